package aws

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/lathe-ml/lathe/internal/cloud"
)

// LaunchAttempt is one RunInstances call and its outcome (Code and Message
// are the AWS error's): an event on the job.
type LaunchAttempt = cloud.LaunchAttempt

// LaunchResult is what Launch did.
type LaunchResult struct {
	// Instance is the attempt's instance (launched now, or found).
	Instance Instance
	// Found is true when the instance already existed (found by its tags)
	// and nothing was launched.
	Found bool
	// Attempts are the RunInstances calls made, in order, including the
	// refused ones; set on error too.
	Attempts []LaunchAttempt
}

// Launch makes sure the job attempt of req has one instance and returns it.
//
// First it looks for a live instance tagged with this cluster, req.JobID and
// req.Attempt and returns it if there is one (a handler run again after a
// crash launches nothing); if that look-up fails, Launch returns the error
// and launches nothing. Otherwise it tries the choices of ChooseTypes in
// order, each in every configured subnet in order: a capacity error moves to
// the next subnet, then the next choice; throttling retries the same call
// after a bounded backoff with jitter; any other error is returned. When
// every choice in every subnet is refused for capacity, the error is a
// *NoCapacityError (errors.Is ErrNoCapacity) listing each attempt. Launch
// never leaves the backend's region.
func (b *Backend) Launch(ctx context.Context, req Request) (LaunchResult, error) {
	var res LaunchResult
	if err := validateRequest(req); err != nil {
		return res, err
	}
	inst, found, err := b.launchedBefore(ctx, req)
	if err != nil || found {
		res.Instance, res.Found = inst, found
		return res, err
	}
	choices, err := b.ChooseTypes(ctx, req)
	if err != nil {
		return res, fmt.Errorf("aws: launch %s attempt %d: %w", req.JobID, req.Attempt, err)
	}
	if len(choices) == 0 {
		return res, fmt.Errorf("aws: launch %s attempt %d: %d GPU(s) of %v with %v GB each: %w",
			req.JobID, req.Attempt, req.GPUs, req.GPUModels, req.GPUMemoryGB, ErrNoFit)
	}
	userData := base64.StdEncoding.EncodeToString([]byte(req.UserData))
	for ci, c := range choices {
		for si, subnet := range b.cfg.Subnets {
			in := b.runInput(req, c, subnet, userData, clientToken(req.JobID, req.Attempt, ci, si))
			attempts, inst, err := b.runInstance(ctx, req, c, subnet, in)
			res.Attempts = append(res.Attempts, attempts...)
			if err != nil {
				return res, err
			}
			if inst != nil {
				res.Instance = *inst
				return res, nil
			}
		}
	}
	return res, &NoCapacityError{Attempts: res.Attempts}
}

// launchedBefore looks for a live instance of req's attempt, launched
// before a crash. found is false when there is none; of several, it takes
// the oldest and logs the others.
func (b *Backend) launchedBefore(ctx context.Context, req Request) (inst Instance, found bool, err error) {
	instances, err := b.findAttempt(ctx, req.JobID, req.Attempt)
	if err != nil {
		return inst, false, fmt.Errorf("aws: launch %s attempt %d: find existing instance: %w", req.JobID, req.Attempt, err)
	}
	if len(instances) == 0 {
		return inst, false, nil
	}
	if len(instances) > 1 {
		ids := make([]string, len(instances))
		for i, f := range instances {
			ids[i] = f.ID
		}
		b.log.Warn("aws: several instances for one attempt; using the oldest",
			"job_id", req.JobID, "attempt", req.Attempt, "instance_ids", ids)
	}
	return instances[0], true, nil
}

// runInstance calls RunInstances with in, choice c in subnet, retrying the same
// call after a throttle (at most maxThrottleRetries times, with backoff).
// It returns the calls made and the instance launched; neither an instance
// nor an error when the subnet has no capacity for c; an error for any
// other refusal.
func (b *Backend) runInstance(ctx context.Context, req Request, c Choice, subnet string, in *ec2.RunInstancesInput) ([]LaunchAttempt, *Instance, error) {
	var attempts []LaunchAttempt
	for retry := 0; ; retry++ {
		out, err := b.ec2.RunInstances(ctx, in, noSDKRetry)
		if err == nil && len(out.Instances) > 0 {
			inst := fromEC2(out.Instances[0])
			attempts = append(attempts, LaunchAttempt{Choice: c.Offer, Subnet: subnet, InstanceID: inst.ID})
			b.log.Info("aws: launched instance", "job_id", req.JobID, "attempt", req.Attempt,
				"instance_id", inst.ID, "instance_type", c.Type, "market", c.Market(), "subnet", subnet)
			return attempts, &inst, nil
		}
		if err == nil {
			err = fmt.Errorf("RunInstances returned no instance")
		}
		code := errorCode(err)
		attempts = append(attempts, LaunchAttempt{Choice: c.Offer, Subnet: subnet, Code: code, Message: errorMessage(err)})
		switch {
		case capacityCodes[code]:
			b.log.Info("aws: no capacity", "job_id", req.JobID, "attempt", req.Attempt,
				"instance_type", c.Type, "market", c.Market(), "subnet", subnet, "code", code)
			return attempts, nil, nil
		case throttleCodes[code] && retry < maxThrottleRetries:
			d := backoff(retry, b.jitter())
			b.log.Info("aws: throttled; retrying", "job_id", req.JobID, "attempt", req.Attempt,
				"code", code, "wait", d)
			if err := b.sleep(ctx, d); err != nil {
				return attempts, nil, fmt.Errorf("aws: launch %s attempt %d: %w", req.JobID, req.Attempt, err)
			}
		default:
			return attempts, nil, fmt.Errorf("aws: launch %s attempt %d: run %s in %s: %w",
				req.JobID, req.Attempt, c, subnet, err)
		}
	}
}

// noSDKRetry turns the SDK's own retries off for RunInstances: EC2 answers
// InsufficientInstanceCapacity with HTTP 500, which the SDK would otherwise
// retry three times with its own sleeps before Launch could move on.
func noSDKRetry(o *ec2.Options) { o.RetryMaxAttempts = 1 }

// clientToken is RunInstances' idempotency token for one choice in one
// subnet of one attempt (a token reused with other parameters is an error
// on EC2, so each subnet has its own).
func clientToken(jobID string, attempt, choice, subnet int) string {
	sum := sha256.Sum256([]byte(strings.Join([]string{
		"lathe", jobID, strconv.Itoa(attempt), strconv.Itoa(choice), strconv.Itoa(subnet)}, "\x00")))
	return hex.EncodeToString(sum[:]) // 64 characters, EC2's limit
}

func (b *Backend) tags(req Request) []ec2types.Tag {
	return []ec2types.Tag{
		{Key: aws.String(TagManaged), Value: aws.String("true")},
		{Key: aws.String(TagCluster), Value: aws.String(b.cfg.Cluster)},
		{Key: aws.String(TagJobID), Value: aws.String(req.JobID)},
		{Key: aws.String(TagAttempt), Value: aws.String(strconv.Itoa(req.Attempt))},
		{Key: aws.String(TagBackend), Value: aws.String(b.cfg.Backend)},
	}
}

func (b *Backend) runInput(req Request, c Choice, subnet, userData, token string) *ec2.RunInstancesInput {
	tags := b.tags(req)
	in := &ec2.RunInstancesInput{
		MinCount:                          aws.Int32(1),
		MaxCount:                          aws.Int32(1),
		ImageId:                           aws.String(b.cfg.AMI),
		InstanceType:                      ec2types.InstanceType(c.Type),
		SubnetId:                          aws.String(subnet),
		UserData:                          aws.String(userData),
		InstanceInitiatedShutdownBehavior: ec2types.ShutdownBehaviorTerminate,
		ClientToken:                       aws.String(token),
		TagSpecifications: []ec2types.TagSpecification{
			{ResourceType: ec2types.ResourceTypeInstance, Tags: tags},
			{ResourceType: ec2types.ResourceTypeVolume, Tags: tags},
		},
		MetadataOptions: &ec2types.InstanceMetadataOptionsRequest{
			HttpTokens:   ec2types.HttpTokensStateRequired, // IMDSv2 only
			HttpEndpoint: ec2types.InstanceMetadataEndpointStateEnabled,
		},
	}
	if len(b.cfg.SecurityGroups) > 0 {
		in.SecurityGroupIds = b.cfg.SecurityGroups
	}
	if strings.HasPrefix(b.cfg.InstanceProfile, "arn:") {
		in.IamInstanceProfile = &ec2types.IamInstanceProfileSpecification{Arn: aws.String(b.cfg.InstanceProfile)}
	} else {
		in.IamInstanceProfile = &ec2types.IamInstanceProfileSpecification{Name: aws.String(b.cfg.InstanceProfile)}
	}
	if b.cfg.KeyName != "" {
		in.KeyName = aws.String(b.cfg.KeyName)
	}
	if c.Spot {
		in.InstanceMarketOptions = &ec2types.InstanceMarketOptionsRequest{
			MarketType: ec2types.MarketTypeSpot,
			SpotOptions: &ec2types.SpotMarketOptions{
				SpotInstanceType:             ec2types.SpotInstanceTypeOneTime,
				InstanceInterruptionBehavior: ec2types.InstanceInterruptionBehaviorTerminate,
			},
		}
	}
	return in
}
