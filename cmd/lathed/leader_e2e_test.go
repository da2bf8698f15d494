package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
)

// quickTrainer is a stand-in for the reference trainer (a /bin/sh one-liner
// that speaks the trainer contract and writes one artifact), so that
// hundreds of jobs run in seconds; the real trainer is exercised by the
// other end-to-end tests.
const quickTrainerConfig = `
trainers:
  quick: ["/bin/sh", "-c", "echo '{\"event\":\"progress\",\"step\":1,\"total_steps\":1,\"loss\":1}'; printf x > \"$LATHE_OUTPUT_DIR/a.bin\""]
worker:
  lease_ttl: 3s
  heartbeat_ttl: 3s
  kill_grace: 2s
scheduler:
  leader_ttl: 2s
  place_interval: 100ms
  reap_grace: 1s
`

// TestLeaderKilledMidRun: two schedulers and two workers (processes) on
// one Redis, 200 jobs; the leading scheduler is killed with SIGKILL while
// they run. Every job ends succeeded exactly once, and no attempt was
// dispatched twice (read from the jobs' event streams).
func TestLeaderKilledMidRun(t *testing.T) {
	lathed, _ := binaries(t)
	rs := redistest.StartWith(t, redistest.Options{AOF: true})
	data := t.TempDir()
	cfg := filepath.Join(data, "lathe.yaml")
	os.WriteFile(cfg, []byte(quickTrainerConfig), 0o644)
	var bases []string
	var scheds []*daemon
	for i := 0; i < 2; i++ {
		port := redistest.FreePort(t)
		base := "http://127.0.0.1:" + strconv.Itoa(port)
		d := startDaemon(t, lathed, "scheduler", "--config", cfg, "--redis-url", rs.URL(), "--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", data)
		waitHTTP(t, base, d)
		bases, scheds = append(bases, base), append(scheds, d)
	}
	for i := 0; i < 2; i++ {
		startDaemon(t, lathed, "worker", "--config", cfg, "--backend", "local", "--redis-url", rs.URL(), "--data-dir", data,
			"--node", fmt.Sprintf("w%d", i), "--slots", "4")
	}
	leader := waitfor.Value(t, 30*time.Second, "a scheduler leading", func() int {
		leader := -1
		for i, b := range bases {
			if isLeader(t, b) {
				leader = i
			}
		}
		return leader
	}, func(leader int) bool { return leader >= 0 })
	other := 1 - leader
	spec := []byte(`{"name":"many","base_model":"tiny-char","dataset":"file://` + repoRoot(t) + `/configs/examples/data/tiny-train.jsonl","trainer":"quick"}`)
	var ids []string
	submit := func(base string) {
		resp, err := http.Post(base+"/api/v1/jobs", "application/json", bytes.NewReader(spec))
		if err != nil {
			t.Fatal(err)
		}
		var j jobtype.Job
		json.NewDecoder(resp.Body).Decode(&j)
		resp.Body.Close()
		if resp.StatusCode != 201 {
			t.Fatalf("submit: %d", resp.StatusCode)
		}
		ids = append(ids, j.ID)
	}
	for i := 0; i < 100; i++ {
		submit(bases[i%2])
	}
	// Kill the leader once some jobs have finished and others still run.
	waitJob(t, bases[other], ids[20], 60*time.Second, "some jobs done", func(j jobtype.Job) bool { return j.State.Terminal() })
	_ = scheds[leader].cmd.Process.Kill()
	<-scheds[leader].done
	for i := 0; i < 100; i++ {
		submit(bases[other])
	}
	deadline := time.Now().Add(3 * time.Minute)
	for _, id := range ids {
		j := waitJob(t, bases[other], id, time.Until(deadline), "terminal", func(j jobtype.Job) bool { return j.State.Terminal() })
		if j.State != jobtype.StateSucceeded {
			t.Fatalf("job %s ended %s: %s", id, j.State, j.Error)
		}
		dispatched := map[int]int{}
		succeeded := 0
		for _, e := range events(t, bases[other], id) {
			if e.Type != "state" {
				continue
			}
			var sc jobtype.StateChange
			json.Unmarshal(e.Data, &sc)
			switch sc.To {
			case jobtype.StateDispatched:
				dispatched[e.Attempt]++
			case jobtype.StateSucceeded:
				succeeded++
			}
		}
		for a, n := range dispatched {
			if n != 1 {
				t.Fatalf("job %s: attempt %d dispatched %d times", id, a, n)
			}
		}
		if succeeded != 1 {
			t.Fatalf("job %s: succeeded %d times", id, succeeded)
		}
	}
	if !isLeader(t, bases[other]) {
		t.Fatal("the surviving scheduler does not lead")
	}
	t.Logf("200 jobs succeeded once each; leader %d killed mid-run, %d took over", leader, other)
}

func isLeader(t *testing.T, base string) bool {
	resp, err := http.Get(base + "/healthz")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var h struct{ Leader bool }
	json.NewDecoder(resp.Body).Decode(&h)
	return h.Leader
}
