// Package cost prices GPU-hours for routing: what a used GPU-hour costs on
// hardware the team owns (amortised purchase, operations and power, spread
// over the hours that do paid work), when owning beats renting, and what a
// job costs in GPU-hours. It is pure: no I/O, no clock, no configuration
// reading. docs/cost.md states the model, its formulas and a worked example.
package cost

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// HoursPerMonth is the number of hours in a month used throughout the
// package: 8760 hours a year / 12 = 730.
const HoursPerMonth = 730.0

// TCO is what owning one GPU costs, to price a local GPU-hour honestly
// (not $0). All amounts are per GPU. Call Validate before using the other
// methods; on an invalid TCO their results are meaningless.
type TCO struct {
	// PurchaseUSDPerGPU is the purchase price of one GPU, its share of the
	// server and network included, in USD (≥ 0).
	PurchaseUSDPerGPU float64
	// AmortisationMonths is the number of months over which the purchase is
	// written off (> 0; there is no default).
	AmortisationMonths float64
	// PowerKWPerGPU is the average draw of one GPU with its share of the
	// server, in kW, averaged over all hours (idle ones too) (≥ 0).
	PowerKWPerGPU float64
	// USDPerKWh is the electricity price (≥ 0).
	USDPerKWh float64
	// PUE is the data-centre power usage effectiveness: facility power over
	// IT power (≥ 1; 0 means 1).
	PUE float64
	// OpsOverheadPct is staff, space and support, as a percentage of the
	// amortised hardware cost per hour (0–1000). It is a fixed dollar amount
	// per month, paid whether or not the hardware is paid off.
	OpsOverheadPct float64
	// Utilisation is the fraction of hours the GPUs do paid work
	// (0 < u ≤ 1; 0 means 1, i.e. fully used, the cheapest reading).
	Utilisation float64
}

// FieldError is one invalid TCO field. Validate returns every FieldError it
// finds, joined with errors.Join; use errors.As to get the first.
type FieldError struct {
	Field string  // the TCO field name, e.g. "AmortisationMonths"
	Value float64 // the value it had
	Rule  string  // what it must be, e.g. "must be > 0"
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("cost: TCO.%s = %v: %s", e.Field, e.Value, e.Rule)
}

// ErrInvalid is matched (errors.Is) by every error this package returns for
// bad input.
var ErrInvalid = errors.New("cost: invalid input")

// Is makes errors.Is(err, ErrInvalid) true for a FieldError.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// Validate reports every bad field, each named with its value, all at once
// (errors.Join of *FieldError). It returns nil when t is usable. NaN and
// ±Inf are refused in every field.
func (t TCO) Validate() error {
	var errs []error
	check := func(field string, v float64, ok bool, rule string) {
		if !finite(v) || !ok {
			errs = append(errs, &FieldError{Field: field, Value: v, Rule: rule})
		}
	}
	check("PurchaseUSDPerGPU", t.PurchaseUSDPerGPU, t.PurchaseUSDPerGPU >= 0, "must be ≥ 0")
	check("AmortisationMonths", t.AmortisationMonths, t.AmortisationMonths > 0, "must be > 0")
	check("PowerKWPerGPU", t.PowerKWPerGPU, t.PowerKWPerGPU >= 0, "must be ≥ 0")
	check("USDPerKWh", t.USDPerKWh, t.USDPerKWh >= 0, "must be ≥ 0")
	check("PUE", t.PUE, t.PUE == 0 || t.PUE >= 1, "must be ≥ 1 (0 means 1)")
	check("OpsOverheadPct", t.OpsOverheadPct, t.OpsOverheadPct >= 0 && t.OpsOverheadPct <= 1000, "must be in [0, 1000]")
	check("Utilisation", t.Utilisation, t.Utilisation >= 0 && t.Utilisation <= 1, "must be in (0, 1] (0 means 1)")
	return errors.Join(errs...)
}

func (t TCO) pue() float64 {
	if t.PUE == 0 {
		return 1
	}
	return t.PUE
}

func (t TCO) utilisation() float64 {
	if t.Utilisation == 0 {
		return 1
	}
	return t.Utilisation
}

// Breakdown is the terms of a local GPU-hour's price, for display. All are
// USD per GPU; the first three are per wall-clock hour, PerUsedHour per hour
// of paid work.
type Breakdown struct {
	// HardwarePerHour = PurchaseUSDPerGPU / (AmortisationMonths × 730).
	HardwarePerHour float64
	// OpsPerHour = HardwarePerHour × OpsOverheadPct / 100.
	OpsPerHour float64
	// PowerPerHour = PowerKWPerGPU × PUE × USDPerKWh.
	PowerPerHour float64
	// Utilisation is the utilisation used (0 replaced by 1).
	Utilisation float64
	// PerUsedHour = (HardwarePerHour + OpsPerHour + PowerPerHour) / Utilisation.
	PerUsedHour float64
}

// Breakdown returns the terms of USDPerGPUHour (see the Breakdown fields for
// each formula). t should have passed Validate.
func (t TCO) Breakdown() Breakdown {
	hw := t.PurchaseUSDPerGPU / (t.AmortisationMonths * HoursPerMonth)
	ops := hw * t.OpsOverheadPct / 100
	power := t.PowerKWPerGPU * t.pue() * t.USDPerKWh
	u := t.utilisation()
	return Breakdown{
		HardwarePerHour: hw,
		OpsPerHour:      ops,
		PowerPerHour:    power,
		Utilisation:     u,
		PerUsedHour:     (hw + ops + power) / u,
	}
}

// USDPerGPUHour is the cost of one *used* GPU-hour on owned hardware:
//
//	hardware/h = PurchaseUSDPerGPU / (AmortisationMonths × 730)
//	power/h    = PowerKWPerGPU × PUE × USDPerKWh
//	USDPerGPUHour = (hardware/h × (1 + OpsOverheadPct/100) + power/h) / Utilisation
//
// with PUE 0 and Utilisation 0 read as 1. t should have passed Validate.
func (t TCO) USDPerGPUHour() float64 { return t.Breakdown().PerUsedHour }

// Breakeven is the answer of BreakevenMonths, with the inputs and terms it
// used so that a reader can check it by hand. All money is USD per GPU.
type Breakeven struct {
	// Months after which owning has cost less than renting; 0 when Never.
	Months float64
	// Never is true when renting per month costs no more than owning's
	// running cost per month, so the purchase is never paid back.
	Never bool
	// Formula is the formula with the numbers filled in.
	Formula string

	TCO                TCO     // the inputs, as given
	CloudUSDPerGPUHour float64 // the cloud price per GPU-hour, as given
	Utilisation        float64 // the utilisation used (0 replaced by 1)
	PurchaseUSD        float64 // paid up front
	RentPerMonth       float64 // CloudUSDPerGPUHour × 730 × Utilisation
	PowerPerMonth      float64 // PowerKWPerGPU × PUE × USDPerKWh × 730
	OpsPerMonth        float64 // PurchaseUSDPerGPU / AmortisationMonths × OpsOverheadPct / 100
	RunningPerMonth    float64 // PowerPerMonth + OpsPerMonth
}

// BreakevenMonths says after how many months owning a GPU beats renting one,
// for a GPU used at utilisation u (t.Utilisation, 0 read as 1), when renting
// costs cloudUSDPerGPUHour per GPU-hour actually used:
//
//	own(m)  = PurchaseUSDPerGPU + m × (power/month + ops/month)
//	rent(m) = m × cloudUSDPerGPUHour × 730 × u
//	power/month = PowerKWPerGPU × PUE × USDPerKWh × 730
//	ops/month   = PurchaseUSDPerGPU / AmortisationMonths × OpsOverheadPct / 100
//	Months = PurchaseUSDPerGPU / (rent/month − (power/month + ops/month))
//
// Ops is the same dollar amount per month as in USDPerGPUHour
// (hardware/h × ops% × 730); staff and space are paid monthly whether the
// hardware is paid off or not, so they count as running cost. Never is true
// when rent/month ≤ running cost/month. The amortisation period does not
// cap Months: a breakeven beyond it is returned as computed, for the caller
// to judge. It returns an error matching ErrInvalid when t fails Validate or
// the cloud price is negative, NaN or infinite.
func BreakevenMonths(t TCO, cloudUSDPerGPUHour float64) (Breakeven, error) {
	err := t.Validate()
	if !finite(cloudUSDPerGPUHour) || cloudUSDPerGPUHour < 0 {
		err = errors.Join(err, fmt.Errorf("%w: cloud price %v USD per GPU-hour: must be ≥ 0", ErrInvalid, cloudUSDPerGPUHour))
	}
	if err != nil {
		return Breakeven{}, fmt.Errorf("cost: breakeven: %w", err)
	}
	u := t.utilisation()
	b := Breakeven{
		TCO:                t,
		CloudUSDPerGPUHour: cloudUSDPerGPUHour,
		Utilisation:        u,
		PurchaseUSD:        t.PurchaseUSDPerGPU,
		RentPerMonth:       cloudUSDPerGPUHour * HoursPerMonth * u,
		PowerPerMonth:      t.PowerKWPerGPU * t.pue() * t.USDPerKWh * HoursPerMonth,
		OpsPerMonth:        t.PurchaseUSDPerGPU / t.AmortisationMonths * t.OpsOverheadPct / 100,
	}
	b.RunningPerMonth = b.PowerPerMonth + b.OpsPerMonth
	margin := b.RentPerMonth - b.RunningPerMonth
	terms := fmt.Sprintf("rent/month = %g $/GPU-h × 730 h × u %g = %.2f; "+
		"power/month = %g kW × PUE %g × %g $/kWh × 730 h = %.2f; "+
		"ops/month = %g $ / %g months × %g%% = %.2f",
		cloudUSDPerGPUHour, u, b.RentPerMonth,
		t.PowerKWPerGPU, t.pue(), t.USDPerKWh, b.PowerPerMonth,
		t.PurchaseUSDPerGPU, t.AmortisationMonths, t.OpsOverheadPct, b.OpsPerMonth)
	if margin <= 0 {
		b.Never = true
		b.Formula = fmt.Sprintf("never: rent/month %.2f ≤ power/month %.2f + ops/month %.2f = %.2f; %s",
			b.RentPerMonth, b.PowerPerMonth, b.OpsPerMonth, b.RunningPerMonth, terms)
		return b, nil
	}
	b.Months = t.PurchaseUSDPerGPU / margin
	b.Formula = fmt.Sprintf("months = purchase / (rent/month − (power/month + ops/month)) = %g / (%.2f − (%.2f + %.2f)) = %.2f; %s",
		t.PurchaseUSDPerGPU, b.RentPerMonth, b.PowerPerMonth, b.OpsPerMonth, b.Months, terms)
	return b, nil
}

// GPUHours is runtime × gpus in hours. gpus ≤ 0 or runtime ≤ 0 counts as 0
// GPU-hours.
func GPUHours(runtime time.Duration, gpus int) float64 {
	if gpus <= 0 || runtime <= 0 {
		return 0
	}
	return runtime.Hours() * float64(gpus)
}

// JobCostUSD is the estimated cost of a job: GPUHours(runtime, gpus) ×
// usdPerGPUHour. A negative or non-finite price is the caller's bug and is
// returned through as computed.
func JobCostUSD(runtime time.Duration, gpus int, usdPerGPUHour float64) float64 {
	return GPUHours(runtime, gpus) * usdPerGPUHour
}
