// Package redistest starts a real redis-server for tests: its own process on
// a free loopback port, in a temporary directory, never the shared one on
// 6379. A test that needs Redis fails (never skips) when redis-server is
// missing, so CI cannot pass without the real thing.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one redis-server child process.
type Server struct {
	// Addr is host:port of the server.
	Addr string
	// Dir is the server's working directory (AOF files live here).
	Dir  string
	args []string
	cmd  *exec.Cmd
	tb   testing.TB
}

// Options change how the server starts.
type Options struct {
	// AOF turns on appendonly with appendfsync everysec and
	// aof-load-truncated no, as lathed requires of a Redis with an AOF.
	AOF bool
	// LoadTruncated, with AOF, sets aof-load-truncated yes (Redis's
	// default), which lathed refuses.
	LoadTruncated bool
	// Policy is maxmemory-policy; default noeviction.
	Policy string
	// ReplicaOf, host:port, starts the server as a replica of that one.
	ReplicaOf string
}

// Start launches redis-server on a free port and stops it at test cleanup.
func Start(tb testing.TB) *Server { return StartWith(tb, Options{}) }

// StartWith is Start with options.
func StartWith(tb testing.TB, o Options) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("redistest: redis-server is not installed (apt-get install -y redis-server): %v", err)
	}
	if o.Policy == "" {
		o.Policy = "noeviction"
	}
	dir := tb.TempDir()
	port := FreePort(tb)
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Dir: dir, tb: tb}
	s.args = []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir,
		"--save", "", "--maxmemory-policy", o.Policy, "--protected-mode", "no"}
	if o.AOF {
		truncated := "no"
		if o.LoadTruncated {
			truncated = "yes"
		}
		s.args = append(s.args, "--appendonly", "yes", "--appendfsync", "everysec", "--aof-load-truncated", truncated)
	} else {
		s.args = append(s.args, "--appendonly", "no")
	}
	if o.ReplicaOf != "" {
		host, port, err := net.SplitHostPort(o.ReplicaOf)
		if err != nil {
			tb.Fatalf("redistest: ReplicaOf %q: %v", o.ReplicaOf, err)
		}
		s.args = append(s.args, "--replicaof", host, port)
	}
	s.args = append([]string{bin}, s.args...)
	s.start()
	tb.Cleanup(func() { s.Kill() })
	return s
}

func (s *Server) start() {
	s.tb.Helper()
	if err := s.startErr(); err != nil {
		s.tb.Fatalf("redistest: %v", err)
	}
}

// startErr starts the server and waits until it answers PING; when it does
// not within 10 s (it exited, say, refusing its AOF), the process is
// killed and the error carries its log.
func (s *Server) startErr() error {
	cmd := exec.Command(s.args[0], s.args[1:]...)
	cmd.Dir = s.Dir
	logf, err := os.Create(filepath.Join(s.Dir, "redis.log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start redis-server: %w", err)
	}
	s.cmd = cmd
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			s.cmd = nil
			log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
			return fmt.Errorf("redis-server on %s exited (%v) before it answered: %v\n%s", s.Addr, cmd.ProcessState, err, log)
		default:
		}
		if time.Now().After(deadline) {
			s.Kill()
			log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
			return fmt.Errorf("redis-server on %s did not answer: %v\n%s", s.Addr, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TryRestart is Restart that returns an error instead of failing the test
// when the server does not come up (it refused to load its AOF, say); the
// error carries its log, and the server is not running then.
func (s *Server) TryRestart() error {
	s.Kill()
	return s.startErr()
}

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr }

// Client returns a new go-redis client closed at test cleanup.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	s.tb.Cleanup(func() { c.Close() })
	return c
}

// Kill stops the server with SIGKILL (as a crash would) and waits until its
// port is closed. Safe to call twice.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	for i := 0; i < 500; i++ {
		conn, err := net.DialTimeout("tcp", s.Addr, 50*time.Millisecond)
		if err != nil {
			break
		}
		conn.Close()
		time.Sleep(10 * time.Millisecond)
	}
	s.cmd = nil
}

// Restart starts the server again on the same port and directory (after Kill).
func (s *Server) Restart() {
	s.tb.Helper()
	s.Kill()
	s.start()
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("redistest: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// String describes the server.
func (s *Server) String() string { return fmt.Sprintf("redis-server %s", s.Addr) }
