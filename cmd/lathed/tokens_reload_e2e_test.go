package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
)

// TestTokensReloadOnSIGHUP runs the real `lathed up` with two tokens, one
// inline in the config and one in auth.tokens_file. A token revoked by
// editing the tokens file and sending SIGHUP gets 401 on its next request,
// while its request already in flight (past its headers, reading its body)
// is answered as before; a token added to the config works at once. A
// reload whose tokens fail to load, and one that would leave no token (an
// open API), keep the tokens in force and log why.
func TestTokensReloadOnSIGHUP(t *testing.T) {
	lathed, _ := binaries(t)
	const (
		alice = "alice-secret-0123456789"
		bob   = "bob-secret-0123456789"
		carol = "carol-secret-0123456789"
	)
	dir := t.TempDir()
	cfg, tokensFile := filepath.Join(dir, "lathe.yaml"), filepath.Join(dir, "tokens.yaml")
	write := func(path, body string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	config := func(inline ...string) string {
		return "auth:\n  tokens_file: tokens.yaml\n  tokens:\n" + strings.Join(inline, "")
	}
	aliceLine := "    - {name: alice, token: " + alice + ", role: admin, team: ops}\n"
	carolLine := "    - {name: carol, token: " + carol + ", role: viewer, team: a}\n"
	write(cfg, config(aliceLine))
	write(tokensFile, "tokens:\n  - {name: bob, token: "+bob+", role: submitter, team: b}\n")

	addr := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
	base := "http://" + addr
	d := startDaemon(t, lathed, "up", "--config", cfg, "--listen", addr, "--data-dir", filepath.Join(dir, "data"))
	waitHTTP(t, base, d)

	status := func(token string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, base+"/api/v1/jobs", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	want := func(when string, m map[string]int) {
		t.Helper()
		for name, code := range m {
			tok := map[string]string{"alice": alice, "bob": bob, "carol": carol}[name]
			if got := status(tok); got != code {
				t.Errorf("%s: %s's token got %d, want %d", when, name, got, code)
			}
		}
	}
	want("at start", map[string]int{"alice": 200, "bob": 200, "carol": 401})

	// bob's request in flight: its headers are read and its token
	// checked (the server asks for the body: 100 Continue), its body not
	// yet sent.
	inflight, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer inflight.Close()
	body := `{"name":"in-flight"}`
	fmt.Fprintf(inflight, "POST /api/v1/jobs HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"+
		"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n", addr, bob, len(body))
	_ = inflight.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(inflight)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
		t.Fatalf("bob's request in flight: %q, %v; want 100 Continue", line, err)
	}
	if _, err := br.ReadString('\n'); err != nil { // the blank line after 100 Continue
		t.Fatal(err)
	}

	reloads := func(what string) int { return strings.Count(d.output(), what) }
	hup := func(what string, n int) {
		t.Helper()
		_ = d.cmd.Process.Signal(syscall.SIGHUP)
		waitfor.Value(t, 20*time.Second, fmt.Sprintf("%q logged %d times", what, n), d.output,
			func(log string) bool { return strings.Count(log, what) >= n })
	}

	// Revoke bob (the tokens file no longer lists him), add carol.
	write(tokensFile, "tokens: []\n")
	write(cfg, config(aliceLine, carolLine))
	hup("SIGHUP: API tokens reloaded", reloads("SIGHUP: API tokens reloaded")+1)
	want("after revoking bob and adding carol", map[string]int{"alice": 200, "bob": 401, "carol": 200})

	// The request in flight is answered by its handler, not refused.
	if _, err := io.WriteString(inflight, body); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("bob's request in flight: %v", err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized || !strings.Contains(string(got), `"invalid"`) {
		t.Errorf("bob's request in flight: %d %s; want its handler's answer (400 invalid spec)", resp.StatusCode, got)
	}

	// A token too short fails to load: the tokens in force stay.
	write(cfg, config(aliceLine, carolLine, "    - {name: dave, token: short, role: viewer, team: a}\n"))
	hup("SIGHUP: API tokens not reloaded", reloads("SIGHUP: API tokens not reloaded")+1)
	want("after a bad reload", map[string]int{"alice": 200, "bob": 401, "carol": 200})
	// No token left would open the API: refused too.
	write(cfg, "auth:\n  tokens: []\n")
	hup("SIGHUP: API tokens not reloaded", reloads("SIGHUP: API tokens not reloaded")+1)
	want("after a reload with no tokens", map[string]int{"alice": 200, "carol": 200})
	if status("") != http.StatusUnauthorized {
		t.Error("a request without a token is served after a reload with no tokens: the API opened")
	}
	if log := d.output(); strings.Contains(log, carol) || strings.Contains(log, bob) {
		t.Errorf("a token's secret is in the log:\n%s", log)
	}
}
