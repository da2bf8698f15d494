package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/spf13/cobra"

	"github.com/lathe-ml/lathe/backends/aws/agent"
)

// agentOptions are lathed agent's flags.
type agentOptions struct {
	job, endpoint, workDir, imds string
	cgroupRoot                   string
	noShutdown                   bool
	imdsPoll                     time.Duration
}

// agentCmd is `lathed agent --job s3://BUCKET/PREFIX/JOB/ATTEMPT/job.json`,
// what a cloud instance's user-data runs (backends/aws/agent), written and
// launched by `lathed worker --backend aws`; the tests run it as a local
// process in the instance's role.
func agentCmd(stderr io.Writer, logLevel *string) *cobra.Command {
	var o agentOptions
	cmd := &cobra.Command{
		Use:   "agent --job s3://BUCKET/PREFIX/JOB_ID/ATTEMPT/job.json",
		Short: "Runs one attempt on a cloud instance: job and data from S3, the trainer, results back to S3, then shuts the instance down",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			log, err := newLogger(stderr, *logLevel)
			if err != nil {
				return err
			}
			return runAgent(c.Context(), o, log)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.job, "job", "", "the attempt's job.json in S3")
	f.StringVar(&o.endpoint, "endpoint-url", "", "an S3-compatible endpoint (path-style); default AWS (or AWS_ENDPOINT_URL)")
	f.StringVar(&o.workDir, "work-dir", "", "local folder for data, checkpoints and outputs (default a new temporary one)")
	f.StringVar(&o.imds, "imds-endpoint", "", "instance metadata service (default http://169.254.169.254)")
	f.DurationVar(&o.imdsPoll, "imds-poll-interval", agent.DefaultIMDSPollInterval, "how often the spot interruption notice is polled")
	f.StringVar(&o.cgroupRoot, "cgroup-root", agent.CgroupAuto, "cgroup v2 directory for the trainer's cgroup (auto finds one; none: a process group only)")
	f.BoolVar(&o.noShutdown, "no-shutdown", false, "do not shut the machine down at the end (tests, debugging)")
	return cmd
}

// runAgent runs the attempt of o.job to its end; an error unless it succeeded.
func runAgent(ctx context.Context, o agentOptions, log *slog.Logger) error {
	if o.job == "" {
		return fmt.Errorf("--job is required (s3://BUCKET/PREFIX/JOB_ID/ATTEMPT/job.json)")
	}
	client, err := agentS3(ctx, o.endpoint)
	if err != nil {
		return err
	}
	workDir := o.workDir
	if workDir == "" {
		if workDir, err = os.MkdirTemp("", "lathe-agent-"); err != nil {
			return err
		}
	}
	scriptsDir := filepath.Join(workDir, "scripts")
	if err := writeScripts(scriptsDir); err != nil {
		return err
	}
	cfg := agent.Config{JobURI: o.job, S3: client, WorkDir: filepath.Join(workDir, "work"), Logger: log,
		TrainerArgv: []string{"/usr/bin/python3", filepath.Join(scriptsDir, "train_lora.py")}, CgroupRoot: o.cgroupRoot}
	if o.imds != "" {
		cfg.IMDSEndpoint = o.imds
	}
	cfg.IMDSPollInterval = o.imdsPoll
	if o.noShutdown {
		cfg.Shutdown = func(context.Context) error {
			log.Warn("--no-shutdown: leaving the machine running")
			return nil
		}
	}
	st, err := agent.Run(ctx, cfg)
	if err != nil {
		return err
	}
	log.Info("attempt ended", "state", st.State, "exit_code", st.ExitCode)
	if st.State != agent.StateSucceeded {
		return fmt.Errorf("attempt ended %s: %s", st.State, st.Error)
	}
	return nil
}

// agentS3 is the S3 client of the instance's role, at endpoint (path-style)
// when it is not empty.
func agentS3(ctx context.Context, endpoint string) (*s3.Client, error) {
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("agent: AWS config: %w", err)
	}
	return s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
			o.UsePathStyle = true // S3-compatible endpoints (and moto) over plain HTTP
		}
	}), nil
}
