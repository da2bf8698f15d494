package worker

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/ledger"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// memStore is an in-memory FAKE of the S3 ObjectStore: a map of objects.
type memStore struct {
	mu   sync.Mutex
	objs map[string][]byte
}

func (m *memStore) Get(_ context.Context, bucket, key string) (io.ReadCloser, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.objs[bucket+"/"+key]
	if !ok {
		return nil, os.ErrNotExist
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (m *memStore) Put(_ context.Context, bucket, key string, body io.ReadSeeker, size int64) error {
	b, err := io.ReadAll(io.LimitReader(body, size))
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objs[bucket+"/"+key] = b
	return nil
}

func (m *memStore) List(_ context.Context, bucket, prefix string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for k := range m.objs {
		if b, key, _ := strings.Cut(k, "/"); b == bucket && strings.HasPrefix(key, prefix) {
			out = append(out, key)
		}
	}
	sort.Strings(out)
	return out, nil
}

// TestStagingRefusesDaemonFiles: the AWS worker never stages lathed's own
// files (its ledger key here) to a work bucket, although the data dir is
// an allowed root; an ordinary dataset is staged with the bytes checked.
// S3 is memStore (a FAKE); the ledger and job store use a real Redis.
func TestStagingRefusesDaemonFiles(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	dataDir, data := t.TempDir(), t.TempDir()
	key := filepath.Join(dataDir, "ledger.key")
	os.WriteFile(key, []byte("ledger-key-secret"), 0o600)
	good := filepath.Join(data, "train.jsonl")
	os.WriteFile(good, []byte("{\"text\":\"ok\"}\n"), 0o644)
	roots, _ := pathpolicy.New([]string{dataDir, data})
	rc, err := routecfg.ParseConfig([]byte(cloudTestConfig))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := rc.Backend("aws-eu")
	s3 := &memStore{objs: map[string][]byte{}}
	c := &Cloud{cfg: CloudConfig{Routing: rc, S3: s3, DataDir: dataDir, AllowedRoots: roots,
		Ledger: ledger.New(rdb, bytes.Repeat([]byte{7}, 32), "")}, b: b,
		remoteNode: remoteNode{store: jobstore.New(rdb, jobstore.Config{}), log: slog.New(slog.DiscardHandler)}}
	job := &jobtype.Job{ID: "j-1", Attempt: 1, Spec: jobspec.Spec{Residency: []string{"eu"}}}
	a := newCloudAttempt(c, job)

	_, err = a.stage(t.Context(), "dataset", fileuri.FromPath(key))
	var perm *permanentError
	if err == nil || !strings.Contains(err.Error(), "never readable by a job") || !errors.As(err, &perm) {
		t.Fatalf("stage(ledger.key): %v, want a permanent refusal", err)
	}
	for k, v := range s3.objs {
		if strings.Contains(string(v), "ledger-key-secret") {
			t.Fatalf("the ledger key was staged to %s", k)
		}
	}
	if _, err := a.stage(t.Context(), "dataset", fileuri.FromPath(data)); err == nil || !strings.Contains(err.Error(), "is a folder") || !errors.As(err, &perm) {
		t.Fatalf("stage(a folder): %v, want a permanent refusal", err)
	}
	to, err := a.stage(t.Context(), "dataset", fileuri.FromPath(good))
	if err != nil {
		t.Fatalf("stage(good): %v", err)
	}
	if got := s3.objs[strings.TrimPrefix(to, "s3://")]; string(got) != "{\"text\":\"ok\"}\n" {
		t.Fatalf("staged %q to %s", got, to)
	}
}
