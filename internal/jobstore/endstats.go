package jobstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// The endings tally: every job that ends (succeeded, failed, cancelled,
// stopped), counted once, by the script that makes the ending. The
// scripts are the only writers of a job's state, and a job moves into an
// ended state in exactly one successful compare-and-set (a second writer
// finds it ended and loses), so the count in Redis is exact whatever
// the number of schedulers and workers, and survives their restarts:
// /metrics reads it (lathe_jobs_finished_total, lathe_job_duration_seconds)
// instead of counting in a process. A retried job that ends again is a
// second ending.
//
// The tally is one hash, endstats, whose fields are JSON arrays:
//
//	["n", state, reason, backend, priority] → endings
//	["d", backend, state, bucket]           → endings whose run time fell in bucket ("1"… or "inf")
//	["s", backend, state]                   → their run time summed, ms
//
// backend is the attempt's backend, or the route's for a job that ended
// before it was dispatched ("" with neither); priority is the spec's
// (normal when it names none). The run time is the job's run_ms: the time
// its attempts spent running, summed (what its cost is computed from); a
// job that never ran is counted at 0 s.
//
// The settled cost is a second hash, costtotal: ["backend", "team"] → USD,
// added to by the settle script with the same amount it adds to the
// month's spend (the one settled figure), so never twice for one job.
const (
	endStatsKey  = "endstats"
	costTotalKey = "costtotal"
)

// DurationBuckets are the upper bounds, in seconds, of the run time
// histogram of ended jobs (lathe_job_duration_seconds): 10 s × 3ⁿ, up to
// about 55 h.
var DurationBuckets = []float64{10, 30, 90, 270, 810, 2430, 7290, 21870, 65610, 196830}

// durationBucketsMS is DurationBuckets in ms as a Lua list's items.
func durationBucketsMS() string {
	parts := make([]string, len(DurationBuckets))
	for i, b := range DurationBuckets {
		parts[i] = strconv.FormatInt(int64(b*1000), 10)
	}
	return strings.Join(parts, ", ")
}

// EndKey names one series of ended jobs.
type EndKey struct{ State, Reason, Backend, Priority string }

// DurationKey names one run time histogram.
type DurationKey struct{ Backend, State string }

// DurationCounts is one run time histogram: Buckets[i] counts the endings
// whose run time was at most DurationBuckets[i] and more than the bound
// before (not cumulative); Inf those above the last bound.
type DurationCounts struct {
	Buckets []uint64
	Inf     uint64
	Sum     time.Duration
}

// Count is how many endings the histogram holds.
func (d DurationCounts) Count() uint64 {
	n := d.Inf
	for _, b := range d.Buckets {
		n += b
	}
	return n
}

// CostKey names one settled cost total.
type CostKey struct{ Backend, Team string }

// EndStats is the endings tally and the settled cost totals, since the
// store was created.
type EndStats struct {
	Finished  map[EndKey]int64
	Durations map[DurationKey]DurationCounts
	CostUSD   map[CostKey]float64
}

// EndStats reads the endings tally and the settled cost totals (two
// HGETALLs in one pipeline).
func (s *Store) EndStats(ctx context.Context) (EndStats, error) {
	pipe := s.rdb.Pipeline()
	ends := pipe.HGetAll(ctx, s.key(endStatsKey))
	costs := pipe.HGetAll(ctx, s.key(costTotalKey))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return EndStats{}, fmt.Errorf("jobstore: end stats: %w", err)
	}
	out := EndStats{Finished: map[EndKey]int64{}, Durations: map[DurationKey]DurationCounts{}, CostUSD: map[CostKey]float64{}}
	for f, v := range ends.Val() {
		var k []string
		if err := json.Unmarshal([]byte(f), &k); err != nil || len(k) == 0 {
			continue // not one of ours
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue
		}
		switch {
		case k[0] == "n" && len(k) == 5:
			out.Finished[EndKey{State: k[1], Reason: k[2], Backend: k[3], Priority: k[4]}] += n
		case k[0] == "d" && len(k) == 4:
			dk := DurationKey{Backend: k[1], State: k[2]}
			d := out.Durations[dk]
			if d.Buckets == nil {
				d.Buckets = make([]uint64, len(DurationBuckets))
			}
			if i, err := strconv.Atoi(k[3]); err == nil && i >= 1 && i <= len(d.Buckets) {
				d.Buckets[i-1] += uint64(n)
			} else {
				d.Inf += uint64(n)
			}
			out.Durations[dk] = d
		case k[0] == "s" && len(k) == 3:
			dk := DurationKey{Backend: k[1], State: k[2]}
			d := out.Durations[dk]
			if d.Buckets == nil {
				d.Buckets = make([]uint64, len(DurationBuckets))
			}
			d.Sum += time.Duration(n) * time.Millisecond
			out.Durations[dk] = d
		}
	}
	for f, v := range costs.Val() {
		var k []string
		if err := json.Unmarshal([]byte(f), &k); err != nil || len(k) != 2 {
			continue
		}
		usd, err := strconv.ParseFloat(v, 64)
		if err != nil {
			continue
		}
		out.CostUSD[CostKey{Backend: k[0], Team: k[1]}] += usd
	}
	return out, nil
}

// Accruing is, of the jobs holding a budget reservation (the priced
// ones), those whose cost is not all settled yet and may be more than
// nothing: running, ended but not settled yet (the leader settles within
// seconds), or waiting again after an attempt that ran (preempted,
// requeued). /metrics adds their cost so far to the settled totals, so
// lathe_cost_dollars_total moves while jobs run and does not fall when
// one ends and is settled. Two pipelines (state and run time, then the
// chosen records whole) after the open set's SMEMBERS.
func (s *Store) Accruing(ctx context.Context) ([]*jobtype.Job, error) {
	ids, err := s.OpenReservations(ctx)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	cmds, err := s.hmgetMany(ctx, ids, accruingArgs, "accruing jobs")
	if err != nil {
		return nil, err
	}
	var pick []string
	for i, c := range cmds {
		v := c.Val()
		if len(v) != 3 {
			continue
		}
		st, _ := v[0].(string)
		ranS, _ := v[1].(string)
		cloudS, _ := v[2].(string)
		ran, _ := strconv.ParseInt(ranS, 10, 64)
		cloud, _ := strconv.ParseFloat(cloudS, 64)
		state := jobtype.State(st)
		if state == jobtype.StateRunning || state.Terminal() || ran > 0 || cloud > 0 {
			pick = append(pick, ids[i])
		}
	}
	if len(pick) == 0 {
		return nil, nil
	}
	jobs, err := s.GetMany(ctx, pick)
	if err != nil {
		return nil, err
	}
	out := jobs[:0]
	for _, j := range jobs {
		if j != nil {
			out = append(out, j)
		}
	}
	return out, nil
}

// accruingArgs reads what Accruing picks by.
var accruingArgs = hmgetArgs([]string{"state", "run_ms", "cloud_cost_usd"})
