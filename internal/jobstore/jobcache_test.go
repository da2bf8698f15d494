package jobstore_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
)

// TestGetManyCachedIsGetMany: after every kind of write between two reads
// (a route and hold set by SetRoute, which keeps updated_at; one field
// written by a bare HSET, which bumps nothing; a cancel; a cancel and a
// delete) a read
// through a JobCache returns exactly what GetMany returns, and the cache
// forgets the jobs the read no longer names. A cached record is never
// served once any of its fields changed.
func TestGetManyCachedIsGetMany(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	s := jobstore.New(rdb, jobstore.Config{})
	ctx := context.Background()
	var ids []string
	for _, name := range []string{"routed", "hset", "cancelled", "deleted", "unchanged", "dropped"} {
		j, _, err := s.Create(ctx, jobstore.NewJob{Spec: spec(name, jobspec.PriorityNormal), OutputURI: "file:///out/{id}"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	c := &jobstore.JobCache{}
	same := func(step string, ids []string) []*jobtype.Job {
		t.Helper()
		got, err := s.GetManyCached(ctx, c, ids)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		want, err := s.GetMany(ctx, ids)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: GetManyCached\n%+v\nGetMany\n%+v", step, got, want)
		}
		return got
	}
	first := same("first read", ids)

	if err := s.SetRoute(ctx, ids[0], &jobtype.RouteInfo{Backend: "local", Kind: "local", Attempt: 1}, "held by the test"); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, s.Prefix()+"job:"+ids[1], "reason", "written by hand").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Cancel(ctx, ids[2]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Cancel(ctx, ids[3]); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, ids[3]); err != nil {
		t.Fatal(err)
	}
	second := same("after the writes", ids[:5])
	if len(second) != 4 {
		t.Fatalf("%d records after the delete, want 4", len(second))
	}
	if second[0].Held != "held by the test" || second[0].Route == nil || second[1].Reason != "written by hand" ||
		second[2].State != jobtype.StateCancelled {
		t.Fatalf("a write was not seen: held %q route %+v, reason %q, state %s", second[0].Held, second[0].Route, second[1].Reason, second[2].State)
	}
	if second[3] != first[4] {
		t.Error("the unchanged record was decoded again, not served from the cache")
	}
	if c.Len() != 4 {
		t.Fatalf("the cache holds %d records, want the 4 the last read found", c.Len())
	}
	same("a job named twice", []string{ids[4], ids[4]})
	if c.Len() != 1 {
		t.Fatalf("the cache holds %d records, want 1", c.Len())
	}
}
