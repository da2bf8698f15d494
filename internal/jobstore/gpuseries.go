package jobstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// The GPU series types are jobtype's (the API and CLI read them too).
type (
	GPUSample  = jobtype.GPUSample
	GPUReading = jobtype.GPUReading
	GPUSeries  = jobtype.GPUSeries
)

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
