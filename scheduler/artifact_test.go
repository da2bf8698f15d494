package scheduler_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/scheduler"
)

// TestArtifactDownloadRefusesSwappedFile: a published artifact that is
// later replaced in the output folder by a symbolic link to a file outside
// it, by a hard link to such a file, or by a file of another size, or whose
// folder is replaced by a link, is refused with 409 naming the artifact; the
// outside bytes are never served. The secret has the artifact's very size,
// so the link itself, not the size check, is what refuses it.
func TestArtifactDownloadRefusesSwappedFile(t *testing.T) {
	out := t.TempDir()
	b := setup(t, scheduler.Config{Defaults: jobspec.Defaults{OutputURI: fileuri.FromPath(out)}})
	code, body := do(t, "POST", b.url+"/api/v1/jobs", goodSpec, nil)
	if code != 201 {
		t.Fatalf("submit: %d %s", code, body)
	}
	j := jobOf(t, body)
	adapter := []byte("the job's own adapter bytes")
	sum := sha256.Sum256(adapter)
	dir, err := fileuri.Path(j.OutputURI)
	if err != nil {
		t.Fatal(err)
	}
	art := filepath.Join(dir, "adapter.bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(art, adapter, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := b.store.Dispatch(b.ctx, jobstore.DispatchParams{JobID: j.ID, Attempt: 1, Node: "n1", Backend: "local", Capacity: 4}); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.store.Claim(b.ctx, jobstore.ClaimParams{ID: j.ID, Attempt: 1, Node: "n1", Incarnation: "i", Lease: time.Minute}); got != jobstore.Claimed {
		t.Fatal("claim")
	}
	if err := b.store.Finish(b.ctx, j.ID, 1, jobstore.Ending{State: jobtype.StateSucceeded,
		Artifacts: []jobtype.Artifact{{Path: "adapter.bin", Bytes: int64(len(adapter)), SHA256: hex.EncodeToString(sum[:])}}}); err != nil {
		t.Fatal(err)
	}
	url := b.url + "/api/v1/jobs/" + j.ID + "/artifacts/adapter.bin"
	if code, body := do(t, "GET", url, "", nil); code != 200 || string(body) != string(adapter) {
		t.Fatalf("download of the published artifact: %d %q", code, body)
	}

	// A file outside the output folder, of the artifact's size: a stand-in
	// for /etc/shadow or ledger.key.
	secret := strings.Repeat("S", len(adapter))
	outside := filepath.Join(t.TempDir(), "ledger.key")
	if err := os.WriteFile(outside, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	refused := func(what string) {
		t.Helper()
		code, body := do(t, "GET", url, "", nil)
		if strings.Contains(string(body), secret) {
			t.Fatalf("%s: the outside file was served: %d %q", what, code, body)
		}
		var e struct{ Error, Code string }
		if err := json.Unmarshal(body, &e); code != 409 || err != nil || e.Code != "conflict" || !strings.Contains(e.Error, "adapter.bin") {
			t.Fatalf("%s: %d %s, want 409 conflict naming adapter.bin", what, code, body)
		}
	}
	restore := func() {
		t.Helper()
		if err := os.Remove(art); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(art, adapter, 0o644); err != nil {
			t.Fatal(err)
		}
		if code, body := do(t, "GET", url, "", nil); code != 200 || string(body) != string(adapter) {
			t.Fatalf("download after restoring the artifact: %d %q", code, body)
		}
	}

	if err := os.Remove(art); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, art); err != nil {
		t.Fatal(err)
	}
	refused("artifact replaced by a symbolic link")
	restore()

	if err := os.Remove(art); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(outside, art); err != nil {
		t.Fatal(err)
	}
	refused("artifact replaced by a hard link")
	restore()

	if err := os.Remove(art); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(art, []byte(secret+"and more"), 0o644); err != nil {
		t.Fatal(err)
	}
	refused("artifact replaced by a file of another size")
	restore()

	// The job's folder itself swapped for a link to a folder holding a
	// file of that name.
	elsewhere := t.TempDir()
	if err := os.WriteFile(filepath.Join(elsewhere, "adapter.bin"), []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir, dir+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, dir); err != nil {
		t.Fatal(err)
	}
	refused("output folder replaced by a symbolic link")
}
