package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/lathe-ml/lathe/backends/slurm"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
	"github.com/lathe-ml/lathe/worker"
)

// slurmSection is the daemon config's slurm: section, read by the slurm
// worker (docs/slurm.md).
type slurmSection struct {
	// Conf is the slurm.conf Slurm's commands use (SLURM_CONF); empty:
	// theirs. --slurm-conf wins.
	Conf         string   `yaml:"conf"`
	PollInterval duration `yaml:"poll_interval"`
	LeaseTTL     duration `yaml:"lease_ttl"`
	SubmitRetry  duration `yaml:"submit_retry"`
	LostGrace    duration `yaml:"lost_grace"`
	OrphanGrace  duration `yaml:"orphan_grace"`
}

// exitCodeError makes lathed exit with code (the slurm step's trainer's).
type exitCodeError struct{ code int }

func (e exitCodeError) Error() string { return fmt.Sprintf("exit code %d", e.code) }

// slurmStepCmd is `lathed slurm-step DIR`, what the batch script of a
// Slurm attempt runs on the node (worker.RunSlurmStep); it exits with the
// trainer's exit code.
func slurmStepCmd(stderr io.Writer, logLevel *string) *cobra.Command {
	return &cobra.Command{
		Use:   "slurm-step DIR",
		Short: "Runs one attempt's trainer inside a Slurm job (the batch script of lathed worker --backend slurm runs it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			log, err := newLogger(stderr, *logLevel)
			if err != nil {
				return err
			}
			code, err := worker.RunSlurmStep(c.Context(), args[0], log)
			if err != nil {
				return err
			}
			if code != 0 {
				return exitCodeError{code}
			}
			return nil
		},
	}
}

// startSlurmWorker starts the slurm worker of backend name, and writes the
// reference trainer into the backend's work_dir (storage its nodes share).
func (d *wiring) startSlurmWorker(ctx context.Context, name string) error {
	fc := d.fc
	b, ok := fc.daemon.Routing.Backend(name)
	if name == "" || !ok || b.Kind != routecfg.KindSlurm {
		var names []string
		for _, b := range fc.daemon.Routing.Backends {
			if b.Kind == routecfg.KindSlurm {
				names = append(names, b.Name)
			}
		}
		return fmt.Errorf("--slurm-backend %q: want one of the config's slurm backends %v", name, names)
	}
	scriptsDir := filepath.Join(b.WorkDir, "scripts")
	if err := writeScripts(scriptsDir); err != nil {
		return err
	}
	conf := firstNonEmpty(d.o.slurmConf, fc.Slurm.Conf)
	s, err := worker.NewSlurm(d.rdb, d.store, worker.SlurmConfig{
		Routing: fc.daemon.Routing, Backend: name, Slurm: slurm.New(slurm.Config{Conf: conf}),
		Trainers: trainerCommands(fc.Trainers), Launchers: trainerLaunchers(fc.Trainers), TrainerPassEnv: trainerPassEnv(fc.Trainers),
		DemoPython: fc.Worker.DemoPython, HFPython: fc.Worker.HFPython, ScriptsDir: scriptsDir,
		AllowedRoots: d.roots, Deny: daemonDeny(fc), MaxAttempts: fc.Worker.MaxAttempts, DefaultMaxRuntime: fc.daemon.MaxRuntime,
		KillGrace: fc.Worker.KillGrace.D(), LeaseTTL: fc.Slurm.LeaseTTL.D(), HeartbeatTTL: fc.Worker.HeartbeatTTL.D(),
		PollInterval: fc.Slurm.PollInterval.D(), TaskCheckInterval: fc.Worker.TaskCheckInterval.D(),
		SubmitRetry: fc.Slurm.SubmitRetry.D(), LostGrace: fc.Slurm.LostGrace.D(), OrphanGrace: fc.Slurm.OrphanGrace.D(),
		Cluster: firstNonEmpty(fc.Cluster, defaultCluster), Logger: d.log,
	})
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	d.stops = append(d.stops, s.Stop)
	d.log.Info("slurm worker up", slog.String("backend", name), slog.String("partition", b.Partition), slog.String("slurm_conf", conf))
	return nil
}
