package cost

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// near reports whether got is within tol of want (absolute).
func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

// simple is the hand-checkable TCO the table tests start from:
//
//	hardware/h = 21900 / (30 × 730) = 21900 / 21900 = 1.00
//	ops/h      = 1.00 × 50 / 100                    = 0.50
//	power/h    = 1 kW × PUE 1.5 × 0.20 $/kWh        = 0.30
//	per used h = (1.00 + 0.50 + 0.30) / 0.5         = 3.60
var simple = TCO{
	PurchaseUSDPerGPU:  21900,
	AmortisationMonths: 30,
	PowerKWPerGPU:      1,
	USDPerKWh:          0.20,
	PUE:                1.5,
	OpsOverheadPct:     50,
	Utilisation:        0.5,
}

func TestValidate(t *testing.T) {
	t.Run("valid", func(t *testing.T) {
		if err := simple.Validate(); err != nil {
			t.Fatalf("Validate(simple) = %v, want nil", err)
		}
		zeroDefaults := simple
		zeroDefaults.PUE, zeroDefaults.Utilisation = 0, 0 // both mean 1
		if err := zeroDefaults.Validate(); err != nil {
			t.Fatalf("PUE 0 and Utilisation 0 mean 1, got %v", err)
		}
		edges := TCO{AmortisationMonths: 1, PUE: 1, OpsOverheadPct: 1000, Utilisation: 1}
		if err := edges.Validate(); err != nil {
			t.Fatalf("edges of the ranges are valid, got %v", err)
		}
	})

	tests := []struct {
		name   string
		tco    TCO
		fields []string // every field the error must name, in order
		texts  []string // substrings the message must hold (field = value)
	}{
		{"zero value lacks amortisation", TCO{}, []string{"AmortisationMonths"}, []string{"TCO.AmortisationMonths = 0: must be > 0"}},
		{"negative purchase", with(func(t *TCO) { t.PurchaseUSDPerGPU = -1 }), []string{"PurchaseUSDPerGPU"}, []string{"PurchaseUSDPerGPU = -1"}},
		{"negative amortisation", with(func(t *TCO) { t.AmortisationMonths = -12 }), []string{"AmortisationMonths"}, []string{"AmortisationMonths = -12"}},
		{"negative power", with(func(t *TCO) { t.PowerKWPerGPU = -0.7 }), []string{"PowerKWPerGPU"}, []string{"PowerKWPerGPU = -0.7"}},
		{"negative kWh price", with(func(t *TCO) { t.USDPerKWh = -0.1 }), []string{"USDPerKWh"}, []string{"USDPerKWh = -0.1"}},
		{"PUE below 1", with(func(t *TCO) { t.PUE = 0.9 }), []string{"PUE"}, []string{"PUE = 0.9: must be ≥ 1 (0 means 1)"}},
		{"ops above 1000", with(func(t *TCO) { t.OpsOverheadPct = 1000.5 }), []string{"OpsOverheadPct"}, []string{"OpsOverheadPct = 1000.5"}},
		{"ops negative", with(func(t *TCO) { t.OpsOverheadPct = -5 }), []string{"OpsOverheadPct"}, []string{"OpsOverheadPct = -5"}},
		{"utilisation above 1", with(func(t *TCO) { t.Utilisation = 1.2 }), []string{"Utilisation"}, []string{"Utilisation = 1.2"}},
		{"utilisation negative", with(func(t *TCO) { t.Utilisation = -0.5 }), []string{"Utilisation"}, []string{"Utilisation = -0.5"}},
		{"NaN purchase", with(func(t *TCO) { t.PurchaseUSDPerGPU = math.NaN() }), []string{"PurchaseUSDPerGPU"}, []string{"PurchaseUSDPerGPU = NaN"}},
		{"Inf power", with(func(t *TCO) { t.PowerKWPerGPU = math.Inf(1) }), []string{"PowerKWPerGPU"}, []string{"PowerKWPerGPU = +Inf"}},
		{
			"all bad at once",
			TCO{PurchaseUSDPerGPU: -1, AmortisationMonths: 0, PowerKWPerGPU: -2, USDPerKWh: -3, PUE: 0.5, OpsOverheadPct: 2000, Utilisation: 2},
			[]string{"PurchaseUSDPerGPU", "AmortisationMonths", "PowerKWPerGPU", "USDPerKWh", "PUE", "OpsOverheadPct", "Utilisation"},
			[]string{"= -1", "= 0", "= -2", "= -3", "= 0.5", "= 2000", "= 2"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.tco.Validate()
			if err == nil {
				t.Fatalf("Validate() = nil, want an error naming %v", tc.fields)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("errors.Is(err, ErrInvalid) = false for %v", err)
			}
			var first *FieldError
			if !errors.As(err, &first) || first.Field != tc.fields[0] {
				t.Errorf("errors.As first FieldError = %+v, want field %s", first, tc.fields[0])
			}
			joined, ok := err.(interface{ Unwrap() []error })
			if !ok {
				t.Fatalf("Validate error %T is not an errors.Join", err)
			}
			var got []string
			for _, e := range joined.Unwrap() {
				var fe *FieldError
				if !errors.As(e, &fe) {
					t.Fatalf("joined error %v is not a *FieldError", e)
				}
				got = append(got, fe.Field)
			}
			if strings.Join(got, ",") != strings.Join(tc.fields, ",") {
				t.Errorf("fields named = %v, want %v", got, tc.fields)
			}
			for _, s := range tc.texts {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

// with returns simple changed by f.
func with(f func(*TCO)) TCO {
	t := simple
	f(&t)
	return t
}

func TestUSDPerGPUHour(t *testing.T) {
	tests := []struct {
		name string
		tco  TCO
		want Breakdown
	}{
		{
			// See simple: 1.00 + 0.50 + 0.30 = 1.80 per wall-clock hour, / 0.5 = 3.60.
			"simple at half use", simple,
			Breakdown{HardwarePerHour: 1, OpsPerHour: 0.5, PowerPerHour: 0.3, Utilisation: 0.5, PerUsedHour: 3.6},
		},
		{
			// Utilisation 0 and PUE 0 read as 1: power 1 × 1 × 0.20 = 0.20;
			// (1.00 + 0.50 + 0.20) / 1 = 1.70.
			"zero means one", with(func(t *TCO) { t.PUE, t.Utilisation = 0, 0 }),
			Breakdown{HardwarePerHour: 1, OpsPerHour: 0.5, PowerPerHour: 0.2, Utilisation: 1, PerUsedHour: 1.7},
		},
		{
			// No ops, no power, full use: the hardware alone, 1.00.
			"hardware only", with(func(t *TCO) { t.OpsOverheadPct, t.PowerKWPerGPU, t.Utilisation = 0, 0, 1 }),
			Breakdown{HardwarePerHour: 1, Utilisation: 1, PerUsedHour: 1},
		},
		{
			// Ops at the cap: 1000% of 1.00 = 10.00; (1 + 10 + 0.30) / 0.5 = 22.60.
			"ops at 1000 percent", with(func(t *TCO) { t.OpsOverheadPct = 1000 }),
			Breakdown{HardwarePerHour: 1, OpsPerHour: 10, PowerPerHour: 0.3, Utilisation: 0.5, PerUsedHour: 22.6},
		},
		{
			// Owned outright already (purchase 0): power only, 0.30 / 0.25 = 1.20.
			"paid off", with(func(t *TCO) { t.PurchaseUSDPerGPU, t.Utilisation = 0, 0.25 }),
			Breakdown{PowerPerHour: 0.3, Utilisation: 0.25, PerUsedHour: 1.2},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.tco.Validate(); err != nil {
				t.Fatal(err)
			}
			got := tc.tco.Breakdown()
			for _, f := range []struct {
				name      string
				got, want float64
			}{
				{"HardwarePerHour", got.HardwarePerHour, tc.want.HardwarePerHour},
				{"OpsPerHour", got.OpsPerHour, tc.want.OpsPerHour},
				{"PowerPerHour", got.PowerPerHour, tc.want.PowerPerHour},
				{"Utilisation", got.Utilisation, tc.want.Utilisation},
				{"PerUsedHour", got.PerUsedHour, tc.want.PerUsedHour},
			} {
				if !near(f.got, f.want, 1e-9) {
					t.Errorf("%s = %v, want %v", f.name, f.got, f.want)
				}
			}
			if u := tc.tco.USDPerGPUHour(); u != got.PerUsedHour {
				t.Errorf("USDPerGPUHour() = %v, Breakdown().PerUsedHour = %v", u, got.PerUsedHour)
			}
		})
	}
}

// TestUSDPerGPUHourFallsWithUse: the same fixed costs spread over more used
// hours can only make a used hour cheaper.
func TestUSDPerGPUHourFallsWithUse(t *testing.T) {
	prev := math.Inf(1)
	for u := 0.05; u <= 1.0001; u += 0.05 {
		c := with(func(t *TCO) { t.Utilisation = math.Min(u, 1) }).USDPerGPUHour()
		if !(c < prev) {
			t.Fatalf("at utilisation %.2f cost %v is not below %v", u, c, prev)
		}
		prev = c
	}
}

func TestBreakevenMonths(t *testing.T) {
	tests := []struct {
		name    string
		tco     TCO
		cloud   float64
		months  float64
		never   bool
		rent    float64 // per month
		running float64 // per month
	}{
		{
			// rent/month  = 4.00 × 730 × 0.5           = 1460
			// power/month = 1 × 1.5 × 0.20 × 730       = 219
			// ops/month   = 21900 / 30 × 50 / 100      = 365
			// months      = 21900 / (1460 − (219+365)) = 21900 / 876 = 25
			"simple pays back in 25 months", simple, 4.00, 25, false, 1460, 584,
		},
		{
			// rent/month = 8.00 × 730 × 1 = 5840; running as above 584;
			// months = 21900 / 5256 = 4.1666…
			"full use pays back sooner", with(func(t *TCO) { t.Utilisation = 1 }), 8.00, 21900.0 / 5256, false, 5840, 584,
		},
		{
			// rent/month = 1.50 × 730 × 0.5 = 547.5 ≤ running 584: never.
			"cheap cloud never", simple, 1.50, 0, true, 547.5, 584,
		},
		{
			// Running cost 0 (no power, no ops) and a free cloud: rent 0 ≤ 0,
			// equality counts as never.
			"equal is never", with(func(t *TCO) { t.PowerKWPerGPU, t.OpsOverheadPct = 0, 0 }), 0, 0, true, 0, 0,
		},
		{
			// Nothing to pay back: rent 1460 > running 584, months = 0 / 876 = 0.
			"paid off breaks even at once", with(func(t *TCO) { t.PurchaseUSDPerGPU = 0 }), 4.00, 0, false, 1460, 219,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := BreakevenMonths(tc.tco, tc.cloud)
			if err != nil {
				t.Fatal(err)
			}
			if b.Never != tc.never || !near(b.Months, tc.months, 1e-9) {
				t.Errorf("got Months %v Never %v, want %v %v (%s)", b.Months, b.Never, tc.months, tc.never, b.Formula)
			}
			if !near(b.RentPerMonth, tc.rent, 1e-9) || !near(b.RunningPerMonth, tc.running, 1e-9) {
				t.Errorf("rent %v running %v, want %v %v", b.RentPerMonth, b.RunningPerMonth, tc.rent, tc.running)
			}
			if !near(b.PowerPerMonth+b.OpsPerMonth, b.RunningPerMonth, 1e-9) {
				t.Errorf("running %v ≠ power %v + ops %v", b.RunningPerMonth, b.PowerPerMonth, b.OpsPerMonth)
			}
			if b.TCO != tc.tco || b.CloudUSDPerGPUHour != tc.cloud {
				t.Errorf("inputs not echoed: %+v %v", b.TCO, b.CloudUSDPerGPUHour)
			}
			if b.Formula == "" {
				t.Error("empty Formula")
			}
		})
	}

	t.Run("formula has the numbers", func(t *testing.T) {
		b, _ := BreakevenMonths(simple, 4)
		for _, s := range []string{"21900 / (1460.00 − (219.00 + 365.00)) = 25.00", "4 $/GPU-h × 730 h × u 0.5", "× PUE 1.5 ×", "× 50%"} {
			if !strings.Contains(b.Formula, s) {
				t.Errorf("Formula %q lacks %q", b.Formula, s)
			}
		}
		n, _ := BreakevenMonths(simple, 1.5)
		if !strings.HasPrefix(n.Formula, "never: rent/month 547.50 ≤ power/month 219.00 + ops/month 365.00 = 584.00") {
			t.Errorf("never Formula = %q", n.Formula)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		for _, c := range []struct {
			name  string
			tco   TCO
			cloud float64
			want  []string
		}{
			{"negative cloud", simple, -1, []string{"cloud price -1"}},
			{"NaN cloud", simple, math.NaN(), []string{"cloud price NaN"}},
			{"bad TCO and cloud", with(func(t *TCO) { t.AmortisationMonths = 0 }), math.Inf(1), []string{"AmortisationMonths = 0", "cloud price +Inf"}},
		} {
			b, err := BreakevenMonths(c.tco, c.cloud)
			if err == nil || !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: err = %v, want ErrInvalid", c.name, err)
				continue
			}
			for _, s := range c.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%s: %q lacks %q", c.name, err, s)
				}
			}
			if b != (Breakeven{}) {
				t.Errorf("%s: got %+v with an error", c.name, b)
			}
		}
	})
}

func TestGPUHours(t *testing.T) {
	tests := []struct {
		runtime time.Duration
		gpus    int
		want    float64
	}{
		{90 * time.Minute, 8, 12}, // 1.5 h × 8
		{2 * time.Hour, 1, 2},
		{30 * time.Minute, 0, 0}, // no GPUs, no GPU-hours
		{time.Hour, -2, 0},
		{0, 4, 0},
		{-time.Hour, 4, 0},
		{36 * time.Second, 100, 1}, // 0.01 h × 100
	}
	for _, tc := range tests {
		if got := GPUHours(tc.runtime, tc.gpus); !near(got, tc.want, 1e-12) {
			t.Errorf("GPUHours(%v, %d) = %v, want %v", tc.runtime, tc.gpus, got, tc.want)
		}
	}
	// 1.5 h × 8 GPUs × $6.88 = $82.56.
	if got := JobCostUSD(90*time.Minute, 8, 6.88); !near(got, 82.56, 1e-9) {
		t.Errorf("JobCostUSD = %v, want 82.56", got)
	}
}
