package aws

import (
	"context"
	"encoding/base64"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/lathe-ml/lathe/internal/mototest"
)

func choiceNames(cs []Choice) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.String()
	}
	return out
}

// TestChooseTypesMotoCatalogue ranks the allowed types with GPU info from
// moto's copy of EC2's instance type catalogue (moto is an emulator; its
// catalogue has g5.xlarge 1×A10G 22888 MiB, g5.12xlarge 4×A10G,
// p4d.24xlarge 8×A100 40960 MiB, g6e.xlarge 1×L40S 45776 MiB).
func TestChooseTypesMotoCatalogue(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := context.Background()
	cases := []struct {
		name string
		spot string
		req  Request
		want []string
	}{
		{"one 24GB GPU, on-demand", SpotNever, Request{GPUs: 1, GPUMemoryGB: 24},
			[]string{"g5.xlarge on-demand", "g6e.xlarge on-demand", "g5.12xlarge on-demand", "p4d.24xlarge on-demand"}},
		{"one GPU, prefer spot: all spot first, then on-demand", SpotPrefer, Request{GPUs: 1},
			[]string{"g5.xlarge spot", "g6e.xlarge spot", "g5.12xlarge spot",
				"g5.xlarge on-demand", "g6e.xlarge on-demand", "g5.12xlarge on-demand", "p4d.24xlarge on-demand"}},
		{"spot only drops types without a spot price", SpotOnly, Request{GPUs: 1},
			[]string{"g5.xlarge spot", "g6e.xlarge spot", "g5.12xlarge spot"}},
		{"model is a case-insensitive substring", SpotNever, Request{GPUs: 1, GPUModels: []string{"a100"}},
			[]string{"p4d.24xlarge on-demand"}},
		{"memory excludes the A10G", SpotNever, Request{GPUs: 1, GPUMemoryGB: 40, GPUModels: []string{"L40S", "H100", "A100"}},
			[]string{"g6e.xlarge on-demand", "p4d.24xlarge on-demand"}},
		{"four GPUs", SpotNever, Request{GPUs: 4},
			[]string{"g5.12xlarge on-demand", "p4d.24xlarge on-demand"}},
		{"nothing fits", SpotPrefer, Request{GPUs: 4, GPUModels: []string{"L40S"}}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := tb.cfg
			cfg.Spot = c.spot
			b := tb.backend(t, tb.moto.URL(), cfg)
			c.req.JobID, c.req.Attempt = "j1", 1
			got, err := b.ChooseTypes(ctx, c.req)
			if err != nil {
				t.Fatal(err)
			}
			if names := choiceNames(got); !reflect.DeepEqual(names, c.want) && !(len(names) == 0 && len(c.want) == 0) {
				t.Fatalf("choices = %v\nwant      %v", names, c.want)
			}
		})
	}
	// An allowed name EC2 does not know is skipped; the others still serve.
	cfg := tb.cfg
	cfg.InstanceTypes = append([]InstanceType{{Name: "x9.nosuch", OnDemandUSDPerHour: 0.01}}, cfg.InstanceTypes...)
	b := tb.backend(t, tb.moto.URL(), cfg)
	got, err := b.ChooseTypes(ctx, Request{JobID: "j", Attempt: 1, GPUs: 8, GPUModels: []string{"A100"}})
	if err != nil || len(got) != 1 {
		t.Fatalf("p4d: %v %v", got, err)
	}
	if c := got[0]; c.GPUs != 8 || c.GPUModel != "A100" || c.GPUMemoryGB < 42.9 || c.GPUMemoryGB > 43 || c.USDPerHour != 32.77 {
		t.Fatalf("p4d choice = %+v", c)
	}
}

// TestNewFromEnvironment: with no aws.Config given, New reads the standard
// AWS environment (here pointing at moto, an emulator, through
// AWS_ENDPOINT_URL), and Config.EndpointURL overrides it.
func TestNewFromEnvironment(t *testing.T) {
	tb := setup(t)
	ctx := context.Background()
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", "/dev/null")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
	t.Setenv("AWS_REGION", "us-east-1") // Config.Region wins
	t.Setenv("AWS_ENDPOINT_URL", tb.moto.URL())

	b, err := New(ctx, tb.cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.Launch(ctx, Request{JobID: "job-env", Attempt: 1, GPUs: 1})
	if err != nil {
		t.Fatalf("Launch from the environment: %v", err)
	}
	if n := len(tb.motoInstances(t)); n != 1 {
		t.Fatalf("moto holds %d instances", n)
	}

	t.Setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1") // nothing listens there
	cfg := tb.cfg
	cfg.EndpointURL = tb.moto.URL()
	b, err = New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if inst, err := b.Describe(ctx, res.Instance.ID); err != nil || inst.ID != res.Instance.ID {
		t.Fatalf("Describe through EndpointURL: %+v %v", inst, err)
	}
}

// TestLaunchSetsTagsShutdownAndUserData launches on moto (an emulator) and
// reads back what EC2 would hold: the five tags on the instance and its
// volume, terminate-on-shutdown, the user data, profile, subnet and groups.
func TestLaunchSetsTagsShutdownAndUserData(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := context.Background()
	cfg := tb.cfg
	cfg.Spot = SpotPrefer
	b := tb.backend(t, tb.moto.URL(), cfg)
	userData := "#!/bin/sh\nexec lathed agent --job s3://bucket/prefix/job-1/1/job.json\n"
	res, err := b.Launch(ctx, Request{JobID: "job-1", Attempt: 1, GPUs: 1, GPUMemoryGB: 24, UserData: userData})
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	if res.Found || len(res.Attempts) != 1 || res.Attempts[0].Code != "" || res.Attempts[0].InstanceID != res.Instance.ID {
		t.Fatalf("result = %+v", res)
	}
	inst, err := b.Describe(ctx, res.Instance.ID)
	if err != nil {
		t.Fatal(err)
	}
	if inst.Type != "g5.xlarge" || !inst.Spot || inst.SubnetID != cfg.Subnets[0] || inst.LaunchTime.IsZero() {
		t.Fatalf("instance = %+v", inst)
	}
	if inst.State != "running" && inst.State != "pending" {
		t.Fatalf("state = %q", inst.State)
	}
	wantTags := map[string]string{TagManaged: "true", TagCluster: "test-cluster", TagJobID: "job-1", TagAttempt: "1", TagBackend: "aws-eu"}
	for k, v := range wantTags {
		if inst.Tags[k] != v {
			t.Errorf("tag %s = %q, want %q (all: %v)", k, inst.Tags[k], v, inst.Tags)
		}
	}

	raw, err := tb.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{inst.ID}})
	if err != nil {
		t.Fatal(err)
	}
	ri := raw.Reservations[0].Instances[0]
	if ri.IamInstanceProfile == nil || !strings.HasSuffix(aws.ToString(ri.IamInstanceProfile.Arn), "/lathe-instance") {
		t.Errorf("instance profile = %+v", ri.IamInstanceProfile)
	}
	if len(ri.SecurityGroups) != 1 || aws.ToString(ri.SecurityGroups[0].GroupId) != cfg.SecurityGroups[0] {
		t.Errorf("security groups = %+v", ri.SecurityGroups)
	}
	if aws.ToString(ri.ImageId) != cfg.AMI {
		t.Errorf("image = %s", aws.ToString(ri.ImageId))
	}

	sd, err := tb.ec2.DescribeInstanceAttribute(ctx, &ec2.DescribeInstanceAttributeInput{
		InstanceId: aws.String(inst.ID), Attribute: ec2types.InstanceAttributeNameInstanceInitiatedShutdownBehavior})
	if err != nil {
		t.Fatal(err)
	}
	if got := aws.ToString(sd.InstanceInitiatedShutdownBehavior.Value); got != "terminate" {
		t.Errorf("shutdown behaviour = %q", got)
	}
	ud, err := tb.ec2.DescribeInstanceAttribute(ctx, &ec2.DescribeInstanceAttributeInput{
		InstanceId: aws.String(inst.ID), Attribute: ec2types.InstanceAttributeNameUserData})
	if err != nil {
		t.Fatal(err)
	}
	dec, err := base64.StdEncoding.DecodeString(aws.ToString(ud.UserData.Value))
	if err != nil || string(dec) != userData {
		t.Errorf("user data = %q (%v), want %q", dec, err, userData)
	}

	vols, err := tb.ec2.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{Filters: []ec2types.Filter{
		{Name: aws.String("attachment.instance-id"), Values: []string{inst.ID}}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(vols.Volumes) == 0 {
		t.Fatalf("no volume attached to %s", inst.ID)
	}
	for _, v := range vols.Volumes {
		got := map[string]string{}
		for _, tg := range v.Tags {
			got[aws.ToString(tg.Key)] = aws.ToString(tg.Value)
		}
		for k, want := range wantTags {
			if got[k] != want {
				t.Errorf("volume %s tag %s = %q, want %q", aws.ToString(v.VolumeId), k, got[k], want)
			}
		}
	}
}

// TestLaunchTwiceSameAttemptOneInstance: a handler run again for the same
// attempt finds the instance by its tags (moto, an emulator, ignores
// ClientToken, so only the tags can guard) and moto holds exactly one; a new
// attempt gets its own.
func TestLaunchTwiceSameAttemptOneInstance(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := context.Background()
	b := tb.backend(t, tb.moto.URL(), tb.cfg)
	req := Request{JobID: "job-1", Attempt: 1, GPUs: 1}
	first, err := b.Launch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	// A second Backend, as a restarted worker would build.
	b2 := tb.backend(t, tb.moto.URL(), tb.cfg)
	second, err := b2.Launch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !second.Found || second.Instance.ID != first.Instance.ID || len(second.Attempts) != 0 {
		t.Fatalf("second launch = %+v, want found %s", second, first.Instance.ID)
	}
	if n := len(tb.motoInstances(t)); n != 1 {
		t.Fatalf("moto holds %d instances, want 1", n)
	}
	third, err := b.Launch(ctx, Request{JobID: "job-1", Attempt: 2, GPUs: 1})
	if err != nil || third.Found || third.Instance.ID == first.Instance.ID {
		t.Fatalf("attempt 2 = %+v, %v", third, err)
	}
	if n := len(tb.motoInstances(t)); n != 2 {
		t.Fatalf("moto holds %d instances, want 2", n)
	}
	// A terminated instance of the attempt does not count as found.
	if err := b.Terminate(ctx, third.Instance.ID); err != nil {
		t.Fatal(err)
	}
	fourth, err := b.Launch(ctx, Request{JobID: "job-1", Attempt: 2, GPUs: 1})
	if err != nil || fourth.Found || fourth.Instance.ID == third.Instance.ID {
		t.Fatalf("attempt 2 after terminate = %+v, %v", fourth, err)
	}
}

// TestLaunchInsufficientCapacityNextChoice: the fake proxy answers
// RunInstances for g5.xlarge with EC2's InsufficientInstanceCapacity (HTTP
// 500, as EC2 does); Launch tries the next subnet, then the next choice,
// and the SDK does not retry the 500 on its own.
func TestLaunchInsufficientCapacityNextChoice(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := context.Background()
	p := mototest.NewFaultProxy(t, tb.moto.URL())
	p.Add(mototest.Fault{Action: "RunInstances", InstanceType: "g5.xlarge", Code: "InsufficientInstanceCapacity", Status: 500})
	b := tb.backend(t, p.URL, tb.cfg)
	res, err := b.Launch(ctx, Request{JobID: "job-ice", Attempt: 1, GPUs: 1})
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	got := make([]string, len(res.Attempts))
	for i, a := range res.Attempts {
		got[i] = a.Choice.Type + "/" + a.Subnet + "/" + a.Code
	}
	s0, s1 := tb.cfg.Subnets[0], tb.cfg.Subnets[1]
	want := []string{"g5.xlarge/" + s0 + "/InsufficientInstanceCapacity", "g5.xlarge/" + s1 + "/InsufficientInstanceCapacity", "g6e.xlarge/" + s0 + "/"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("attempts = %v\nwant       %v", got, want)
	}
	if res.Instance.Type != "g6e.xlarge" {
		t.Fatalf("launched %s", res.Instance.Type)
	}
	if n := p.Count("RunInstances"); n != 3 {
		t.Fatalf("RunInstances calls = %d, want 3 (no SDK retries of the 500)", n)
	}
	if n := len(tb.motoInstances(t)); n != 1 {
		t.Fatalf("moto holds %d instances", n)
	}
}

// TestLaunchNoCapacityAnywhere: every choice in every subnet refused →
// ErrNoCapacity listing each attempt with its code; nothing launched.
func TestLaunchNoCapacityAnywhere(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	p := mototest.NewFaultProxy(t, tb.moto.URL())
	p.Add(mototest.Fault{Action: "RunInstances", InstanceType: "g5.xlarge", Code: "InsufficientInstanceCapacity", Status: 500})
	p.Add(mototest.Fault{Action: "RunInstances", Code: "VcpuLimitExceeded", Status: 400})
	cfg := tb.cfg
	cfg.Spot = SpotPrefer
	b := tb.backend(t, p.URL, cfg)
	res, err := b.Launch(context.Background(), Request{JobID: "job-none", Attempt: 1, GPUs: 4})
	if !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("err = %v, want ErrNoCapacity", err)
	}
	var nc *NoCapacityError
	if !errors.As(err, &nc) {
		t.Fatalf("err %T is not *NoCapacityError", err)
	}
	// 4 GPUs: g5.12xlarge spot, g5.12xlarge od, p4d od; × 2 subnets.
	if len(nc.Attempts) != 6 || len(res.Attempts) != 6 {
		t.Fatalf("attempts = %v", nc.Attempts)
	}
	for _, a := range nc.Attempts {
		if a.Code != "VcpuLimitExceeded" {
			t.Errorf("attempt %v", a)
		}
	}
	for _, s := range []string{"g5.12xlarge spot in " + cfg.Subnets[1] + ": VcpuLimitExceeded", "p4d.24xlarge on-demand"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
	if n := len(tb.motoInstances(t)); n != 0 {
		t.Fatalf("moto holds %d instances", n)
	}
}

// TestLaunchFindFailureLaunchesNothing: when DescribeInstances fails (the
// fake proxy answers 503 Unavailable), Launch returns the error and never
// calls RunInstances, whether or not the attempt already has an instance.
// The SDK's own retries are off here so the test does not wait for them.
func TestLaunchFindFailureLaunchesNothing(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := context.Background()
	p := mototest.NewFaultProxy(t, tb.moto.URL())
	noRetry := func(c *aws.Config) { c.RetryMaxAttempts = 1 }
	b := tb.backend(t, p.URL, tb.cfg, noRetry)

	p.Add(mototest.Fault{Action: "DescribeInstances", Code: "Unavailable", Status: 503, Times: 1})
	if _, err := b.Launch(ctx, Request{JobID: "job-a", Attempt: 1, GPUs: 1}); err == nil || !strings.Contains(err.Error(), "Unavailable") {
		t.Fatalf("Launch err = %v, want the DescribeInstances error", err)
	}
	if n := p.Count("RunInstances"); n != 0 {
		t.Fatalf("RunInstances called %d times", n)
	}
	if n := len(tb.motoInstances(t)); n != 0 {
		t.Fatalf("moto holds %d instances", n)
	}

	first, err := b.Launch(ctx, Request{JobID: "job-a", Attempt: 1, GPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	p.Add(mototest.Fault{Action: "DescribeInstances", Code: "InternalError", Status: 500, Times: 1})
	if _, err := b.Launch(ctx, Request{JobID: "job-a", Attempt: 1, GPUs: 1}); err == nil {
		t.Fatal("Launch succeeded through a failing DescribeInstances")
	}
	if n := p.Count("RunInstances"); n != 1 {
		t.Fatalf("RunInstances called %d times, want 1", n)
	}
	all := tb.motoInstances(t)
	if len(all) != 1 || aws.ToString(all[0].InstanceId) != first.Instance.ID {
		t.Fatalf("moto holds %d instances", len(all))
	}
}

// TestLaunchThrottledRetries: RequestLimitExceeded once → the same call
// again after one backoff (recorded, not slept); throttled forever → an
// error after a bounded number of retries with growing waits, nothing
// launched.
func TestLaunchThrottledRetries(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := context.Background()
	p := mototest.NewFaultProxy(t, tb.moto.URL())
	p.Add(mototest.Fault{Action: "RunInstances", Code: "RequestLimitExceeded", Status: 503, Times: 1})
	b := tb.backend(t, p.URL, tb.cfg)
	res, err := b.Launch(ctx, Request{JobID: "job-t", Attempt: 1, GPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Attempts) != 2 || res.Attempts[0].Code != "RequestLimitExceeded" ||
		res.Attempts[1].Code != "" || res.Attempts[1].Choice != res.Attempts[0].Choice || res.Attempts[1].Subnet != res.Attempts[0].Subnet {
		t.Fatalf("attempts = %+v", res.Attempts)
	}
	if want := []time.Duration{375 * time.Millisecond}; !reflect.DeepEqual(tb.sleeps, want) {
		t.Fatalf("sleeps = %v, want %v", tb.sleeps, want)
	}

	tb.sleeps = nil
	p.Add(mototest.Fault{Action: "RunInstances", Code: "RequestLimitExceeded", Status: 503})
	before := p.Count("RunInstances")
	_, err = b.Launch(ctx, Request{JobID: "job-t2", Attempt: 1, GPUs: 1})
	if err == nil || errors.Is(err, ErrNoCapacity) || errorCode(err) != "RequestLimitExceeded" {
		t.Fatalf("err = %v, want RequestLimitExceeded", err)
	}
	if n := p.Count("RunInstances") - before; n != maxThrottleRetries+1 {
		t.Fatalf("RunInstances calls = %d, want %d", n, maxThrottleRetries+1)
	}
	if len(tb.sleeps) != maxThrottleRetries {
		t.Fatalf("sleeps = %v", tb.sleeps)
	}
	for i := 1; i < len(tb.sleeps); i++ {
		if tb.sleeps[i] < tb.sleeps[i-1] || tb.sleeps[i] > backoffMax {
			t.Fatalf("sleeps not growing within %v: %v", backoffMax, tb.sleeps)
		}
	}
	if n := len(tb.motoInstances(t)); n != 1 {
		t.Fatalf("moto holds %d instances, want 1", n)
	}
}

// TestTerminateIdempotent: terminating twice succeeds, an unknown id is
// success, and an instance Lathe did not launch is refused and left running.
func TestTerminateIdempotent(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := context.Background()
	b := tb.backend(t, tb.moto.URL(), tb.cfg)
	res, err := b.Launch(ctx, Request{JobID: "job-x", Attempt: 1, GPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := b.Terminate(ctx, res.Instance.ID); err != nil {
			t.Fatalf("Terminate #%d: %v", i+1, err)
		}
	}
	inst, err := b.Describe(ctx, res.Instance.ID)
	if err != nil || inst.State != "terminated" || !inst.Gone() {
		t.Fatalf("after terminate: %+v %v", inst, err)
	}
	if err := b.Terminate(ctx, "i-0123456789abcdef0"); err != nil {
		t.Fatalf("Terminate unknown: %v", err)
	}
	if _, err := b.Describe(ctx, "i-0123456789abcdef0"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Describe unknown: %v", err)
	}

	other, err := tb.ec2.RunInstances(ctx, &ec2.RunInstancesInput{
		ImageId: aws.String(tb.cfg.AMI), MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
		InstanceType: "g5.xlarge", SubnetId: aws.String(tb.cfg.Subnets[0])})
	if err != nil {
		t.Fatal(err)
	}
	id := aws.ToString(other.Instances[0].InstanceId)
	if err := b.Terminate(ctx, id); !errors.Is(err, ErrNotManaged) {
		t.Fatalf("Terminate unmanaged: %v", err)
	}
	if inst, _ := b.Describe(ctx, id); inst.Gone() {
		t.Fatalf("unmanaged instance terminated: %+v", inst)
	}
}

// TestFindManagedAndOrphans launches on moto (an emulator) this cluster's
// instances, another cluster's and an untagged one, and checks what the
// reconciler would see and terminate.
func TestFindManagedAndOrphans(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := context.Background()
	b := tb.backend(t, tb.moto.URL(), tb.cfg)
	otherCfg := tb.cfg
	otherCfg.Cluster = "other-cluster"
	other := tb.backend(t, tb.moto.URL(), otherCfg)

	launch := func(b *Backend, job string, attempt int) string {
		res, err := b.Launch(ctx, Request{JobID: job, Attempt: attempt, GPUs: 1})
		if err != nil {
			t.Fatal(err)
		}
		return res.Instance.ID
	}
	a1 := launch(b, "job-a", 1)
	a2 := launch(b, "job-a", 2)
	b1 := launch(b, "job-b", 1)
	gone := launch(b, "job-c", 1)
	if err := b.Terminate(ctx, gone); err != nil {
		t.Fatal(err)
	}
	theirs := launch(other, "job-a", 1)
	if _, err := tb.ec2.RunInstances(ctx, &ec2.RunInstancesInput{
		ImageId: aws.String(tb.cfg.AMI), MinCount: aws.Int32(1), MaxCount: aws.Int32(1), InstanceType: "g5.xlarge"}); err != nil {
		t.Fatal(err)
	}

	managed, err := b.FindManaged(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, m := range managed {
		ids[m.ID] = true
		if m.Tags[TagCluster] != "test-cluster" || m.Tags[TagBackend] != "aws-eu" {
			t.Errorf("managed %s tags %v", m.ID, m.Tags)
		}
	}
	if len(managed) != 3 || !ids[a1] || !ids[a2] || !ids[b1] || ids[theirs] || ids[gone] {
		t.Fatalf("FindManaged = %v, want %s %s %s", ids, a1, a2, b1)
	}

	// DescribeBackend: this backend's instances in every state, the
	// terminated one included; not another cluster's, not an untagged one.
	all, err := b.DescribeBackend(ctx)
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, in := range all {
		states[in.ID] = in.State
	}
	if len(all) != 4 || states[gone] != "terminated" || states[a1] != "running" || states[theirs] != "" {
		t.Fatalf("DescribeBackend = %v, want %s %s %s running and %s terminated", states, a1, a2, b1, gone)
	}

	later := managed[len(managed)-1].LaunchTime.Add(time.Hour)
	orph := orphans(managed, map[string]int{"job-a": 2}, later, 10*time.Minute)
	got := map[string]bool{}
	for _, o := range orph {
		got[o.ID] = true
	}
	if len(orph) != 2 || !got[a1] || !got[b1] {
		t.Fatalf("orphans = %v, want %s (stale attempt) and %s (no live attempt)", got, a1, b1)
	}
	if young := orphans(managed, nil, managed[0].LaunchTime.Add(time.Minute), 10*time.Minute); len(young) != 0 {
		t.Fatalf("young orphans = %v", young)
	}
}

// TestLaunchSpotRefusedFallsBackToOnDemand: with spot "prefer", the fake
// proxy refuses every spot request (SpotMaxPriceTooLow, then
// MaxSpotInstanceCountExceeded); Launch tries every spot choice in every
// subnet, then launches the cheapest on-demand choice on moto.
func TestLaunchSpotRefusedFallsBackToOnDemand(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	p := mototest.NewFaultProxy(t, tb.moto.URL())
	p.Add(mototest.Fault{Action: "RunInstances", Market: "spot", InstanceType: "g5.xlarge", Code: "SpotMaxPriceTooLow", Status: 400})
	p.Add(mototest.Fault{Action: "RunInstances", Market: "spot", Code: "MaxSpotInstanceCountExceeded", Status: 400})
	cfg := tb.cfg
	cfg.Spot = SpotPrefer
	b := tb.backend(t, p.URL, cfg)
	res, err := b.Launch(context.Background(), Request{JobID: "job-spot", Attempt: 1, GPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range res.Attempts {
		got = append(got, a.Choice.String()+"/"+a.Code)
	}
	want := []string{
		"g5.xlarge spot/SpotMaxPriceTooLow", "g5.xlarge spot/SpotMaxPriceTooLow",
		"g6e.xlarge spot/MaxSpotInstanceCountExceeded", "g6e.xlarge spot/MaxSpotInstanceCountExceeded",
		"g5.12xlarge spot/MaxSpotInstanceCountExceeded", "g5.12xlarge spot/MaxSpotInstanceCountExceeded",
		"g5.xlarge on-demand/",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("attempts = %v\nwant       %v", got, want)
	}
	inst, err := b.Describe(context.Background(), res.Instance.ID)
	if err != nil || inst.Spot || inst.Type != "g5.xlarge" {
		t.Fatalf("instance = %+v %v", inst, err)
	}
}

// TestLaunchOtherErrorStops: an error that is neither capacity nor
// throttling (here UnauthorizedOperation through the fake proxy) ends
// Launch at once, without trying other choices.
func TestLaunchOtherErrorStops(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	p := mototest.NewFaultProxy(t, tb.moto.URL())
	p.Add(mototest.Fault{Action: "RunInstances", Code: "UnauthorizedOperation", Status: 403})
	b := tb.backend(t, p.URL, tb.cfg)
	res, err := b.Launch(context.Background(), Request{JobID: "job-denied", Attempt: 1, GPUs: 1})
	if err == nil || errors.Is(err, ErrNoCapacity) || errorCode(err) != "UnauthorizedOperation" {
		t.Fatalf("err = %v", err)
	}
	if len(res.Attempts) != 1 || p.Count("RunInstances") != 1 {
		t.Fatalf("attempts = %+v, calls = %d", res.Attempts, p.Count("RunInstances"))
	}
}

// TestDescribeFailureIsNotGone: while DescribeInstances fails (the fake
// proxy), Describe's error is not ErrNotFound and Terminate refuses to act,
// so a transient API error never terminates a running instance.
func TestDescribeFailureIsNotGone(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := context.Background()
	p := mototest.NewFaultProxy(t, tb.moto.URL())
	b := tb.backend(t, p.URL, tb.cfg, func(c *aws.Config) { c.RetryMaxAttempts = 1 })
	res, err := b.Launch(ctx, Request{JobID: "job-d", Attempt: 1, GPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	p.Add(mototest.Fault{Action: "DescribeInstances", Code: "Unavailable", Status: 503, Times: 2})
	if _, err := b.Describe(ctx, res.Instance.ID); err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("Describe err = %v, want a non-NotFound error", err)
	}
	if err := b.Terminate(ctx, res.Instance.ID); err == nil {
		t.Fatal("Terminate succeeded without knowing the instance")
	}
	if n := p.Count("TerminateInstances"); n != 0 {
		t.Fatalf("TerminateInstances called %d times", n)
	}
	if _, err := b.FindManaged(ctx); err != nil {
		t.Fatalf("FindManaged after the faults: %v", err)
	}
	if inst, err := b.Describe(ctx, res.Instance.ID); err != nil || inst.Gone() {
		t.Fatalf("instance = %+v %v", inst, err)
	}
}
