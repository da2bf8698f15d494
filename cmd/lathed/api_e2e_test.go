package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/redistest"
)

// TestAPITimeoutsFromConfig: the scheduler section's http_* timeouts reach
// the real lathed's API: with http_read_timeout and http_idle_timeout of
// 1s, a client that stalls in its request body and an idle keep-alive
// connection are closed by the server (the defaults, 30 s and 60 s, would
// keep both open past the test's 20-s deadline).
func TestAPITimeoutsFromConfig(t *testing.T) {
	lathed, _ := binaries(t)
	cfg := filepath.Join(t.TempDir(), "lathe.yaml")
	if err := os.WriteFile(cfg, []byte("scheduler:\n  http_read_timeout: 1s\n  http_idle_timeout: 1s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	port := redistest.FreePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	d := startDaemon(t, lathed, "up", "--config", cfg, "--listen", addr, "--data-dir", t.TempDir())
	waitHTTP(t, "http://"+addr, d)

	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fmt.Fprintf(slow, "POST /api/v1/jobs HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 200000\r\n\r\n{", addr)

	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	fmt.Fprintf(idle, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	br := bufio.NewReader(idle)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Close {
		t.Fatal("healthz closed the connection: want it kept alive")
	}

	deadline := time.Now().Add(20 * time.Second)
	for name, r := range map[string]io.Reader{"slow body": slow, "idle keep-alive": br} {
		c := slow
		if name == "idle keep-alive" {
			c = idle
		}
		_ = c.SetReadDeadline(deadline)
		_, err := io.Copy(io.Discard, r)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("%s connection still open at the deadline: the config's timeouts did not reach the API", name)
		}
	}
}
