package main

import (
	"strings"
	"testing"
	"time"
)

// TestParseRedisURL: the Sentinel form's parts (sentinels, master, db,
// the data nodes' and the sentinels' passwords, min_replicas with its
// defaults: 1 through Sentinel, 0 otherwise), min_replicas and
// replica_timeout taken off a redis:// URL before go-redis reads it, and
// each malformed URL refused with an error that names what is wrong and
// never the password.
func TestParseRedisURL(t *testing.T) {
	tg, err := parseRedisURL("redis+sentinel://:p%40ss@10.0.0.1:26379,s2.example:26380/mymaster/3?sentinel_password=spw&replica_timeout=250ms")
	if err != nil {
		t.Fatal(err)
	}
	fo := tg.failover
	if fo == nil || tg.opt != nil {
		t.Fatalf("not a failover target: %+v", tg)
	}
	if strings.Join(fo.SentinelAddrs, " ") != "10.0.0.1:26379 s2.example:26380" || fo.MasterName != "mymaster" || fo.DB != 3 ||
		fo.Password != "p@ss" || fo.SentinelPassword != "spw" || tg.minReplicas != 1 || tg.replicaTimeout != 250*time.Millisecond {
		t.Fatalf("parsed %+v, min_replicas %d, timeout %s", fo, tg.minReplicas, tg.replicaTimeout)
	}
	if where := tg.where(); where != "sentinel master mymaster (10.0.0.1:26379,s2.example:26380)" {
		t.Fatalf("where = %q", where)
	}
	if tg, err = parseRedisURL("redis+sentinel://h:1/m?min_replicas=0"); err != nil || tg.minReplicas != 0 || tg.failover.DB != 0 {
		t.Fatalf("min_replicas=0: %+v %v", tg, err)
	}
	tg, err = parseRedisURL("redis://:pw@127.0.0.1:6379/2?min_replicas=2&dial_timeout=3s")
	if err != nil {
		t.Fatal(err)
	}
	if tg.opt == nil || tg.opt.DB != 2 || tg.opt.Password != "pw" || tg.minReplicas != 2 || tg.opt.DialTimeout != 3*time.Second {
		t.Fatalf("redis:// with min_replicas: %+v %d", tg.opt, tg.minReplicas)
	}
	if tg, err = parseRedisURL("redis://127.0.0.1:6379"); err != nil || tg.minReplicas != 0 {
		t.Fatalf("plain redis://: %d %v", tg.minReplicas, err)
	}
	if c := tg.client(0); c.Options().ReadTimeout != time.Second {
		t.Fatalf("read timeout %s", c.Options().ReadTimeout)
	}
	for _, c := range []struct{ url, want string }{
		{"redis+sentinel://:SECRETPW@h:1", "no master name"},
		{"redis+sentinel://:SECRETPW@h:1,/m", "not host:port"},
		{"redis+sentinel://:SECRETPW@h:x/m", "no valid port"},
		{"redis+sentinel://:SECRETPW@h:99999/m", "no valid port"},
		{"redis+sentinel://:SECRETPW@h:1/m/zero", "not a number"},
		{"redis+sentinel://:SECRETPW@h:1/m?master=x", "unknown query parameter"},
		{"redis+sentinel://:SECRETPW@h:1/m?min_replicas=-1", "min_replicas"},
		{"redis+sentinel://:SECRETPW@h:1/m?replica_timeout=1h", "replica_timeout"},
		{"redis://:SECRETPW@h:1?min_replicas=x", "min_replicas"},
	} {
		_, err := newRedisClient(c.url)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "--redis-url") {
			t.Errorf("%s: err %v, want one naming --redis-url and %q", c.url, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), "SECRETPW") {
			t.Errorf("%s: the error shows the password: %v", c.url, err)
		}
	}
}
