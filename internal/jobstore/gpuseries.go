package jobstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// GPUSample is one point of a job's GPU series: the mean readings of its
// GPUs over the point's step, from time T (unix ms).
type GPUSample struct {
	T    int64        `json:"t"`
	GPUs []GPUReading `json:"gpus"`
}

// GPUReading is one GPU's readings in a GPUSample.
type GPUReading struct {
	Index  int     `json:"index"`
	Util   float64 `json:"utilization_pct"`
	MemMB  float64 `json:"memory_used_mb"`
	PowerW float64 `json:"power_w"`
	TempC  float64 `json:"temperature_c"`
}

// GPUSeries is a job's downsampled GPU series.
type GPUSeries struct {
	// Step is the time one point covers.
	Step   time.Duration `json:"step_ns"`
	Points []GPUSample   `json:"points"`
}

// AppendGPUSample adds a point to job id's GPU series (step: what a point
// covers now).
func (s *Store) AppendGPUSample(ctx context.Context, id string, p GPUSample, step time.Duration) error {
	b, _ := json.Marshal(p)
	pipe := s.rdb.TxPipeline()
	pipe.RPush(ctx, s.key("job", id, "gpu"), b)
	pipe.HSet(ctx, s.key("job", id), "gpu_series_step_ms", step.Milliseconds())
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("jobstore: gpu series %s: %w", id, err)
	}
	return nil
}

// ReplaceGPUSeries writes job id's whole GPU series (after compaction).
func (s *Store) ReplaceGPUSeries(ctx context.Context, id string, ps []GPUSample, step time.Duration) error {
	vals := make([]any, len(ps))
	for i, p := range ps {
		b, _ := json.Marshal(p)
		vals[i] = b
	}
	pipe := s.rdb.TxPipeline()
	pipe.Del(ctx, s.key("job", id, "gpu"))
	if len(vals) > 0 {
		pipe.RPush(ctx, s.key("job", id, "gpu"), vals...)
	}
	pipe.HSet(ctx, s.key("job", id), "gpu_series_step_ms", step.Milliseconds())
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("jobstore: gpu series %s: %w", id, err)
	}
	return nil
}

// GPUSeriesOf reads job id's GPU series (empty when it never ran on GPUs).
func (s *Store) GPUSeriesOf(ctx context.Context, id string) (GPUSeries, error) {
	pipe := s.rdb.Pipeline()
	lr := pipe.LRange(ctx, s.key("job", id, "gpu"), 0, -1)
	st := pipe.HGet(ctx, s.key("job", id), "gpu_series_step_ms")
	_, _ = pipe.Exec(ctx)
	if err := lr.Err(); err != nil {
		return GPUSeries{}, fmt.Errorf("jobstore: gpu series %s: %w", id, err)
	}
	out := GPUSeries{Points: []GPUSample{}}
	if v, err := st.Int64(); err == nil {
		out.Step = time.Duration(v) * time.Millisecond
	}
	for _, v := range lr.Val() {
		var p GPUSample
		if json.Unmarshal([]byte(v), &p) == nil {
			out.Points = append(out.Points, p)
		}
	}
	return out, nil
}
