package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobstore"
)

// newRedisClient returns a client tuned to fail fast: the API must answer
// 503 within 2 s when Redis is away, never hang. url is a redis://,
// rediss://, unix:// or redis+sentinel:// URL (parseRedisURL).
func newRedisClient(url string) (*redis.Client, error) { return newRedisClientPool(url, 0) }

// newRedisClientPool is newRedisClient with a pool of poolSize connections
// (0: go-redis's default, 10 per CPU).
// An error names the URL with its password redacted (redactURL), and its
// cause never quotes the password (redact.Parse: url.Parse quotes the
// whole URL, go-redis a path that can hold it).
func newRedisClientPool(url string, poolSize int) (*redis.Client, error) {
	t, err := parseRedisURL(url)
	if err != nil {
		return nil, fmt.Errorf("--redis-url %q: %w", redactURL(url), err)
	}
	return t.client(poolSize), nil
}

// redisWhere names the Redis rdb reaches for logs and errors: its address,
// or for a failover client (whose Options().Addr is a placeholder) the
// primary it reaches now.
func redisWhere(ctx context.Context, rdb *redis.Client) string {
	if a := rdb.Options().Addr; a != "FailoverClient" {
		return a
	}
	info, err := rdb.Info(ctx, "server").Result()
	if err == nil {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "tcp_port:"); ok {
				return "the Sentinel primary (port " + v + ")"
			}
		}
	}
	return "the Sentinel primary"
}

// waitRedis pings until Redis answers or wait passes.
func waitRedis(ctx context.Context, rdb *redis.Client, wait time.Duration, log *slog.Logger) error {
	deadline := time.Now().Add(wait)
	delay := 200 * time.Millisecond
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := rdb.Ping(pctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("redis at %s did not answer within %s: %w", redisWhere(ctx, rdb), wait, err)
		}
		log.Warn("waiting for Redis", slog.String("addr", redisWhere(ctx, rdb)), slog.Any("err", err))
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
		if delay < 2*time.Second {
			delay *= 2
		}
	}
}

// checkNoEviction refuses a Redis that may evict keys: asynq loses tasks to
// eviction and Lathe loses jobs (docs/design.md, "Processes"). The scheduler checks again on
// every /healthz.
func checkNoEviction(ctx context.Context, rdb *redis.Client) error {
	if err := jobstore.New(rdb, jobstore.Config{}).CheckNoEviction(ctx); err != nil {
		return fmt.Errorf("redis at %s: %w", redisWhere(ctx, rdb), err)
	}
	return nil
}

// checkAOFTruncation refuses a Redis that keeps an AOF and would load a
// truncated one (aof-load-truncated yes, Redis's default): a crash that
// cuts the AOF inside a script's transaction would then come back with
// part of it, e.g. a refused admission half stored (docs/operations.md,
// "A truncated AOF"). A Redis that does not let us read the setting
// (CONFIG renamed away) is let through with a warning.
func checkAOFTruncation(ctx context.Context, rdb *redis.Client, log *slog.Logger) error {
	info, err := rdb.Info(ctx, "persistence").Result()
	if err != nil || !strings.Contains(info, "aof_enabled:1") {
		return nil // no AOF: warnNoAOF says what that costs
	}
	v, err := rdb.ConfigGet(ctx, "aof-load-truncated").Result()
	if err != nil {
		log.Warn("cannot read this Redis's aof-load-truncated (CONFIG GET refused); it must be no (docs/operations.md)",
			slog.String("addr", redisWhere(ctx, rdb)), slog.Any("err", err))
		return nil
	}
	if v["aof-load-truncated"] == "yes" {
		return fmt.Errorf("redis at %s: aof-load-truncated is yes: after a crash that cuts its AOF inside a transaction, Redis would load part of it. Run it with aof-load-truncated no (redis-cli CONFIG SET aof-load-truncated no, and in redis.conf); see docs/operations.md, \"A truncated AOF\"", redisWhere(ctx, rdb))
	}
	return nil
}

// warnNoAOF logs a warning when the given Redis does not keep an AOF: a
// restart of such a Redis loses every job (docs/operations.md).
func warnNoAOF(ctx context.Context, rdb *redis.Client, log *slog.Logger) {
	info, err := rdb.Info(ctx, "persistence").Result()
	if err != nil {
		return
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "aof_enabled:"); ok && v != "1" {
			log.Warn("this Redis has appendonly off: a restart of it loses every job. Run it with --appendonly yes --appendfsync everysec (docs/operations.md)",
				slog.String("addr", redisWhere(ctx, rdb)))
		}
	}
}

// warnFewReplicas logs what a submit waits for (t.minReplicas replicas'
// acknowledgement) and warns when the primary has fewer replicas connected
// now: until they are, every submit is answered 503, outcome unknown.
func warnFewReplicas(ctx context.Context, rdb *redis.Client, t redisTarget, log *slog.Logger) {
	if t.minReplicas == 0 {
		if t.failover != nil {
			log.Warn("min_replicas=0 through Sentinel: a submit is acknowledged before any replica has it, and a failover may lose it (docs/operations.md)")
		}
		return
	}
	log.Info("each submit waits for replicas to acknowledge its write (WAIT)", slog.Int("min_replicas", t.minReplicas),
		slog.Duration("replica_timeout", t.replicaTimeout), slog.String("redis", t.where()))
	info, err := rdb.Info(ctx, "replication").Result()
	if err != nil {
		return
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			if n, err := strconv.Atoi(v); err == nil && n < t.minReplicas {
				log.Warn("the primary has fewer replicas connected than min_replicas: every submit is answered 503 (outcome unknown) until enough are",
					slog.Int("connected", n), slog.Int("min_replicas", t.minReplicas))
			}
		}
	}
}

// managedRedis is the Redis `lathed up` runs when no --redis-url is given:
// a redis-server from PATH inside the data dir (AOF on, noeviction), else
// an embedded miniredis (ephemeral).
type managedRedis struct {
	URL      string
	Embedded bool
	cmd      *exec.Cmd
	waitErr  chan error
	mini     *miniredis.Miniredis
	stopTick chan struct{}
}

// startManagedRedis starts redis-server in dataDir/redis, or miniredis
// when there is none. hold, when not nil, is the data dir's lock file
// (lockDataDir): redis-server inherits it, so the lock stays held until
// the redis-server of a lathed killed outright has exited too (it gets
// SIGTERM when lathed dies), and no later lathed up starts another one on
// its socket meanwhile.
func startManagedRedis(ctx context.Context, dataDir string, hold *os.File, log *slog.Logger) (*managedRedis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return startMiniredis(log)
	}
	dir := filepath.Join(dataDir, "redis")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("redis dir: %w", err)
	}
	conf, pw, err := managedRedisPassword(dir)
	if err != nil {
		return nil, err
	}
	args := []string{conf, "--dir", dir, "--appendonly", "yes", "--appendfsync", "everysec", "--aof-load-truncated", "no",
		"--maxmemory-policy", "noeviction", "--save", "", "--daemonize", "no",
		"--logfile", filepath.Join(dir, "redis.log")}
	listen, url, err := managedRedisListen(dir, pw)
	if err != nil {
		return nil, err
	}
	cmd := redisServerCommand(bin, append(args, listen...))
	if hold != nil {
		cmd.ExtraFiles = []*os.File{hold}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	m := &managedRedis{URL: url, cmd: cmd, waitErr: make(chan error, 1)}
	go func() { m.waitErr <- cmd.Wait() }()
	if err := m.awaitStart(ctx, dir); err != nil {
		return nil, err
	}
	log.Info("started redis-server inside the data dir (AOF on, noeviction)", slog.String("url", redactURL(url)), slog.String("dir", dir))
	return m, nil
}

// managedRedisPassword is the managed redis-server's password, made once
// (32 random bytes, hex) and kept in dir/password, and the config file that
// gives it to redis-server (dir/redis.conf: requirepass), both mode 0600 in
// a folder of mode 0700: it is in no process's arguments or environment,
// so a trainer (or any local user) that reached the socket or the port
// could still not use it.
func managedRedisPassword(dir string) (conf, pw string, err error) {
	pwFile := filepath.Join(dir, "password")
	b, err := os.ReadFile(pwFile)
	switch {
	case err == nil && len(strings.TrimSpace(string(b))) >= 32:
		pw = strings.TrimSpace(string(b))
	case err == nil || errors.Is(err, fs.ErrNotExist):
		var raw [32]byte
		if _, err := rand.Read(raw[:]); err != nil {
			return "", "", fmt.Errorf("redis password: %w", err)
		}
		pw = hex.EncodeToString(raw[:])
		if err := writePrivate(pwFile, pw+"\n"); err != nil {
			return "", "", fmt.Errorf("redis password: %w", err)
		}
	default:
		return "", "", fmt.Errorf("redis password: %w", err)
	}
	conf = filepath.Join(dir, "redis.conf")
	if err := writePrivate(conf, "# written by lathed at each start: the managed Redis's password (see password)\nrequirepass "+pw+"\n"); err != nil {
		return "", "", fmt.Errorf("redis config: %w", err)
	}
	return conf, pw, nil
}

// writePrivate writes body to path, mode 0600, through a temporary file
// renamed over it (a link at path is replaced, not written through).
func writePrivate(path, body string) error {
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(body); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// managedRedisListen is where a managed redis-server in dir listens: the
// redis-server arguments and the URL (with password pw). A unix socket in
// dir, unless its path is too long for one; then a free TCP port on
// 127.0.0.1.
func managedRedisListen(dir, pw string) (args []string, url string, err error) {
	sock := filepath.Join(dir, "redis.sock")
	if len(sock) < 100 {
		return []string{"--port", "0", "--unixsocket", sock, "--unixsocketperm", "700"}, "unix://:" + pw + "@" + sock, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", fmt.Errorf("redis port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port)}, "redis://:" + pw + "@127.0.0.1:" + strconv.Itoa(port), nil
}

// awaitStart waits up to 10s for the redis-server just started (logging to
// dir/redis.log) to answer a PING. It fails at once if the server exits, and
// stops it if it never answers.
func (m *managedRedis) awaitStart(ctx context.Context, dir string) error {
	rdb, _ := newRedisClient(m.URL)
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		err := rdb.Ping(pctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case werr := <-m.waitErr:
			return fmt.Errorf("redis-server exited at start (%v); see %s", werr, filepath.Join(dir, "redis.log"))
		default:
		}
		if time.Now().After(deadline) {
			m.Stop()
			return fmt.Errorf("redis-server did not answer on %s: %w", redactURL(m.URL), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// childEnvKeys are the only variables of lathed's environment a helper
// process it runs (redis-server, shutdown) gets.
var childEnvKeys = []string{"PATH", "HOME", "LANG", "LC_ALL", "TZ"}

// childEnv is a minimal environment for a helper process: childEnvKeys
// where lathed has them, nothing else. Never nil (a nil exec.Cmd.Env
// inherits everything): lathed's API tokens (LATHE_TOKEN*) and cloud
// credentials (AWS_*) stay in lathed.
func childEnv() []string {
	env := []string{}
	for _, k := range childEnvKeys {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// redisServerCommand is the managed redis-server's command: bin with args,
// in its own process group, ended when lathed dies, with childEnv.
func redisServerCommand(bin string, args []string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Env = childEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
	return cmd
}

func startMiniredis(log *slog.Logger) (*managedRedis, error) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		return nil, fmt.Errorf("embedded redis: %w", err)
	}
	m := &managedRedis{URL: "redis://" + mr.Addr(), Embedded: true, mini: mr, stopTick: make(chan struct{})}
	// miniredis TTLs do not move by themselves: advance its clock.
	go func() {
		last := time.Now()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-m.stopTick:
				return
			case now := <-t.C:
				mr.FastForward(now.Sub(last))
				mr.SetTime(now)
				last = now
			}
		}
	}()
	log.Warn("no redis-server on PATH: using an embedded in-process Redis (miniredis). It is EPHEMERAL: every job is lost when lathed stops. Install redis-server or pass --redis-url for anything that matters; cloud backends are refused in this mode.",
		slog.String("addr", mr.Addr()))
	return m, nil
}

// Stop ends the managed Redis (SIGTERM: redis-server flushes its AOF).
func (m *managedRedis) Stop() {
	if m == nil {
		return
	}
	if m.mini != nil {
		close(m.stopTick)
		m.mini.Close()
		return
	}
	if m.cmd != nil && m.cmd.Process != nil {
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-m.waitErr:
		case <-time.After(10 * time.Second):
			_ = m.cmd.Process.Kill()
			<-m.waitErr
		}
	}
}
