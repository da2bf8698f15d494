package api

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"
)

// TestClientPrefix: IPv4 counts per /24, an IPv4-mapped IPv6 address as
// its IPv4, IPv6 per /64 (zone dropped).
func TestClientPrefix(t *testing.T) {
	for _, c := range []struct{ addr, want string }{
		{"203.0.113.7:5000", "203.0.113.0/24"},
		{"203.0.113.250:1", "203.0.113.0/24"},
		{"[::ffff:203.0.113.9]:80", "203.0.113.0/24"},
		{"[2001:db8:1:2:aaaa::1]:443", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff:ffff:ffff:ffff]:443", "2001:db8:1:2::/64"},
		{"[2001:db8:1:3::1]:443", "2001:db8:1:3::/64"},
		{"[fe80::1%lo]:443", "fe80::/64"},
		{"127.0.17.1:9", "127.0.17.0/24"},
	} {
		ta, err := net.ResolveTCPAddr("tcp", c.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := clientPrefix(ta).String(); got != c.want {
			t.Errorf("clientPrefix(%s) = %s, want %s", c.addr, got, c.want)
		}
		if got := clientPrefix(stringAddr(c.addr)).String(); got != c.want {
			t.Errorf("clientPrefix(%q as a string) = %s, want %s", c.addr, got, c.want)
		}
	}
}

type stringAddr string

func (a stringAddr) Network() string { return "tcp" }
func (a stringAddr) String() string  { return string(a) }

// TestRefusalLog: one line per key per period, the next one counting the
// refusals held back; past maxKeys, new keys share "*".
func TestRefusalLog(t *testing.T) {
	r := newRefusalLog(10*time.Second, 2)
	t0 := time.Unix(1000, 0)
	type step struct {
		key        string
		at         time.Duration
		ok         bool
		suppressed int
	}
	for i, s := range []step{
		{"a", 0, true, 0},
		{"a", time.Second, false, 0},
		{"a", 2 * time.Second, false, 0},
		{"b", 2 * time.Second, true, 0},
		{"c", 3 * time.Second, true, 0}, // a and b are recent: c goes under "*"
		{"d", 4 * time.Second, false, 0},
		{"a", 10 * time.Second, true, 2},
		{"a", 11 * time.Second, false, 0},
		// b is old and held nothing back: forgotten; a still holds one
		// back, so e goes under "*", which held d back.
		{"e", 25 * time.Second, true, 1},
		{"b", 26 * time.Second, false, 0}, // b forgotten: under "*" too, just logged
	} {
		ok, n := r.allow(s.key, t0.Add(s.at))
		if ok != s.ok || n != s.suppressed {
			t.Errorf("step %d (%s at %v): allow = %v, %d; want %v, %d", i, s.key, s.at, ok, n, s.ok, s.suppressed)
		}
	}
}

// TestRefusalLogged: a refused connection is answered and logged once a
// period, with the prefix, not the address.
func TestRefusalLogged(t *testing.T) {
	var buf bytes.Buffer
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newConnLimiter(ln, 1, 1, -1, slog.New(slog.NewTextHandler(&buf, nil)))
	defer l.Close()
	p := clientPrefix(stringAddr("192.0.2.10:1"))
	for range 3 {
		a, b := net.Pipe()
		go func() { _, _ = b.Read(make([]byte, 512)); _ = b.Close() }()
		l.refuse(a, p, "429 Too Many Requests")
	}
	out := buf.String()
	if strings.Count(out, "API connection refused") != 1 || !strings.Contains(out, "client_prefix=192.0.2.0/24") ||
		strings.Contains(out, "192.0.2.10") {
		t.Fatalf("log:\n%s", out)
	}
	if l.refused429.Load() != 3 {
		t.Fatalf("refused429 = %d, want 3", l.refused429.Load())
	}
}
