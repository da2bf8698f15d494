// Package kubernetes runs attempts as Kubernetes Jobs through the API
// server, with client-go: it makes each attempt's Job, follows the
// deployment's Jobs and their pods through a watch (shared informers), reads
// a pod's log, and deletes a Job to cancel it. It is the only package of
// Lathe that talks to a Kubernetes API; the kubernetes worker
// (worker.Kube) uses it through a small interface of its own. Everything
// read back from the cluster is treated as hostile: strings are bounded
// and stripped of control characters, logs are read up to a limit.
package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	k8s "k8s.io/client-go/kubernetes"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// ErrNotFound is returned for a Job the API server does not hold (never
// made, deleted, or removed by its TTL).
var ErrNotFound = errors.New("kubernetes: job not found")

// Config says which cluster and namespace, and which Jobs are this
// deployment's.
type Config struct {
	// Kubeconfig is the kubeconfig file's path; empty: the in-cluster
	// config (the pod's service account).
	Kubeconfig string
	// Namespace the Jobs are made and watched in. Required.
	Namespace string
	// Cluster is the deployment's name: its Jobs carry it in LabelCluster,
	// and only those are watched. Required.
	Cluster string
	// Timeout bounds one API call; default 30s.
	Timeout time.Duration
}

// Client makes, watches and deletes the Jobs of one deployment in one
// namespace. Start it before reading the watched Jobs.
type Client struct {
	cs      k8s.Interface
	cfg     Config
	factory informers.SharedInformerFactory
	jobs    batchlisters.JobLister
	pods    corelisters.PodLister
	synced  []cache.InformerSynced
}

// New returns a Client of cfg's cluster.
func New(cfg Config) (*Client, error) {
	rc, err := restConfig(cfg.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cs, err := k8s.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: client: %w", err)
	}
	return NewForClientset(cs, cfg)
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		rc, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("kubernetes: no kubeconfig given and not in a cluster: %w", err)
		}
		return rc, nil
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: kubeconfig %s: %w", kubeconfig, err)
	}
	return rc, nil
}

// NewForClientset returns a Client over cs.
func NewForClientset(cs k8s.Interface, cfg Config) (*Client, error) {
	if cfg.Namespace == "" || cfg.Cluster == "" {
		return nil, errors.New("kubernetes: a namespace and a cluster name are required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	sel := labels.SelectorFromSet(labels.Set{LabelCluster: cfg.Cluster}).String()
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel }))
	c := &Client{cs: cs, cfg: cfg, factory: f, jobs: f.Batch().V1().Jobs().Lister(), pods: f.Core().V1().Pods().Lister()}
	c.synced = []cache.InformerSynced{f.Batch().V1().Jobs().Informer().HasSynced, f.Core().V1().Pods().Informer().HasSynced}
	return c, nil
}

// Start starts the watch of the deployment's Jobs and pods and waits until
// it has listed them; it stops when ctx ends.
func (c *Client) Start(ctx context.Context) error {
	c.factory.Start(ctx.Done())
	wctx, cancel := context.WithTimeout(ctx, 2*c.cfg.Timeout)
	defer cancel()
	if !cache.WaitForCacheSync(wctx.Done(), c.synced...) {
		return fmt.Errorf("kubernetes: watch of namespace %s not synced: %w", c.cfg.Namespace, context.Cause(wctx))
	}
	return nil
}

// Submit makes r's Job. The name is the attempt's: when a Job of that name
// already exists (made before a restart), none is made and that one is
// returned with existed true.
func (c *Client) Submit(ctx context.Context, r SubmitRequest) (j Job, existed bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	r.Cluster = c.cfg.Cluster
	made, err := c.cs.BatchV1().Jobs(c.cfg.Namespace).Create(ctx, BuildJob(r, c.cfg.Namespace), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		j, err = c.Get(ctx, r.Name)
		return j, true, err
	}
	if err != nil {
		return Job{}, false, fmt.Errorf("kubernetes: create job %s: %w", r.Name, err)
	}
	return Summarize(made, nil), false, nil
}

// Get asks the API server for Job name and its pods (not the watch).
func (c *Client) Get(ctx context.Context, name string) (Job, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	job, err := c.cs.BatchV1().Jobs(c.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Job{}, fmt.Errorf("kubernetes: job %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return Job{}, fmt.Errorf("kubernetes: get job %s: %w", name, err)
	}
	list, err := c.cs.CoreV1().Pods(c.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: podSelector(job).String()})
	if err != nil {
		return Job{}, fmt.Errorf("kubernetes: pods of job %s: %w", name, err)
	}
	pods := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		pods[i] = &list.Items[i]
	}
	return Summarize(job, ownedBy(job, pods)), nil
}

// Watched returns Job name as the watch last saw it; ErrNotFound when the
// watch holds none (not made, deleted, or not seen yet).
func (c *Client) Watched(name string) (Job, error) {
	job, err := c.jobs.Jobs(c.cfg.Namespace).Get(name)
	if err != nil {
		return Job{}, fmt.Errorf("kubernetes: job %s: %w", name, ErrNotFound)
	}
	return c.summarize(job), nil
}

// List returns the deployment's Jobs as the watch holds them.
func (c *Client) List() ([]Job, error) {
	jobs, err := c.jobs.Jobs(c.cfg.Namespace).List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("kubernetes: list jobs: %w", err)
	}
	out := make([]Job, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, c.summarize(j))
	}
	return out, nil
}

func (c *Client) summarize(job *batchv1.Job) Job {
	pods, _ := c.pods.Pods(c.cfg.Namespace).List(podSelector(job))
	return Summarize(job, ownedBy(job, pods))
}

// ownedBy keeps the pods job owns (not those of an earlier Job of its name
// and labels).
func ownedBy(job *batchv1.Job, pods []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		for _, o := range p.OwnerReferences {
			if o.UID == job.UID {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// podSelector selects the pods of Lathe's Job job by its labels.
func podSelector(job *batchv1.Job) labels.Selector {
	return labels.SelectorFromSet(labels.Set{LabelCluster: job.Labels[LabelCluster], LabelJob: job.Labels[LabelJob],
		LabelAttempt: job.Labels[LabelAttempt]})
}

// Delete deletes Job name and, in the background, its pods (the
// garbage collector's); a Job already gone is not an error.
func (c *Client) Delete(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	bg := metav1.DeletePropagationBackground
	err := c.cs.BatchV1().Jobs(c.cfg.Namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kubernetes: delete job %s: %w", name, err)
	}
	return nil
}

// Logs returns the last limit bytes at most of the log of Job name's
// latest pod's container, as the API server serves it (from the node).
func (c *Client) Logs(ctx context.Context, name string, limit int64) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	job, err := c.jobs.Jobs(c.cfg.Namespace).Get(name)
	if err != nil {
		return "", fmt.Errorf("kubernetes: job %s: %w", name, ErrNotFound)
	}
	pods, _ := c.pods.Pods(c.cfg.Namespace).List(podSelector(job))
	pod := latestPod(ownedBy(job, pods))
	if pod == nil {
		return "", fmt.Errorf("kubernetes: job %s has no pod", name)
	}
	tail := int64(200)
	rc, err := c.cs.CoreV1().Pods(c.cfg.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: ContainerName,
		TailLines: &tail, LimitBytes: &limit}).Stream(ctx)
	if err != nil {
		return "", fmt.Errorf("kubernetes: log of pod %s: %w", pod.Name, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit))
	return string(b), err
}
