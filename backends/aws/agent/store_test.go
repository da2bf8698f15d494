package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

// memStore is an in-memory FAKE ObjectStore with state, for unit tests of
// the parts above it; failPuts makes the next n Puts fail.
type memStore struct {
	mu       sync.Mutex
	objs     map[string][]byte // "bucket/key"
	failPuts int
}

func newMemStore() *memStore { return &memStore{objs: map[string][]byte{}} }

func (m *memStore) Get(_ context.Context, bucket, key string) (io.ReadCloser, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.objs[bucket+"/"+key]
	if !ok {
		return nil, fmt.Errorf("get %s/%s: %w", bucket, key, ErrNotFound)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (m *memStore) Put(_ context.Context, bucket, key string, body io.ReadSeeker, size int64) error {
	b, err := io.ReadAll(body)
	if err != nil {
		return err
	}
	if int64(len(b)) != size {
		return fmt.Errorf("put %s: size %d, body %d bytes", key, size, len(b))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failPuts > 0 {
		m.failPuts--
		return errors.New("memStore: injected failure")
	}
	m.objs[bucket+"/"+key] = b
	return nil
}

func (m *memStore) List(_ context.Context, bucket, prefix string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var keys []string
	for k := range m.objs {
		if rest, ok := strings.CutPrefix(k, bucket+"/"); ok && strings.HasPrefix(rest, prefix) {
			keys = append(keys, rest)
		}
	}
	sort.Strings(keys)
	return keys, nil
}

var _ ObjectStore = (*memStore)(nil)

// TestEventBatches: lines are cut into numbered batches of at most
// EventBatchLines, in order; a failed upload keeps its batch and number.
func TestEventBatches(t *testing.T) {
	st := newMemStore()
	uri, _ := ParseJobURI("s3://b/p/j/1/job.json")
	u := newEventUploader(st, uri, 3, 1<<62, slog.New(slog.DiscardHandler)) // no ticks: batches are cut by hand
	for i := range 7 {
		u.note(fmt.Sprint("line ", i))
	}
	u.cut()
	st.failPuts = 1
	if err := u.upload(t.Context()); err == nil {
		t.Fatal("upload with a failing store: no error")
	}
	if err := u.upload(t.Context()); err != nil {
		t.Fatal(err)
	}
	u.note("line 7")
	go u.loop(t.Context())
	if err := u.close(t.Context()); err != nil {
		t.Fatal(err)
	}
	keys, _ := st.List(t.Context(), "b", "p/j/1/events/")
	want := []string{"p/j/1/events/000001.jsonl", "p/j/1/events/000002.jsonl", "p/j/1/events/000003.jsonl", "p/j/1/events/000004.jsonl"}
	if fmt.Sprint(keys) != fmt.Sprint(want) {
		t.Fatalf("batches %v, want %v", keys, want)
	}
	n := 0
	for _, k := range keys {
		st.mu.Lock()
		lines := strings.Split(strings.TrimSpace(string(st.objs["b/"+k])), "\n")
		st.mu.Unlock()
		if len(lines) > 3 {
			t.Errorf("%s has %d lines, want at most 3", k, len(lines))
		}
		for _, l := range lines {
			if !strings.Contains(l, fmt.Sprintf(`"line %d"`, n)) || !strings.Contains(l, `"type":"log"`) || !strings.Contains(l, `"stream":"agent"`) {
				t.Errorf("%s: line %q, want line %d", k, l, n)
			}
			n++
		}
	}
	if n != 8 || u.batches() != 4 {
		t.Fatalf("%d lines in %d batches, want 8 in 4", n, u.batches())
	}
}

// TestRestoreNewestComplete: only the newest checkpoint folder holding
// trainer_state.json is downloaded.
func TestRestoreNewestComplete(t *testing.T) {
	st := newMemStore()
	for _, k := range []string{"ckpt-2/a", "ckpt-2/trainer_state.json", "ckpt-10/a", "ckpt-10/trainer_state.json", "ckpt-11/a"} {
		st.objs["b/p/j/checkpoints/"+k] = []byte(k)
	}
	dir := t.TempDir()
	c := newCheckpoints(st, S3URI{Bucket: "b", Key: "p/j/checkpoints/"}, dir, slog.New(slog.DiscardHandler), func(string) {})
	got, err := c.restore(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[ckpt-10]" || c.newest() != "ckpt-10" {
		t.Fatalf("restored %v (newest %q), want [ckpt-10]", got, c.newest())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("checkpoint dir holds %d entries, want 1", len(entries))
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "ckpt-10", "a")); string(b) != "ckpt-10/a" {
		t.Fatalf("ckpt-10/a = %q", b)
	}
}

// TestRestoreRefusesEscapingKeys: a key with ".." never writes outside the
// checkpoint folder.
func TestRestoreRefusesEscapingKeys(t *testing.T) {
	st := newMemStore()
	st.objs["b/p/checkpoints/../evil"] = []byte("x")
	c := newCheckpoints(st, S3URI{Bucket: "b", Key: "p/checkpoints/"}, t.TempDir(), slog.New(slog.DiscardHandler), func(string) {})
	if _, err := c.restore(t.Context()); err == nil {
		t.Fatal("restore accepted a key leaving the checkpoint folder")
	}
}
