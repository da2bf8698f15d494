package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/redact"
)

// sentinelScheme starts a --redis-url that names a Redis Sentinel group:
//
//	redis+sentinel://[[user]:password@]host:port[,host:port…]/master[/db][?query]
//
// The hosts are the sentinels; master is the name they monitor; db is the
// database number (default 0). The userinfo is the data nodes' (primary's
// and replicas') user and password, percent-encoded. The query may hold
// sentinel_password (the sentinels' own, when they require one),
// min_replicas and replica_timeout (redisTarget). docs/operations.md,
// "Replicas and failover".
const sentinelScheme = "redis+sentinel://"

// redisTarget is a --redis-url taken apart: exactly one of opt (redis://,
// rediss://, unix://) and failover (redis+sentinel://) is set.
type redisTarget struct {
	opt      *redis.Options
	failover *redis.FailoverOptions
	// minReplicas is how many replicas must acknowledge a submit's write
	// (query min_replicas; default 1 with Sentinel, 0 otherwise).
	minReplicas int
	// replicaTimeout bounds that wait (query replica_timeout, a Go
	// duration; default 500ms, at most 10s).
	replicaTimeout time.Duration
}

// replicaQuery are the query parameters lathed reads itself, on any URL.
var replicaQuery = []string{"min_replicas", "replica_timeout"}

// parseRedisURL takes u apart. Its error never quotes u or a piece of it:
// the caller names u redacted.
func parseRedisURL(u string) (redisTarget, error) {
	if strings.HasPrefix(strings.ToLower(u), sentinelScheme) {
		return parseSentinelURL(u[len(sentinelScheme):])
	}
	t := redisTarget{}
	rest, q, hasQuery := strings.Cut(u, "?")
	if hasQuery && (strings.Contains(q, "min_replicas") || strings.Contains(q, "replica_timeout")) {
		vals, err := url.ParseQuery(q)
		if err != nil {
			return t, errors.New("its query does not parse")
		}
		if err := t.readReplicaQuery(vals, 0); err != nil {
			return t, err
		}
		for _, k := range replicaQuery {
			vals.Del(k)
		}
		u = rest
		if len(vals) > 0 {
			u += "?" + vals.Encode()
		}
	} else if err := t.readReplicaQuery(url.Values{}, 0); err != nil {
		return t, err
	}
	opt, err := redact.Parse(u, redis.ParseURL)
	if err != nil {
		return t, err
	}
	t.opt = opt
	return t, nil
}

// parseSentinelURL parses what follows "redis+sentinel://".
func parseSentinelURL(rest string) (redisTarget, error) {
	t := redisTarget{}
	fo := &redis.FailoverOptions{}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		user, pw, _ := strings.Cut(rest[:at], ":")
		var err1, err2 error
		fo.Username, err1 = url.PathUnescape(user)
		fo.Password, err2 = url.PathUnescape(pw)
		if err1 != nil || err2 != nil {
			return t, errors.New("its user or password is not percent-encoded properly")
		}
		rest = rest[at+1:]
	}
	rest, q, _ := strings.Cut(rest, "?")
	hosts, path, _ := strings.Cut(rest, "/")
	// No error quotes a piece of the URL: a malformed one may hold a
	// password anywhere (FuzzRedisURLError).
	for i, h := range strings.Split(hosts, ",") {
		host, port, err := net.SplitHostPort(h)
		if err != nil || host == "" {
			return t, fmt.Errorf("sentinel %d of the list is not host:port", i+1)
		}
		if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
			return t, fmt.Errorf("sentinel %d of the list has no valid port", i+1)
		}
		fo.SentinelAddrs = append(fo.SentinelAddrs, h)
	}
	master, db, hasDB := strings.Cut(path, "/")
	if master == "" {
		return t, errors.New("no master name: want redis+sentinel://host:port[,host:port…]/master[/db]")
	}
	fo.MasterName = master
	if hasDB {
		n, err := strconv.Atoi(db)
		if err != nil || n < 0 {
			return t, errors.New("the database (after the master name) is not a number")
		}
		fo.DB = n
	}
	vals, err := url.ParseQuery(q)
	if err != nil {
		return t, errors.New("its query does not parse")
	}
	for k := range vals {
		if k != "sentinel_password" && k != "min_replicas" && k != "replica_timeout" {
			return t, errors.New("an unknown query parameter (want only sentinel_password, min_replicas, replica_timeout)")
		}
	}
	fo.SentinelPassword = vals.Get("sentinel_password")
	if err := t.readReplicaQuery(vals, 1); err != nil {
		return t, err
	}
	t.failover = fo
	return t, nil
}

// readReplicaQuery sets minReplicas (default def) and replicaTimeout from
// vals.
func (t *redisTarget) readReplicaQuery(vals url.Values, def int) error {
	t.minReplicas, t.replicaTimeout = def, 500*time.Millisecond
	if v := vals.Get("min_replicas"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 100 {
			return errors.New("min_replicas: want a number from 0 to 100")
		}
		t.minReplicas = n
	}
	if v := vals.Get("replica_timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > 10*time.Second {
			return errors.New("replica_timeout: want a duration above 0 and at most 10s (250ms, 1s)")
		}
		t.replicaTimeout = d
	}
	return nil
}

// client is a go-redis client for t tuned to fail fast (newRedisClient),
// with a pool of poolSize connections (0: go-redis's default). Through
// Sentinel it is go-redis's failover client: it asks the sentinels for
// the primary, follows a failover (+switch-master) and sends every
// command, CONFIG and INFO included, to the primary. asynq is built from
// the same client (NewClientFromRedisClient and the like), so its queues
// fail over with it.
func (t redisTarget) client(poolSize int) *redis.Client {
	// A submit's pipeline reads WAIT's answer with the read timeout.
	read := max(time.Second, t.replicaTimeout+500*time.Millisecond)
	if fo := t.failover; fo != nil {
		fo.DialTimeout, fo.ReadTimeout, fo.WriteTimeout = time.Second, read, time.Second
		fo.PoolTimeout = 1500 * time.Millisecond
		fo.MaxRetries = 1
		fo.ContextTimeoutEnabled = true
		if poolSize > 0 {
			fo.PoolSize = poolSize
		}
		return redis.NewFailoverClient(fo)
	}
	opt := t.opt
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = time.Second, read, time.Second
	opt.PoolTimeout = 1500 * time.Millisecond
	opt.MaxRetries = 1
	opt.ContextTimeoutEnabled = true
	if poolSize > 0 {
		opt.PoolSize = poolSize
	}
	return redis.NewClient(opt)
}

// where names the Redis t reaches, for logs and errors: host:port or
// the socket, or "sentinel master NAME (host:port,…)". No password.
func (t redisTarget) where() string {
	if t.failover != nil {
		return "sentinel master " + t.failover.MasterName + " (" + strings.Join(t.failover.SentinelAddrs, ",") + ")"
	}
	return t.opt.Addr
}
