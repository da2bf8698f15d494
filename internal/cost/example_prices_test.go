package cost

import (
	"fmt"
	"testing"
	"time"
)

// h100 is one NVIDIA H100 SXM GPU in an 8-GPU DGX H100 server, priced from
// public figures. Each input says where it comes from; "assumed" marks the
// ones that are a choice, not a citation. docs/cost.md repeats this table.
var h100 = TCO{
	// $270,000 per DGX H100 (8 × H100 SXM, networking for the server
	// included) / 8 = $33,750 per GPU. Source: SemiAnalysis estimate of the
	// DGX H100 sale price (May 2023), as quoted in Epoch AI's
	// training-cost-trends notebook,
	// https://github.com/epoch-research/training-cost-trends. Cross-checks:
	// the same notebook quotes Raymond James at $25,000–$30,000 per H100
	// GPU alone (Aug 2023); a Thinkmate quote for an 8 × H100 server was
	// $317k (Aug 2024, in a public sheet that links the archived quote).
	PurchaseUSDPerGPU: 33750,
	// Assumed: written off over 4 years.
	AmortisationMonths: 48,
	// 8 kW per DGX H100 / 8 = 1.0 kW per GPU with its share of CPUs, NICs
	// and fans. Sources: NVIDIA's H100 SXM TDP is up to 700 W per GPU; a
	// DGX H100 is rated 10.2 kW max, typical 6.5–8.5 kW
	// (https://www.supercluster.blog/p/6-ai-supercluster-nvidia-dgx-h100).
	// 1.0 kW as the average over all hours, idle ones included, is on the
	// high side of typical; idle GPUs draw less.
	PowerKWPerGPU: 1.0,
	// 8.92 ¢/kWh: average industrial price in Virginia (where us-east-1
	// is) in 2023, EIA Electric Power Annual, released Oct 17, 2024,
	// https://www.eia.gov/electricity/annual/secrev-map.php.
	USDPerKWh: 0.0892,
	// 1.58: Uptime Institute's industry-average PUE for 2023 (Intelligence
	// Update 221, Nov 2023, https://intelligence.uptimeinstitute.com/resource/large-data-centers-are-mostly-more-efficient-analysis-confirms).
	PUE: 1.58,
	// 80%: support quoted at ~20% of the DGX H100 base price per year
	// (https://www.supercluster.blog/p/4-nvidia-dgx-h100-hardware). 20% of
	// the purchase a year is purchase × 0.20 / 12 a month; over 48 months the
	// hardware is purchase / 48 a month, so ops = 0.20 / 12 × 48 = 0.80 of
	// the hardware cost. Support only: staff and space would add to it.
	OpsOverheadPct: 80,
	// Assumed: the GPUs do paid work 60% of the hours.
	Utilisation: 0.6,
}

// p5PerGPUHour is AWS p5.48xlarge (8 × H100 SXM) on-demand Linux in us-east-1,
// $55.04 an hour, / 8 GPUs = $6.88 per GPU-hour.
//
// Source: instances.vantage.sh data (built from the AWS Price List API) as
// copied on 2025-12-21 into tsaol/aws-gpu, data/p5_family_all.js:
// "us-east-1": {"onDemand": 55.04}. It is the price after AWS's June 2025 cut
// of "up to 45%" on P5 On-Demand (reported by
// https://www.usage.ai/blogs/aws/ai-ml-cost/llm-cost-optimization-aws/ and, as
// ~44%, https://costnimbus.com/article/gpu-cost-management-ml-teams): the
// earlier list price was $98.32 (https://computespec.pages.dev/learn/pricing/cost-per-gpu-hour),
// and 55.04 / 98.32 = 0.56, a 44% cut. The same dataset's us-west-1 price,
// $68.80, matches a `dstack offer` listing of Nov 2025
// (https://github.com/dstackai/dstack/pull/3264). Not read from
// aws.amazon.com/ec2/pricing itself: check it before relying on it. One page
// found (digiterialabs.com, Q1 2026) gives a different history ($98.32 →
// $80.62 in Jan 2026) that no other source supports.
const p5PerGPUHour = 55.04 / 8

// TestExamplePrices checks the formulas on the cited H100 example; the
// numbers are worked by hand below and in docs/cost.md.
func TestExamplePrices(t *testing.T) {
	if err := h100.Validate(); err != nil {
		t.Fatal(err)
	}
	if !near(p5PerGPUHour, 6.88, 1e-12) {
		t.Fatalf("p5 per GPU-hour = %v, want 6.88", p5PerGPUHour)
	}

	// hardware/h = 33750 / (48 × 730) = 33750 / 35040        = 0.963185
	// ops/h      = 0.963185 × 80 / 100                        = 0.770548
	// power/h    = 1.0 kW × 1.58 × 0.0892 $/kWh               = 0.140936
	// per used h = (0.963185 + 0.770548 + 0.140936) / 0.6     = 3.124448
	b := h100.Breakdown()
	for _, f := range []struct {
		name      string
		got, want float64
	}{
		{"HardwarePerHour", b.HardwarePerHour, 0.963185},
		{"OpsPerHour", b.OpsPerHour, 0.770548},
		{"PowerPerHour", b.PowerPerHour, 0.140936},
		{"PerUsedHour", b.PerUsedHour, 3.124448},
	} {
		if !near(f.got, f.want, 5e-7) {
			t.Errorf("%s = %.7f, want %.6f", f.name, f.got, f.want)
		}
	}

	// rent/month  = 6.88 × 730 × 0.6                  = 3013.44
	// power/month = 0.140936 × 730                    = 102.88328
	// ops/month   = 33750 / 48 × 80 / 100             = 562.50
	// running     = 102.88328 + 562.50                = 665.38328
	// months      = 33750 / (3013.44 − 665.38328)
	//             = 33750 / 2348.05672                = 14.3736
	be, err := BreakevenMonths(h100, p5PerGPUHour)
	if err != nil {
		t.Fatal(err)
	}
	if be.Never || !near(be.Months, 14.3736, 5e-5) {
		t.Errorf("breakeven = %v months (never %v), want 14.3736: %s", be.Months, be.Never, be.Formula)
	}
	if !near(be.RentPerMonth, 3013.44, 1e-6) || !near(be.PowerPerMonth, 102.88328, 1e-6) ||
		!near(be.OpsPerMonth, 562.5, 1e-9) || !near(be.RunningPerMonth, 665.38328, 1e-6) {
		t.Errorf("terms = rent %v power %v ops %v running %v", be.RentPerMonth, be.PowerPerMonth, be.OpsPerMonth, be.RunningPerMonth)
	}

	// At 10% use the rent saved is 6.88 × 730 × 0.1 = 502.24 a month, below
	// the 665.38 running cost: owning never pays back. The utilisation
	// where rent equals running cost is 665.38328 / (6.88 × 730) = 0.1325.
	idle := h100
	idle.Utilisation = 0.1
	be, err = BreakevenMonths(idle, p5PerGPUHour)
	if err != nil {
		t.Fatal(err)
	}
	if !be.Never || !near(be.RentPerMonth, 502.24, 1e-6) {
		t.Errorf("at 10%% use: never %v rent %v, want never and 502.24: %s", be.Never, be.RentPerMonth, be.Formula)
	}

	// A 90-minute LoRA job on 8 GPUs is 12 GPU-hours: 12 × 6.88 = $82.56 on
	// p5 on demand, 12 × 3.124448 = $37.49 on the owned H100s.
	if got := JobCostUSD(90*time.Minute, 8, p5PerGPUHour); !near(got, 82.56, 1e-9) {
		t.Errorf("cloud job = %v, want 82.56", got)
	}
	if got := JobCostUSD(90*time.Minute, 8, h100.USDPerGPUHour()); !near(got, 37.4934, 5e-5) {
		t.Errorf("local job = %v, want 37.4934", got)
	}
}

// ExampleBreakevenMonths prints the breakeven for the cited H100 example.
func ExampleBreakevenMonths() {
	b, err := BreakevenMonths(h100, p5PerGPUHour)
	if err != nil {
		panic(err)
	}
	fmt.Printf("local $%.2f per used GPU-hour; owning beats renting after %.1f months\n", h100.USDPerGPUHour(), b.Months)
	fmt.Println(b.Formula)
	// Output:
	// local $3.12 per used GPU-hour; owning beats renting after 14.4 months
	// months = purchase / (rent/month − (power/month + ops/month)) = 33750 / (3013.44 − (102.88 + 562.50)) = 14.37; rent/month = 6.88 $/GPU-h × 730 h × u 0.6 = 3013.44; power/month = 1 kW × PUE 1.58 × 0.0892 $/kWh × 730 h = 102.88; ops/month = 33750 $ / 48 months × 80% = 562.50
}
