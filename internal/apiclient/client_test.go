package apiclient

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// These tests run the client against httptest servers that stand in for
// the scheduler: each implements only the slice of docs/api.md it tests.
// The scheduler's own end-to-end tests cover the real server.

func newTestClient(t *testing.T, h http.Handler) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c := New(srv.URL, "", nil)
	c.followBackoff = 0
	return c
}

func sseEvent(w io.Writer, id, typ, data string) {
	fmt.Fprintf(w, "id: %s\nevent: %s\ndata: %s\n\n", id, typ, data)
}

func eventJSON(id, typ string, data string) string {
	return fmt.Sprintf(`{"id":%q,"time":"2025-01-02T03:04:05Z","type":%q,"attempt":1,"data":%s}`, id, typ, data)
}

func TestFollowParsesEvents(t *testing.T) {
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/jobs/j-1/events" || r.URL.Query().Get("follow") != "true" {
			t.Errorf("request %s", r.URL)
		}
		if got := r.Header.Get("Accept"); got != "text/event-stream" {
			t.Errorf("Accept = %q", got)
		}
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		io.WriteString(w, ": keep-alive\n\n")
		io.WriteString(w, "event: error\ndata: \"redis: i/o timeout\"\n\n") // the scheduler's own hiccup
		sseEvent(w, "1-0", "state", eventJSON("1-0", "state", `{"to":"running"}`))
		// CRLF line ends, data split over two lines, no id inside the JSON.
		io.WriteString(w, "id: 2-0\r\nevent: progress\r\ndata: {\"type\":\"progress\",\r\ndata: \"data\":{\"step\":1,\"total_steps\":2,\"loss\":2.5}}\r\n\r\n")
		sseEvent(w, "3-0", "log", eventJSON("3-0", "log", `{"stream":"stdout","line":"hello"}`))
		sseEvent(w, "4-0", "state", eventJSON("4-0", "state", `{"from":"running","to":"succeeded"}`))
	}))
	var got []jobtype.Event
	err := c.Follow(context.Background(), "j-1", "", func(ev jobtype.Event) error {
		got = append(got, ev)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, ev := range got {
		ids = append(ids, ev.ID+"/"+ev.Type)
	}
	if want := "1-0/state 2-0/progress 3-0/log 4-0/state"; strings.Join(ids, " ") != want {
		t.Fatalf("events = %v, want %s", ids, want)
	}
	var p jobtype.Progress
	if err := json.Unmarshal(got[1].Data, &p); err != nil || p.Step != 1 || p.Loss != 2.5 {
		t.Errorf("progress data = %s (%v)", got[1].Data, err)
	}
}

// TestFollowReconnects drops the first stream mid-way (the handler aborts
// the connection, so the chunked body never ends cleanly) and checks that
// Follow resumes with after= the last event it delivered, delivering every
// event once.
func TestFollowReconnects(t *testing.T) {
	var (
		mu     sync.Mutex
		afters []string
	)
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		afters = append(afters, r.URL.Query().Get("after"))
		n := len(afters)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		switch n {
		case 1:
			sseEvent(w, "1-0", "state", eventJSON("1-0", "state", `{"to":"running"}`))
			sseEvent(w, "2-0", "progress", eventJSON("2-0", "progress", `{"step":1}`))
			io.WriteString(w, "id: 3-0\nevent: progress\n") // half an event
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		case 2:
			sseEvent(w, "3-0", "progress", eventJSON("3-0", "progress", `{"step":2}`))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		default:
			sseEvent(w, "4-0", "state", eventJSON("4-0", "state", `{"to":"succeeded"}`))
		}
	}))
	var ids []string
	err := c.Follow(context.Background(), "j-1", "", func(ev jobtype.Event) error {
		ids = append(ids, ev.ID)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ids, ","); got != "1-0,2-0,3-0,4-0" {
		t.Errorf("events = %s, want each once, in order", got)
	}
	if got := strings.Join(afters, ","); got != ",2-0,3-0" {
		t.Errorf("after= of each connection = %q, want \",2-0,3-0\"", got)
	}
}

func TestFollowGivesUp(t *testing.T) {
	var conns atomic.Int32
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conns.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}))
	err := c.Follow(context.Background(), "j-1", "5-0", func(jobtype.Event) error { return nil })
	if !errors.Is(err, errBroken) || !strings.Contains(err.Error(), "gave up") {
		t.Fatalf("err = %v, want a broken stream given up on", err)
	}
	if n := int(conns.Load()); n != c.followRetries+1 {
		t.Errorf("%d connections, want %d", n, c.followRetries+1)
	}
}

func TestFollowFirstConnectFailsFast(t *testing.T) {
	c := New(closedURL(t), "", nil)
	err := c.Follow(context.Background(), "j-1", "", func(jobtype.Event) error { return nil })
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("err = %v, want ErrUnreachable", err)
	}
}

func TestFollowCallbackStops(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 1; i <= 3; i++ {
			id := fmt.Sprintf("%d-0", i)
			sseEvent(w, id, "log", eventJSON(id, "log", `{"line":"x"}`))
		}
	})
	c := newTestClient(t, h)
	n := 0
	err := c.Follow(context.Background(), "j-1", "", func(jobtype.Event) error {
		n++
		return ErrStop
	})
	if err != nil || n != 1 {
		t.Errorf("ErrStop: err %v after %d events, want nil after 1", err, n)
	}
	boom := errors.New("boom")
	err = c.Follow(context.Background(), "j-1", "", func(jobtype.Event) error { return boom })
	if err != boom {
		t.Errorf("err = %v, want the callback's own error", err)
	}
}

func TestAPIErrors(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		want   APIError
	}{
		{400, `{"error":"validation failed","code":"invalid","fields":[{"field":"lora.rank","value":"-4","message":"must be between 1 and 1024"}]}`,
			APIError{Status: 400, Code: CodeInvalid, Message: "validation failed"}},
		{404, `{"error":"no such job","code":"not_found"}`, APIError{Status: 404, Code: CodeNotFound, Message: "no such job"}},
		{409, `{"error":"job already ended","code":"conflict","state":"succeeded"}`,
			APIError{Status: 409, Code: CodeConflict, Message: "job already ended", State: "succeeded"}},
		{503, `{"error":"redis: connection refused","code":"unavailable"}`,
			APIError{Status: 503, Code: CodeUnavailable, Message: "redis: connection refused"}},
		{502, `<html>bad gateway</html>`, APIError{Status: 502, Message: "<html>bad gateway</html>"}},
	} {
		c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(tc.status)
			io.WriteString(w, tc.body)
		}))
		_, err := c.Get(context.Background(), "j-1")
		var ae *APIError
		if !errors.As(err, &ae) {
			t.Fatalf("%d: err = %v, want *APIError", tc.status, err)
		}
		if ae.Status != tc.want.Status || ae.Code != tc.want.Code || ae.Message != tc.want.Message || ae.State != tc.want.State {
			t.Errorf("%d: got %+v, want %+v", tc.status, *ae, tc.want)
		}
		if errors.Is(err, ErrUnreachable) {
			t.Errorf("%d: an answer is not ErrUnreachable", tc.status)
		}
		if tc.status == 400 && (len(ae.Fields) != 1 || ae.Fields[0].Field != "lora.rank" || ae.Fields[0].Value != "-4") {
			t.Errorf("fields = %+v", ae.Fields)
		}
		if got := ae.Unavailable(); got != (tc.status == 503) {
			t.Errorf("%d: Unavailable() = %v", tc.status, got)
		}
	}
}

func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

func TestUnreachable(t *testing.T) {
	c := New(closedURL(t), "", nil)
	_, err := c.Get(context.Background(), "j-1")
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("err = %v, want ErrUnreachable", err)
	}
	var ae *APIError
	if errors.As(err, &ae) {
		t.Errorf("no answer is not an *APIError")
	}
}

// TestRequestTimeout: a scheduler that accepts but never answers is
// unreachable after the request timeout.
func TestRequestTimeout(t *testing.T) {
	release := make(chan struct{})
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
	}))
	defer close(release)
	c.requestTimeout = 20 * time.Millisecond
	_, err := c.Queues(context.Background())
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("err = %v, want ErrUnreachable", err)
	}
}

func TestCallerCancelIsNotUnreachable(t *testing.T) {
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.Get(ctx, "j-1")
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnreachable) {
		t.Fatalf("err = %v, want context.Canceled only", err)
	}
}

func TestSubmitRequest(t *testing.T) {
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch {
		case r.Method != http.MethodPost || r.URL.Path != "/api/v1/jobs":
			t.Errorf("request %s %s", r.Method, r.URL)
		case r.Header.Get("Authorization") != "Bearer s3cret":
			t.Errorf("Authorization = %q", r.Header.Get("Authorization"))
		case r.Header.Get("Content-Type") != "application/json":
			t.Errorf("Content-Type = %q", r.Header.Get("Content-Type"))
		case string(body) != `{"name":"x"}`:
			t.Errorf("body = %s", body)
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("dry_run") == "true" {
			io.WriteString(w, `{"dry_run":true,"spec":{"name":"x","base_model":"tiny-char"}}`)
			return
		}
		if k := r.Header.Get("Idempotency-Key"); k != "k1" {
			t.Errorf("Idempotency-Key = %q", k)
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"j-1","name":"x","state":"queued"}`)
	}))
	c.token = "s3cret"
	job, err := c.Submit(context.Background(), []byte(`{"name":"x"}`), "k1", false)
	if err != nil || job.ID != "j-1" || job.State != jobtype.StateQueued {
		t.Fatalf("Submit = %+v, %v", job, err)
	}
	job, err = c.Submit(context.Background(), []byte(`{"name":"x"}`), "", true)
	if err != nil || job.ID != "" || job.Spec.BaseModel != "tiny-char" {
		t.Fatalf("dry run = %+v, %v", job, err)
	}
}

func TestNoTokenNoAuthorization(t *testing.T) {
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h, ok := r.Header["Authorization"]; ok {
			t.Errorf("Authorization sent without a token: %q", h)
		}
		io.WriteString(w, `{"jobs":[],"next_cursor":""}`)
	}))
	if _, err := c.List(context.Background(), "", "", 0); err != nil {
		t.Fatal(err)
	}
}

func TestArtifact(t *testing.T) {
	content := []byte("adapter weights")
	h := sha256.Sum256(content)
	want := hex.EncodeToString(h[:])
	announce := want
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.EscapedPath() != "/api/v1/jobs/j-1/artifacts/adapter%20model.bin" {
			t.Errorf("path %s", r.URL.EscapedPath())
		}
		w.Header().Set("X-Lathe-SHA256", announce)
		w.Write(content)
	}))
	var buf bytes.Buffer
	got, err := c.Artifact(context.Background(), "j-1", "adapter model.bin", &buf)
	if err != nil || got != want || buf.String() != string(content) {
		t.Fatalf("Artifact = %s %q, %v; want %s", got, buf.String(), err, want)
	}
	announce = strings.Repeat("0", 64)
	_, err = c.Artifact(context.Background(), "j-1", "adapter model.bin", io.Discard)
	if !errors.Is(err, ErrChecksum) {
		t.Errorf("err = %v, want ErrChecksum when the bytes do not match the header", err)
	}
}

func TestHealth(t *testing.T) {
	status, body := 200, `{"ok":true,"redis":"up"}`
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			t.Errorf("path %s", r.URL.Path)
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	h, err := c.Health(context.Background())
	if err != nil || !h.OK || h.Redis != "up" {
		t.Fatalf("Health = %+v, %v", h, err)
	}
	status, body = 503, `{"ok":false,"redis":"down: connection refused"}`
	h, err = c.Health(context.Background())
	var ae *APIError
	if !errors.As(err, &ae) || ae.Code != CodeUnavailable || h == nil || h.OK {
		t.Fatalf("Health = %+v, %v; want the health and a 503 unavailable", h, err)
	}
}
