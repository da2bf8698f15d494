// Package cloudfake is a fake cloud.Backend: an in-memory cloud of one
// backend of one cluster, for tests of the reconciler and anything else
// that works through the seam (not a cloud; the real backend, backends/aws,
// runs the same conformance suite, cloudtest, against moto_server). It has
// state, not call scripts: instances launched or put there stay until
// terminated, and the test can make Find fail and read what was
// terminated.
package cloudfake

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/lathe-ml/lathe/internal/cloud"
)

// Backend is the fake. The zero value is not usable; call New. Safe for
// concurrent use.
type Backend struct {
	name  string
	types []InstanceType

	mu         sync.Mutex
	insts      []cloud.Instance
	failFind   error
	terminated []string
	next       int
	now        func() time.Time
}

// InstanceType is one type the fake launches: its GPUs and prices.
type InstanceType struct {
	Name               string
	GPUs               int
	OnDemandUSDPerHour float64
}

var _ cloud.Backend = (*Backend)(nil)

// New returns an empty fake of backend name whose one instance type is
// "fake.gpu1" (1 GPU, $1/h) unless types are given.
func New(name string, types ...InstanceType) *Backend {
	if len(types) == 0 {
		types = []InstanceType{{Name: "fake.gpu1", GPUs: 1, OnDemandUSDPerHour: 1}}
	}
	return &Backend{name: name, types: types, now: time.Now}
}

// Put adds instances as they are (any backend, label or state): the
// cloud's state a test starts from. Each counts as this cluster's.
func (b *Backend) Put(insts ...cloud.Instance) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.insts = append(b.insts, insts...)
}

// FailFind makes every Find return err (nil: Find works again).
func (b *Backend) FailFind(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failFind = err
}

// Terminated returns the ids Terminate was called with, in order, each
// call counted (an unknown or already terminated id too).
func (b *Backend) Terminated() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.terminated...)
}

// Launch finds the attempt's live instance or launches one of the first
// type with enough GPUs, on demand.
func (b *Backend) Launch(ctx context.Context, req cloud.LaunchRequest) (cloud.LaunchResult, error) {
	var res cloud.LaunchResult
	if bad := cloud.RequestProblems(req); len(bad) > 0 {
		return res, fmt.Errorf("cloudfake: request: %s", strings.Join(bad, "; "))
	}
	found, err := b.Find(ctx, cloud.Query{JobID: req.JobID, Attempt: req.Attempt})
	if err != nil {
		return res, fmt.Errorf("cloudfake: launch: %w", err)
	}
	if len(found) > 0 {
		res.Instance, res.Found = found[0], true
		return res, nil
	}
	for _, t := range b.types {
		if t.GPUs < req.GPUs {
			continue
		}
		b.mu.Lock()
		b.next++
		in := cloud.Instance{ID: fmt.Sprintf("i-fake%013d", b.next), Backend: b.name, JobID: req.JobID, Attempt: req.Attempt,
			Managed: true, Type: t.Name, State: cloud.StatePending, LaunchTime: b.now()}
		b.insts = append(b.insts, in)
		b.mu.Unlock()
		res.Instance = in
		res.Attempts = []cloud.LaunchAttempt{{Choice: cloud.Offer{Type: t.Name, USDPerHour: t.OnDemandUSDPerHour},
			Subnet: "fake-subnet", InstanceID: in.ID}}
		return res, nil
	}
	return res, fmt.Errorf("cloudfake: %d GPU(s): %w", req.GPUs, cloud.ErrNoFit)
}

// Find returns the managed instances q selects, oldest first.
func (b *Backend) Find(_ context.Context, q cloud.Query) ([]cloud.Instance, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failFind != nil {
		return nil, b.failFind
	}
	var out []cloud.Instance
	for _, in := range b.insts {
		switch {
		case !in.Managed, in.Gone() && !q.Ended, q.OwnOnly && in.Backend != b.name,
			q.JobID != "" && (in.JobID != q.JobID || in.Attempt != q.Attempt):
			continue
		}
		out = append(out, in)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].LaunchTime.Before(out[j].LaunchTime) })
	return out, nil
}

// Describe returns the instance, or ErrNotFound.
func (b *Backend) Describe(_ context.Context, id string) (cloud.Instance, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, in := range b.insts {
		if in.ID == id {
			return in, nil
		}
	}
	return cloud.Instance{}, fmt.Errorf("cloudfake: describe %s: %w", id, cloud.ErrNotFound)
}

// Terminate records the call and terminates a managed instance;
// ErrNotManaged for one that is not, nil for an unknown id.
func (b *Backend) Terminate(_ context.Context, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.terminated = append(b.terminated, id)
	for i := range b.insts {
		if b.insts[i].ID != id {
			continue
		}
		if !b.insts[i].Managed {
			return fmt.Errorf("cloudfake: terminate %s: %w", id, cloud.ErrNotManaged)
		}
		b.insts[i].State = cloud.StateTerminated
	}
	return nil
}

// Price is the on-demand price of the instance's type; 0 for another.
func (b *Backend) Price(inst cloud.Instance) float64 {
	for _, t := range b.types {
		if t.Name == inst.Type {
			return t.OnDemandUSDPerHour
		}
	}
	return 0
}

// Cost bills per started second, no minimum; 0 unpriced.
func (b *Backend) Cost(launch, end time.Time, usdPerHour float64) float64 {
	if !(usdPerHour > 0) || math.IsInf(usdPerHour, 0) || !end.After(launch) {
		return 0
	}
	return math.Ceil(end.Sub(launch).Seconds()) * usdPerHour / 3600
}

// ErrThrottled is an error for FailFind that reads like a throttled
// cloud API.
var ErrThrottled = errors.New("cloudfake: RequestLimitExceeded")
