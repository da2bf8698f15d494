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
	// one more is answered 503 and closed before it is read. Default 4096;
	// negative: no cap.
	MaxConns int
	// MaxConnsPerIP caps the open connections of one client IP (429 and
	// closed beyond it), so one host cannot take every slot. Default 256;
	// negative: no cap.
	MaxConnsPerIP int
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
	if c.MaxConnsPerIP == 0 {
		c.MaxConnsPerIP = 256
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
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("api: listen %s: %w", s.cfg.Listen, err)
	}
	ln = newConnLimiter(ln, s.cfg.MaxConns, s.cfg.MaxConnsPerIP, s.log)
	s.ln = ln
	s.httpSrv = &http.Server{Handler: s.routes(), ReadHeaderTimeout: s.cfg.ReadHeaderTimeout, ReadTimeout: s.cfg.ReadTimeout,
		WriteTimeout: s.cfg.WriteTimeout, IdleTimeout: s.cfg.IdleTimeout}
	go func() {
		if err := s.httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http server", slog.Any("err", err))
		}
	}()
	s.log.Info("API listening", slog.String("listen", ln.Addr().String()))
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
