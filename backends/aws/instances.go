package aws

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/lathe-ml/lathe/internal/cloud"
)

// liveStates are the states of an instance that exists and may bill (or
// come back): the ones a find-by-tags and FindManaged look at.
var liveStates = []string{"pending", "running", "stopping", "stopped"}

// Instance is what Lathe knows of one EC2 instance.
type Instance struct {
	// ID is the instance id ("i-…").
	ID string
	// Type is the instance type.
	Type string
	// State is EC2's state name: pending, running, shutting-down,
	// terminated, stopping or stopped.
	State string
	// LaunchTime is when EC2 launched it (the start of its cost).
	LaunchTime time.Time
	// Spot is true for a spot instance.
	Spot bool
	// SubnetID is the subnet it runs in.
	SubnetID string
	// PrivateIP is its private address, when it has one.
	PrivateIP string
	// Tags are all its tags.
	Tags map[string]string
}

// JobAttempt returns the job id and attempt of the instance's lathe tags;
// ok is false when either is missing or the attempt is not a number >= 1.
func (i Instance) JobAttempt() (jobID string, attempt int, ok bool) {
	jobID = i.Tags[TagJobID]
	a, err := strconv.Atoi(i.Tags[TagAttempt])
	if jobID == "" || err != nil || a < 1 {
		return "", 0, false
	}
	return jobID, a, true
}

// Gone reports whether the instance is terminated or on its way there.
func (i Instance) Gone() bool { return i.State == "terminated" || i.State == "shutting-down" }

func fromEC2(in ec2types.Instance) Instance {
	out := Instance{
		ID:         aws.ToString(in.InstanceId),
		Type:       string(in.InstanceType),
		LaunchTime: aws.ToTime(in.LaunchTime),
		Spot:       in.InstanceLifecycle == ec2types.InstanceLifecycleTypeSpot,
		SubnetID:   aws.ToString(in.SubnetId),
		PrivateIP:  aws.ToString(in.PrivateIpAddress),
		Tags:       make(map[string]string, len(in.Tags)),
	}
	if in.State != nil {
		out.State = string(in.State.Name)
	}
	for _, t := range in.Tags {
		out.Tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	return out
}

func filter(name string, values ...string) ec2types.Filter {
	return ec2types.Filter{Name: aws.String(name), Values: values}
}

// filters select this cluster's managed instances (lathe:managed=true and
// lathe:cluster), in live states unless q.Ended, this backend's only if
// q.OwnOnly (lathe:backend), one job attempt's if q.JobID is set.
func (b *Backend) filters(q cloud.Query) []ec2types.Filter {
	f := []ec2types.Filter{filter("tag:"+TagManaged, "true"), filter("tag:"+TagCluster, b.cfg.Cluster)}
	if !q.Ended {
		f = append(f, filter("instance-state-name", liveStates...))
	}
	if q.OwnOnly {
		f = append(f, filter("tag:"+TagBackend, b.cfg.Backend))
	}
	if q.JobID != "" {
		f = append(f, filter("tag:"+TagJobID, q.JobID), filter("tag:"+TagAttempt, strconv.Itoa(q.Attempt)))
	}
	return f
}

// describe runs DescribeInstances over every page.
func (b *Backend) describe(ctx context.Context, in *ec2.DescribeInstancesInput) ([]Instance, error) {
	var out []Instance
	for {
		page, err := b.ec2.DescribeInstances(ctx, in)
		if err != nil {
			return nil, err
		}
		for _, r := range page.Reservations {
			for _, i := range r.Instances {
				out = append(out, fromEC2(i))
			}
		}
		if aws.ToString(page.NextToken) == "" {
			break
		}
		in.NextToken = page.NextToken
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].LaunchTime.Equal(out[j].LaunchTime) {
			return out[i].LaunchTime.Before(out[j].LaunchTime)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// findAttempt returns this cluster's live instances of one job attempt,
// oldest first.
func (b *Backend) findAttempt(ctx context.Context, jobID string, attempt int) ([]Instance, error) {
	return b.describe(ctx, &ec2.DescribeInstancesInput{Filters: b.filters(cloud.Query{JobID: jobID, Attempt: attempt})})
}

// FindManaged returns every instance tagged lathe:managed=true and this
// backend's lathe:cluster that is pending, running, stopping or stopped,
// oldest first, with all its tags: what the reconciler checks against the
// live attempts (see cloud.Orphans).
func (b *Backend) FindManaged(ctx context.Context) ([]Instance, error) {
	out, err := b.describe(ctx, &ec2.DescribeInstancesInput{Filters: b.filters(cloud.Query{})})
	if err != nil {
		return nil, fmt.Errorf("aws: find managed instances of cluster %s: %w", b.cfg.Cluster, err)
	}
	return out, nil
}

// Describe returns one instance. It returns an error wrapping ErrNotFound
// when EC2 does not know the id; any other error is the API's, and says
// nothing about the instance (a caller must not terminate or relaunch on
// it).
func (b *Backend) Describe(ctx context.Context, instanceID string) (Instance, error) {
	out, err := b.describe(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{instanceID}})
	if err != nil {
		if errorCode(err) == "InvalidInstanceID.NotFound" {
			return Instance{}, fmt.Errorf("aws: describe %s: %w", instanceID, ErrNotFound)
		}
		return Instance{}, fmt.Errorf("aws: describe %s: %w", instanceID, err)
	}
	for _, i := range out {
		if i.ID == instanceID {
			return i, nil
		}
	}
	return Instance{}, fmt.Errorf("aws: describe %s: %w", instanceID, ErrNotFound)
}

// Terminate terminates an instance this cluster manages. It is idempotent:
// an instance already terminated, shutting down or unknown to EC2 is
// success. An instance not tagged lathe:managed=true with this cluster is
// refused with ErrNotManaged and left alone.
func (b *Backend) Terminate(ctx context.Context, instanceID string) error {
	inst, err := b.Describe(ctx, instanceID)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("aws: terminate %s: %w", instanceID, err)
	}
	if inst.Tags[TagManaged] != "true" || inst.Tags[TagCluster] != b.cfg.Cluster {
		return fmt.Errorf("aws: terminate %s (tags %s=%q %s=%q): %w", instanceID,
			TagManaged, inst.Tags[TagManaged], TagCluster, inst.Tags[TagCluster], ErrNotManaged)
	}
	if inst.State == "terminated" {
		return nil
	}
	_, err = b.ec2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{instanceID}})
	if err != nil {
		if errorCode(err) == "InvalidInstanceID.NotFound" {
			return nil
		}
		return fmt.Errorf("aws: terminate %s: %w", instanceID, err)
	}
	b.log.Info("aws: terminated instance", "instance_id", instanceID,
		"job_id", inst.Tags[TagJobID], "attempt", inst.Tags[TagAttempt])
	return nil
}

// DescribeBackend returns every instance this backend launched for this
// cluster (tagged lathe:managed=true, lathe:cluster and lathe:backend) in
// any state, terminated ones included while EC2 still lists them: one
// paginated DescribeInstances for all the instances a worker watches.
func (b *Backend) DescribeBackend(ctx context.Context) ([]Instance, error) {
	out, err := b.describe(ctx, &ec2.DescribeInstancesInput{Filters: b.filters(cloud.Query{OwnOnly: true, Ended: true})})
	if err != nil {
		return nil, fmt.Errorf("aws: describe the instances of backend %s: %w", b.cfg.Backend, err)
	}
	return out, nil
}
