package imdsfake

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"
)

func do(t *testing.T, method, url string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestTokenThenNoticeAfterInterrupt(t *testing.T) {
	s := New()
	defer s.Close()

	if code, _ := do(t, http.MethodPut, s.URL()+TokenPath, nil); code != http.StatusBadRequest {
		t.Fatalf("token without TTL: %d, want 400", code)
	}
	if code, _ := do(t, http.MethodGet, s.URL()+TokenPath, map[string]string{TTLHeader: "60"}); code != http.StatusMethodNotAllowed {
		t.Fatalf("GET token: %d, want 405", code)
	}
	code, tok := do(t, http.MethodPut, s.URL()+TokenPath, map[string]string{TTLHeader: "60"})
	if code != http.StatusOK || tok == "" {
		t.Fatalf("token: %d %q", code, tok)
	}
	if code, _ := do(t, http.MethodGet, s.URL()+InstanceActionPath, nil); code != http.StatusUnauthorized {
		t.Fatalf("instance-action without token: %d, want 401", code)
	}
	if code, _ := do(t, http.MethodGet, s.URL()+InstanceActionPath, map[string]string{TokenHeader: "nope"}); code != http.StatusUnauthorized {
		t.Fatalf("instance-action with a wrong token: %d, want 401", code)
	}
	if got := s.Rejected(); got != 3 {
		t.Fatalf("Rejected = %d, want 3", got)
	}
	if code, _ := do(t, http.MethodGet, s.URL()+InstanceActionPath, map[string]string{TokenHeader: tok}); code != http.StatusNotFound {
		t.Fatalf("instance-action before Interrupt: %d, want 404", code)
	}
	when := time.Date(2026, 12, 2, 15, 4, 5, 0, time.UTC)
	s.Interrupt("terminate", when)
	code, body := do(t, http.MethodGet, s.URL()+InstanceActionPath, map[string]string{TokenHeader: tok})
	if code != http.StatusOK {
		t.Fatalf("instance-action after Interrupt: %d %s", code, body)
	}
	var n struct{ Action, Time string }
	if err := json.Unmarshal([]byte(body), &n); err != nil {
		t.Fatal(err)
	}
	if n.Action != "terminate" || n.Time != "2026-12-02T15:04:05Z" {
		t.Fatalf("notice = %+v", n)
	}
	if got := s.Polls(); got != 2 {
		t.Fatalf("Polls = %d, want 2", got)
	}
}

func TestTokenExpires(t *testing.T) {
	s := New()
	defer s.Close()
	_, tok := do(t, http.MethodPut, s.URL()+TokenPath, map[string]string{TTLHeader: "1"})
	s.mu.Lock()
	s.tokens[tok] = time.Now().Add(-time.Second) // expire it without waiting
	s.mu.Unlock()
	if code, _ := do(t, http.MethodGet, s.URL()+InstanceActionPath, map[string]string{TokenHeader: tok}); code != http.StatusUnauthorized {
		t.Fatalf("expired token: %d, want 401", code)
	}
}

func TestPollSeen(t *testing.T) {
	s := New()
	defer s.Close()
	seen := s.PollSeen()
	_, tok := do(t, http.MethodPut, s.URL()+TokenPath, map[string]string{TTLHeader: "60"})
	do(t, http.MethodGet, s.URL()+InstanceActionPath, map[string]string{TokenHeader: tok})
	select {
	case <-seen:
	default:
		t.Fatal("PollSeen channel not closed after a poll")
	}
}
