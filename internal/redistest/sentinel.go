package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// MasterName is the name the sentinels of StartSentinel monitor.
const MasterName = "lathe-test"

// Sentinels is a Redis group that fails over: a primary, its replicas and
// sentinels watching them, every one its own process on a free loopback
// port (Debian's redis-sentinel). The sentinels call the primary down
// after one second without an answer and need two of them to agree.
type Sentinels struct {
	// Servers are the data nodes: Servers[0] started as the primary, the
	// others as its replicas. After a failover another one is primary:
	// ask Primary.
	Servers []*Server
	// Addrs are the sentinels' host:port.
	Addrs []string
	procs []*exec.Cmd
	tb    testing.TB
}

// StartSentinel starts a primary with AOF on (as lathed requires), the
// given number of replicas of it, and three sentinels, waits until every
// sentinel knows every replica, and stops them all at test cleanup. A
// test that calls it fails (never skips) when redis-sentinel is missing.
func StartSentinel(tb testing.TB, replicas int) *Sentinels {
	tb.Helper()
	bin, err := exec.LookPath("redis-sentinel")
	if err != nil {
		tb.Fatalf("redistest: redis-sentinel is not installed (apt-get install -y redis-sentinel): %v", err)
	}
	g := &Sentinels{tb: tb}
	primary := StartWith(tb, Options{AOF: true})
	g.Servers = append(g.Servers, primary)
	for i := 0; i < replicas; i++ {
		g.Servers = append(g.Servers, StartWith(tb, Options{AOF: true, ReplicaOf: primary.Addr}))
	}
	primary.WaitReplicas(replicas)
	host, port, _ := net.SplitHostPort(primary.Addr)
	for i := 0; i < 3; i++ {
		dir := tb.TempDir()
		p := FreePort(tb)
		conf := filepath.Join(dir, "sentinel.conf")
		body := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\n"+
			"sentinel monitor %s %s %s 2\nsentinel down-after-milliseconds %s 1000\n"+
			"sentinel failover-timeout %s 10000\nsentinel parallel-syncs %s 1\n",
			p, dir, MasterName, host, port, MasterName, MasterName, MasterName)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			tb.Fatalf("redistest: %v", err)
		}
		cmd := exec.Command(bin, conf)
		cmd.Dir = dir
		logf, err := os.Create(filepath.Join(dir, "sentinel.log"))
		if err != nil {
			tb.Fatalf("redistest: %v", err)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			tb.Fatalf("redistest: start redis-sentinel: %v", err)
		}
		go func() { _ = cmd.Wait(); logf.Close() }()
		g.procs = append(g.procs, cmd)
		g.Addrs = append(g.Addrs, "127.0.0.1:"+strconv.Itoa(p))
	}
	tb.Cleanup(func() {
		for _, c := range g.procs {
			_ = c.Process.Kill()
		}
	})
	g.waitKnown(replicas)
	return g
}

// waitKnown waits up to 30 s until every sentinel knows the primary, its
// replicas and the other sentinels.
func (g *Sentinels) waitKnown(replicas int) {
	g.tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, a := range g.Addrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: a})
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			m, err := sc.Master(ctx, MasterName).Result()
			cancel()
			if err == nil && m["num-slaves"] == strconv.Itoa(replicas) && m["num-other-sentinels"] == strconv.Itoa(len(g.Addrs)-1) {
				break
			}
			if time.Now().After(deadline) {
				sc.Close()
				g.tb.Fatalf("redistest: sentinel %s does not know the group after 30 s: %v %v", a, m, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		sc.Close()
	}
}

// URL is the group's redis+sentinel:// URL (lathed's form, see
// docs/operations.md) with query, if not empty, after a '?'.
func (g *Sentinels) URL(query string) string {
	u := "redis+sentinel://" + strings.Join(g.Addrs, ",") + "/" + MasterName
	if query != "" {
		u += "?" + query
	}
	return u
}

// Primary is the host:port the sentinels name as the primary now, or ""
// when none of them answers.
func (g *Sentinels) Primary() string {
	for _, a := range g.Addrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: a})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		addr, err := sc.GetMasterAddrByName(ctx, MasterName).Result()
		cancel()
		sc.Close()
		if err == nil && len(addr) == 2 {
			return net.JoinHostPort(addr[0], addr[1])
		}
	}
	return ""
}

// Server is the data node at addr, or nil.
func (g *Sentinels) Server(addr string) *Server {
	for _, s := range g.Servers {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// WaitReplicas waits up to 30 s until n replicas are online at s (INFO
// replication: connected and past their first sync), failing the test
// otherwise.
func (s *Server) WaitReplicas(n int) {
	s.tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := c.Info(ctx, "replication").Result()
		cancel()
		if err == nil && strings.Count(info, "state=online") >= n {
			return
		}
		if time.Now().After(deadline) {
			s.tb.Fatalf("redistest: %d replicas not online at %s after 30 s: %v\n%s", n, s.Addr, err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
