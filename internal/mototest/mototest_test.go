package mototest_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/lathe-ml/lathe/internal/mototest"
)

// TestServerAnswersEC2AndS3 drives moto_server (an emulator of AWS, not AWS)
// with the real SDK: EC2 over the Query protocol and S3 path-style.
func TestServerAnswersEC2AndS3(t *testing.T) {
	ctx := context.Background()
	srv := mototest.Start(t)
	cfg := srv.Config(ctx)
	if cfg.Region != mototest.Region {
		t.Fatalf("region = %q", cfg.Region)
	}
	if got := aws.ToString(cfg.BaseEndpoint); got != srv.URL() {
		t.Fatalf("BaseEndpoint = %q, want %q", got, srv.URL())
	}

	ec := ec2.NewFromConfig(cfg)
	out, err := ec.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{InstanceTypes: []ec2types.InstanceType{"g5.xlarge"}})
	if err != nil {
		t.Fatalf("DescribeInstanceTypes: %v", err)
	}
	if len(out.InstanceTypes) != 1 || out.InstanceTypes[0].GpuInfo == nil {
		t.Fatalf("g5.xlarge: %+v", out.InstanceTypes)
	}

	sc := s3.NewFromConfig(cfg, mototest.S3PathStyle)
	if _, err := sc.CreateBucket(ctx, &s3.CreateBucketInput{
		Bucket: aws.String("lathe-test"),
		CreateBucketConfiguration: &s3types.CreateBucketConfiguration{
			LocationConstraint: s3types.BucketLocationConstraint(mototest.Region),
		},
	}); err != nil {
		t.Fatalf("CreateBucket: %v", err)
	}
	if _, err := sc.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String("lathe-test"), Key: aws.String("a/b.txt"),
		Body: bytes.NewReader([]byte("hello")),
	}); err != nil {
		t.Fatalf("PutObject: %v", err)
	}
	got, err := sc.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("lathe-test"), Key: aws.String("a/b.txt")})
	if err != nil {
		t.Fatalf("GetObject: %v", err)
	}
	defer got.Body.Close()
	b, _ := io.ReadAll(got.Body)
	if string(b) != "hello" {
		t.Fatalf("body = %q", b)
	}
}

// TestBinaryFound: the test machines must have moto_server; a missing one
// is a failure, not a skip.
func TestBinaryFound(t *testing.T) {
	p, err := mototest.Binary()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("moto_server: %s", p)
}

// TestNetworkSurvivesLostAnswers: a proxy (a fake, in front of the real
// moto_server) forwards the first CreateSubnet, CreateSecurityGroup and
// CreateInstanceProfile and then drops the connection without answering,
// as moto's server once did in CI. The SDK retries; moto answers the
// retry with a conflict; NewNetwork still returns the network the first
// tries made.
func TestNetworkSurvivesLostAnswers(t *testing.T) {
	ctx := context.Background()
	srv := mototest.Start(t)
	target, _ := url.Parse(srv.URL())
	rp := httputil.NewSingleHostReverseProxy(target)
	var mu sync.Mutex
	dropped := map[string]int{}
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		form, _ := url.ParseQuery(string(body))
		action := form.Get("Action")
		mu.Lock()
		drop := dropped[action] == 0 && (action == "CreateSubnet" || action == "CreateSecurityGroup" || action == "CreateInstanceProfile")
		if drop {
			dropped[action]++
		}
		mu.Unlock()
		if !drop {
			rp.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		rp.ServeHTTP(rec, r) // moto does it ...
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close() // ... and the answer is lost
		}
	}))
	t.Cleanup(proxy.Close)
	cfg := mototest.ConfigFor(ctx, t, proxy.URL)
	n := mototest.NewNetwork(ctx, t, cfg)
	if len(dropped) != 3 {
		t.Fatalf("the proxy dropped the answers of %v, want CreateSubnet, CreateSecurityGroup, CreateInstanceProfile", dropped)
	}
	ec := ec2.NewFromConfig(srv.Config(ctx))
	subs, err := ec.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{Filters: []ec2types.Filter{{Name: aws.String("vpc-id"), Values: []string{n.VPC}}}})
	if err != nil || len(subs.Subnets) != 2 || len(n.Subnets) != 2 {
		t.Fatalf("subnets in the VPC: %v, %d; NewNetwork gave %v", err, len(subs.Subnets), n.Subnets)
	}
	for _, s := range subs.Subnets {
		if !slices.Contains(n.Subnets, aws.ToString(s.SubnetId)) {
			t.Fatalf("subnet %s is not among %v", aws.ToString(s.SubnetId), n.Subnets)
		}
	}
	if n.SecurityGroup == "" || n.AMI == "" || n.InstanceProfile != "lathe-instance" {
		t.Fatalf("network %+v", n)
	}
}
