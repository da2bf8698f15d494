// Package cloudtest is the conformance suite of the cloud.Backend seam: the
// same checks run against every implementation (backends/aws against
// moto_server, cloudfake in memory), so the reconciler and the cloud worker
// can count on what the interface says and nothing a backend happens to do.
package cloudtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/cloud"
)

// UnknownID is an instance id no backend under test knows (well-formed for
// EC2).
const UnknownID = "i-0123456789abcdef0"

// Run checks a backend from newBackend, which returns a fresh backend of
// its own cluster, with no instances, whose configured instance types have
// one with a single GPU of any model. Each check runs as a subtest on its
// own backend.
func Run(t *testing.T, newBackend func(t *testing.T) cloud.Backend) {
	t.Helper()
	for _, c := range []struct {
		name string
		fn   func(t *testing.T, b cloud.Backend)
	}{
		{"LaunchFindDescribeTerminate", launchFindDescribeTerminate},
		{"LaunchTwiceSameAttempt", launchTwice},
		{"AttemptsApart", attemptsApart},
		{"InvalidRequest", invalidRequest},
		{"NoFit", noFit},
		{"UnknownInstance", unknownInstance},
		{"PriceAndCost", priceAndCost},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newBackend(t)) })
	}
}

func launch(t *testing.T, b cloud.Backend, job string, attempt int) cloud.LaunchResult {
	t.Helper()
	res, err := b.Launch(context.Background(), cloud.LaunchRequest{JobID: job, Attempt: attempt, GPUs: 1, UserData: "#!/bin/sh\ntrue\n"})
	if err != nil {
		t.Fatalf("Launch %s attempt %d: %v", job, attempt, err)
	}
	return res
}

func find(t *testing.T, b cloud.Backend, q cloud.Query) map[string]cloud.Instance {
	t.Helper()
	insts, err := b.Find(context.Background(), q)
	if err != nil {
		t.Fatalf("Find %+v: %v", q, err)
	}
	out := map[string]cloud.Instance{}
	for i, in := range insts {
		if i > 0 && in.LaunchTime.Before(insts[i-1].LaunchTime) {
			t.Errorf("Find %+v: not oldest first: %v", q, insts)
		}
		out[in.ID] = in
	}
	return out
}

// checkAttempt: the instance carries its job attempt, its backend and the
// managed label (the tags' round trip).
func checkAttempt(t *testing.T, what string, in cloud.Instance, job string, attempt int) {
	t.Helper()
	j, a, ok := in.JobAttempt()
	if !ok || j != job || a != attempt || !in.Managed || in.Backend == "" || in.ID == "" || in.Type == "" {
		t.Errorf("%s: %+v, want a managed instance of %s attempt %d with its backend and type", what, in, job, attempt)
	}
}

// launchFindDescribeTerminate: launch → find → describe → terminate →
// find after terminate, and terminate again.
func launchFindDescribeTerminate(t *testing.T, b cloud.Backend) {
	ctx := context.Background()
	res := launch(t, b, "job-ct", 1)
	in := res.Instance
	checkAttempt(t, "launched", in, "job-ct", 1)
	if res.Found || in.Gone() || in.LaunchTime.IsZero() {
		t.Errorf("launched: found %v, %+v; want a new live instance with its launch time", res.Found, in)
	}
	if n := len(res.Attempts); n == 0 || res.Attempts[n-1].InstanceID != in.ID || res.Attempts[n-1].Code != "" {
		t.Errorf("launch attempts %v: want the last one to have launched %s", res.Attempts, in.ID)
	}
	for _, q := range []cloud.Query{{}, {JobID: "job-ct", Attempt: 1}, {OwnOnly: true}, {OwnOnly: true, Ended: true}} {
		got := find(t, b, q)
		if len(got) != 1 {
			t.Fatalf("Find %+v = %v, want only %s", q, got, in.ID)
		}
		checkAttempt(t, "found", got[in.ID], "job-ct", 1)
	}
	d, err := b.Describe(ctx, in.ID)
	if err != nil {
		t.Fatalf("Describe: %v", err)
	}
	checkAttempt(t, "described", d, "job-ct", 1)
	if d.Backend != in.Backend || d.Type != in.Type || d.Spot != in.Spot {
		t.Errorf("described %+v, launched %+v", d, in)
	}
	if err := b.Terminate(ctx, in.ID); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	if d, err := b.Describe(ctx, in.ID); err == nil && !d.Gone() || err != nil && !errors.Is(err, cloud.ErrNotFound) {
		t.Errorf("described after terminate: %+v, %v; want gone or not found", d, err)
	}
	for _, q := range []cloud.Query{{}, {JobID: "job-ct", Attempt: 1}, {OwnOnly: true}} {
		if got := find(t, b, q); len(got) != 0 {
			t.Errorf("Find %+v after terminate = %v, want none", q, got)
		}
	}
	for id, e := range find(t, b, cloud.Query{OwnOnly: true, Ended: true}) {
		if id != in.ID || !e.Gone() {
			t.Errorf("Find with ended after terminate: %+v, want at most %s, gone", e, in.ID)
		}
	}
	if err := b.Terminate(ctx, in.ID); err != nil {
		t.Errorf("Terminate again: %v, want nil (idempotent)", err)
	}
}

// launchTwice: one instance per attempt; the second launch finds it.
func launchTwice(t *testing.T, b cloud.Backend) {
	first := launch(t, b, "job-twice", 1)
	again := launch(t, b, "job-twice", 1)
	if !again.Found || again.Instance.ID != first.Instance.ID {
		t.Fatalf("second launch: found %v %s, want found %s", again.Found, again.Instance.ID, first.Instance.ID)
	}
	checkAttempt(t, "found again", again.Instance, "job-twice", 1)
	if got := find(t, b, cloud.Query{JobID: "job-twice", Attempt: 1}); len(got) != 1 {
		t.Fatalf("instances of the attempt: %v, want one", got)
	}
}

// attemptsApart: two attempts of one job are two instances, found apart.
func attemptsApart(t *testing.T, b cloud.Backend) {
	a1 := launch(t, b, "job-apart", 1).Instance
	a2 := launch(t, b, "job-apart", 2).Instance
	if a1.ID == a2.ID {
		t.Fatalf("attempts 1 and 2 share instance %s", a1.ID)
	}
	for n, want := range map[int]string{1: a1.ID, 2: a2.ID} {
		got := find(t, b, cloud.Query{JobID: "job-apart", Attempt: n})
		if len(got) != 1 || got[want].ID != want {
			t.Errorf("attempt %d: %v, want only %s", n, got, want)
		}
	}
	if got := find(t, b, cloud.Query{JobID: "job-apart", Attempt: 3}); len(got) != 0 {
		t.Errorf("attempt 3: %v, want none", got)
	}
	if got := find(t, b, cloud.Query{}); len(got) != 2 {
		t.Errorf("all: %v, want both", got)
	}
}

// invalidRequest: a request without a job or attempt launches nothing.
func invalidRequest(t *testing.T, b cloud.Backend) {
	ctx := context.Background()
	for _, req := range []cloud.LaunchRequest{{Attempt: 1, GPUs: 1}, {JobID: "job-bad", GPUs: 1}, {JobID: "job-bad", Attempt: 1, GPUs: -1}} {
		if _, err := b.Launch(ctx, req); err == nil {
			t.Errorf("Launch %+v: no error", req)
		}
	}
	if got := find(t, b, cloud.Query{Ended: true}); len(got) != 0 {
		t.Errorf("launched %v", got)
	}
}

// noFit: a GPU request no type holds is ErrNoFit, not ErrNoCapacity.
func noFit(t *testing.T, b cloud.Backend) {
	_, err := b.Launch(context.Background(), cloud.LaunchRequest{JobID: "job-big", Attempt: 1, GPUs: 1024})
	if !errors.Is(err, cloud.ErrNoFit) || errors.Is(err, cloud.ErrNoCapacity) {
		t.Fatalf("Launch of 1024 GPUs: %v, want ErrNoFit", err)
	}
}

// unknownInstance: Describe says ErrNotFound, Terminate succeeds.
func unknownInstance(t *testing.T, b cloud.Backend) {
	ctx := context.Background()
	if _, err := b.Describe(ctx, UnknownID); !errors.Is(err, cloud.ErrNotFound) {
		t.Errorf("Describe unknown: %v, want ErrNotFound", err)
	}
	if err := b.Terminate(ctx, UnknownID); err != nil {
		t.Errorf("Terminate unknown: %v, want nil", err)
	}
}

// priceAndCost: a launched instance has a price; cost grows with time, is
// > 0 for a priced hour and 0 unpriced.
func priceAndCost(t *testing.T, b cloud.Backend) {
	in := launch(t, b, "job-price", 1).Instance
	p := b.Price(in)
	if !(p > 0) {
		t.Fatalf("Price(%+v) = %v, want > 0", in, p)
	}
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	hour, minute := b.Cost(t0, t0.Add(time.Hour), p), b.Cost(t0, t0.Add(time.Minute), p)
	if !(hour > 0) || hour < minute || hour > 2*p {
		t.Errorf("Cost of an hour %v, of a minute %v at $%v/h", hour, minute, p)
	}
	if c := b.Cost(t0, t0.Add(time.Hour), 0); c != 0 {
		t.Errorf("Cost unpriced = %v, want 0", c)
	}
}
