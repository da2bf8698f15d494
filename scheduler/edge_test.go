package scheduler_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/apiclient"
	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/ledger/ledgertest"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/scheduler"
	"github.com/lathe-ml/lathe/scheduler/api"
	"github.com/lathe-ml/lathe/scheduler/apitest"
	"github.com/lathe-ml/lathe/scheduler/plane"
)

// The API's edge (issue #11): slow clients, cross-site requests, DNS
// rebinding, team isolation on reads, and bad query values. Every test
// runs the real handler (most of them the real http.Server that
// Scheduler.Start runs) against a real redis-server.

// startAPI runs a scheduler with cfg on 127.0.0.1:0 through Start (the real
// http.Server with its timeouts) and returns it and its address.
func startAPI(t testing.TB, cfg scheduler.Config, acs ...api.Config) (bundle, string) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client()
	store := jobstore.New(rdb, jobstore.Config{})
	cfg.Logger = quiet
	if cfg.Defaults.OutputURI == "" {
		cfg.Defaults.OutputURI = "file://" + t.TempDir()
	}
	r := apitest.Start(t, rdb, store, cfg, apiConfig(acs))
	return bundle{ctx: context.Background(), srv: srv, rdb: rdb, store: store, s: r.S, url: r.URL}, r.API.Addr()
}

// waitClosed reads conn until the server closes it (EOF or a reset) and
// returns an error when it is still open at deadline.
func waitClosed(conn net.Conn, deadline time.Time) error {
	_ = conn.SetReadDeadline(deadline)
	_, err := io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("still open at the deadline")
	}
	return nil // EOF (nil from io.Copy) or a reset: closed by the server
}

// TestSlowClientsAreCutOff: sockets that send a request's headers and one
// byte of a 200,000-byte body, then stall (a slow-loris), are all closed by
// the server once its read timeout passes; so is a socket that never ends
// its headers, and an idle keep-alive connection.
func TestSlowClientsAreCutOff(t *testing.T) {
	_, addr := startAPI(t, scheduler.Config{}, api.Config{ReadHeaderTimeout: 300 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: time.Second, IdleTimeout: 500 * time.Millisecond})
	const n = 100
	conns := make([]net.Conn, 0, n+2)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := fmt.Fprintf(c, "POST /api/v1/jobs HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 200000\r\n\r\n{", addr); err != nil {
			t.Fatal(err)
		}
	}
	// Headers never finished.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conns = append(conns, c)
	fmt.Fprintf(c, "GET /api/v1/jobs HTTP/1.1\r\nHost: %s\r\n", addr)

	// A keep-alive connection after one good request.
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conns = append(conns, idle)
	fmt.Fprintf(idle, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	br := bufio.NewReader(idle)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Close {
		t.Fatalf("healthz: %d, close %v: want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
	}

	deadline := time.Now().Add(20 * time.Second)
	var wg sync.WaitGroup
	errs := make([]error, len(conns))
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c == idle {
				_ = c.SetReadDeadline(deadline)
				_, err := br.ReadByte()
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					errs[i] = fmt.Errorf("idle keep-alive connection still open at the deadline")
				} else if err == nil {
					errs[i] = fmt.Errorf("idle keep-alive connection got unasked bytes")
				}
				return
			}
			errs[i] = waitClosed(c, deadline)
		}()
	}
	wg.Wait()
	open := 0
	for i, err := range errs {
		if err != nil {
			open++
			if open <= 3 {
				t.Errorf("connection %d: %v", i, err)
			}
		}
	}
	if open > 0 {
		t.Fatalf("%d of %d slow or idle connections were never closed by the server", open, len(conns))
	}
}

// rawRequest sends head (a request's start line and headers, without the
// blank line) and then body on a fresh connection, and reads the answer;
// the server must answer and close the connection within 10 s although
// the client never sends the rest of the body its Content-Length promises.
func rawRequest(t *testing.T, addr, head, body string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	deadline := time.Now().Add(10 * time.Second)
	_ = c.SetDeadline(deadline)
	if _, err := io.WriteString(c, head+"\r\n\r\n"+body); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer while the body is unsent (the server is reading it): %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(strings.NewReader(string(b)))
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("bytes after the answer")
	} else if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%d answered, but the connection stays open (the server waits to drain the body)", resp.StatusCode)
	}
	return resp
}

// TestRefusalsCloseWithoutReadingBody: a 401, 403, 413 or 415 is answered
// at once and the connection closed, without waiting for the rest of a
// 200,000-byte body (the read timeout is a minute here, so only closing
// explains an answer within seconds).
func TestRefusalsCloseWithoutReadingBody(t *testing.T) {
	toks := []plane.Token{
		{Name: "view", Secret: "viewer-secret-0123456789", Role: plane.RoleViewer, Team: "a"},
		{Name: "alice", Secret: "alice-secret-0123456789", Role: plane.RoleSubmitter, Team: "a"},
	}
	_, addr := startAPI(t, scheduler.Config{}, api.Config{Tokens: toks, MaxBodyBytes: 4096, ReadTimeout: time.Minute, IdleTimeout: time.Minute})
	head := func(auth, ctype string) string {
		return fmt.Sprintf("POST /api/v1/jobs HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: %s\r\nContent-Length: 200000", addr, auth, ctype)
	}
	for _, c := range []struct {
		name, head, body string
		code             int
	}{
		{"unknown token", head("wrong-secret-0123456789", "application/json"), "{", 401},
		{"viewer submits", head("viewer-secret-0123456789", "application/json"), "{", 403},
		{"not json or yaml", head("alice-secret-0123456789", "text/plain"), "{", 415},
		{"over the limit", head("alice-secret-0123456789", "application/json"), `{"name":"` + strings.Repeat("a", 5000), 413},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp := rawRequest(t, addr, c.head, c.body)
			if resp.StatusCode != c.code {
				t.Fatalf("%d, want %d", resp.StatusCode, c.code)
			}
		})
	}
}

// TestFollowOutlivesTimeouts: a follow stream stays open past the server's
// read and write timeouts (its handler extends them) and still delivers
// the job's events, to the end of the job.
func TestFollowOutlivesTimeouts(t *testing.T) {
	b, _ := startAPI(t, scheduler.Config{}, api.Config{ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond})
	code, body := do(t, "POST", b.url+"/api/v1/jobs", goodSpec, nil)
	if code != 201 {
		t.Fatalf("submit: %d %s", code, body)
	}
	id := jobOf(t, body).ID
	if err := b.store.Dispatch(b.ctx, jobstore.DispatchParams{JobID: id, Attempt: 1, Node: "n1", Backend: "local", Capacity: 4}); err != nil {
		t.Fatal(err)
	}
	if out, _ := b.store.Claim(b.ctx, jobstore.ClaimParams{ID: id, Attempt: 1, Node: "n1", Incarnation: "i", Lease: time.Minute}); out != jobstore.Claimed {
		t.Fatal("claim")
	}
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", b.url+"/api/v1/jobs/"+id+"/events?follow=true", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("follow: %d", resp.StatusCode)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	// Two keepalives: the stream has been open for two of its 2-s waits,
	// far past the 300-ms timeouts.
	keepalives := 0
	for keepalives < 2 {
		l, ok := <-lines
		if !ok {
			t.Fatalf("the stream ended after %d keepalives (cut off by the server's timeouts)", keepalives)
		}
		if l == ": keepalive" {
			keepalives++
		}
	}
	if err := b.store.Finish(b.ctx, id, 1, jobstore.Ending{State: jobtype.StateSucceeded}); err != nil {
		t.Fatal(err)
	}
	sawEnd := false
	for l := range lines {
		if strings.HasPrefix(l, "data: ") && strings.Contains(l, `"to":"succeeded"`) {
			sawEnd = true
		}
	}
	if !sawEnd {
		t.Fatal("the stream ended without delivering the job's last state change")
	}
}

// auditSetup is a scheduler over a real Redis with a ledger, served by
// httptest on 127.0.0.1, with cfg's tokens.
func auditSetup(t *testing.T, cfg scheduler.Config, acs ...api.Config) bundle {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client()
	cfg.Ledger = ledgertest.New(t, rdb)
	cfg.Logger = quiet
	if cfg.Defaults.OutputURI == "" {
		cfg.Defaults.OutputURI = fileuri.FromPath(t.TempDir())
	}
	store := jobstore.New(rdb, jobstore.Config{})
	r := apitest.Serve(t, rdb, store, cfg, apiConfig(acs))
	return bundle{ctx: context.Background(), srv: srv, rdb: rdb, store: store, s: r.S, url: r.URL}
}

// TestCrossSiteRequestsRefused: in open mode (no tokens, loopback) a web
// page's requests are refused: a cross-site POST (text/plain, as a form or
// fetch may send without a preflight; or JSON with a foreign Origin, or
// Sec-Fetch-Site: cross-site) stores nothing, and a request whose Host is
// not a loopback name (DNS rebinding) reads nothing. The CLI's own
// requests (JSON, or no body) still work.
func TestCrossSiteRequestsRefused(t *testing.T) {
	b := auditSetup(t, scheduler.Config{})
	port := strings.TrimPrefix(b.url, "http://127.0.0.1:")
	evil := "http://evil.example"
	for _, c := range []struct {
		name string
		hdr  map[string]string
		code int
	}{
		{"text/plain with a foreign Origin", map[string]string{"Content-Type": "text/plain", "Origin": evil}, 403},
		{"text/plain without Origin", map[string]string{"Content-Type": "text/plain"}, 415},
		{"form", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415},
		{"no Content-Type with a body", map[string]string{"Content-Type": ""}, 415},
		{"JSON with a foreign Origin", map[string]string{"Content-Type": "application/json", "Origin": evil}, 403},
		{"JSON from another port of localhost", map[string]string{"Content-Type": "application/json", "Origin": "http://127.0.0.1:1"}, 403},
		{"Origin null", map[string]string{"Content-Type": "application/json", "Origin": "null"}, 403},
		{"Sec-Fetch-Site cross-site", map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, 403},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, body := do(t, "POST", b.url+"/api/v1/jobs", goodSpec, c.hdr)
			if code != c.code {
				t.Fatalf("%d, want %d: %s", code, c.code, body)
			}
		})
	}
	if n, _ := b.rdb.Keys(b.ctx, "lathe:job:*").Result(); len(n) != 0 {
		t.Fatalf("cross-site submits stored jobs: %v", n)
	}
	// What the CLI sends, and a same-origin page, still work.
	code, body := do(t, "POST", b.url+"/api/v1/jobs", goodSpec, map[string]string{"Content-Type": "application/json", "Origin": b.url})
	if code != 201 {
		t.Fatalf("same-origin JSON submit: %d %s", code, body)
	}
	id := jobOf(t, body).ID
	if code, body := do(t, "POST", b.url+"/api/v1/jobs?dry_run=true", "name: y\nbase_model: tiny-char\ndataset: file:///d\n", map[string]string{"Content-Type": "application/yaml"}); code != 200 {
		t.Fatalf("YAML dry run: %d %s", code, body)
	}
	if code, body := do(t, "POST", b.url+"/api/v1/jobs/"+id+"/cancel", "", map[string]string{"Content-Type": ""}); code != 202 {
		t.Fatalf("cancel with no body: %d %s", code, body)
	}
	if code, _ := do(t, "POST", b.url+"/api/v1/jobs/"+id+"/retry", "", map[string]string{"Content-Type": "", "Origin": evil}); code != 403 {
		t.Fatalf("cross-site retry with no body: %d, want 403", code)
	}

	// DNS rebinding: evil.example resolves to 127.0.0.1; the browser sends
	// its own name as Host.
	for _, host := range []string{"evil.example:" + port, "evil.example", "127.0.0.1.nip.io:" + port, "localhost.evil.example:" + port} {
		for _, p := range []string{"/api/v1/audit/export", "/api/v1/jobs", "/api/v1/jobs/" + id} {
			code, body := do(t, "GET", b.url+p, "", map[string]string{"Host": host})
			if code != http.StatusMisdirectedRequest || strings.Contains(string(body), id) {
				t.Fatalf("GET %s with Host %s: %d %s, want 421 and nothing of the job", p, host, code, body)
			}
		}
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST", "[::1]:" + port, "localhost"} {
		if code, body := do(t, "GET", b.url+"/api/v1/audit/export", "", map[string]string{"Host": host}); code != 200 || !strings.Contains(string(body), id) {
			t.Fatalf("export with Host %s: %d %s", host, code, body)
		}
	}

	// With tokens, the token is the defense; any Host name is fine (a
	// deployment behind a load balancer), a cross-site Origin is not.
	tb := auditSetup(t, scheduler.Config{}, api.Config{Tokens: []plane.Token{{Name: "root", Secret: "admin-secret-0123456789", Role: plane.RoleAdmin, Team: "ops"}}})
	auth := "Bearer admin-secret-0123456789"
	if code, body := do(t, "GET", tb.url+"/api/v1/jobs", "", map[string]string{"Host": "lathe.example.com", "Authorization": auth}); code != 200 {
		t.Fatalf("tokens, another Host: %d %s", code, body)
	}
	if code, _ := do(t, "POST", tb.url+"/api/v1/jobs", goodSpec, map[string]string{"Authorization": auth, "Origin": evil}); code != 403 {
		t.Fatalf("tokens, cross-site Origin: %d, want 403", code)
	}
}

// TestTeamReads: a token reads its own team's jobs only (404 for another
// team's, as for a job that does not exist), unless it is an admin or has
// all_teams; the list shows only what the token may read; an idempotency
// key never answers with another team's job (a token whose team changed
// gets a new job of its new team).
func TestTeamReads(t *testing.T) {
	toks := []plane.Token{
		{Name: "view", Secret: "viewer-secret-0123456789", Role: plane.RoleViewer, Team: "a"},
		{Name: "alice", Secret: "alice-secret-0123456789", Role: plane.RoleSubmitter, Team: "a"},
		{Name: "bob", Secret: "bob-secret-0123456789xx", Role: plane.RoleSubmitter, Team: "b"},
		{Name: "auditor", Secret: "auditor-secret-0123456", Role: plane.RoleViewer, Team: "x", AllTeams: true},
		{Name: "root", Secret: "admin-secret-0123456789", Role: plane.RoleAdmin, Team: "ops"},
	}
	if err := plane.ValidateTokens(toks); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	b := setup(t, scheduler.Config{Defaults: jobspec.Defaults{OutputURI: fileuri.FromPath(out)}}, api.Config{Tokens: toks})
	auth := func(secret string) map[string]string { return map[string]string{"Authorization": "Bearer " + secret} }
	alice, bob, view, auditor, root := auth(toks[1].Secret), auth(toks[2].Secret), auth(toks[0].Secret), auth(toks[3].Secret), auth(toks[4].Secret)

	code, body := do(t, "POST", b.url+"/api/v1/jobs", goodSpec, alice)
	if code != 201 {
		t.Fatalf("alice submit: %d %s", code, body)
	}
	ja := jobOf(t, body)
	code, body = do(t, "POST", b.url+"/api/v1/jobs", goodSpec, bob)
	if code != 201 {
		t.Fatalf("bob submit: %d %s", code, body)
	}
	jb := jobOf(t, body)
	// Alice's job ends with an artifact on disk.
	if err := b.store.Dispatch(b.ctx, jobstore.DispatchParams{JobID: ja.ID, Attempt: 1, Node: "n1", Backend: "local", Capacity: 4}); err != nil {
		t.Fatal(err)
	}
	if out, _ := b.store.Claim(b.ctx, jobstore.ClaimParams{ID: ja.ID, Attempt: 1, Node: "n1", Incarnation: "i", Lease: time.Minute}); out != jobstore.Claimed {
		t.Fatal("claim")
	}
	dir, _ := fileuri.Path(ja.OutputURI)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "adapter.bin"), []byte("team a's adapter"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := b.store.Finish(b.ctx, ja.ID, 1, jobstore.Ending{State: jobtype.StateSucceeded,
		Artifacts: []jobtype.Artifact{{Path: "adapter.bin", Bytes: 16}}}); err != nil {
		t.Fatal(err)
	}
	reads := []string{"", "/events", "/events?follow=true", "/artifacts/adapter.bin", "/gpu"}
	_, unknown := do(t, "GET", b.url+"/api/v1/jobs/j-00000000000000zz", "", root)
	unknownText := strings.ReplaceAll(string(unknown), "j-00000000000000zz", "ID")
	for _, p := range reads {
		for who, h := range map[string]map[string]string{"bob": bob} {
			code, body := do(t, "GET", b.url+"/api/v1/jobs/"+ja.ID+p, "", h)
			if code != 404 || strings.ReplaceAll(string(body), ja.ID, "ID") != unknownText {
				t.Errorf("%s reads team a's job%s: %d %s, want the 404 of an unknown job", who, p, code, body)
			}
		}
		for who, h := range map[string]map[string]string{"alice": alice, "view": view, "auditor": auditor, "root": root} {
			if code, body := do(t, "GET", b.url+"/api/v1/jobs/"+ja.ID+p, "", h); code != 200 {
				t.Errorf("%s reads team a's job%s: %d %s", who, p, code, body)
			}
		}
	}
	for _, p := range []string{"/cancel", "/retry"} {
		if code, body := do(t, "POST", b.url+"/api/v1/jobs/"+ja.ID+p, "", bob); code != 404 || strings.ReplaceAll(string(body), ja.ID, "ID") != unknownText {
			t.Errorf("bob %s team a's job: %d %s, want the 404 of an unknown job", p, code, body)
		}
	}
	list := func(h map[string]string, q string) []string {
		t.Helper()
		code, body := do(t, "GET", b.url+"/api/v1/jobs"+q, "", h)
		var l struct{ Jobs []jobtype.Job }
		if err := json.Unmarshal(body, &l); code != 200 || err != nil {
			t.Fatalf("list: %d %s", code, body)
		}
		var ids []string
		for _, j := range l.Jobs {
			ids = append(ids, j.ID)
		}
		return ids
	}
	if got := list(bob, ""); len(got) != 1 || got[0] != jb.ID {
		t.Errorf("bob's list: %v, want only %s", got, jb.ID)
	}
	if got := list(view, "?state=succeeded"); len(got) != 1 || got[0] != ja.ID {
		t.Errorf("viewer a's list of succeeded jobs: %v, want only %s", got, ja.ID)
	}
	if got := list(bob, "?state=succeeded"); len(got) != 0 {
		t.Errorf("bob's list of succeeded jobs: %v, want none", got)
	}
	if got := list(auditor, ""); len(got) != 2 {
		t.Errorf("all-teams viewer's list: %v, want both jobs", got)
	}
	if got := list(root, ""); len(got) != 2 {
		t.Errorf("admin's list: %v, want both jobs", got)
	}
	// A team's page is full although other teams' jobs lie between.
	for i := 0; i < 3; i++ {
		if code, body := do(t, "POST", b.url+"/api/v1/jobs", goodSpec, bob); code != 201 {
			t.Fatalf("bob submit: %d %s", code, body)
		}
	}
	code, body = do(t, "POST", b.url+"/api/v1/jobs", goodSpec, alice)
	if code != 201 {
		t.Fatalf("alice submit: %d %s", code, body)
	}
	ja2 := jobOf(t, body)
	if got := list(alice, "?limit=2"); len(got) != 2 || got[0] != ja2.ID || got[1] != ja.ID {
		t.Errorf("alice's page of 2: %v, want [%s %s]", got, ja2.ID, ja.ID)
	}

	// An idempotency key of a token whose team changed (the config was
	// edited) does not answer with the old team's job.
	code, body = do(t, "POST", b.url+"/api/v1/jobs", goodSpec, map[string]string{"Authorization": alice["Authorization"], "Idempotency-Key": "k1"})
	if code != 201 {
		t.Fatalf("alice keyed submit: %d %s", code, body)
	}
	keyed := jobOf(t, body)
	moved := append([]plane.Token(nil), toks...)
	moved[1].Team = "b"
	hs2 := httptest.NewServer(apitest.New(b.rdb, b.store, scheduler.Config{Logger: quiet, Defaults: jobspec.Defaults{OutputURI: fileuri.FromPath(out)}}, api.Config{Tokens: moved}).API.Handler())
	defer hs2.Close()
	for _, p := range []string{"/api/v1/jobs", "/api/v1/jobs/batch"} {
		spec := goodSpec
		key := "k1"
		if p == "/api/v1/jobs/batch" {
			spec = batchBody(goodSpec)
			// The batch's job 0 has key k1#0; store it as team a first.
			if code, body := do(t, "POST", b.url+p, spec, map[string]string{"Authorization": alice["Authorization"], "Idempotency-Key": "k2"}); code != 201 {
				t.Fatalf("alice keyed batch: %d %s", code, body)
			}
			key = "k2"
		}
		code, body = do(t, "POST", hs2.URL+p, spec, map[string]string{"Authorization": alice["Authorization"], "Idempotency-Key": key})
		if code != 201 || strings.Contains(string(body), keyed.ID) || strings.Contains(string(body), `"team":"a"`) || !strings.Contains(string(body), `"team":"b"`) {
			t.Errorf("%s: a key of team a's job, sent as team b: %d %s, want 201 and a new job of team b", p, code, body)
		}
	}
}

// TestEventsBadQuery: a bad after (or Last-Event-ID) or follow value is a
// 400 naming it, at once, with follow or without.
func TestEventsBadQuery(t *testing.T) {
	b := setup(t, scheduler.Config{})
	_, body := do(t, "POST", b.url+"/api/v1/jobs", goodSpec, nil)
	id := jobOf(t, body).ID
	c := &http.Client{Timeout: 10 * time.Second}
	for _, c2 := range []struct {
		query, lastID, field, value string
	}{
		{"?follow=true&after=garbage", "", "after", "garbage"},
		{"?after=garbage", "", "after", "garbage"},
		{"?follow=true&after=1-x", "", "after", "1-x"},
		{"?follow=true&after=99999999999999999999999", "", "after", "99999999999999999999999"},
		{"?follow=true&after=-1", "", "after", "-1"},
		{"?follow=true", "nope", "Last-Event-ID", "nope"},
		{"?follow=yes", "", "follow", "yes"},
	} {
		req, _ := http.NewRequest("GET", b.url+"/api/v1/jobs/"+id+"/events"+c2.query, nil)
		if c2.lastID != "" {
			req.Header.Set("Last-Event-ID", c2.lastID)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c2.query, err)
		}
		rb, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(rb), `"field":"`+c2.field+`"`) || !strings.Contains(string(rb), fmt.Sprintf(`"value":%q`, c2.value)) {
			t.Errorf("%s (Last-Event-ID %q): %d %s, want 400 naming %s=%s", c2.query, c2.lastID, resp.StatusCode, rb, c2.field, c2.value)
		}
	}
	for _, q := range []string{"?after=0", "?after=1-0", "?after=1733140000000", "?follow=false"} {
		if code, body := do(t, "GET", b.url+"/api/v1/jobs/"+id+"/events"+q, "", nil); code != 200 {
			t.Errorf("%s: %d %s", q, code, body)
		}
	}
}

// TestExplainRefusesNonFinite: POST /api/v1/route refuses a what-if that
// is not a finite number ≥ 0 (or not a duration), naming the field and the
// value, as the CLI refuses its --assume-* flags.
func TestExplainRefusesNonFinite(t *testing.T) {
	b := setup(t, scheduler.Config{})
	for _, q := range []string{"assume_spent=local=Inf", "assume_spent=local=%2BInf", "assume_spent=local=-Inf", "assume_spent=local=NaN",
		"assume_spent=local=-1", "assume_spent=local=1e400", "assume_spent=local=", "assume_wait=local=Inf", "assume_wait=local=NaN",
		"assume_wait=local=", "assume_wait=local=-1h", "assume_wait=local=1e400h", "assume_wait=local=999999999999d"} {
		code, body := do(t, "POST", b.url+"/api/v1/route?"+q, goodSpec, nil)
		field, value, _ := strings.Cut(q, "=")
		value = strings.ReplaceAll(value, "%2B", "+")
		if code != 400 || !strings.Contains(string(body), `"field":"`+field+`"`) || !strings.Contains(string(body), fmt.Sprintf(`"value":%q`, value)) {
			t.Errorf("%s: %d %s, want 400 naming %s and %s", q, code, body, field, value)
		}
	}
	for _, q := range []string{"assume_spent=local=0", "assume_spent=local=12.5", "assume_wait=local=3h", "assume_wait=local=1d"} {
		if code, body := do(t, "POST", b.url+"/api/v1/route?"+q, goodSpec, nil); code != 200 {
			t.Errorf("%s: %d %s", q, code, body)
		}
	}
}

// TestAPIClientPassesTheEdge: the CLI's client (internal/apiclient) against
// the real handler in open mode: what the CLI sends passes the content
// type, Origin and Host checks.
func TestAPIClientPassesTheEdge(t *testing.T) {
	b := auditSetup(t, scheduler.Config{})
	c := apiclient.New(b.url, "", nil)
	ctx := b.ctx
	j, err := c.Submit(ctx, []byte(goodSpec), "k", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubmitBatch(ctx, [][]byte{[]byte(goodSpec)}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Explain(ctx, []byte(goodSpec), apiclient.WhatIf{Wait: map[string]time.Duration{"local": time.Hour}, Spent: map[string]float64{"local": 12.5}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Retry(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := c.Follow(ctx, j.ID, "", func(jobtype.Event) error { n++; return nil }); err != nil || n == 0 {
		t.Fatalf("follow: %d events, %v", n, err)
	}
	if l, err := c.List(ctx, "", "", 10); err != nil || len(l.Jobs) != 2 {
		t.Fatalf("list: %+v, %v", l, err)
	}
	var sink strings.Builder
	if _, n, err := c.AuditExport(ctx, &sink); err != nil || n == 0 {
		t.Fatalf("audit export: %d records, %v", n, err)
	}
}

// TestDryRunValueStrict: dry_run must be true or false; any other value
// (dry_run=1 meant as a dry run) is a 400 naming it, and nothing is stored.
func TestDryRunValueStrict(t *testing.T) {
	b := setup(t, scheduler.Config{})
	for _, p := range []string{"/api/v1/jobs?dry_run=1", "/api/v1/jobs?dry_run=yes", "/api/v1/jobs/batch?dry_run=1"} {
		body := goodSpec
		if strings.Contains(p, "batch") {
			body = batchBody(goodSpec)
		}
		code, out := do(t, "POST", b.url+p, body, nil)
		_, v, _ := strings.Cut(p, "=")
		if code != 400 || !strings.Contains(string(out), `"field":"dry_run"`) || !strings.Contains(string(out), `"value":"`+v+`"`) {
			t.Errorf("%s: %d %s, want 400 naming dry_run=%s", p, code, out, v)
		}
	}
	if n, _ := b.rdb.Keys(b.ctx, "lathe:job:*").Result(); len(n) != 0 {
		t.Fatalf("submits with a bad dry_run stored jobs: %v", n)
	}
	if code, out := do(t, "POST", b.url+"/api/v1/jobs?dry_run=false", goodSpec, nil); code != 201 {
		t.Fatalf("dry_run=false: %d %s", code, out)
	}
}
