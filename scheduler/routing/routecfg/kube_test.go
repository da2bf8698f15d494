package routecfg

import (
	"errors"
	"strings"
	"testing"
)

// kubeConfig is briefConfig with a kubernetes backend in the on-prem site.
var kubeConfig = strings.Replace(briefConfig, "  aws-eu:\n", `  k8s:
    kind: kubernetes
    site: dc-frankfurt
    namespace: lathe-jobs
    image: registry.example/lathe:1.0
    service_account: lathe-trainer
    node_selector: {nvidia.com/gpu.product: A100-SXM4-80GB}
    tolerations:
    - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
    queue_name: team-a
    host_paths: [/shared]
    work_dir: /shared/lathe/k8s
    gpus_per_node: 4
    price: {usd_per_gpu_hour: 2}
  aws-eu:
`, 1)

// TestParseKubernetesBackend: a kubernetes backend's settings, its
// defaults (those of a slurm backend) and the GPU shapes routing sees.
func TestParseKubernetesBackend(t *testing.T) {
	c, err := ParseConfig([]byte(kubeConfig))
	if err != nil {
		t.Fatal(err)
	}
	b, ok := c.Backend("k8s")
	if !ok || b.Kube == nil {
		t.Fatalf("backend k8s: %+v", b)
	}
	k := b.Kube
	if !b.BatchPool() || k.Namespace != "lathe-jobs" || k.Image != "registry.example/lathe:1.0" || k.ServiceAccount != "lathe-trainer" ||
		k.QueueName != "team-a" || k.NodeSelector["nvidia.com/gpu.product"] != "A100-SXM4-80GB" || len(k.HostPaths) != 1 {
		t.Errorf("settings = %+v", k)
	}
	if len(k.Tolerations) != 1 || k.Tolerations[0] != (Toleration{Key: "nvidia.com/gpu", Operator: "Exists", Effect: "NoSchedule"}) {
		t.Errorf("tolerations = %+v", k.Tolerations)
	}
	if b.MaxInstances != DefaultMaxJobs || b.GPUsPerNode != 4 || b.AgentPath != DefaultAgentPath {
		t.Errorf("defaults: max_jobs %d gpus_per_node %d lathed_path %q", b.MaxInstances, b.GPUsPerNode, b.AgentPath)
	}
	if types := slurmTypes(b); len(types) != 4 || types[1].OnDemandUSDPerHour != 4 {
		t.Errorf("types = %+v", types)
	}
}

// TestParseKubernetesErrors: one row per kind of error of a kubernetes
// backend, and its keys refused on the other kinds.
func TestParseKubernetesErrors(t *testing.T) {
	with := func(old, new string) string {
		if !strings.Contains(kubeConfig, old) {
			t.Fatalf("kubeConfig lacks %q", old)
		}
		return strings.Replace(kubeConfig, old, new, 1)
	}
	const p = "backends.k8s."
	cases := []configErrorCase{
		{"no namespace", with("    namespace: lathe-jobs\n", ""), p + "namespace", "", "is required for kind kubernetes"},
		{"bad namespace", with("namespace: lathe-jobs", "namespace: Lathe_Jobs"), p + "namespace", "Lathe_Jobs", "must be a Kubernetes namespace name"},
		{"no image", with("    image: registry.example/lathe:1.0\n", ""), p + "image", "", "is required for kind kubernetes"},
		{"bad image", with("image: registry.example/lathe:1.0", "image: 'x y'"), p + "image", "x y", "must be an image reference"},
		{"no work dir", with("    work_dir: /shared/lathe/k8s\n", ""), p + "work_dir", "", "is required for kind kubernetes"},
		{"bad queue", with("queue_name: team-a", "queue_name: 'Team A'"), p + "queue_name", "Team A", "must be a Kueue LocalQueue name"},
		{"bad host path", with("host_paths: [/shared]", "host_paths: [shared]"), p + "host_paths[0]", "shared", "clean absolute path"},
		{"bad operator", with("operator: Exists", "operator: Maybe"), p + "tolerations[0].operator", "Maybe", "must be Equal or Exists"},
		{"bad effect", with("effect: NoSchedule", "effect: Never"), p + "tolerations[0].effect", "Never", "must be NoSchedule"},
		{"bad selector", with("nvidia.com/gpu.product: A100-SXM4-80GB", "nvidia.com/gpu.product: 'a b'"), p + "node_selector.nvidia.com/gpu.product", "a b", "label key and value"},
		{"partition on kubernetes", with("    namespace: lathe-jobs\n", "    namespace: lathe-jobs\n    partition: gpu\n"), p + "partition", "gpu", "only for kind slurm"},
		{"aws key on kubernetes", with("    namespace: lathe-jobs\n", "    namespace: lathe-jobs\n    ami: ami-1\n"), p + "ami", "ami-1", "only for kind aws"},
		{"s3 checkpoints", with("    namespace: lathe-jobs\n", "    namespace: lathe-jobs\n    checkpoint_uri: s3://lathe-eu-ckpt/x\n"), p + "checkpoint_uri", "s3://lathe-eu-ckpt/x", "for kind kubernetes"},
		{"kube key on local", with("    checkpoint_uri: file:///shared/ckpt\n", "    checkpoint_uri: file:///shared/ckpt\n    namespace: x\n"), "backends.local.namespace", "x", "only for kind kubernetes"},
		{"work dir on local", with("    checkpoint_uri: file:///shared/ckpt\n", "    checkpoint_uri: file:///shared/ckpt\n    work_dir: /x\n"), "backends.local.work_dir", "/x", "only for kind slurm or kubernetes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.src))
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want a *ConfigError", err)
			}
			for _, fe := range ce.Errors {
				if fe.Field == tc.field && fe.Value == tc.value && strings.Contains(fe.Message, tc.msg) {
					return
				}
			}
			t.Errorf("no error {%s %q …%s…} in\n%v", tc.field, tc.value, tc.msg, err)
		})
	}
}
