package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestRouteExplainOfflineAgreesWithDaemon: `lathe route --explain --config`
// (offline) and the real scheduler's POST /api/v1/route, wired from the
// same config file as lathed wires it, decide a table of specs alike:
// backend, site, refused, waiting, every reason, and every candidate's
// feasibility, reason, wait, cost and instance. The scheduler runs on a real
// redis-server with one live local node whose GPUs (8 × H100 80GB) fit every
// GPU request of the table (offline, the local pool is assumed to fit).
func TestRouteExplainOfflineAgreesWithDaemon(t *testing.T) {
	t.Run("no jobs.default_max_runtime", func(t *testing.T) { routeAgreement(t, routeConfig) })
	// lathed reads jobs.default_max_runtime into its scheduler's defaults.
	t.Run("jobs.default_max_runtime 6h", func(t *testing.T) {
		routeAgreement(t, routeConfig+"\njobs:\n  default_max_runtime: 6h\n")
	})
	// Every job default the file gives: the default output folder (staged
	// back from a cloud site under its own name), the run time, and a
	// default residency of [eu], which bursts an untagged job.
	t.Run("job defaults", func(t *testing.T) {
		routeAgreement(t, strings.Replace(routeConfig, "  default_residency: [onprem]", "  default_residency: [eu]", 1)+
			"\njobs:\n  default_max_runtime: 3h\n  default_output_uri: file:///srv/lathe/models\n")
	})
	// A relative data_dir is relative to the config file's folder, for
	// lathed and the CLI alike: the default output folder is under it.
	t.Run("relative data_dir", func(t *testing.T) {
		routeAgreement(t, strings.Replace(routeConfig, "data_dir: /var/lib/lathe", "data_dir: state", 1))
	})
}

// routeAgreement runs the table against config.
func routeAgreement(t *testing.T, config string) {
	dir := t.TempDir()
	cfgPath := writeFile(t, dir, "lathe.yaml", config)
	online := daemonFromConfig(t, cfgPath)

	const base = "name: support-bot\nbase_model: tiny-char\n"
	const fileData = "dataset: file:///data/support/train.jsonl\n"
	for _, tc := range []struct {
		name string
		spec string
		args []string
	}{
		{"untagged", base + fileData + "resources: {gpus: 1}\nexpected_runtime: 2h\nmax_runtime: 8h\n", nil},
		{"onprem, local queue 10h", base + fileData + "residency: [onprem]\nmax_wait: 1h\nresources: {gpus: 1}\nmax_runtime: 8h\n", []string{"--assume-wait", "local=10h"}},
		{"eu, bursts", base + fileData + "residency: [eu]\nmax_wait: 1h\nresources: {gpus: 1}\nexpected_runtime: 2h\n", []string{"--assume-wait", "local=3h"}},
		{"eu, default max_runtime", base + fileData + "residency: [eu]\nmax_wait: 1h\nresources: {gpus: 1}\n", []string{"--assume-wait", "local=3h"}},
		{"cloud eu, s3 data and output", base + "dataset: s3://lathe-eu-data/support/train.jsonl\nresidency: [cloud, eu]\nresources: {gpus: 1}\nexpected_runtime: 2h\noutput: {uri: s3://lathe-eu-data/out}\n", nil},
		{"cloud eu, s3 data and output, no run time given", base + "dataset: s3://lathe-eu-data/support/train.jsonl\nresidency: [cloud, eu]\nresources: {gpus: 1}\noutput: {uri: s3://lathe-eu-data/out}\n", nil},
		{"cloud eu, default output", base + "dataset: s3://lathe-eu-data/support/train.jsonl\nresidency: [cloud, eu]\nresources: {gpus: 1}\nexpected_runtime: 2h\n", nil},
		{"cloud eu, file data", base + fileData + "residency: [cloud, eu]\nresources: {gpus: 1}\n", nil},
		{"onprem, s3 data", base + "dataset: s3://lathe-eu-data/support/train.jsonl\nresidency: [onprem]\nresources: {gpus: 1}\n", nil},
		{"eu, s3 data", base + "dataset: s3://lathe-eu-data/support/train.jsonl\nresidency: [eu]\nresources: {gpus: 1}\nexpected_runtime: 2h\n", nil},
		{"us, s3 data and output", base + "dataset: s3://lathe-us-data/support/train.jsonl\nresidency: [us]\nresources: {gpus: 1}\nexpected_runtime: 2h\noutput: {uri: s3://lathe-us-data/out}\n", nil},
		{"eu, us data: refused", base + "dataset: s3://lathe-us-data/support/train.jsonl\nresidency: [eu]\nresources: {gpus: 1}\n", nil},
		{"4 H100, eu, bursts", base + fileData + "residency: [eu]\nmax_wait: 30m\nresources: {gpus: 4, gpu_models: [H100], gpu_memory_gb: 80}\nexpected_runtime: 3h\n", []string{"--assume-wait", "local=2h"}},
		{"8 GPUs, eu, over budget", base + fileData + "residency: [eu]\nmax_wait: 1h\nresources: {gpus: 8}\nexpected_runtime: 10h\n", []string{"--assume-wait", "local=3h", "--assume-spent", "aws-eu=4900"}},
		{"eu, over the job's own budget", base + fileData + "residency: [eu]\nmax_wait: 1h\nresources: {gpus: 8}\nexpected_runtime: 10h\nbudget_usd: 10\n", []string{"--assume-wait", "local=3h"}},
		{"cpu only, eu", base + fileData + "residency: [eu]\nresources: {gpus: 0}\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := writeFile(t, dir, "job.yaml", tc.spec)
			off := lathe(t, closedURL(t), append([]string{"route", "--explain", spec, "--config", cfgPath, "-o", "json"}, tc.args...)...)
			on := lathe(t, online, append([]string{"route", "--explain", spec, "-o", "json"}, tc.args...)...)
			var offEx, onEx explanation
			if err := json.Unmarshal([]byte(off.stdout), &offEx); err != nil {
				t.Fatalf("offline: %v\nstdout:\n%s\nstderr:\n%s", err, off.stdout, off.stderr)
			}
			if err := json.Unmarshal([]byte(on.stdout), &onEx); err != nil {
				t.Fatalf("daemon: %v\nstdout:\n%s\nstderr:\n%s", err, on.stdout, on.stderr)
			}
			if off.code != on.code {
				t.Errorf("exit offline %d, daemon %d", off.code, on.code)
			}
			if offEx.ConfigHash != onEx.ConfigHash {
				t.Errorf("config hash offline %s, daemon %s", offEx.ConfigHash, onEx.ConfigHash)
			}
			o, d := offEx.Decision, onEx.Decision
			t.Logf("offline → %q refused %v waiting %v; daemon → %q refused %v waiting %v", o.Backend, o.Refused, o.Waiting, d.Backend, d.Refused, d.Waiting)
			if o.Backend != d.Backend || o.Site != d.Site || o.Refused != d.Refused || o.Waiting != d.Waiting {
				t.Errorf("offline backend %q site %q refused %v waiting %v; daemon %q %q %v %v",
					o.Backend, o.Site, o.Refused, o.Waiting, d.Backend, d.Site, d.Refused, d.Waiting)
			}
			if !reflect.DeepEqual(o.Reasons, d.Reasons) {
				t.Errorf("reasons\noffline %q\ndaemon  %q", o.Reasons, d.Reasons)
			}
			if !reflect.DeepEqual(o.Candidates, d.Candidates) {
				t.Errorf("candidates\noffline %+v\ndaemon  %+v", o.Candidates, d.Candidates)
			}
			if o.EstRuntime != d.EstRuntime || o.EstCostUSD != d.EstCostUSD || !reflect.DeepEqual(o.Staging, d.Staging) || !reflect.DeepEqual(o.Residency, d.Residency) {
				t.Errorf("estimates/staging/residency\noffline %v $%v %+v %v\ndaemon  %v $%v %+v %v",
					o.EstRuntime, o.EstCostUSD, o.Staging, o.Residency, d.EstRuntime, d.EstCostUSD, d.Staging, d.Residency)
			}
			// A refused decision lists no candidate as feasible.
			if o.Refused {
				for _, c := range o.Candidates {
					if c.Feasible || c.Reason == "" {
						t.Errorf("refused, yet %s is feasible %v with reason %q", c.Backend, c.Feasible, c.Reason)
					}
				}
			}
		})
	}
}
