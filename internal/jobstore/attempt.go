package jobstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// The job record's fields that an attempt's owner writes while it runs.
// They are named here only: workers and the agent's mirror go through the
// typed methods and EventIn builders below (docs/architecture.md).
const (
	fieldCUDAVisible    = "cuda_visible_devices"
	fieldSimulatedGPUs  = "simulated_gpus"
	fieldInstance       = "instance"
	fieldCloudEventsSeq = "cloud_events_seq"
	fieldProgress       = "progress"
	fieldMetrics        = "metrics"
)

// RecordGPUs notes on job id, while attempt is current and dispatched or
// running, the CUDA_VISIBLE_DEVICES its trainer got and whether those GPUs
// are simulated.
func (s *Store) RecordGPUs(ctx context.Context, id string, attempt int, visible string, simulated bool) error {
	sim := "0"
	if simulated {
		sim = "1"
	}
	return s.annotate(ctx, id, attempt, fieldCUDAVisible, visible, fieldSimulatedGPUs, sim)
}

// RecordInstance notes the attempt's cloud instance on job id (as
// Job.Instance reads it back), while attempt is current and dispatched or
// running.
func (s *Store) RecordInstance(ctx context.Context, id string, attempt int, inst *jobtype.Instance) error {
	b, err := json.Marshal(inst)
	if err != nil {
		return fmt.Errorf("jobstore: instance of %s: %w", id, err)
	}
	return s.annotate(ctx, id, attempt, fieldInstance, string(b))
}

// CloudEventsSeq returns the next agent events batch the AWS worker is to
// mirror into job id (what WithCloudEventsSeq stored); 0 when none was.
func (s *Store) CloudEventsSeq(ctx context.Context, id string) (int, error) {
	v, err := s.rdb.HGet(ctx, s.key("job", id), fieldCloudEventsSeq).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("jobstore: read %s of %s: %w", fieldCloudEventsSeq, id, err)
	}
	n, _ := strconv.Atoi(v)
	return n, nil
}

// WithProgress makes e also set the job's latest progress to p.
func (e EventIn) WithProgress(p jobtype.Progress) EventIn {
	b, _ := json.Marshal(p)
	e.Field, e.Value = fieldProgress, string(b)
	return e
}

// WithMetrics makes e also set the job's metrics to m (all of them).
func (e EventIn) WithMetrics(m map[string]float64) EventIn {
	b, _ := json.Marshal(m)
	e.Field, e.Value = fieldMetrics, string(b)
	return e
}

// CloudEventsSeqUpdate is an EventIn that writes no event and stores next as
// the agent events batch to mirror next (read back with CloudEventsSeq).
func CloudEventsSeqUpdate(next int) EventIn {
	return EventIn{Field: fieldCloudEventsSeq, Value: strconv.Itoa(next)}
}
