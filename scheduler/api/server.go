package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/ledger"
	"github.com/lathe-ml/lathe/scheduler/plane"
)

// Config configures the API. Zero values take the defaults stated.
type Config struct {
	// Listen is the API's address; default 127.0.0.1:8080.
	Listen string
	// Defaults fill what a job spec leaves out (residency [onprem],
	// max_runtime 24h, output under the data dir, trainer reference).
	Defaults jobspec.Defaults
	// MaxBodyBytes caps a request body; default 1 MiB (a batch: 16×).
	MaxBodyBytes int64
	// ReadHeaderTimeout bounds reading a request's headers; default 10s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included, so a
	// client that sends its body byte by byte (or never) is cut off;
	// default 30s. A follow stream, an artifact download and an audit
	// export lift it once their request is read.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing a response; default 60s. Streams (follow,
	// artifact, audit export) extend it before each write, so it bounds one
	// stalled write, not the stream.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that sends no new request
	// for this long; default 60s.
	IdleTimeout time.Duration
	// MaxConns caps the API's open connections, follow streams included;
	// one more is answered 503 and closed before it is read, unless a
	// waiting connection is closed to make room for it (connLimiter).
	// Default 4096; negative: no cap (and no reserve).
	MaxConns int
	// ReservedConns of the MaxConns slots are held only by connections
	// that have presented a valid token (on an open API: made any request
	// that needs one): a connection not yet authenticated (still sending
	// its headers, or without a token) is counted in the waiting pool of
	// MaxConns - ReservedConns. So clients without a token cannot take the
	// token holders' connections, however many they open. Default
	// MaxConns/4; negative: none. Must be below MaxConns.
	ReservedConns int
	// MaxConnsPerPrefix caps the waiting connections of one client prefix,
	// a /24 of IPv4 (an IPv4-mapped IPv6 address counts as IPv4) or a /64
	// of IPv6: one more is answered 429 and closed. So one host, or one
	// network, cannot take every waiting slot. Authenticated connections
	// do not count here. Default 256; negative: no cap.
	MaxConnsPerPrefix int
	// RedisTimeout bounds each request's Redis work, so the API answers 503
	// within 2 s when Redis is away; default 1.5s.
	RedisTimeout time.Duration
	// Ledger records every routing decision; nil records nothing (tests
	// that do not look at it). lathed always sets it.
	Ledger *ledger.Ledger
	// Tokens are the API tokens at start (Server.SetTokens replaces them).
	// Empty means an open API (every request is an anonymous admin): only
	// for a scheduler on loopback, which lathed enforces. /healthz is
	// always open.
	Tokens []plane.Token
	// FollowRedis, when set, serves the blocking stream reads of event
	// follows (SSE), so many `lathe logs -f` cannot take every connection
	// of the API's pool; default the API's own client.
	FollowRedis redis.UniversalClient
	// NoEvictionCheck turns off /healthz's check of Redis's
	// maxmemory-policy (for the embedded miniredis, which never evicts and
	// does not report one). Default false: every /healthz reads the policy
	// and answers 503 unless it is noeviction.
	NoEvictionCheck bool
	// Logger; default slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8080"
	}
	c.Defaults = jobspec.DeploymentDefaults(c.Defaults)
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 1 << 20
	}
	if c.ReadHeaderTimeout <= 0 {
		c.ReadHeaderTimeout = 10 * time.Second
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = 30 * time.Second
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 60 * time.Second
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 60 * time.Second
	}
	if c.MaxConns == 0 {
		c.MaxConns = 4096 // negative stays: no cap
	}
	if c.ReservedConns == 0 && c.MaxConns > 0 {
		c.ReservedConns = c.MaxConns / 4
	}
	if c.MaxConnsPerPrefix == 0 {
		c.MaxConnsPerPrefix = 256
	}
	if c.RedisTimeout <= 0 {
		c.RedisTimeout = 1500 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Handler is the API's HTTP handler (for tests and embedding).
func (s *Server) Handler() http.Handler { return s.routes() }

// Addr is the address the API listens on once started ("" before).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Start listens on Config.Listen (behind the connection limits) and
// serves the API until Stop.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.httpSrv != nil {
		return errors.New("api: already started")
	}
	if s.cfg.MaxConns > 0 && s.cfg.ReservedConns >= s.cfg.MaxConns {
		return fmt.Errorf("api: ReservedConns %d must be below MaxConns %d", s.cfg.ReservedConns, s.cfg.MaxConns)
	}
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("api: listen %s: %w", s.cfg.Listen, err)
	}
	lim := newConnLimiter(ln, s.cfg.MaxConns, s.cfg.MaxConnsPerPrefix, s.cfg.ReservedConns, s.log)
	s.ln, s.limiter = lim, lim
	s.httpSrv = &http.Server{Handler: s.routes(), ReadHeaderTimeout: s.cfg.ReadHeaderTimeout, ReadTimeout: s.cfg.ReadTimeout,
		WriteTimeout: s.cfg.WriteTimeout, IdleTimeout: s.cfg.IdleTimeout, ConnContext: withConn}
	go func() {
		if err := s.httpSrv.Serve(lim); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http server", slog.Any("err", err))
		}
	}()
	s.log.Info("API listening", slog.String("listen", ln.Addr().String()), slog.Int("max_conns", s.cfg.MaxConns),
		slog.Int("reserved_conns", s.cfg.ReservedConns), slog.Int("max_conns_per_prefix", s.cfg.MaxConnsPerPrefix))
	if s.tokenSet().open() {
		s.log.Warn("no API tokens configured: the API is OPEN to anyone who can reach it (allowed on loopback only)", slog.String("listen", ln.Addr().String()))
	} else {
		s.log.Info("API tokens loaded", slog.Int("tokens", len(s.tokenSet().tokens)))
	}
	return nil
}

// Stop stops serving, waiting for open requests up to ctx's deadline (then
// closing them). Safe to call twice, and before Start.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	srv := s.httpSrv
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	if err := srv.Shutdown(ctx); err != nil {
		_ = srv.Close()
	}
	return nil
}
