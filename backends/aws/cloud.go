package aws

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/lathe-ml/lathe/internal/cloud"
)

// Cloud is a Backend seen through the cloud.Backend seam: what the
// reconciler and the cloud worker use. Its instances carry the job fields
// parsed from their lathe tags; its errors match cloud's (and this
// package's). Safe for concurrent use.
type Cloud struct{ b *Backend }

var _ cloud.Backend = (*Cloud)(nil)

// Cloud returns b as a cloud.Backend.
func (b *Backend) Cloud() *Cloud { return &Cloud{b: b} }

// Launch is Backend.Launch with its result in cloud's terms.
func (c *Cloud) Launch(ctx context.Context, req cloud.LaunchRequest) (cloud.LaunchResult, error) {
	res, err := c.b.Launch(ctx, req)
	return cloud.LaunchResult{Instance: res.Instance.Cloud(), Found: res.Found, Attempts: res.Attempts}, err
}

// Find returns this cluster's managed instances that q selects, oldest
// first: cloud.Query{} is FindManaged; OwnOnly with Ended is
// DescribeBackend; a JobID narrows to that attempt's tags.
func (c *Cloud) Find(ctx context.Context, q cloud.Query) ([]cloud.Instance, error) {
	var (
		insts []Instance
		err   error
	)
	switch {
	case q == cloud.Query{}:
		insts, err = c.b.FindManaged(ctx)
	case q == cloud.Query{OwnOnly: true, Ended: true}:
		insts, err = c.b.DescribeBackend(ctx)
	default:
		insts, err = c.b.find(ctx, q)
	}
	if err != nil {
		return nil, err
	}
	out := make([]cloud.Instance, len(insts))
	for i, in := range insts {
		out[i] = in.Cloud()
	}
	return out, nil
}

// Describe is Backend.Describe in cloud's terms.
func (c *Cloud) Describe(ctx context.Context, instanceID string) (cloud.Instance, error) {
	in, err := c.b.Describe(ctx, instanceID)
	if err != nil {
		return cloud.Instance{}, err
	}
	return in.Cloud(), nil
}

// Terminate is Backend.Terminate.
func (c *Cloud) Terminate(ctx context.Context, instanceID string) error {
	return c.b.Terminate(ctx, instanceID)
}

// Price is Backend.Price of an instance of inst's type and market.
func (c *Cloud) Price(inst cloud.Instance) float64 {
	return c.b.Price(Instance{Type: inst.Type, Spot: inst.Spot})
}

// Cost is EC2's billing rule: Cost.
func (c *Cloud) Cost(launch, end time.Time, usdPerHour float64) float64 {
	return Cost(launch, end, usdPerHour)
}

// Cloud is the instance in cloud's terms: its job attempt (zero when
// JobAttempt is not ok), backend and managed tag parsed from its tags.
func (i Instance) Cloud() cloud.Instance {
	job, attempt, _ := i.JobAttempt()
	return cloud.Instance{ID: i.ID, Backend: i.Tags[TagBackend], JobID: job, Attempt: attempt,
		Managed: i.Tags[TagManaged] == "true", Type: i.Type, State: i.State, LaunchTime: i.LaunchTime,
		Spot: i.Spot, SubnetID: i.SubnetID}
}

// find runs a query of any other shape (see filters).
func (b *Backend) find(ctx context.Context, q cloud.Query) ([]Instance, error) {
	out, err := b.describe(ctx, &ec2.DescribeInstancesInput{Filters: b.filters(q)})
	if err != nil {
		return nil, fmt.Errorf("aws: find instances of cluster %s (%+v): %w", b.cfg.Cluster, q, err)
	}
	return out, nil
}
