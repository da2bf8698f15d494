package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/trace"
)

// MixShare is one value of a drawn attribute and its share.
type MixShare struct {
	// Value: a priority, or residency tags joined by '+' ("eu+de").
	Value string
	Share float64
}

// ParseMix reads "a=0.6,b=0.3,c=0.1" for flag (which names it in errors).
// Shares must be positive and finite; they are normalised to sum to 1.
func ParseMix(flag, s string, valid func(string) error) ([]MixShare, error) {
	var mix []MixShare
	sum := 0.0
	for part := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("%s %q: want value=share,… (e.g. onprem=0.6,eu=0.4), not %q", flag, s, part)
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || !(f > 0) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("%s %q: share %q of %q: want a number above 0", flag, s, v, k)
		}
		k = strings.ToLower(strings.TrimSpace(k))
		if err := valid(k); err != nil {
			return nil, fmt.Errorf("%s %q: %w", flag, s, err)
		}
		if slices.ContainsFunc(mix, func(m MixShare) bool { return m.Value == k }) {
			return nil, fmt.Errorf("%s %q: %q appears twice", flag, s, k)
		}
		mix = append(mix, MixShare{Value: k, Share: f})
		sum += f
	}
	for i := range mix {
		mix[i].Share /= sum
	}
	return mix, nil
}

// ValidPriority accepts urgent, normal and batch.
func ValidPriority(v string) error {
	switch jobspec.Priority(v) {
	case jobspec.PriorityUrgent, jobspec.PriorityNormal, jobspec.PriorityBatch:
		return nil
	}
	return fmt.Errorf("priority %q: want urgent, normal or batch", v)
}

// ValidResidency accepts tags [a-z0-9_-] joined by '+'.
func ValidResidency(v string) error {
	for t := range strings.SplitSeq(v, "+") {
		if t == "" || len(t) > 63 || strings.Trim(t, "abcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
			return fmt.Errorf("residency %q: tags are lower-case words [a-z0-9_-], several joined by '+'", v)
		}
	}
	return nil
}

// Draws says how a trace becomes simulated jobs: what is drawn (with
// Seed) for the attributes a trace lacks.
type Draws struct {
	Seed      uint64
	Residency []MixShare // nil: the trace's, else the config's default_residency
	Priority  []MixShare // nil: the trace's, else normal
}

// DrawReport says, per attribute, how many jobs had it from the trace and
// how many got each drawn or default value.
type DrawReport struct {
	Residency map[string]int `json:"residency"`
	Priority  map[string]int `json:"priority"`
	FromTrace map[string]int `json:"from_trace"`
}

// JobsFromTrace makes the simulation's jobs from a trace: ids t00001…
// (or the trace's job_id), submit times relative to the first, and the
// drawn attributes. The same seed draws the same values.
func JobsFromTrace(tj []trace.Job, d Draws) ([]Job, DrawReport) {
	rng := rand.New(rand.NewPCG(d.Seed, 0x5eed_0001))
	rep := DrawReport{Residency: map[string]int{}, Priority: map[string]int{}, FromTrace: map[string]int{}}
	out := make([]Job, len(tj))
	var t0 float64
	if len(tj) > 0 {
		t0 = tj[0].SubmitS
	}
	seen := map[string]bool{}
	for i, j := range tj {
		id := j.ID
		if id == "" || seen[id] {
			id = fmt.Sprintf("t%05d", i+1)
		}
		seen[id] = true
		sj := Job{ID: id, Submit: secs(j.SubmitS - t0), Duration: secs(j.DurationS), GPUs: j.GPUs, GPUModel: j.GPUModel}
		// Draw both attributes for every job, used or not, so that one
		// mix does not shift the other's draws.
		rr, rp := rng.Float64(), rng.Float64()
		switch {
		case len(j.Residency) > 0:
			sj.Residency = j.Residency
			rep.FromTrace["residency"]++
		case d.Residency != nil:
			v := pick(d.Residency, rr)
			sj.Residency = strings.Split(v, "+")
			rep.Residency[v]++
		default:
			rep.Residency["(config default)"]++
		}
		switch {
		case j.Priority != "":
			sj.Priority = jobspec.Priority(j.Priority)
			rep.FromTrace["priority"]++
		case d.Priority != nil:
			v := pick(d.Priority, rp)
			sj.Priority = jobspec.Priority(v)
			rep.Priority[v]++
		default:
			sj.Priority = jobspec.PriorityNormal
			rep.Priority["normal (default)"]++
		}
		if j.GPUModel != "" {
			rep.FromTrace["gpu_model"]++
		}
		out[i] = sj
	}
	return out, rep
}

// ScaleArrivals returns jobs arriving factor times as often: every submit
// time divided by factor (run times unchanged); jobs itself when factor is
// 1 or not above 0.
func ScaleArrivals(jobs []Job, factor float64) []Job {
	if factor == 1 || !(factor > 0) {
		return jobs
	}
	out := slices.Clone(jobs)
	for i := range out {
		out[i].Submit = time.Duration(float64(out[i].Submit) / factor)
	}
	return out
}

func pick(mix []MixShare, u float64) string {
	for _, m := range mix {
		if u < m.Share {
			return m.Value
		}
		u -= m.Share
	}
	return mix[len(mix)-1].Value
}

func secs(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }

// Estimator is how the policy learns a job's run time: Learned (from the
// jobs that ended), a user's Hint (the true duration × lognormal noise of
// Sigma), or Oracle (the true duration).
type Estimator struct {
	Kind  string // learned | hint | oracle
	Sigma float64
}

// String is the estimator as the flag writes it.
func (e Estimator) String() string {
	if e.Kind == "hint" {
		return "hint:" + strconv.FormatFloat(e.Sigma, 'g', -1, 64)
	}
	return e.Kind
}

// ParseEstimator reads learned, oracle or hint:SIGMA (0 ≤ σ ≤ 5).
func ParseEstimator(s string) (Estimator, error) {
	switch s = strings.TrimSpace(s); {
	case s == "learned" || s == "oracle":
		return Estimator{Kind: s}, nil
	case strings.HasPrefix(s, "hint:"):
		f, err := strconv.ParseFloat(strings.TrimPrefix(s, "hint:"), 64)
		if err != nil || !(f >= 0 && f <= 5) {
			return Estimator{}, fmt.Errorf("--estimates %q: hint:SIGMA wants σ from 0 to 5 (hint:1.0)", s)
		}
		return Estimator{Kind: "hint", Sigma: f}, nil
	}
	return Estimator{}, fmt.Errorf("--estimates %q: want learned, hint:SIGMA (e.g. hint:1.0) or oracle", s)
}

// WithEstimates returns a copy of jobs whose hints follow e: none
// (learned), the true duration (oracle), or the true duration × exp(σZ)
// with Z standard normal drawn with seed, at least a second (hint).
func WithEstimates(jobs []Job, e Estimator, seed uint64) []Job {
	out := slices.Clone(jobs)
	rng := rand.New(rand.NewPCG(seed, 0x5eed_0002))
	for i := range out {
		switch e.Kind {
		case "oracle":
			out[i].Hint = max(out[i].Duration, time.Second)
		case "hint":
			f := math.Exp(e.Sigma * rng.NormFloat64())
			out[i].Hint = max(time.Duration(float64(out[i].Duration)*f), time.Second)
		default:
			out[i].Hint = 0
		}
	}
	return out
}
