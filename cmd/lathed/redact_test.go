package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/redact/redacttest"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
)

// TestRedactURL: a password never survives redactURL, wherever it sits in
// the text and however it is encoded; URLs without one are unchanged.
func TestRedactURL(t *testing.T) {
	for _, c := range []struct{ in, want, secret string }{
		{"redis://:s3cret@db.internal:6379/0", "redis://:xxxxx@db.internal:6379/0", "s3cret"},
		{"redis://lathe:s3cret@db.internal:6379/2", "redis://lathe:xxxxx@db.internal:6379/2", "s3cret"},
		// The password equals the scheme: replacing its first occurrence
		// in the text would redact the scheme and print the password.
		{"redis://:redis@db.internal:6379/0", "redis://:xxxxx@db.internal:6379/0", ":redis@"},
		// Percent-encoded: the decoded password is not in the text.
		{"redis://:p%40ss%3Aw0rd@db.internal:6379/0", "redis://:xxxxx@db.internal:6379/0", "w0rd"},
		{"rediss://:s3cret@db.internal:6380/1", "rediss://:xxxxx@db.internal:6380/1", "s3cret"},
		{"unix://:s3cret@/run/redis.sock?db=1", "unix://:xxxxx@/run/redis.sock?db=1", "s3cret"},
		{"https://AKIA:s3cret@minio.internal:9000", "https://AKIA:xxxxx@minio.internal:9000", "s3cret"},
		// Does not parse (a control character): everything up to the last @ goes.
		{"redis://:s3\x7fcret@db.internal:6379/0", "redis://xxxxx@db.internal:6379/0", "cret"},
		{"redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0", ""},
		{"unix:///run/redis.sock", "unix:///run/redis.sock", ""},
		{"AWS", "AWS", ""},
	} {
		got := redactURL(c.in)
		if got != c.want {
			t.Errorf("redactURL(%q) = %q, want %q", c.in, got, c.want)
		}
		if c.secret != "" && strings.Contains(got, c.secret) {
			t.Errorf("redactURL(%q) = %q still holds %q", c.in, got, c.secret)
		}
	}
}

// TestRedisURLErrorRedacted: a bad db number is an error that names the
// flag and the URL, without its password.
func TestRedisURLErrorRedacted(t *testing.T) {
	var out, errb bytes.Buffer
	cmd := newRootCmd(&out, &errb)
	cmd.SetArgs([]string{"scheduler", "--redis-url", "redis://:s3cretpw@127.0.0.1:1/notadb", "--data-dir", t.TempDir()})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		t.Fatal("a bad db number was accepted")
	}
	all := err.Error() + out.String() + errb.String()
	if strings.Contains(all, "s3cretpw") {
		t.Fatalf("the password is printed: %s", all)
	}
	if want := `--redis-url "redis://:xxxxx@127.0.0.1:1/notadb"`; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not name %s", err, want)
	}
	if !strings.Contains(err.Error(), "invalid database number") {
		t.Fatalf("error %q does not say what is wrong", err)
	}
}

// TestStartLogRedacted runs `lathed scheduler` against a real redis-server
// that requires a password (one with an '@', percent-encoded in the URL)
// and reads its log until it is up: the password is nowhere in it.
func TestStartLogRedacted(t *testing.T) {
	rs := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	if err := rdb.ConfigSet(context.Background(), "requirepass", "s3cret@pw").Err(); err != nil {
		t.Fatal(err)
	}
	rdb.Close()
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: rs.Addr, Password: "s3cret@pw"})
		c.ConfigSet(context.Background(), "requirepass", "")
		c.Close()
	})
	out := &logBuf{}
	cmd := newRootCmd(out, out)
	cmd.SetArgs([]string{"scheduler", "--redis-url", "redis://:s3cret%40pw@" + rs.Addr + "/0", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	defer cancel() // also when the wait below fails
	waitfor.Value(t, 30*time.Second, "lathed scheduler up", func() string {
		select {
		case err := <-done:
			t.Fatalf("lathed scheduler ended: %v\n%s", err, out.String())
		default:
		}
		return out.String()
	}, func(log string) bool { return strings.Contains(log, "lathe is up") })
	cancel()
	<-done
	log := out.String()
	if strings.Contains(log, "s3cret") {
		t.Fatalf("the password is in the log:\n%s", log)
	}
	if !strings.Contains(log, "redis://:xxxxx@"+rs.Addr+"/0") {
		t.Fatalf("the log does not name the redacted URL:\n%s", log)
	}
}

// FuzzRedisURLError: wherever a --redis-url (or redis.url) holds a
// password, in whatever malformed URL, the error of the function that
// parses it never shows the password, nor does the URL the log prints.
func FuzzRedisURLError(f *testing.F) {
	redacttest.Fuzz(f, func(t *testing.T, u string) {
		rdb, err := newRedisClientPool(u, 0)
		if err != nil {
			redacttest.NoMarker(t, u, "newRedisClientPool's error", err.Error())
		} else {
			_ = rdb.Close()
		}
		redacttest.NoMarker(t, u, "redactURL", redactURL(u))
	})
}

// TestMalformedURLsRedactedE2E runs the real binaries with URLs that do
// not parse and hold a password: `lathed scheduler` and `lathed up` with
// such a --redis-url (a bracket error, no "://" so go-redis quotes the
// path, a password with '/'), and `lathe --server 'http://u:PASS@[::1:…'
// list`. Each fails, naming the URL redacted; the password is nowhere on
// stderr or stdout.
func TestMalformedURLsRedactedE2E(t *testing.T) {
	lathed, lathe := binaries(t)
	const pass = "SECRETPASS"
	for _, c := range []struct{ args []string }{
		{[]string{"scheduler", "--redis-url", "redis://:" + pass + "@[::1:6379/0"}},
		{[]string{"scheduler", "--redis-url", "redis:/:" + pass + "@127.0.0.1:6379/0"}},
		{[]string{"up", "--redis-url", "redis://u:" + pass + "/x@127.0.0.1:6379/0", "--listen", "127.0.0.1:0"}},
	} {
		cmd := exec.Command(lathed, append(c.args, "--data-dir", t.TempDir())...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if err == nil || strings.Contains(out.String()+errb.String(), pass) || !strings.Contains(errb.String(), "xxxxx@") {
			t.Errorf("lathed %v: %v\nstdout %q\nstderr %q\nwant a failure naming the URL redacted, without the password", c.args, err, out.String(), errb.String())
		}
	}
	for _, server := range []string{"http://u:" + pass + "@[::1:8080", "http://u:" + pass + "@[::1]]:8080"} {
		out, errOut, code := runLathe(t, lathe, os.Environ(), "--server", server, "list")
		if code != 2 || strings.Contains(out+errOut, pass) || !strings.Contains(errOut, "xxxxx@") {
			t.Errorf("lathe --server %s list: exit %d\nstdout %q\nstderr %q\nwant exit 2 naming the URL redacted, without the password", server, code, out, errOut)
		}
	}
}

// logBuf is a bytes.Buffer safe for the command's goroutines and the test's.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }

func (l *logBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }
