package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/lathe-ml/lathe/backends/kubernetes"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
	"github.com/lathe-ml/lathe/worker"
)

// kubeSection is the daemon config's kubernetes: section, read by the
// kubernetes worker (docs/kubernetes.md).
type kubeSection struct {
	// Kubeconfig is the kubeconfig file of the cluster; empty: the
	// in-cluster config. --kubeconfig wins.
	Kubeconfig   string   `yaml:"kubeconfig"`
	PollInterval duration `yaml:"poll_interval"`
	LeaseTTL     duration `yaml:"lease_ttl"`
	SubmitRetry  duration `yaml:"submit_retry"`
	LostGrace    duration `yaml:"lost_grace"`
	OrphanGrace  duration `yaml:"orphan_grace"`
}

// kubeBackend returns kubernetes backend name of the config, or an error
// listing the config's kubernetes backends.
func (d *wiring) kubeBackend(name string) (routecfg.Backend, error) {
	b, ok := d.fc.daemon.Routing.Backend(name)
	if name != "" && ok && b.Kind == routecfg.KindKubernetes {
		return b, nil
	}
	var names []string
	for _, b := range d.fc.daemon.Routing.Backends {
		if b.Kind == routecfg.KindKubernetes {
			names = append(names, b.Name)
		}
	}
	return b, fmt.Errorf("--kube-backend %q: want one of the config's kubernetes backends %v", name, names)
}

// startKubeWorker starts the kubernetes worker of backend name, and
// writes the reference trainer into the backend's work_dir (storage its
// pods share).
func (d *wiring) startKubeWorker(ctx context.Context, name string) error {
	fc := d.fc
	b, err := d.kubeBackend(name)
	if err != nil {
		return err
	}
	scriptsDir := filepath.Join(b.WorkDir, "scripts")
	if err := writeScripts(scriptsDir); err != nil {
		return err
	}
	kubeconfig := firstNonEmpty(d.o.kubeconfig, fc.Kube.Kubeconfig)
	cluster := firstNonEmpty(fc.Cluster, defaultCluster)
	api, err := kubernetes.New(kubernetes.Config{Kubeconfig: kubeconfig, Namespace: b.Kube.Namespace, Cluster: cluster})
	if err != nil {
		return err
	}
	if err := api.Start(ctx); err != nil {
		return err
	}
	k, err := worker.NewKube(d.rdb, d.store, worker.KubeConfig{Kube: api, SlurmConfig: worker.SlurmConfig{
		Routing: fc.daemon.Routing, Backend: name,
		Trainers: trainerCommands(fc.Trainers), Launchers: trainerLaunchers(fc.Trainers), TrainerPassEnv: trainerPassEnv(fc.Trainers),
		DemoPython: fc.Worker.DemoPython, HFPython: fc.Worker.HFPython, ScriptsDir: scriptsDir,
		AllowedRoots: d.roots, Deny: daemonDeny(fc), MaxAttempts: fc.Worker.MaxAttempts, DefaultMaxRuntime: fc.daemon.MaxRuntime,
		KillGrace: fc.Worker.KillGrace.D(), LeaseTTL: fc.Kube.LeaseTTL.D(), HeartbeatTTL: fc.Worker.HeartbeatTTL.D(),
		PollInterval: fc.Kube.PollInterval.D(), TaskCheckInterval: fc.Worker.TaskCheckInterval.D(),
		SubmitRetry: fc.Kube.SubmitRetry.D(), LostGrace: fc.Kube.LostGrace.D(), OrphanGrace: fc.Kube.OrphanGrace.D(),
		Cluster: cluster, Logger: d.log,
	}})
	if err != nil {
		return err
	}
	if err := k.Start(ctx); err != nil {
		return err
	}
	d.stops = append(d.stops, k.Stop)
	d.log.Info("kubernetes worker up", slog.String("backend", name), slog.String("namespace", b.Kube.Namespace), slog.String("kubeconfig", kubeconfig))
	return nil
}
