package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/redis/go-redis/v9"

	awsbackend "github.com/lathe-ml/lathe/backends/aws"
	"github.com/lathe-ml/lathe/backends/aws/agent"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/ledger"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
	"github.com/lathe-ml/lathe/scheduler"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
	"github.com/lathe-ml/lathe/worker"
)

// awsSection is the aws: section of the daemon's config: what the AWS
// worker and the reconciler share. Launch settings per backend live under
// backends: (scheduler/routing).
type awsSection struct {
	// EndpointURL points EC2 and S3 at a compatible endpoint (path-style
	// S3); --endpoint-url wins; AWS_ENDPOINT_URL also works.
	EndpointURL  string   `yaml:"endpoint_url"`
	PollInterval duration `yaml:"poll_interval"`
	LaunchRetry  duration `yaml:"launch_retry"`
	StatusGrace  duration `yaml:"status_grace"`
	LeaseTTL     duration `yaml:"lease_ttl"`
}

// defaultCluster is the lathe:cluster tag when the config names none.
const defaultCluster = "lathe"

// awsConfigOf is the backends/aws configuration of routing backend rb.
func awsConfigOf(rb routecfg.Backend, cluster, endpoint string) awsbackend.Config {
	types := make([]awsbackend.InstanceType, 0, len(rb.InstanceTypes))
	for _, t := range rb.InstanceTypes {
		types = append(types, awsbackend.InstanceType{Name: t.Name, OnDemandUSDPerHour: t.OnDemandUSDPerHour, SpotUSDPerHour: t.SpotUSDPerHour})
	}
	return awsbackend.Config{Cluster: cluster, Backend: rb.Name, Region: rb.Region, AMI: rb.AMI, Subnets: rb.Subnets,
		SecurityGroups: rb.SecurityGroups, InstanceProfile: rb.InstanceProfile, KeyName: rb.KeyName, Spot: rb.SpotPolicy,
		InstanceTypes: types, EndpointURL: endpoint}
}

// loadAWS is the standard AWS environment (credentials, profile) with the
// backend's region.
func loadAWS(ctx context.Context, region string) (aws.Config, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(region))
	if err != nil {
		return aws.Config{}, fmt.Errorf("AWS config: %w", err)
	}
	return cfg, nil
}

// s3Client is an S3 client for region, at endpoint (path-style) when set.
func s3Client(awsCfg aws.Config, endpoint string) *s3.Client {
	return s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
			o.UsePathStyle = true
		}
	})
}

// cloudReconcilers builds, for the scheduler's reconciler, the EC2 side of
// every aws backend of the config that can launch (one that cannot has no
// instances of Lathe's). A backend whose settings are refused is logged and
// left out.
func cloudReconcilers(ctx context.Context, rc routecfg.Config, cluster, endpoint string, log *slog.Logger) map[string]scheduler.CloudInstances {
	out := map[string]scheduler.CloudInstances{}
	for _, b := range rc.Backends {
		if b.Kind != routecfg.KindAWS {
			continue
		}
		if err := b.LaunchReady(); err != nil {
			log.Info("reconciler: backend not watched (no launch settings)", slog.String("backend", b.Name), slog.Any("why", err))
			continue
		}
		awsCfg, err := loadAWS(ctx, b.Region)
		if err != nil {
			log.Error("reconciler: backend not watched", slog.String("backend", b.Name), slog.Any("err", err))
			continue
		}
		eb, err := awsbackend.New(ctx, awsConfigOf(b, cluster, endpoint), awsbackend.WithAWSConfig(awsCfg), awsbackend.WithLogger(log))
		if err != nil {
			log.Error("reconciler: backend not watched", slog.String("backend", b.Name), slog.Any("err", err))
			continue
		}
		out[b.Name] = eb.Cloud()
	}
	return out
}

// startCloudWorker starts the AWS worker of backend name.
func startCloudWorker(ctx context.Context, rdb redis.UniversalClient, store *jobstore.Store, fc *fileConfig, name, endpoint, dataDir string,
	roots pathpolicy.Roots, teams pathpolicy.TeamRoots, log *slog.Logger) (*worker.Cloud, error) {
	b, ok := fc.daemon.Routing.Backend(name)
	if name == "" || !ok || b.Kind != routecfg.KindAWS {
		var names []string
		for _, b := range fc.daemon.Routing.Backends {
			if b.Kind == routecfg.KindAWS {
				names = append(names, b.Name)
			}
		}
		return nil, fmt.Errorf("--aws-backend %q: want one of the config's aws backends %v", name, names)
	}
	if err := b.LaunchReady(); err != nil {
		return nil, fmt.Errorf("--aws-backend %s: %w", name, err)
	}
	awsCfg, err := loadAWS(ctx, b.Region)
	if err != nil {
		return nil, err
	}
	cluster := firstNonEmpty(fc.Cluster, defaultCluster)
	eb, err := awsbackend.New(ctx, awsConfigOf(b, cluster, endpoint), awsbackend.WithAWSConfig(awsCfg), awsbackend.WithLogger(log))
	if err != nil {
		return nil, err
	}
	led, err := loadLedgerKey(rdb, fc, dataDir, log)
	if err != nil {
		return nil, err
	}
	c, err := worker.NewCloud(rdb, store, worker.CloudConfig{
		Routing: fc.daemon.Routing, Backend: name, EC2: eb.Cloud(), S3: agent.NewS3Store(s3Client(awsCfg, endpoint)), Ledger: led,
		DataDir: dataDir, AllowedRoots: roots, TeamRoots: teams, Deny: daemonDeny(fc), MaxAttempts: fc.Worker.MaxAttempts, DefaultMaxRuntime: fc.daemon.MaxRuntime,
		LeaseTTL: fc.AWS.LeaseTTL.D(), HeartbeatTTL: fc.Worker.HeartbeatTTL.D(), PollInterval: fc.AWS.PollInterval.D(),
		LaunchRetry: fc.AWS.LaunchRetry.D(), StatusGrace: fc.AWS.StatusGrace.D(), TrainerPassEnv: trainerPassEnv(fc.Trainers), Logger: log,
	})
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	log.Info("AWS worker up", slog.String("backend", name), slog.String("cluster", cluster), slog.String("region", b.Region),
		slog.String("endpoint", redactURL(firstNonEmpty(endpoint, "AWS"))), slog.Bool("ledger", led != nil))
	return c, nil
}

// loadLedgerKey opens the ledger with the scheduler's key file, without
// ever making one (a new key would break the chain): with no key file the
// worker gets no ledger, and refuses to copy data it cannot record.
func loadLedgerKey(rdb redis.UniversalClient, fc *fileConfig, dataDir string, log *slog.Logger, opts ...ledger.Option) (*ledger.Ledger, error) {
	keyFile := fc.Ledger.KeyFile
	if keyFile == "" {
		keyFile = filepath.Join(dataDir, "ledger.key")
	}
	if _, err := os.Stat(keyFile); errors.Is(err, os.ErrNotExist) {
		log.Warn("no ledger key: file:// datasets will not be staged to S3 (a copy must be recorded first); give ledger.key_file the scheduler's key",
			slog.String("key_file", keyFile))
		return nil, nil
	}
	key, err := ledger.LoadKey(keyFile)
	if err != nil {
		return nil, fmt.Errorf("ledger.key_file: %w", err)
	}
	return ledger.New(rdb, key, firstNonEmpty(fc.Redis.KeyPrefix, "lathe:"), opts...), nil
}
