package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/spf13/cobra"

	"github.com/lathe-ml/lathe/backends/aws/agent"
)

// agentCmd is `lathed agent --job s3://BUCKET/PREFIX/JOB/ATTEMPT/job.json`,
// what a cloud instance's user-data runs (backends/aws/agent), written and
// launched by `lathed worker --backend aws`; the tests run it as a local
// process in the instance's role.
func agentCmd(stderr io.Writer, logLevel *string) *cobra.Command {
	var (
		job, endpoint, workDir, imds string
		cgroupRoot                   string
		noShutdown                   bool
		imdsPoll                     time.Duration
	)
	cmd := &cobra.Command{
		Use:   "agent --job s3://BUCKET/PREFIX/JOB_ID/ATTEMPT/job.json",
		Short: "Runs one attempt on a cloud instance: job and data from S3, the trainer, results back to S3, then shuts the instance down",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			log, err := newLogger(stderr, *logLevel)
			if err != nil {
				return err
			}
			if job == "" {
				return fmt.Errorf("--job is required (s3://BUCKET/PREFIX/JOB_ID/ATTEMPT/job.json)")
			}
			ctx := c.Context()
			awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
			if err != nil {
				return fmt.Errorf("agent: AWS config: %w", err)
			}
			client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
				if endpoint != "" {
					o.BaseEndpoint = aws.String(endpoint)
					o.UsePathStyle = true // S3-compatible endpoints (and moto) over plain HTTP
				}
			})
			if workDir == "" {
				if workDir, err = os.MkdirTemp("", "lathe-agent-"); err != nil {
					return err
				}
			}
			scriptsDir := filepath.Join(workDir, "scripts")
			if err := writeScripts(scriptsDir); err != nil {
				return err
			}
			cfg := agent.Config{JobURI: job, S3: client, WorkDir: filepath.Join(workDir, "work"), Logger: log,
				TrainerArgv: []string{"/usr/bin/python3", filepath.Join(scriptsDir, "train_lora.py")}, CgroupRoot: cgroupRoot}
			if imds != "" {
				cfg.IMDSEndpoint = imds
			}
			cfg.IMDSPollInterval = imdsPoll
			if noShutdown {
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
		},
	}
	f := cmd.Flags()
	f.StringVar(&job, "job", "", "the attempt's job.json in S3")
	f.StringVar(&endpoint, "endpoint-url", "", "an S3-compatible endpoint (path-style); default AWS (or AWS_ENDPOINT_URL)")
	f.StringVar(&workDir, "work-dir", "", "local folder for data, checkpoints and outputs (default a new temporary one)")
	f.StringVar(&imds, "imds-endpoint", "", "instance metadata service (default http://169.254.169.254)")
	f.DurationVar(&imdsPoll, "imds-poll-interval", agent.DefaultIMDSPollInterval, "how often the spot interruption notice is polled")
	f.StringVar(&cgroupRoot, "cgroup-root", agent.CgroupAuto, "cgroup v2 directory for the trainer's cgroup (auto finds one; none: a process group only)")
	f.BoolVar(&noShutdown, "no-shutdown", false, "do not shut the machine down at the end (tests, debugging)")
	return cmd
}
