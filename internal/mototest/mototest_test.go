package mototest_test

import (
	"bytes"
	"context"
	"io"
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
