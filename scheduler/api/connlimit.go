package api

import (
	"container/list"
	"context"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// connLimiter caps the API's open connections (Config.MaxConns,
// MaxConnsPerPrefix, ReservedConns). The timeouts bound how long each
// connection lives, the caps how many a client can hold at once, so no
// client can take every file descriptor with slow or idle connections, or
// follow streams.
//
// A connection is accepted before its headers, and so its token, are read:
// it starts in the waiting pool, which holds at most MaxConns -
// ReservedConns connections, and at most MaxConnsPerPrefix of one client
// prefix (a /24 of IPv4, a /64 of IPv6). Once a request on it presents a
// valid token (or any request, on an open API), it moves to the
// authenticated pool, which only MaxConns bounds: the ReservedConns slots
// are left to connections that have shown a token. A connection over its
// prefix's cap gets a one-line 429 and is closed, before any of its bytes
// is read. When the waiting pool (or the whole) is full, the oldest waiting
// connection of the prefix that holds the most of them is closed to make
// room, if that prefix holds at least two more than the newcomer's; else
// the newcomer gets a 503. So slow clients share the waiting pool fairly
// by prefix, and a client on a fresh prefix is never shut out by others
// that fill it. Refusals and evictions are logged at most once per prefix
// per refusalLogEvery, with a count of those not logged.
type connLimiter struct {
	net.Listener
	max, perPrefix, waitCap int // ≤ 0: no cap
	reserved                int
	log                     *slog.Logger
	refusals                *refusalLog

	mu       sync.Mutex
	open     int                         // every connection held
	waiting  int                         // those not yet authenticated
	byPrefix map[netip.Prefix]*list.List // waiting connections of a prefix, oldest first

	refused429, refused503, evicted atomic.Int64 // since start
}

// refusalLogEvery is how often a refusal of one prefix is logged at most.
const refusalLogEvery = 10 * time.Second

func newConnLimiter(ln net.Listener, maxConns, perPrefix, reserved int, log *slog.Logger) *connLimiter {
	l := &connLimiter{Listener: ln, max: maxConns, perPrefix: perPrefix, reserved: reserved, log: log,
		refusals: newRefusalLog(refusalLogEvery, 4096), byPrefix: map[netip.Prefix]*list.List{}}
	if maxConns > 0 {
		l.waitCap = maxConns - max(reserved, 0)
	}
	return l
}

// Accept returns the next connection within the caps.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc := &limitedConn{Conn: c, l: l, prefix: clientPrefix(c.RemoteAddr())}
		status, victim := l.admit(lc)
		if victim != nil {
			_ = victim.Conn.Close() // its server goroutine sees the error and ends
			l.evicted.Add(1)
			l.logRefusal(victim.prefix, "API connection closed to make room: the waiting pool is full and its prefix holds the most of it", "evicted")
		}
		if status == "" {
			return lc, nil
		}
		l.refuse(c, lc.prefix, status)
	}
}

// admit counts lc in, possibly after taking a slot from victim (whose
// connection the caller closes), or says which answer refuses it.
func (l *connLimiter) admit(lc *limitedConn) (status string, victim *limitedConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	held := 0
	if q := l.byPrefix[lc.prefix]; q != nil {
		held = q.Len()
	}
	if l.perPrefix > 0 && held >= l.perPrefix {
		return "429 Too Many Requests", nil
	}
	if (l.max > 0 && l.open >= l.max) || (l.waitCap > 0 && l.waiting >= l.waitCap) {
		if victim = l.victim(held); victim == nil {
			return "503 Service Unavailable", nil
		}
		l.drop(victim)
	}
	l.open++
	l.waiting++
	q := l.byPrefix[lc.prefix]
	if q == nil {
		q = list.New()
		l.byPrefix[lc.prefix] = q
	}
	lc.elem = q.PushBack(lc)
	return "", victim
}

// victim is the oldest waiting connection of the prefix that holds the
// most waiting connections, when it holds at least two more than held
// (the newcomer's prefix's count: after the swap it still holds more);
// else nil. Ties go to any of them.
func (l *connLimiter) victim(held int) *limitedConn {
	var most *list.List
	for _, q := range l.byPrefix {
		if most == nil || q.Len() > most.Len() {
			most = q
		}
	}
	if most == nil || most.Len() < held+2 {
		return nil
	}
	return most.Front().Value.(*limitedConn)
}

// drop takes lc's slot back, whichever pool it is in; l.mu is held. A
// connection dropped before is left alone.
func (l *connLimiter) drop(lc *limitedConn) {
	switch lc.state {
	case connWaiting:
		l.unwait(lc)
	case connAuthenticated:
	default:
		return
	}
	lc.state = connGone
	l.open--
}

// unwait takes lc out of the waiting pool; l.mu is held.
func (l *connLimiter) unwait(lc *limitedConn) {
	q := l.byPrefix[lc.prefix]
	q.Remove(lc.elem)
	lc.elem = nil
	if q.Len() == 0 {
		delete(l.byPrefix, lc.prefix)
	}
	l.waiting--
}

// authenticated moves lc from the waiting pool to the authenticated one.
func (l *connLimiter) authenticated(lc *limitedConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lc.state == connWaiting {
		l.unwait(lc)
		lc.state = connAuthenticated
		lc.authed.Store(true)
	}
}

func (l *connLimiter) release(lc *limitedConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.drop(lc)
}

// counts are the connections held now: waiting and authenticated.
func (l *connLimiter) counts() (waiting, authenticated int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.waiting, l.open - l.waiting
}

// refuse answers a connection over a cap and closes it. The answer fits in
// the socket's send buffer of a fresh connection, and the write deadline
// keeps a client that reads nothing from holding Accept.
func (l *connLimiter) refuse(c net.Conn, prefix netip.Prefix, status string) {
	if status[0:3] == "429" {
		l.refused429.Add(1)
	} else {
		l.refused503.Add(1)
	}
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	body := "too many connections: " + status[4:] + "\n"
	_, _ = c.Write([]byte("HTTP/1.1 " + status + "\r\nConnection: close\r\nContent-Type: text/plain; charset=utf-8\r\nRetry-After: 1\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body))
	_ = c.Close()
	l.logRefusal(prefix, "API connection refused: over the connection caps", status)
}

// logRefusal logs a refusal or an eviction of prefix, unless one of the
// prefix's was logged less than refusalLogEvery ago; the line counts
// those not logged since the last.
func (l *connLimiter) logRefusal(prefix netip.Prefix, msg, what string) {
	key := prefix.String()
	ok, suppressed := l.refusals.allow(key, time.Now())
	if !ok {
		return
	}
	waiting, authed := l.counts()
	l.log.Warn(msg, slog.String("client_prefix", key), slog.String("status", what),
		slog.Int("suppressed", suppressed), slog.Int("waiting", waiting), slog.Int("authenticated", authed),
		slog.Int("max_conns", l.max), slog.Int("max_conns_per_prefix", l.perPrefix), slog.Int("reserved_conns", l.reserved),
		slog.Int64("refused_total", l.refused429.Load()+l.refused503.Load()), slog.Int64("evicted_total", l.evicted.Load()))
}

// The states of a limitedConn.
const (
	connWaiting       = iota // accepted, no valid token seen
	connAuthenticated        // a request on it presented a valid token
	connGone                 // closed or evicted: its slot is back
)

// limitedConn is a connection the limiter counts, in the pool its state
// says; it gives its slot back once, when it is closed.
type limitedConn struct {
	net.Conn
	l      *connLimiter
	prefix netip.Prefix
	authed atomic.Bool // state == connAuthenticated, read without l.mu

	// Under l.mu:
	state int
	elem  *list.Element // in l.byPrefix[prefix] while waiting
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.l.release(c)
	return err
}

// connKey carries a request's *limitedConn in its context (ConnContext).
type connKey struct{}

// withConn is the http.Server's ConnContext: it puts the limiter's
// connection in the context of each request on it.
func withConn(ctx context.Context, c net.Conn) context.Context {
	if lc, ok := c.(*limitedConn); ok {
		return context.WithValue(ctx, connKey{}, lc)
	}
	return ctx
}

// markAuthenticated moves the connection of a request whose token was
// accepted to the authenticated pool (no-op for a request served without
// the limiter: Handler, tests).
func markAuthenticated(ctx context.Context) {
	if lc, ok := ctx.Value(connKey{}).(*limitedConn); ok && !lc.authed.Load() {
		lc.l.authenticated(lc)
	}
}

// clientPrefix is the prefix a client's connections are counted under:
// the /24 of an IPv4 address (an IPv4-mapped IPv6 one too), the /64 of an
// IPv6 one. An address that is not an IP counts as one prefix of its own
// (the zero Prefix).
func clientPrefix(a net.Addr) netip.Prefix {
	var ip netip.Addr
	switch ta := a.(type) {
	case *net.TCPAddr:
		ip = ta.AddrPort().Addr()
	default:
		ap, err := netip.ParseAddrPort(a.String())
		if err != nil {
			return netip.Prefix{}
		}
		ip = ap.Addr()
	}
	ip = ip.Unmap().WithZone("")
	bits := 64
	if ip.Is4() {
		bits = 24
	}
	p, err := ip.Prefix(bits)
	if err != nil {
		return netip.Prefix{}
	}
	return p
}

// refusalLog rate-limits the refusal lines: at most one per key per every,
// with the count of those held back. It remembers at most maxKeys keys;
// past that (a flood from many prefixes), the others share the key "*".
type refusalLog struct {
	every   time.Duration
	maxKeys int

	mu sync.Mutex
	by map[string]*refusalEntry
}

type refusalEntry struct {
	last       time.Time
	suppressed int
}

func newRefusalLog(every time.Duration, maxKeys int) *refusalLog {
	return &refusalLog{every: every, maxKeys: maxKeys, by: map[string]*refusalEntry{}}
}

// allow says whether to log a refusal of key at now, and how many of key's
// refusals were held back since its last line.
func (r *refusalLog) allow(key string, now time.Time) (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.by[key]
	if e == nil {
		if len(r.by) >= r.maxKeys {
			r.prune(now)
		}
		if len(r.by) >= r.maxKeys {
			key = "*"
			e = r.by[key]
		}
	}
	if e == nil {
		r.by[key] = &refusalEntry{last: now}
		return true, 0
	}
	if now.Sub(e.last) < r.every {
		e.suppressed++
		return false, 0
	}
	n := e.suppressed
	e.last, e.suppressed = now, 0
	return true, n
}

// prune forgets the keys whose last line is older than every and that
// held nothing back.
func (r *refusalLog) prune(now time.Time) {
	for k, e := range r.by {
		if now.Sub(e.last) >= r.every && e.suppressed == 0 {
			delete(r.by, k)
		}
	}
}

// The connection limiter's metrics (connCollector).
var (
	descConns        = desc("lathe_api_connections", "API connections held now, by pool: waiting (no valid token seen yet; at most max_conns - reserved_conns) or authenticated.", "pool")
	descConnsRefused = desc("lathe_api_connections_refused_total", "API connections refused or closed by the connection caps since start, by reason: prefix_cap (429), full (503), evicted (a waiting connection closed to make room for one of a prefix holding fewer).", "reason")
)

// connCollector exports the connection limiter's counts (none before Start).
type connCollector struct{ s *Server }

func (c connCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descConns; ch <- descConnsRefused }

func (c connCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.mu.Lock()
	l := c.s.limiter
	c.s.mu.Unlock()
	if l == nil {
		return
	}
	waiting, authed := l.counts()
	ch <- prometheus.MustNewConstMetric(descConns, prometheus.GaugeValue, float64(waiting), "waiting")
	ch <- prometheus.MustNewConstMetric(descConns, prometheus.GaugeValue, float64(authed), "authenticated")
	for reason, n := range map[string]int64{"prefix_cap": l.refused429.Load(), "full": l.refused503.Load(), "evicted": l.evicted.Load()} {
		ch <- prometheus.MustNewConstMetric(descConnsRefused, prometheus.CounterValue, float64(n), reason)
	}
}
