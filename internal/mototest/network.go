package mototest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// Network is what an EC2 launch needs, made in moto: a VPC, two subnets
// (availability zones a and b), a security group "lathe-workers", an
// instance profile "lathe-instance" and one of moto's AMIs.
type Network struct {
	VPC             string
	Subnets         []string
	SecurityGroup   string
	InstanceProfile string
	AMI             string
}

// NewNetwork makes a Network in the moto that cfg points at, or calls
// tb.Fatal.
//
// Every create is safe to retry. The SDK retries a call whose answer was
// lost on a connection moto's server closed under load; moto had already
// done the first try, so the retry answers a conflict (a subnet's CIDR, a
// group's name, a profile's name). NewNetwork then takes what the first
// try made instead of failing the test (CI once failed on exactly this:
// "InvalidSubnet.Conflict: The CIDR '10.0.1.0/24' conflicts with another
// subnet" after "failed to discard remaining HTTP response body").
func NewNetwork(ctx context.Context, tb testing.TB, cfg aws.Config) Network {
	tb.Helper()
	ec := ec2.NewFromConfig(cfg)
	var n Network
	vpc, err := ec.CreateVpc(ctx, &ec2.CreateVpcInput{CidrBlock: aws.String("10.0.0.0/16")})
	if err != nil {
		tb.Fatalf("mototest: CreateVpc: %v", err)
	}
	n.VPC = aws.ToString(vpc.Vpc.VpcId)
	for i, cidr := range []string{"10.0.1.0/24", "10.0.2.0/24"} {
		id, err := subnet(ctx, ec, n.VPC, cidr, fmt.Sprintf("%s%c", Region, 'a'+i))
		if err != nil {
			tb.Fatalf("mototest: subnet %s: %v", cidr, err)
		}
		n.Subnets = append(n.Subnets, id)
	}
	if n.SecurityGroup, err = securityGroup(ctx, ec, n.VPC, "lathe-workers"); err != nil {
		tb.Fatalf("mototest: security group: %v", err)
	}
	n.InstanceProfile = "lathe-instance"
	_, err = iam.NewFromConfig(cfg).CreateInstanceProfile(ctx, &iam.CreateInstanceProfileInput{
		InstanceProfileName: aws.String(n.InstanceProfile)})
	if err != nil && !isCode(err, "EntityAlreadyExists") {
		tb.Fatalf("mototest: CreateInstanceProfile: %v", err)
	}
	imgs, err := ec.DescribeImages(ctx, &ec2.DescribeImagesInput{Owners: []string{"amazon"}})
	if err != nil || len(imgs.Images) == 0 {
		tb.Fatalf("mototest: DescribeImages: %v (no image)", err)
	}
	n.AMI = aws.ToString(imgs.Images[0].ImageId)
	return n
}

// Bucket creates an S3 bucket in Region (a retried create that finds the
// bucket already ours is not an error), or calls tb.Fatal.
func Bucket(ctx context.Context, tb testing.TB, c *s3.Client, name string) {
	tb.Helper()
	_, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name),
		CreateBucketConfiguration: &s3types.CreateBucketConfiguration{LocationConstraint: s3types.BucketLocationConstraint(Region)}})
	if err != nil && !isCode(err, "BucketAlreadyOwnedByYou") {
		tb.Fatalf("mototest: CreateBucket %s: %v", name, err)
	}
}

func subnet(ctx context.Context, ec *ec2.Client, vpc, cidr, az string) (string, error) {
	sn, err := ec.CreateSubnet(ctx, &ec2.CreateSubnetInput{VpcId: aws.String(vpc), CidrBlock: aws.String(cidr),
		AvailabilityZone: aws.String(az)})
	if err == nil {
		return aws.ToString(sn.Subnet.SubnetId), nil
	}
	if !isCode(err, "InvalidSubnet.Conflict") {
		return "", err
	}
	out, derr := ec.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{Filters: []ec2types.Filter{
		{Name: aws.String("vpc-id"), Values: []string{vpc}},
		{Name: aws.String("cidr-block"), Values: []string{cidr}}}})
	if derr != nil || len(out.Subnets) != 1 {
		return "", fmt.Errorf("%w; looking up the subnet a first try made: %d found, %v", err, len(out.Subnets), derr)
	}
	return aws.ToString(out.Subnets[0].SubnetId), nil
}

func securityGroup(ctx context.Context, ec *ec2.Client, vpc, name string) (string, error) {
	sg, err := ec.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String(name),
		Description: aws.String("lathe"), VpcId: aws.String(vpc)})
	if err == nil {
		return aws.ToString(sg.GroupId), nil
	}
	if !isCode(err, "InvalidGroup.Duplicate") {
		return "", err
	}
	out, derr := ec.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{Filters: []ec2types.Filter{
		{Name: aws.String("vpc-id"), Values: []string{vpc}},
		{Name: aws.String("group-name"), Values: []string{name}}}})
	if derr != nil || len(out.SecurityGroups) != 1 {
		return "", fmt.Errorf("%w; looking up the group a first try made: %d found, %v", err, len(out.SecurityGroups), derr)
	}
	return aws.ToString(out.SecurityGroups[0].GroupId), nil
}

func isCode(err error, code string) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == code
}
