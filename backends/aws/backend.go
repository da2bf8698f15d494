package aws

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

// Tag keys Lathe puts on every instance (and its volumes) it launches.
const (
	TagManaged = "lathe:managed"
	TagCluster = "lathe:cluster"
	TagJobID   = "lathe:job-id"
	TagAttempt = "lathe:attempt"
	TagBackend = "lathe:backend"
)

// Throttling backoff defaults: attempt n (from 0) waits a random duration in
// [d/2, d] with d = min(backoffMax, backoffBase·2^n); at most maxThrottleRetries
// retries of one call.
const (
	backoffBase        = 500 * time.Millisecond
	backoffMax         = 20 * time.Second
	maxThrottleRetries = 6
)

// Backend launches, describes and terminates the EC2 instances of one Lathe
// backend. Safe for concurrent use.
type Backend struct {
	cfg    Config
	ec2    ec2API
	log    *slog.Logger
	sleep  func(ctx context.Context, d time.Duration) error
	jitter func() float64 // in [0, 1)
	now    func() time.Time
}

// Option changes how New builds a Backend.
type Option func(*options)

type options struct {
	awsCfg *aws.Config
	log    *slog.Logger
	sleep  func(ctx context.Context, d time.Duration) error
	jitter func() float64
}

// WithAWSConfig uses awsCfg (credentials, retryer, HTTP client) instead of
// the standard AWS environment. Config.Region and Config.EndpointURL still
// override its region and endpoint.
func WithAWSConfig(awsCfg aws.Config) Option { return func(o *options) { o.awsCfg = &awsCfg } }

// WithLogger sets the logger; default slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithSleep replaces the throttling backoff's wait (tests record it instead
// of waiting). sleep must return ctx.Err() when ctx ends first.
func WithSleep(sleep func(ctx context.Context, d time.Duration) error) Option {
	return func(o *options) { o.sleep = sleep }
}

// WithJitter replaces the random source of the backoff's jitter; f returns
// a number in [0, 1).
func WithJitter(f func() float64) Option { return func(o *options) { o.jitter = f } }

// New validates cfg (applying defaults: Spot "never") and builds a Backend
// whose EC2 client uses the standard AWS environment (or WithAWSConfig),
// cfg.Region and cfg.EndpointURL. It makes no AWS call.
func New(ctx context.Context, cfg Config, opts ...Option) (*Backend, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	o := options{log: slog.Default(), sleep: sleepCtx, jitter: rand.Float64}
	for _, opt := range opts {
		opt(&o)
	}
	var awsCfg aws.Config
	if o.awsCfg != nil {
		awsCfg = o.awsCfg.Copy()
	} else {
		var err error
		awsCfg, err = config.LoadDefaultConfig(ctx)
		if err != nil {
			return nil, fmt.Errorf("aws: load AWS config: %w", err)
		}
	}
	awsCfg.Region = cfg.Region
	if cfg.EndpointURL != "" {
		awsCfg.BaseEndpoint = aws.String(cfg.EndpointURL)
	}
	var api ec2API = ec2.NewFromConfig(awsCfg)
	return &Backend{
		cfg:    cfg,
		ec2:    api,
		log:    o.log.With(slog.String("backend", cfg.Backend)),
		sleep:  o.sleep,
		jitter: o.jitter,
		now:    time.Now,
	}, nil
}

// Config returns the validated configuration with defaults applied.
func (b *Backend) Config() Config { return b.cfg }

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// backoff is the wait before throttling retry n (from 0): a random duration
// in [d/2, d), d = min(backoffMax, backoffBase·2^n).
func backoff(n int, jitter float64) time.Duration {
	d := backoffBase
	for i := 0; i < n && d < backoffMax; i++ {
		d *= 2
	}
	if d > backoffMax {
		d = backoffMax
	}
	return d/2 + time.Duration(jitter*float64(d/2))
}
