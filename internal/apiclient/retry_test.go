package apiclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// TestKeyedWriteSentAgain: a submit with an Idempotency-Key that got no
// answer (the connection dropped) and then a 503 outcome_unknown is sent
// again with the same key until it gets its answer; one without a key is
// sent once.
func TestKeyedWriteSentAgain(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		n := len(keys)
		mu.Unlock()
		switch n {
		case 1: // no answer at all
			hj, _ := w.(http.Hijacker)
			conn, _, _ := hj.Hijack()
			_ = conn.Close()
		case 2:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":"Redis did not answer the write","code":"outcome_unknown"}`))
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(`{"id":"j-0000000000000001","state":"queued"}`))
		}
	}))
	defer srv.Close()
	sent := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), keys...)
	}
	c := New(srv.URL, "", nil)
	job, err := c.Submit(context.Background(), []byte(`{}`), "K1", false)
	if err != nil || job.ID != "j-0000000000000001" {
		t.Fatalf("submit: %+v %v", job, err)
	}
	if k := sent(); len(k) != 3 || k[0] != "K1" || k[1] != "K1" || k[2] != "K1" {
		t.Fatalf("requests' keys %q, want K1 three times", k)
	}
	// Without a key: sent once, the dropped connection is the answer.
	mu.Lock()
	keys = nil
	mu.Unlock()
	if _, err := c.Submit(context.Background(), []byte(`{}`), "", false); err == nil || len(sent()) != 1 {
		t.Fatalf("a submit without a key: %v after %d requests, want an error after 1", err, len(sent()))
	}
}
