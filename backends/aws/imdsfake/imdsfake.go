// Package imdsfake is a FAKE of the EC2 instance metadata service (IMDSv2),
// for tests only: an httptest server that answers the two calls Lathe's
// agent makes, so that a test can play a spot interruption on this machine.
//
// It serves:
//   - PUT /latest/api/token with the header X-aws-ec2-metadata-token-ttl-seconds
//     (1–21600): a fresh session token, valid for that many seconds. A missing
//     or bad TTL is 400, another method 405, as on EC2.
//   - GET /latest/meta-data/spot/instance-action with the header
//     X-aws-ec2-metadata-token: 404 until [Server.Interrupt] is called, then
//     the JSON {"action":"terminate","time":"2026-…Z"}. A missing, unknown or
//     expired token is 401 (IMDSv2 required), as on EC2.
//
// Everything else is 404. It is not github.com/aws/amazon-ec2-metadata-mock
// and models nothing beyond the above (no hop limit, no X-Forwarded-For
// refusal, no other metadata).
package imdsfake

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"
)

// Header names and paths of IMDSv2.
const (
	TokenPath          = "/latest/api/token"
	InstanceActionPath = "/latest/meta-data/spot/instance-action"
	TTLHeader          = "X-aws-ec2-metadata-token-ttl-seconds"
	TokenHeader        = "X-aws-ec2-metadata-token"
)

// Server is a running fake IMDS. Its methods are safe for concurrent use.
type Server struct {
	srv *httptest.Server

	mu       sync.Mutex
	tokens   map[string]time.Time // token → expiry
	notice   []byte               // nil: no interruption yet
	polls    int                  // instance-action GETs with a valid token
	rejected int                  // requests refused for a token problem
	changed  chan struct{}        // closed and replaced on each poll
}

// New starts a fake IMDS on a loopback port. Call Close when done.
func New() *Server {
	s := &Server{tokens: map[string]time.Time{}, changed: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc(TokenPath, s.token)
	mux.HandleFunc(InstanceActionPath, s.instanceAction)
	s.srv = httptest.NewServer(mux)
	return s
}

// URL is the base URL to use in place of http://169.254.169.254.
func (s *Server) URL() string { return s.srv.URL }

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// Interrupt makes the instance-action endpoint answer with a spot
// interruption notice: action ("terminate", "stop" or "hibernate") at t,
// written like EC2 does ("2026-12-02T15:04:05Z").
func (s *Server) Interrupt(action string, t time.Time) {
	b, _ := json.Marshal(map[string]string{"action": action, "time": t.UTC().Format("2006-01-02T15:04:05Z")})
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notice = b
}

// ExpireTokens makes every token handed out so far invalid, as if their TTL
// had passed.
func (s *Server) ExpireTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.tokens)
}

// Polls is how many instance-action requests with a valid token were served.
func (s *Server) Polls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.polls
}

// Rejected is how many requests were refused for a missing, unknown or
// expired token (or a bad TTL).
func (s *Server) Rejected() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rejected
}

// PollSeen returns a channel closed at the next instance-action request
// served with a valid token, for tests that wait on a condition.
func (s *Server) PollSeen() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut {
		w.Header().Set("Allow", http.MethodPut)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	ttl, err := strconv.Atoi(r.Header.Get(TTLHeader))
	if err != nil || ttl < 1 || ttl > 21600 {
		s.mu.Lock()
		s.rejected++
		s.mu.Unlock()
		http.Error(w, "missing or invalid "+TTLHeader, http.StatusBadRequest)
		return
	}
	var b [24]byte
	_, _ = rand.Read(b[:])
	tok := hex.EncodeToString(b[:])
	s.mu.Lock()
	s.tokens[tok] = time.Now().Add(time.Duration(ttl) * time.Second)
	s.mu.Unlock()
	w.Header().Set(TTLHeader, strconv.Itoa(ttl))
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte(tok))
}

func (s *Server) instanceAction(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	s.mu.Lock()
	exp, ok := s.tokens[r.Header.Get(TokenHeader)]
	if !ok || time.Now().After(exp) {
		s.rejected++
		s.mu.Unlock()
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	s.polls++
	close(s.changed)
	s.changed = make(chan struct{})
	notice := s.notice
	s.mu.Unlock()
	if notice == nil {
		http.Error(w, "Not Found", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write(notice)
}
