package kubetest

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
)

// StandIn is a **stand-in** for what a kubelet and a container runtime do
// with a pod: no container runs here. When kwok has made a pod Running on
// its node, the stand-in runs the pod's one container's command (and args)
// on this host, in the container's working folder, with this process's
// environment, the container's env and CUDA_VISIBLE_DEVICES numbering its
// nvidia.com/gpu limit (what NVIDIA's device plugin would give); the output
// goes to a file of its own (Log). When the command exits it ends the pod
// through the API: phase Succeeded or Failed, the container terminated with
// the exit code. A pod being deleted (a cancel, the Job's deadline, an
// eviction) has its command stopped as a kubelet would: SIGTERM to its
// process group, SIGKILL after the pod's grace period. It serves the output
// as the pod's log on a kubelet's log path (GET
// /containerLogs/NS/POD/CONTAINER, with tailLines and limitBytes) over TLS
// on 127.0.0.1, the nodes' kubelet endpoint: the API server's pods/log
// reaches it as it would a kubelet.
type StandIn struct {
	cs     kubernetes.Interface
	ns     string
	logDir string
	port   int

	mu      sync.Mutex
	started map[types.UID]*exec.Cmd
	runs    int
}

// newStandIn makes the stand-in of namespace ns and starts its log server.
func newStandIn(t testing.TB, ns, logDir string) *StandIn {
	t.Helper()
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := &StandIn{ns: ns, logDir: logDir, started: map[types.UID]*exec.Cmd{}}
	srv := httptest.NewTLSServer(http.HandlerFunc(s.serveLog))
	t.Cleanup(srv.Close)
	s.port = srv.Listener.Addr().(*net.TCPAddr).Port
	return s
}

// start starts playing the pods of the cluster cs.
func (s *StandIn) start(t testing.TB, cs kubernetes.Interface) {
	t.Helper()
	s.cs = cs
	ctx, cancel := context.WithCancel(context.Background())
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(s.ns))
	inf := f.Core().V1().Pods().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { s.consider(o) },
		UpdateFunc: func(_, o any) { s.consider(o) },
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if p, ok := o.(*corev1.Pod); ok {
				s.stop(p)
			}
		},
	})
	f.Start(ctx.Done())
	t.Cleanup(func() {
		cancel()
		s.stopAll()
	})
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("kubetest: stand-in: pod watch not synced")
	}
}

// serveLog serves a pod's output as a kubelet serves its container's log:
// the last tailLines lines, at most limitBytes.
func (s *StandIn) serveLog(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/containerLogs/"), "/")
	if len(parts) != 3 || parts[0] != s.ns || strings.Contains(parts[1], "..") {
		http.NotFound(w, r)
		return
	}
	b, err := os.ReadFile(s.Log(parts[1]))
	if err != nil {
		http.NotFound(w, r)
		return
	}
	if n, err := strconv.Atoi(r.URL.Query().Get("tailLines")); err == nil && n >= 0 {
		lines := strings.SplitAfter(string(b), "\n")
		if len(lines) > 0 && lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		b = []byte(strings.Join(lines, ""))
	}
	if n, err := strconv.Atoi(r.URL.Query().Get("limitBytes")); err == nil && n >= 0 && len(b) > n {
		b = b[:n]
	}
	_, _ = w.Write(b)
}

// Runs is how many pods' commands the stand-in has started.
func (s *StandIn) Runs() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs
}

// Log is the path of the output of pod's command.
func (s *StandIn) Log(pod string) string { return filepath.Join(s.logDir, pod+".log") }

func (s *StandIn) consider(o any) {
	pod, ok := o.(*corev1.Pod)
	if !ok || len(pod.Spec.Containers) == 0 {
		return
	}
	if pod.DeletionTimestamp != nil {
		s.stop(pod)
		return
	}
	if pod.Status.Phase != corev1.PodRunning || pod.Spec.NodeName == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, done := s.started[pod.UID]; done {
		return
	}
	s.started[pod.UID] = nil
	s.runs++
	go s.run(pod.DeepCopy())
}

// run runs pod's command and ends the pod with its exit code.
func (s *StandIn) run(pod *corev1.Pod) {
	c := pod.Spec.Containers[0]
	argv := append(append([]string(nil), c.Command...), c.Args...)
	if len(argv) == 0 {
		s.end(pod, 128, time.Now())
		return
	}
	out, err := os.Create(s.Log(pod.Name))
	if err != nil {
		s.end(pod, 128, time.Now())
		return
	}
	defer out.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = c.WorkingDir, out, out
	cmd.Env = append(os.Environ(), containerEnv(c)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		s.end(pod, 127, start)
		return
	}
	s.mu.Lock()
	s.started[pod.UID] = cmd
	s.mu.Unlock()
	code := 0
	if err := cmd.Wait(); err != nil {
		code = exitCode(err)
	}
	s.end(pod, code, start)
}

// containerEnv is c's env and CUDA_VISIBLE_DEVICES for its GPU limit.
func containerEnv(c corev1.Container) []string {
	var env []string
	for _, e := range c.Env {
		env = append(env, e.Name+"="+e.Value)
	}
	if q, ok := c.Resources.Limits["nvidia.com/gpu"]; ok && q.Value() > 0 {
		ids := make([]string, q.Value())
		for i := range ids {
			ids[i] = strconv.Itoa(i)
		}
		env = append(env, "CUDA_VISIBLE_DEVICES="+strings.Join(ids, ","))
	}
	return env
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
			return 128 + int(st.Signal())
		}
		return ee.ExitCode()
	}
	return 128
}

// end sets pod's end through the API, as a kubelet would: the phase, the
// container terminated with code. A pod gone is left alone.
func (s *StandIn) end(pod *corev1.Pod, code int, start time.Time) {
	phase, reason := corev1.PodSucceeded, "Completed"
	if code != 0 {
		phase, reason = corev1.PodFailed, "Error"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := s.cs.CoreV1().Pods(s.ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || p.UID != pod.UID {
			return err
		}
		p.Status.Phase = phase
		p.Status.Conditions = setReady(p.Status.Conditions)
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: pod.Spec.Containers[0].Name, Image: pod.Spec.Containers[0].Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: int32(code), Reason: reason,
				StartedAt: metav1.NewTime(start), FinishedAt: metav1.Now()}}}}
		_, err = s.cs.CoreV1().Pods(s.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		println("kubetest: stand-in: end pod", pod.Name, err.Error())
	}
}

// setReady marks the pod's Ready and ContainersReady conditions false.
func setReady(conds []corev1.PodCondition) []corev1.PodCondition {
	for i := range conds {
		if conds[i].Type == corev1.PodReady || conds[i].Type == corev1.ContainersReady {
			conds[i].Status, conds[i].Reason = corev1.ConditionFalse, "PodCompleted"
		}
	}
	return conds
}

// stop stops the command of a pod being deleted: SIGTERM to its process
// group, SIGKILL after the grace period.
func (s *StandIn) stop(pod *corev1.Pod) {
	s.mu.Lock()
	cmd := s.started[pod.UID]
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	pid := cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	grace := 30 * time.Second
	if g := pod.DeletionGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	time.AfterFunc(grace, func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
}

func (s *StandIn) stopAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, cmd := range s.started {
		if cmd != nil && cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}
}
