// Package kubetest starts a Kubernetes control plane for tests: a real
// etcd (Debian's etcd-server) and a real kube-apiserver under
// controller-runtime's envtest, a real kube-controller-manager (its Job,
// garbage-collector and TTL controllers only) and a real kube-scheduler, all
// built from k8s.io/kubernetes v1.37.2 by scripts/setup.sh, and kwok
// (sigs.k8s.io/kwok), which makes fake GPU nodes Ready and their pods
// Running. There is no kubelet and no container runtime: a pod's container
// never runs. Its work is played by a stand-in (standin.go), named as such:
// it runs the container's command on this host and ends the pod through the
// API with the command's exit code. Code under test talks to the API server
// only and cannot tell.
//
// A test that needs a missing binary fails, saying how to build it.
package kubetest

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/lathe-ml/lathe/internal/waitfor"
)

// Version is the Kubernetes release the binaries are built from.
const Version = "v1.37.2"

//go:embed kwok-stages.yaml
var kwokStages []byte

// BinDir is where scripts/setup.sh builds kube-apiserver,
// kube-controller-manager, kube-scheduler and kwok: $LATHE_KUBE_BIN, else
// $HOME/.cache/lathe/kube-v1.37.2.
func BinDir() string {
	if d := os.Getenv("LATHE_KUBE_BIN"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "lathe", "kube-"+Version)
}

// Options shape the cluster.
type Options struct {
	// Nodes is how many kwok GPU nodes to make; default 1.
	Nodes int
	// GPUs is each node's nvidia.com/gpu; default 2.
	GPUs int
	// Namespace to make; default "lathe-jobs".
	Namespace string
}

// Cluster is a running control plane with kwok GPU nodes and the stand-in.
type Cluster struct {
	// Kubeconfig is the path of a kubeconfig of the cluster's admin.
	Kubeconfig string
	// Client is an admin client.
	Client kubernetes.Interface
	// Namespace exists; Nodes are the kwok GPU nodes' names.
	Namespace string
	Nodes     []string
	// StandIn plays the pods' containers.
	StandIn *StandIn
	dir     string
}

// Start starts a cluster for t, stopped at t's cleanup.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	if o.Nodes <= 0 {
		o.Nodes = 1
	}
	if o.GPUs <= 0 {
		o.GPUs = 2
	}
	if o.Namespace == "" {
		o.Namespace = "lathe-jobs"
	}
	bins := requireBinaries(t)
	c := &Cluster{Namespace: o.Namespace, dir: t.TempDir()}
	c.StandIn = newStandIn(t, o.Namespace, filepath.Join(c.dir, "pods"))
	c.startControlPlane(t, bins)
	c.startProcess(t, bins["kube-controller-manager"], "--kubeconfig="+c.Kubeconfig, "--controllers=job,garbagecollector,ttl-after-finished",
		"--leader-elect=false", "--secure-port=0", "--concurrent-job-syncs=5")
	c.startProcess(t, bins["kube-scheduler"], "--kubeconfig="+c.Kubeconfig, "--leader-elect=false", "--secure-port=0")
	stages := filepath.Join(c.dir, "kwok-stages.yaml")
	if err := os.WriteFile(stages, kwokStages, 0o644); err != nil {
		t.Fatal(err)
	}
	c.startProcess(t, bins["kwok"], "--kubeconfig="+c.Kubeconfig, "--config="+stages, "--manage-all-nodes=true",
		"--node-lease-duration-seconds=0", "--cidr=10.0.0.0/16", "--node-ip=127.0.0.1")
	ctx := context.Background()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.Namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < o.Nodes; i++ {
		c.Nodes = append(c.Nodes, c.addNode(t, "kwok-gpu-"+strconv.Itoa(i), o.GPUs))
	}
	c.StandIn.start(t, c.Client)
	return c
}

// requireBinaries returns the paths of the binaries, failing t when one is
// missing.
func requireBinaries(t testing.TB) map[string]string {
	t.Helper()
	bins := map[string]string{}
	for _, name := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"} {
		p := filepath.Join(BinDir(), name)
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("kubetest: %s is missing (%v): scripts/setup.sh --test builds it into %s (LATHE_KUBE_BIN moves it)", name, err, BinDir())
		}
		bins[name] = p
	}
	etcd, err := exec.LookPath("etcd")
	if err != nil {
		t.Fatalf("kubetest: etcd is missing: scripts/setup.sh --test installs etcd-server (apt)")
	}
	bins["etcd"] = etcd
	return bins
}

// startControlPlane starts etcd and kube-apiserver (envtest) and writes an
// admin kubeconfig.
func (c *Cluster) startControlPlane(t testing.TB, bins map[string]string) {
	t.Helper()
	env := &envtest.Environment{ControlPlaneStartTimeout: 2 * time.Minute, ControlPlaneStopTimeout: time.Minute}
	env.ControlPlane.Etcd = &envtest.Etcd{Path: bins["etcd"]}
	env.ControlPlane.APIServer = &envtest.APIServer{Path: bins["kube-apiserver"]}
	// The nodes' kubelet endpoint is the stand-in's log server on 127.0.0.1
	// (kwok --node-ip): reach it by that address, not the node's name.
	env.ControlPlane.APIServer.Configure().Set("kubelet-preferred-address-types", "InternalIP")
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("kubetest: start etcd and kube-apiserver: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c.Kubeconfig = filepath.Join(c.dir, "kubeconfig")
	if err := os.WriteFile(c.Kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	if c.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
}

// startProcess runs path with args until t's cleanup; its output goes to
// a file of the cluster's folder, logged when t failed.
func (c *Cluster) startProcess(t testing.TB, path string, args ...string) {
	t.Helper()
	logPath := filepath.Join(c.dir, filepath.Base(path)+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("kubetest: start %s: %v", path, err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		f.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("kubetest: %s log ends:\n%s", filepath.Base(path), b)
		}
	})
}

// addNode makes a node of gpus nvidia.com/gpu that kwok manages and
// waits until it is Ready.
func (c *Cluster) addNode(t testing.TB, name string, gpus int) string {
	t.Helper()
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi"),
		corev1.ResourcePods: resource.MustParse("110"), "nvidia.com/gpu": resource.MustParse(strconv.Itoa(gpus))}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
			Labels: map[string]string{"kubernetes.io/hostname": name, "type": "kwok", "nvidia.com/gpu.present": "true"}},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res,
			// The kubelet endpoint is the stand-in's log server (kwok's own
			// server, --node-port, is not started).
			Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: name}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(c.StandIn.port)}}},
	}
	ctx := context.Background()
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatalf("kubetest: create node %s: %v", name, err)
	}
	ok := waitfor.Poll(time.Minute, func() bool {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return err == nil && nodeReady(n) && !n.Status.Allocatable.Name("nvidia.com/gpu", resource.DecimalSI).IsZero()
	})
	if !ok {
		t.Fatalf("kubetest: node %s not Ready with GPUs (kwok)", name)
	}
	untaint(t, c.Client, name)
	return name
}

// untaint removes the node.kubernetes.io/not-ready taint the API server's
// TaintNodesByCondition admission puts on a new node. The node lifecycle
// controller does that once the node is Ready; it is not run here (it
// would also want kubelet heartbeats and evict pods without them).
func untaint(t testing.TB, cs kubernetes.Interface, name string) {
	t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var keep []corev1.Taint
		for _, tn := range n.Spec.Taints {
			if tn.Key != corev1.TaintNodeNotReady {
				keep = append(keep, tn)
			}
		}
		n.Spec.Taints = keep
		_, err = cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("kubetest: untaint node %s: %v", name, err)
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// String names the cluster for logs.
func (c *Cluster) String() string {
	return fmt.Sprintf("kubetest cluster %s (nodes %v, namespace %s)", c.Kubeconfig, c.Nodes, c.Namespace)
}
