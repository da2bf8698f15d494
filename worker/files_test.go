package worker_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// hostileArtifactTrainer is a /bin/sh STAND-IN for a hostile trainer: it
// makes its artifact a symbolic link (LINK=sym) or a hard link (LINK=hard)
// to $SECRET, a file outside its output folder, reports it, and exits 0.
const hostileArtifactTrainer = `#!/bin/sh
if [ "$(basename "$0")" = "hard.sh" ]; then
  ln "` + "%SECRET%" + `" "$LATHE_OUTPUT_DIR/adapter_model.safetensors"
else
  ln -s "` + "%SECRET%" + `" "$LATHE_OUTPUT_DIR/adapter_model.safetensors"
fi
echo '{"event":"artifact","path":"adapter_model.safetensors","format":"safetensors"}'
echo '{"event":"done","metrics":{}}'
`

// TestArtifactLinkOutOfTheOutputIsRefused: a trainer whose artifact is a
// symbolic or hard link to a file outside its output folder does not get a
// succeeded job, and the foreign bytes are not published.
func TestArtifactLinkOutOfTheOutputIsRefused(t *testing.T) {
	secretDir := t.TempDir()
	secret := filepath.Join(secretDir, "shadow")
	if err := os.WriteFile(secret, []byte("root:$6$secret-hash"), 0o600); err != nil {
		t.Fatal(err)
	}
	body := strings.ReplaceAll(hostileArtifactTrainer, "%SECRET%", secret)
	b := setup(t, map[string]string{"sym": body, "hard": body})
	for _, trainer := range []string{"sym", "hard"} {
		t.Run(trainer, func(t *testing.T) {
			id := b.submit(t, trainer, time.Hour)
			j := b.wait(t, id, terminal)
			if j.State == jobtype.StateSucceeded {
				t.Fatalf("succeeded with artifacts %+v", j.Artifacts)
			}
			if j.State != jobtype.StateFailed || !strings.Contains(j.Error, "adapter_model.safetensors") || !strings.Contains(j.Error, "not a regular file of the output folder") {
				t.Fatalf("got %s/%s: %q; want failed naming the artifact", j.State, j.Reason, j.Error)
			}
			p, _ := fileuri.Path(j.OutputURI)
			if got, err := os.ReadFile(filepath.Join(p, "adapter_model.safetensors")); err == nil {
				t.Fatalf("published %q", got)
			}
		})
	}
}
