package routecfg

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// KubeSettings are the settings of a kubernetes backend that a slurm one
// has not (docs/kubernetes.md). Each attempt is a Job in Namespace whose
// one container, of Image, runs `LATHED_PATH slurm-step DIR` with DIR on
// storage the worker and the pods share.
type KubeSettings struct {
	// Namespace the attempts' Jobs are made in. Required.
	Namespace string `json:"namespace,omitempty"`
	// Image is the container image the attempts run: it must hold lathed
	// at lathed_path and the trainers' interpreters. Required.
	Image string `json:"image,omitempty"`
	// ServiceAccount of the attempts' pods; empty: the namespace's default.
	ServiceAccount string `json:"service_account,omitempty"`
	// NodeSelector and Tolerations go into every attempt's pod as they are.
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	Tolerations  []Toleration      `json:"tolerations,omitempty"`
	// QueueName, when set, is Kueue's LocalQueue for the attempts: the Job
	// carries the label kueue.x-k8s.io/queue-name with it.
	QueueName string `json:"queue_name,omitempty"`
	// VolumeClaim is a PersistentVolumeClaim mounted at work_dir in every
	// pod (ReadWriteMany storage the worker shares); empty: none.
	VolumeClaim string `json:"volume_claim,omitempty"`
	// HostPaths are folders of the nodes mounted at the same path in every
	// pod (storage the nodes share: work_dir, the data's roots); empty:
	// none. With neither a claim nor host paths, the image must see
	// work_dir by other means.
	HostPaths []string `json:"host_paths,omitempty"`
}

// Toleration is one toleration of an attempt's pod, as Kubernetes has it.
type Toleration struct {
	Key      string `json:"key,omitempty"`
	Operator string `json:"operator,omitempty"`
	Value    string `json:"value,omitempty"`
	Effect   string `json:"effect,omitempty"`
}

// kubeKeys are the keys of a kubernetes backend that no other kind has.
var kubeKeys = []string{"namespace", "image", "service_account", "node_selector", "tolerations", "queue_name", "volume_claim", "host_paths"}

func isKubeKey(key string) bool {
	for _, k := range kubeKeys {
		if k == key {
			return true
		}
	}
	return false
}

// kube decodes one of a kubernetes backend's own settings (key) into b.
func (d *decoder) kube(b *Backend, key, p string, v *yaml.Node) {
	if b.Kube == nil {
		b.Kube = &KubeSettings{}
	}
	k := b.Kube
	switch key {
	case "namespace":
		k.Namespace, _ = d.str(p, v)
	case "image":
		k.Image, _ = d.str(p, v)
	case "service_account":
		k.ServiceAccount, _ = d.str(p, v)
	case "queue_name":
		k.QueueName, _ = d.str(p, v)
	case "volume_claim":
		k.VolumeClaim, _ = d.str(p, v)
	case "host_paths":
		k.HostPaths, _ = d.strList(p, v)
	case "node_selector":
		k.NodeSelector = map[string]string{}
		d.entries(p, v, func(name, p string, v *yaml.Node) { k.NodeSelector[name], _ = d.str(p, v) })
	case "tolerations":
		d.tolerations(k, p, v)
	}
}

// tolerations decodes a list of tolerations, each a mapping of key,
// operator, value and effect.
func (d *decoder) tolerations(k *KubeSettings, path string, n *yaml.Node) {
	if n.Kind != yaml.SequenceNode {
		d.fail(path, n, "must be a list of {key, operator, value, effect}, not "+kindName(n))
		return
	}
	for i, item := range n.Content {
		var t Toleration
		d.fields(path+"["+strconv.Itoa(i)+"]", item, func(key, p string, v *yaml.Node) bool {
			f := map[string]*string{"key": &t.Key, "operator": &t.Operator, "value": &t.Value, "effect": &t.Effect}[key]
			if f == nil {
				return false
			}
			*f, _ = d.str(p, v)
			return true
		})
		k.Tolerations = append(k.Tolerations, t)
	}
}

var (
	// dnsLabel is a Kubernetes name of the DNS-1123 label form.
	dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	// dnsSubdomain is one of the DNS-1123 subdomain form (a service account).
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)
	// labelKey is a label key (an optional DNS prefix, then a name).
	labelKey = regexp.MustCompile(`^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)
	// labelValue is a label value (empty, or a name of up to 63).
	labelValue = regexp.MustCompile(`^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$`)
	// imageRef is an image reference: no spaces or control characters.
	imageRef = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,511}$`)
)

// validateKube checks kubernetes backend b at path p: the settings it
// shares with a slurm backend (work_dir, max_jobs, gpus_per_node,
// lathed_path, price, a file:// checkpoint_uri), then its own, each of
// Kubernetes' form.
func validateKube(c *checker, p string, b Backend) {
	awsOnly := refuseAWSKeys(c, p, b)
	awsOnly("max_instances", false)
	awsOnly("agent_path", false)
	c.nonNegative(p+".budget_usd_per_month", b.BudgetUSDPerMonth)
	switch {
	case b.WorkDir == "":
		c.add(p+".work_dir", "", "is required for kind kubernetes: an absolute folder the kubernetes worker and the pods share")
	case !validAgentPath(b.WorkDir) || filepath.Clean(b.WorkDir) != b.WorkDir:
		c.add(p+".work_dir", b.WorkDir, "must be a clean absolute path of A-Z, a-z, 0-9, '/', '.', '_' and '-'")
	}
	validateSlurmNumbers(c, p, b)
	if b.Price != nil {
		validatePrice(c, p+".price", *b.Price)
	}
	if u := b.CheckpointURI; u != "" && !strings.HasPrefix(u, "file://") {
		c.add(p+".checkpoint_uri", u, "must be file:///absolute/path for kind kubernetes (storage the pods share)")
	}
	k := b.Kube
	if k == nil {
		k = &KubeSettings{}
	}
	validateKubeNames(c, p, k)
	validateKubeScheduling(c, p, k)
}

// validateKubeNames checks the namespace, image, service account, queue,
// claim and host paths of k at path p.
func validateKubeNames(c *checker, p string, k *KubeSettings) {
	switch {
	case k.Namespace == "":
		c.add(p+".namespace", "", "is required for kind kubernetes: the namespace its attempts' Jobs are made in")
	case !dnsLabel.MatchString(k.Namespace):
		c.add(p+".namespace", k.Namespace, "must be a Kubernetes namespace name: a-z, 0-9 and '-', at most 63")
	}
	switch {
	case k.Image == "":
		c.add(p+".image", "", "is required for kind kubernetes: the image its attempts run (with lathed at lathed_path)")
	case !imageRef.MatchString(k.Image):
		c.add(p+".image", k.Image, "must be an image reference: A-Z, a-z, 0-9 and . _ / : @ + -")
	}
	if k.ServiceAccount != "" && !dnsSubdomain.MatchString(k.ServiceAccount) {
		c.add(p+".service_account", k.ServiceAccount, "must be a Kubernetes service account name: a-z, 0-9, '.' and '-'")
	}
	if k.QueueName != "" && !dnsSubdomain.MatchString(k.QueueName) {
		c.add(p+".queue_name", k.QueueName, "must be a Kueue LocalQueue name: a-z, 0-9, '.' and '-'")
	}
	if k.VolumeClaim != "" && !dnsSubdomain.MatchString(k.VolumeClaim) {
		c.add(p+".volume_claim", k.VolumeClaim, "must be a PersistentVolumeClaim name: a-z, 0-9, '.' and '-'")
	}
	for i, h := range k.HostPaths {
		if !validAgentPath(h) || filepath.Clean(h) != h {
			c.add(p+".host_paths["+strconv.Itoa(i)+"]", h, "must be a clean absolute path of A-Z, a-z, 0-9, '/', '.', '_' and '-'")
		}
	}
}

// validateKubeScheduling checks the node selector and tolerations of k at
// path p.
func validateKubeScheduling(c *checker, p string, k *KubeSettings) {
	for key, v := range k.NodeSelector {
		if !labelKey.MatchString(key) || !labelValue.MatchString(v) {
			c.add(p+".node_selector."+key, v, "must be a label key and value of Kubernetes' form")
		}
	}
	for i, t := range k.Tolerations {
		tp := p + ".tolerations[" + strconv.Itoa(i) + "]"
		switch {
		case t.Key != "" && !labelKey.MatchString(t.Key):
			c.add(tp+".key", t.Key, "must be a taint key of Kubernetes' form")
		case t.Operator != "" && t.Operator != "Equal" && t.Operator != "Exists":
			c.add(tp+".operator", t.Operator, "must be Equal or Exists")
		case t.Operator == "Exists" && t.Value != "":
			c.add(tp+".value", t.Value, "must be empty with operator Exists")
		case !labelValue.MatchString(t.Value):
			c.add(tp+".value", t.Value, "must be a taint value of Kubernetes' form")
		case t.Effect != "" && t.Effect != "NoSchedule" && t.Effect != "PreferNoSchedule" && t.Effect != "NoExecute":
			c.add(tp+".effect", t.Effect, "must be NoSchedule, PreferNoSchedule or NoExecute")
		}
	}
}

// refuseKubeKeys refuses the settings of a kubernetes backend on backend b
// of another kind, at path p.
func refuseKubeKeys(c *checker, p string, b Backend) {
	for _, key := range kubeKeys {
		if c.present(p+"."+key, b.Kube != nil) {
			c.add(p+"."+key, "", "only for kind kubernetes")
			if c.d == nil {
				return // built in Go: one error says it
			}
		}
	}
}
