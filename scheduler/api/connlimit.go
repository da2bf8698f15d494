package api

import (
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// connLimiter caps the API's open connections, in all and per client IP
// (Config.MaxConns, MaxConnsPerIP): the timeouts bound how long each one
// lives, the caps how many a client can hold at once, so one host cannot
// take every file descriptor with slow or idle connections, or follow
// streams. A connection over a cap gets a one-line 503 (all) or 429 (its
// IP) and is closed at once, before any of its bytes is read; Accept then
// goes on to the next.
type connLimiter struct {
	net.Listener
	max, perIP int // ≤ 0: no cap
	log        *slog.Logger

	mu    sync.Mutex
	open  int
	byIP  map[string]int
	shed  atomic.Int64 // connections refused since start
	lastW atomic.Int64 // unix seconds of the last warning (one a second at most)
}

func newConnLimiter(ln net.Listener, max, perIP int, log *slog.Logger) *connLimiter {
	return &connLimiter{Listener: ln, max: max, perIP: perIP, log: log, byIP: map[string]int{}}
}

// Accept returns the next connection within the caps.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := clientIP(c.RemoteAddr())
		status := l.admit(ip)
		if status == "" {
			return &limitedConn{Conn: c, l: l, ip: ip}, nil
		}
		l.refuse(c, ip, status)
	}
}

// admit counts a new connection from ip, or says which answer refuses it.
func (l *connLimiter) admit(ip string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.max > 0 && l.open >= l.max:
		return "503 Service Unavailable"
	case l.perIP > 0 && l.byIP[ip] >= l.perIP:
		return "429 Too Many Requests"
	}
	l.open++
	l.byIP[ip]++
	return ""
}

func (l *connLimiter) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byIP[ip]--; l.byIP[ip] <= 0 {
		delete(l.byIP, ip)
	}
}

// refuse answers a connection over a cap and closes it. The answer fits in
// the socket's send buffer of a fresh connection, and the write deadline
// keeps a client that reads nothing from holding Accept.
func (l *connLimiter) refuse(c net.Conn, ip, status string) {
	n := l.shed.Add(1)
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	body := "too many connections: " + status[4:] + "\n"
	_, _ = c.Write([]byte("HTTP/1.1 " + status + "\r\nConnection: close\r\nContent-Type: text/plain; charset=utf-8\r\nRetry-After: 1\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body))
	_ = c.Close()
	if now := time.Now().Unix(); l.lastW.Swap(now) != now {
		l.log.Warn("API connection refused: over the connection cap", slog.String("client", ip), slog.String("status", status),
			slog.Int("max_conns", l.max), slog.Int("max_conns_per_ip", l.perIP), slog.Int64("refused_total", n))
	}
}

// limitedConn gives its slot back once, when it is closed.
type limitedConn struct {
	net.Conn
	l    *connLimiter
	ip   string
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.ip) })
	return err
}

// clientIP is the IP of a remote address (the whole address when it has no
// port).
func clientIP(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}
