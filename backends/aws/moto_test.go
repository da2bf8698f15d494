package aws

// Integration tests: the real aws-sdk-go-v2 EC2 client against moto_server,
// an emulator of EC2 (not AWS itself), started per test by mototest. Where
// EC2 behaviour moto lacks is needed (capacity errors, throttling, a
// failing DescribeInstances), faultProxy, a fake that sits between the SDK
// and moto, answers chosen calls with EC2's XML error and forwards the rest.

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/lathe-ml/lathe/internal/mototest"
)

// testBundle is one moto_server with a VPC, two subnets, a security group,
// an instance profile and an AMI, and a Config for them.
type testBundle struct {
	moto   *mototest.Server
	ec2    *ec2.Client // straight to moto, for checks
	cfg    Config
	sleeps []time.Duration
	mu     sync.Mutex
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	ctx := context.Background()
	srv := mototest.Start(t)
	awsCfg := srv.Config(ctx)
	ec := ec2.NewFromConfig(awsCfg)

	net := mototest.NewNetwork(ctx, t, awsCfg)
	return &testBundle{
		moto: srv,
		ec2:  ec,
		cfg: Config{
			Cluster:         "test-cluster",
			Backend:         "aws-eu",
			Region:          mototest.Region,
			AMI:             net.AMI,
			Subnets:         net.Subnets,
			SecurityGroups:  []string{net.SecurityGroup},
			InstanceProfile: net.InstanceProfile,
			Spot:            SpotNever,
			InstanceTypes: []InstanceType{
				{Name: "g5.xlarge", OnDemandUSDPerHour: 1.006, SpotUSDPerHour: 0.45},
				{Name: "g5.12xlarge", OnDemandUSDPerHour: 5.672, SpotUSDPerHour: 2.10},
				{Name: "p4d.24xlarge", OnDemandUSDPerHour: 32.77},
				{Name: "g6e.xlarge", OnDemandUSDPerHour: 1.861, SpotUSDPerHour: 0.80},
			},
		},
	}
}

// backend builds a Backend on endpoint (moto's URL, or a proxy's) with the
// given config; the throttling backoff's sleeps are recorded, not slept,
// and its jitter is 0.5.
func (tb *testBundle) backend(t *testing.T, endpoint string, cfg Config, mod ...func(*aws.Config)) *Backend {
	t.Helper()
	awsCfg := mototest.ConfigFor(context.Background(), t, endpoint)
	for _, m := range mod {
		m(&awsCfg)
	}
	cfg.EndpointURL = endpoint
	b, err := New(context.Background(), cfg, WithAWSConfig(awsCfg),
		WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, nil))),
		WithJitter(func() float64 { return 0.5 }),
		WithSleep(func(ctx context.Context, d time.Duration) error {
			tb.mu.Lock()
			tb.sleeps = append(tb.sleeps, d)
			tb.mu.Unlock()
			return ctx.Err()
		}))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return b
}

// motoInstances lists every instance moto holds that is not terminated,
// tagged or not, read straight from moto.
func (tb *testBundle) motoInstances(t *testing.T) []ec2types.Instance {
	t.Helper()
	out, err := tb.ec2.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{
		Filters: []ec2types.Filter{{Name: aws.String("instance-state-name"), Values: liveStates}},
	})
	if err != nil {
		t.Fatalf("DescribeInstances (moto): %v", err)
	}
	var all []ec2types.Instance
	for _, r := range out.Reservations {
		all = append(all, r.Instances...)
	}
	return all
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
