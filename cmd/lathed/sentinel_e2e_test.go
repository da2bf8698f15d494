package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/apiclient"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
)

// statusCounter counts the API's answers by status (a transport under
// apiclient: every try of every resend passes here).
type statusCounter struct {
	next  http.RoundTripper
	mu    sync.Mutex
	codes map[int]int
	errs  int
}

func (c *statusCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.errs++
	} else {
		c.codes[resp.StatusCode]++
	}
	return resp, err
}

// TestSentinelFailoverE2E: a Redis that fails over, all real: a primary
// redis-server, two replicas and three redis-sentinel processes
// (redistest.StartSentinel), and the real `lathed scheduler` and `lathed
// worker` binaries on --redis-url redis+sentinel://… (min_replicas left at
// its Sentinel default, 1: a submit's write waits for one replica).
// 1,000 submits, each with its own Idempotency-Key and job name, go
// through apiclient as `lathe submit` sends them, eight at a time, and
// each is sent again with its key until it is acknowledged (apiclient
// resends on a 503 or no answer, and the test after apiclient gives up).
// After 300 are acknowledged the primary is killed with SIGKILL. Once the
// sentinels have promoted a replica and every submit is acknowledged,
// the new primary, read directly, holds every acknowledged job exactly
// once, under the id its answer named: none lost, none duplicated. Then
// the same scheduler and worker processes (none restarted) run a job
// submitted after the failover to the end (lathe submit --wait, its
// artifacts pulled: checkRun). Nothing is asserted about time; the
// answers' statuses and the time from the kill to the promotion are
// logged.
func TestSentinelFailoverE2E(t *testing.T) {
	requireTorch(t)
	lathed, lathe := binaries(t)
	g := redistest.StartSentinel(t, 2)
	url := g.URL("")
	port := redistest.FreePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	data := t.TempDir()
	sd := startDaemon(t, lathed, "scheduler", "--redis-url", url, "--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", data)
	wd := startDaemon(t, lathed, "worker", "--backend", "local", "--redis-url", url, "--data-dir", data, "--node", "sentinel-node", "--slots", "1")
	waitHTTP(t, base, sd)

	counter := &statusCounter{next: http.DefaultTransport, codes: map[int]int{}}
	client := apiclient.New(base, "", &http.Client{Transport: counter})
	root := repoRoot(t)
	const total, killAfter, parallel = 1000, 300, 8
	spec := func(name string) []byte {
		return fmt.Appendf(nil, `{"name":%q,"base_model":"tiny-char","dataset":"file://%s/configs/examples/data/tiny-train.jsonl",`+
			`"lora":{"rank":4,"alpha":8,"target_modules":["q_proj","v_proj"]},"training":{"max_steps":2,"batch_size":4,"learning_rate":0.001},`+
			`"resources":{"gpus":0},"priority":"batch"}`, name, root)
	}
	oldPrimary := g.Primary()
	if oldPrimary != g.Servers[0].Addr {
		t.Fatalf("primary %s, want %s", oldPrimary, g.Servers[0].Addr)
	}
	var (
		acked    = make([]string, total) // job id by submit
		nAcked   atomic.Int64
		killOnce sync.Once
		killedAt time.Time
		killed   = make(chan struct{})
		next     atomic.Int64
		wg       sync.WaitGroup
		fail     = make(chan error, parallel)
		slowMu   sync.Mutex
		slowest  time.Duration // one submit's, from its first send to its answer
		slowName string
		promoted = make(chan time.Time, 1)
	)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for w := 0; w < parallel; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= total {
					return
				}
				name := fmt.Sprintf("sentinel-%04d", i)
				began := time.Now()
				for {
					j, err := client.Submit(ctx, spec(name), "key-"+name, false)
					if err == nil {
						acked[i] = j.ID
						break
					}
					var ae *apiclient.APIError
					if ctx.Err() != nil || !(errors.Is(err, apiclient.ErrUnreachable) || errors.As(err, &ae) && ae.Status == http.StatusServiceUnavailable) {
						fail <- fmt.Errorf("submit %s: %w", name, err)
						return
					}
					// apiclient gave up on its tries: the user runs it again, same key.
				}
				took := time.Since(began)
				slowMu.Lock()
				if took > slowest {
					slowest, slowName = took, name
				}
				slowMu.Unlock()
				if nAcked.Add(1) == killAfter {
					killOnce.Do(func() {
						killedAt = time.Now()
						g.Server(oldPrimary).Kill() // SIGKILL
						close(killed)
						go func() { // when the sentinels name another primary, for the log
							for ctx.Err() == nil {
								if a := g.Primary(); a != "" && a != oldPrimary {
									promoted <- time.Now()
									return
								}
								time.Sleep(20 * time.Millisecond)
							}
						}()
					})
				}
			}
		}()
	}
	wg.Wait()
	doneAt := time.Now()
	close(fail)
	for err := range fail {
		t.Fatal(err)
	}
	<-killed
	newPrimary := waitfor.Value(t, 60*time.Second, "a replica promoted", g.Primary, func(a string) bool { return a != "" && a != oldPrimary })
	t.Logf("failover: %s → %s, named by the sentinels %s after the kill; the slowest submit (%s) took %s from its first send to its answer; the last was answered %s after the kill (logged, not asserted)",
		oldPrimary, newPrimary, (<-promoted).Sub(killedAt).Round(time.Millisecond), slowName, slowest.Round(time.Millisecond), doneAt.Sub(killedAt).Round(time.Millisecond))
	counter.mu.Lock()
	t.Logf("API answers over all tries: %v, no answer %d", counter.codes, counter.errs)
	counter.mu.Unlock()

	// Every acknowledged job is in the new primary, exactly once.
	rdb := redis.NewClient(&redis.Options{Addr: newPrimary})
	defer rdb.Close()
	store := jobstore.New(rdb, jobstore.Config{})
	byName := map[string][]string{}
	for cursor := ""; ; {
		jobs, nextCursor, err := store.List(ctx, "", cursor, 500)
		if err != nil {
			t.Fatalf("list the new primary's jobs: %v", err)
		}
		for _, j := range jobs {
			byName[j.Spec.Name] = append(byName[j.Spec.Name], j.ID)
		}
		if nextCursor == "" {
			break
		}
		cursor = nextCursor
	}
	lost, dup := 0, 0
	for i, id := range acked {
		name := fmt.Sprintf("sentinel-%04d", i)
		got := byName[name]
		switch {
		case len(got) == 0:
			lost++
			t.Errorf("%s: acknowledged as %s, not in the new primary (lost)", name, id)
		case len(got) > 1:
			dup++
			t.Errorf("%s: %d jobs %v (duplicated)", name, len(got), got)
		case got[0] != id:
			t.Errorf("%s: acknowledged as %s, stored as %s", name, id, got[0])
		}
	}
	t.Logf("%d submits acknowledged, %d jobs of theirs in the new primary; lost %d, duplicated %d", total, len(byName), lost, dup)
	if len(byName) != total {
		t.Errorf("%d job names in the new primary, want %d", len(byName), total)
	}

	// The same scheduler and worker carry on: a job submitted now runs to the end.
	for _, d := range []*daemon{sd, wd} {
		select {
		case <-d.done:
			t.Fatalf("a lathed process exited over the failover:\n%s", d.output())
		default:
		}
	}
	checkRun(t, lathe, base)
}

// TestSentinelSettingsChecked: through redis+sentinel:// lathed's start
// checks read the primary the sentinels name (a real group: primary, one
// replica, three redis-sentinel): a primary set to allkeys-lru is refused
// though its replica keeps noeviction, and the refusal names the primary's
// port; then aof-load-truncated yes on the primary is refused; with both
// fixed, min_replicas=2 against one replica starts with the warning that
// submits are answered 503 until enough replicas connect.
func TestSentinelSettingsChecked(t *testing.T) {
	lathed, _ := binaries(t)
	g := redistest.StartSentinel(t, 1)
	primary := g.Servers[0].Client()
	ctx := context.Background()
	_, port, _ := net.SplitHostPort(g.Servers[0].Addr)
	run := func(query string) string {
		out, err := exec.Command(lathed, "scheduler", "--redis-url", g.URL(query), "--listen", "127.0.0.1:0", "--data-dir", t.TempDir()).CombinedOutput()
		if err == nil {
			t.Fatalf("lathed scheduler started (want a refusal):\n%s", out)
		}
		return string(out)
	}
	if err := primary.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	if out := run(""); !strings.Contains(out, "CONFIG SET maxmemory-policy noeviction") || !strings.Contains(out, "port "+port) {
		t.Fatalf("an evicting Sentinel primary was not refused by name:\n%s", out)
	}
	if err := primary.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := primary.ConfigSet(ctx, "aof-load-truncated", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	if out := run(""); !strings.Contains(out, "aof-load-truncated is yes") {
		t.Fatalf("a Sentinel primary loading truncated AOFs was not refused:\n%s", out)
	}
	if err := primary.ConfigSet(ctx, "aof-load-truncated", "no").Err(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(lathed, "scheduler", "--redis-url", g.URL("min_replicas=2"), "--listen", "127.0.0.1:0", "--data-dir", t.TempDir())
	log := &logBuf{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitfor.True(t, 30*time.Second, "lathed scheduler up through Sentinel", func() bool { return strings.Contains(log.String(), "API listening") })
	if !strings.Contains(log.String(), "fewer replicas connected than min_replicas") {
		t.Fatalf("no warning for min_replicas=2 with one replica:\n%s", log.String())
	}
}
