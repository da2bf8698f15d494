package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestSubmitIdempotencyKeyReused: against the real scheduler (on a real
// redis-server), `lathe submit --idempotency-key K` of one spec twice gives
// one job; K with another spec exits 1 naming the key, and stores nothing.
func TestSubmitIdempotencyKeyReused(t *testing.T) {
	dir := t.TempDir()
	server := daemonFromConfig(t, writeFile(t, dir, "lathe.yaml", routeConfig))
	spec := func(name string) string {
		return writeFile(t, dir, name+".yaml", "name: "+name+"\nbase_model: tiny-char\ndataset: file:///data/support/train.jsonl\n")
	}
	a, b := spec("first"), spec("second")
	r1 := lathe(t, server, "submit", a, "--idempotency-key", "release-7", "-o", "json")
	r2 := lathe(t, server, "submit", a, "--idempotency-key", "release-7", "-o", "json")
	if r1.code != exitOK || r2.code != exitOK || r1.stdout != r2.stdout {
		t.Fatalf("same spec, same key: exit %d/%d\n%s\n%s\n%s%s", r1.code, r2.code, r1.stdout, r2.stdout, r1.stderr, r2.stderr)
	}
	r3 := lathe(t, server, "submit", b, "--idempotency-key", "release-7")
	if r3.code != exitFailed || !strings.Contains(r3.stderr, `409 idempotency_conflict: Idempotency-Key "release-7" was used before with another job spec`) {
		t.Errorf("another spec, same key: exit %d, stderr %q", r3.code, r3.stderr)
	}
	list := lathe(t, server, "list", "-o", "json")
	var got struct{ Jobs []struct{ Name string } }
	if err := json.Unmarshal([]byte(list.stdout), &got); err != nil || len(got.Jobs) != 1 || got.Jobs[0].Name != "first" {
		t.Errorf("list: %d %v\n%s", list.code, err, list.stdout)
	}
}
