package scheduler_test

import (
	"bufio"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/waitfor"
	"github.com/lathe-ml/lathe/scheduler"
	"github.com/lathe-ml/lathe/scheduler/api"
)

// TestConnectionCaps holds open keep-alive connections against the real
// http.Server: one client IP gets MaxConnsPerIP of them and then a 429,
// another IP gets the rest up to MaxConns and then a 503; each refusal is
// closed by the server, and a closed connection gives its slot back.
func TestConnectionCaps(t *testing.T) {
	_, addr := startAPI(t, scheduler.Config{}, api.Config{MaxConns: 5, MaxConnsPerIP: 3})
	dialFrom := func(ip string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial from %s: %v", ip, err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	// status sends one keep-alive request on c and returns the answer's
	// status code (0 when the server closed the connection without one).
	status := func(c net.Conn) int {
		t.Helper()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")); err != nil {
			return 0
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	var held []net.Conn
	for i := 0; i < 3; i++ {
		c := dialFrom("127.0.0.1")
		if got := status(c); got == 429 || got == 503 || got == 0 {
			t.Fatalf("connection %d from 127.0.0.1: status %d, want it served", i+1, got)
		}
		held = append(held, c)
	}
	if got := status(dialFrom("127.0.0.1")); got != http.StatusTooManyRequests {
		t.Fatalf("4th connection from 127.0.0.1: status %d, want 429 (max_conns_per_ip 3)", got)
	}
	for i := 0; i < 2; i++ {
		if got := status(dialFrom("127.0.0.2")); got == 429 || got == 503 || got == 0 {
			t.Fatalf("connection %d from 127.0.0.2: status %d, want it served", i+1, got)
		}
	}
	over := dialFrom("127.0.0.2")
	if got := status(over); got != http.StatusServiceUnavailable {
		t.Fatalf("6th connection: status %d, want 503 (max_conns 5)", got)
	}
	if err := waitClosed(over, time.Now().Add(5*time.Second)); err != nil {
		t.Fatalf("refused connection: %v", err)
	}
	// One of 127.0.0.1's closes: once the server has seen it, 127.0.0.1
	// may open one again.
	_ = held[0].Close()
	waitfor.True(t, 10*time.Second, "a slot given back after a close", func() bool {
		c := dialFrom("127.0.0.1")
		ok := status(c) == http.StatusOK
		_ = c.Close()
		return ok
	})
}
