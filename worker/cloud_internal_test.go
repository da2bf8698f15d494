package worker

import (
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/backends/aws/agent"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// Pure parts of the AWS worker: the residency re-check before anything is
// copied or launched, the conversion of the agent's event batches, the
// user data. The whole worker runs against moto in cmd/lathed/aws_e2e_test.go.

const cloudTestConfig = `
sites:
  dc: [onprem, eu]
  aws-eu-central-1: [cloud, eu]
  aws-us-east-1: [cloud, us]
redis_site: dc
backends:
  local: {kind: local, site: dc}
  aws-eu:
    kind: aws
    site: aws-eu-central-1
    region: eu-central-1
    checkpoint_uri: s3://eu-work/ckpt
    work_uri: s3://eu-work/runs
    ami: ami-12345678
    subnets: [subnet-12345678]
    instance_profile: lathe
    instance_types:
      g5.xlarge: {gpus: 1, gpu_model: A10G, gpu_memory_gb: 24, on_demand_usd_per_hour: 1}
datasets:
  buckets: {eu-work: aws-eu-central-1, eu-data: aws-eu-central-1, us-data: aws-us-east-1}
`

func testAttempt(t *testing.T, cfgText string, job *jobtype.Job) *cloudAttempt {
	t.Helper()
	rc, err := routecfg.ParseConfig([]byte(cfgText))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := rc.Backend("aws-eu")
	c := &Cloud{cfg: CloudConfig{Routing: rc}, b: b, remoteNode: remoteNode{log: slog.New(slog.DiscardHandler)}}
	return newCloudAttempt(c, job)
}

func TestCloudResidencyRecheck(t *testing.T) {
	job := func(res []string, dataset, output string) *jobtype.Job {
		return &jobtype.Job{ID: "j-1", Attempt: 2, OutputURI: output,
			Spec: jobspec.Spec{Residency: res, Dataset: dataset, EvalDataset: ""}}
	}
	cases := []struct {
		name     string
		job      *jobtype.Job
		refusal  string // "" = allowed
		logsHere bool
	}{
		{"eu job, eu data, file output", job([]string{"eu"}, "s3://eu-data/t.jsonl", "file:///out/j-1"), "", true},
		{"eu job, staged file data", job([]string{"eu"}, "file:///data/t.jsonl", "s3://eu-work/models/j-1"), "", true},
		{"onprem job: compute refused", job([]string{"onprem"}, "file:///data/t.jsonl", "file:///out/j-1"), "backend aws-eu is in site aws-eu-central-1", false},
		{"no tags: [onprem] by default", job(nil, "file:///data/t.jsonl", "file:///out/j-1"), "lacks residency tag(s) onprem", false},
		{"eu job, us data", job([]string{"eu"}, "s3://us-data/t.jsonl", "file:///out/j-1"), "dataset s3://us-data/t.jsonl is in site aws-us-east-1", false},
		{"eu job, unknown bucket", job([]string{"eu"}, "s3://nobody/t.jsonl", "file:///out/j-1"), "dataset s3://nobody/t.jsonl: its site is not known", false},
		{"eu job, output in us", job([]string{"eu"}, "s3://eu-data/t.jsonl", "s3://us-data/models/j-1"), "output s3://us-data/models/j-1 is in site aws-us-east-1", false},
		{"cloud+eu job: logs stay in the bucket", job([]string{"cloud", "eu"}, "s3://eu-data/t.jsonl", "s3://eu-work/m/j-1"), "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := testAttempt(t, cloudTestConfig, tc.job)
			end := a.checkResidency()
			switch {
			case tc.refusal == "" && end != nil:
				t.Fatal("refused an allowed attempt")
			case tc.refusal != "" && end == nil:
				t.Fatalf("allowed; want a refusal with %q", tc.refusal)
			}
			if tc.refusal == "" && a.logs != tc.logsHere {
				t.Fatalf("raw logs into Redis = %v, want %v", a.logs, tc.logsHere)
			}
			if tc.refusal == "" {
				return
			}
			if got := refusalText(a); !strings.Contains(got, tc.refusal) || !strings.Contains(got, "reason=residency") {
				t.Fatalf("refusal %q does not say %q with reason residency", got, tc.refusal)
			}
		})
	}
	a := testAttempt(t, cloudTestConfig, job([]string{"eu"}, "s3://eu-data/t.jsonl", ""))
	if a.jobURI != "s3://eu-work/runs/j-1/2/job.json" || a.ckpt != "s3://eu-work/ckpt/j-1/checkpoints/" || a.work.Key != "runs/j-1/2/" {
		t.Fatalf("layout: job %s checkpoints %s work %+v", a.jobURI, a.ckpt, a.work)
	}
}

// TestCloudTrainerRecheck: a job naming a trainer other than the
// reference one (a hand-queued task; routing never sends one) is refused by
// the AWS worker before anything is launched, naming the trainer.
func TestCloudTrainerRecheck(t *testing.T) {
	for trainer, refused := range map[string]bool{"": false, "reference": false, "axolotl": true} {
		job := &jobtype.Job{ID: "j-1", Attempt: 1, OutputURI: "file:///out/j-1",
			Spec: jobspec.Spec{Residency: []string{"eu"}, Dataset: "s3://eu-data/t.jsonl", Trainer: trainer}}
		a := testAttempt(t, cloudTestConfig, job)
		var sb strings.Builder
		a.log = slog.New(slog.NewTextHandler(&sb, nil))
		end := a.checkTrainer()
		if (end != nil) != refused {
			t.Fatalf("trainer %q: refused = %v, want %v", trainer, end != nil, refused)
		}
		if refused && (!strings.Contains(sb.String(), `trainer \"axolotl\"`) || !strings.Contains(sb.String(), "reason=permanent")) {
			t.Fatalf("refusal %q does not name the trainer with reason permanent", sb.String())
		}
	}
}

// refusalText re-runs the residency check's message building: the end
// function writes to the store, so the test reads the message from the log
// of a checkResidency call with a capturing logger.
func refusalText(a *cloudAttempt) string {
	var sb strings.Builder
	a.log = slog.New(slog.NewTextHandler(&sb, nil))
	a.checkResidency()
	return sb.String()
}

func TestCloudEventConversion(t *testing.T) {
	lines := []agent.EventLine{
		{T: 1000, Type: "progress", Data: json.RawMessage(`{"event":"progress","step":5,"total_steps":40,"loss":2.5}`)},
		{T: 1001, Type: "log", Data: json.RawMessage(`{"stream":"stdout","line":"epoch 1"}`)},
		{T: 1002, Type: "eval", Data: json.RawMessage(`{"event":"eval","step":5,"eval_loss":2.1}`)},
		{T: 1003, Type: "checkpoint", Data: json.RawMessage(`{"event":"checkpoint","step":5,"path":"ckpt-5"}`)},
		{T: 1004, Type: "done", Data: json.RawMessage(`{"event":"done","metrics":{"train_loss":1.9}}`)},
	}
	var batch []byte
	for _, l := range lines {
		b, _ := json.Marshal(l)
		batch = append(append(batch, b...), '\n')
	}
	batch = append(batch, []byte("not json\n")...)
	for _, logs := range []bool{true, false} {
		a := testAttempt(t, cloudTestConfig, &jobtype.Job{ID: "j-1", Attempt: 1, Metrics: map[string]float64{"old": 1}})
		a.logs = logs
		evs, first := a.convert(batch)
		if first.UnixMilli() != 1000 {
			t.Fatalf("first event time %v", first)
		}
		types := []string{}
		for _, e := range evs {
			types = append(types, e.Type)
		}
		want := "progress,log,eval,checkpoint,done"
		if !logs {
			want = "progress,eval,checkpoint,done"
		}
		if strings.Join(types, ",") != want {
			t.Fatalf("logs=%v: events %v, want %s", logs, types, want)
		}
		var p jobtype.Progress
		if evs[0].Field != "progress" || json.Unmarshal([]byte(evs[0].Value), &p) != nil || p.Step != 5 || p.TotalSteps != 40 || p.Loss != 2.5 {
			t.Fatalf("progress field %q %q", evs[0].Field, evs[0].Value)
		}
		last := evs[len(evs)-1]
		var m map[string]float64
		if last.Field != "metrics" || json.Unmarshal([]byte(last.Value), &m) != nil || m["eval_loss"] != 2.1 || m["train_loss"] != 1.9 || m["old"] != 1 {
			t.Fatalf("metrics field %q %q", last.Field, last.Value)
		}
	}
}

func TestUserDataRoundTrip(t *testing.T) {
	ud := UserData("/usr/local/bin/lathed", "eu-central-1", "s3://b/runs/j-1/3/job.json")
	if !strings.HasPrefix(ud, "#!/bin/sh\n") || !strings.Contains(ud, "AWS_REGION='eu-central-1' exec '/usr/local/bin/lathed' agent --job 's3://b/runs/j-1/3/job.json' ") || strings.Contains(strings.ToLower(ud), "secret") || strings.Contains(ud, "AWS_ACCESS_KEY") || strings.Contains(ud, "AWS_SESSION_TOKEN") {
		t.Fatalf("user data:\n%s", ud)
	}
	if got := JobURIFromUserData(ud); got != "s3://b/runs/j-1/3/job.json" {
		t.Fatalf("job uri from user data: %q", got)
	}
	if got := JobURIFromUserData("#!/bin/sh\necho hi\n"); got != "" {
		t.Fatalf("no --job: %q", got)
	}
}

// TestUserDataQuotesArguments: every value pasted into the user-data script
// reaches the agent as one literal argument, whatever shell metacharacters
// it holds (config validation refuses them too; this is the second wall).
// The script runs under the real /bin/sh with a stand-in lathed (a small
// /bin/sh script, at a path with a quote and a space in it, that writes its
// environment's AWS_REGION and its arguments, NUL-separated, to a file).
func TestUserDataQuotesArguments(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "argv")
	bin := filepath.Join(dir, "it's a $(dir)")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	agentPath := filepath.Join(bin, "lathed")
	stub := "#!/bin/sh\nprintf '%s\\0' \"$AWS_REGION\" \"$@\" >" + shellQuote(out) + "\n"
	if err := os.WriteFile(agentPath, []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "pwned")
	region := "eu-central-1; touch " + marker + "; `touch " + marker + "` $(touch " + marker + ")'\"\n touch " + marker
	jobURI := "s3://b/it's/$(touch " + marker + ")/`touch " + marker + "`/a\nb;touch " + marker + "|x&y>z/job.json"
	ud := userData(agentPath, region, jobURI, filepath.Join(dir, "agent.log"))

	script := filepath.Join(dir, "user-data")
	if err := os.WriteFile(script, []byte(ud), 0o755); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("/bin/sh", "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("sh -n: %v: %s\n%s", err, b, ud)
	}
	if b, err := exec.Command("/bin/sh", script).CombinedOutput(); err != nil {
		t.Fatalf("sh: %v: %s\n%s", err, b, ud)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("the stand-in lathed did not run: %v\n%s", err, ud)
	}
	want := strings.Join([]string{region, "agent", "--job", jobURI}, "\x00") + "\x00"
	if string(got) != want {
		t.Errorf("the agent got %q, want %q\nscript:\n%s", got, want, ud)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("a value ran as a command\nscript:\n%s", ud)
	}
	if got := JobURIFromUserData(ud); got != jobURI {
		t.Errorf("JobURIFromUserData = %q, want %q", got, jobURI)
	}
}

// TestCloudJobCarriesTrainerPassEnv: job.json names the pass_env of the
// job's trainer (reference when the spec names none), so the agent gives
// the instance's trainer the same environment a local worker would; a
// trainer without pass_env gets none.
func TestCloudJobCarriesTrainerPassEnv(t *testing.T) {
	pass := map[string][]string{"reference": {"HF_TOKEN"}, "s3": {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}}
	for _, c := range []struct {
		trainer string
		want    string
	}{{"", "HF_TOKEN"}, {"reference", "HF_TOKEN"}, {"s3", "AWS_ACCESS_KEY_ID,AWS_SECRET_ACCESS_KEY"}, {"plain", ""}} {
		a := testAttempt(t, cloudTestConfig, &jobtype.Job{ID: "j-1", Attempt: 1,
			Spec: jobspec.Spec{Residency: []string{"eu"}, Dataset: "s3://eu-data/t.jsonl", Trainer: c.trainer}})
		a.c.cfg.TrainerPassEnv = pass
		aj := a.agentJob("s3://eu-data/t.jsonl", "", time.Hour)
		if got := strings.Join(aj.TrainerPassEnv, ","); got != c.want {
			t.Errorf("trainer %q: job.json trainer_pass_env %q, want %q", c.trainer, got, c.want)
		}
		if aj.JobID != "j-1" || aj.Attempt != 1 || aj.MaxRuntimeS != 3600 || aj.Dataset != "s3://eu-data/t.jsonl" {
			t.Errorf("job.json %+v", aj)
		}
	}
	if _, _, err := (CloudConfig{Backend: "aws-eu", TrainerPassEnv: map[string][]string{"s3": {"LATHE_TOKEN_X"}}}).withDefaults(); err == nil ||
		!strings.Contains(err.Error(), `trainers.s3.pass_env[0]`) || !strings.Contains(err.Error(), "LATHE_TOKEN_X") {
		t.Errorf("a token in pass_env: %v, want an error naming trainers.s3.pass_env[0] and the name", err)
	}
}

// TestCloudRefusesJobThatSpansNodes: a job of resources.nodes 2 on an AWS
// worker's queue (routing never sends one; a task queued by hand) is
// refused before anything is copied or launched, naming the backend.
func TestCloudRefusesJobThatSpansNodes(t *testing.T) {
	job := &jobtype.Job{ID: "j-1", Attempt: 1, OutputURI: "file:///out/j-1",
		Spec: jobspec.Spec{Residency: []string{"eu"}, Dataset: "s3://eu-data/t.jsonl", Resources: jobspec.Resources{GPUs: 1, Nodes: 2}}}
	a := testAttempt(t, cloudTestConfig, job)
	got := refusalText(a)
	if !strings.Contains(got, "resources.nodes 2: backend aws-eu (aws) does not run jobs that span nodes") || !strings.Contains(got, "reason=permanent") {
		t.Fatalf("refusal %q", got)
	}
}
