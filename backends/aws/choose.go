package aws

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/lathe-ml/lathe/internal/cloud"
)

// maxUserDataBytes is EC2's limit on user data before base64.
const maxUserDataBytes = 16 * 1024

// Request is what one launch needs (cloud.LaunchRequest): the job attempt
// it is for, its GPU request (GPUMemoryGB is EC2's MiB converted and
// rounded to 0.1 GB) and the instance's user data, at most 16 KiB raw (this
// package base64-encodes it).
type Request = cloud.LaunchRequest

// validateRequest checks req for EC2: cloud.RequestProblems and the user
// data's size.
func validateRequest(r Request) error {
	bad := cloud.RequestProblems(r)
	if len(r.UserData) > maxUserDataBytes {
		bad = append(bad, fmt.Sprintf("user data: %d bytes, EC2 allows %d", len(r.UserData), maxUserDataBytes))
	}
	if len(bad) > 0 {
		return fmt.Errorf("aws: request: %s", strings.Join(bad, "; "))
	}
	return nil
}

// Choice is one way to launch: an instance type in a market, at the
// configured price (its cloud.Offer: Type, Spot, USDPerHour, Market,
// String), with the type's matching GPUs (from DescribeInstanceTypes).
type Choice struct {
	cloud.Offer
	GPUs        int
	GPUModel    string
	GPUMemoryGB float64
}

// gpuFit is what a type offers to a request: how many GPUs match.
type gpuFit struct {
	name   string
	gpus   int
	model  string
	memGB  float64
	usable bool
}

// ChooseTypes returns the ways to launch req within the backend's allowed
// types, in the order Launch tries them: types whose GPUs (from
// DescribeInstanceTypes) fit the request; with Spot "prefer" every spot
// choice (cheapest first) before every on-demand one (cheapest first);
// with "only" spot choices alone; with "never" on-demand alone. Ties go to
// the type listed first in the config. An empty result with a nil error
// means no allowed type fits.
func (b *Backend) ChooseTypes(ctx context.Context, req Request) ([]Choice, error) {
	if err := validateRequest(req); err != nil {
		return nil, err
	}
	names := make([]ec2types.InstanceType, len(b.cfg.InstanceTypes))
	for i, t := range b.cfg.InstanceTypes {
		names[i] = ec2types.InstanceType(t.Name)
	}
	infos, err := b.describeTypes(ctx, names)
	if err != nil && unknownType(err) {
		// One unknown name fails the whole call; ask per type so the
		// others still serve, and say which is unknown.
		infos, err = map[string]ec2types.InstanceTypeInfo{}, nil
		for _, n := range names {
			one, e := b.describeTypes(ctx, []ec2types.InstanceType{n})
			if unknownType(e) {
				b.log.Warn("aws: allowed instance type unknown to EC2 in this region; skipped",
					"instance_type", string(n), "region", b.cfg.Region)
				continue
			}
			if e != nil {
				err = e
				break
			}
			for k, v := range one {
				infos[k] = v
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("aws: describe instance types %v: %w", names, err)
	}
	fits := make([]gpuFit, 0, len(b.cfg.InstanceTypes))
	for _, t := range b.cfg.InstanceTypes {
		info, ok := infos[t.Name]
		if !ok {
			fits = append(fits, gpuFit{name: t.Name})
			continue
		}
		fits = append(fits, fitGPUs(t.Name, info.GpuInfo, req))
	}
	return rankChoices(b.cfg, fits), nil
}

// unknownType reports EC2's (and moto's) error for an instance type name it
// does not know: InvalidInstanceType, or InvalidInstanceType.NotFound.
func unknownType(err error) bool {
	return err != nil && strings.HasPrefix(errorCode(err), "InvalidInstanceType")
}

// describeTypes runs DescribeInstanceTypes for names over every page.
func (b *Backend) describeTypes(ctx context.Context, names []ec2types.InstanceType) (map[string]ec2types.InstanceTypeInfo, error) {
	infos := map[string]ec2types.InstanceTypeInfo{}
	in := &ec2.DescribeInstanceTypesInput{InstanceTypes: names}
	for {
		out, err := b.ec2.DescribeInstanceTypes(ctx, in)
		if err != nil {
			return nil, err
		}
		for _, it := range out.InstanceTypes {
			infos[string(it.InstanceType)] = it
		}
		if aws.ToString(out.NextToken) == "" {
			return infos, nil
		}
		in.NextToken = out.NextToken
	}
}

// fitGPUs counts the GPUs of a type that match req's models and memory.
func fitGPUs(name string, gi *ec2types.GpuInfo, req Request) gpuFit {
	f := gpuFit{name: name}
	if gi != nil {
		for _, g := range gi.Gpus {
			model := aws.ToString(g.Name)
			if !modelMatches(model, req.GPUModels) {
				continue
			}
			memGB := 0.0
			if g.MemoryInfo != nil {
				// EC2 reports MiB; GB as sold are 10^9 bytes, rounded
				// to 0.1 (an A10G's 22888 MiB is 23.9998 GB: "24 GB").
				memGB = math.Round(float64(aws.ToInt32(g.MemoryInfo.SizeInMiB))*(1<<20)/1e8) / 10
			}
			if memGB < req.GPUMemoryGB {
				continue
			}
			if f.gpus == 0 || memGB < f.memGB {
				f.memGB = memGB
			}
			f.gpus += int(aws.ToInt32(g.Count))
			if f.model == "" {
				f.model = model
			}
		}
	}
	asksGPU := req.GPUs > 0 || len(req.GPUModels) > 0 || req.GPUMemoryGB > 0
	f.usable = f.gpus >= req.GPUs && (f.gpus > 0 || !asksGPU)
	return f
}

func modelMatches(name string, want []string) bool {
	if len(want) == 0 {
		return true
	}
	n := strings.ToLower(name)
	for _, w := range want {
		if w != "" && strings.Contains(n, strings.ToLower(w)) {
			return true
		}
	}
	return false
}

// rankChoices orders the usable types into choices per cfg.Spot.
func rankChoices(cfg Config, fits []gpuFit) []Choice {
	price := map[string]InstanceType{}
	order := map[string]int{}
	for i, t := range cfg.InstanceTypes {
		price[t.Name] = t
		order[t.Name] = i
	}
	var spot, onDemand []Choice
	for _, f := range fits {
		if !f.usable {
			continue
		}
		p := price[f.name]
		c := Choice{Offer: cloud.Offer{Type: f.name}, GPUs: f.gpus, GPUModel: f.model, GPUMemoryGB: f.memGB}
		if cfg.Spot != SpotNever && p.SpotUSDPerHour > 0 {
			s := c
			s.Spot, s.USDPerHour = true, p.SpotUSDPerHour
			spot = append(spot, s)
		}
		if cfg.Spot != SpotOnly {
			c.USDPerHour = p.OnDemandUSDPerHour
			onDemand = append(onDemand, c)
		}
	}
	byPrice := func(cs []Choice) {
		sort.SliceStable(cs, func(i, j int) bool {
			if cs[i].USDPerHour != cs[j].USDPerHour {
				return cs[i].USDPerHour < cs[j].USDPerHour
			}
			return order[cs[i].Type] < order[cs[j].Type]
		})
	}
	byPrice(spot)
	byPrice(onDemand)
	return append(spot, onDemand...)
}
