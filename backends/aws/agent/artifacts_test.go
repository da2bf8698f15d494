package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// linkArtifactTrainer is a /bin/sh STAND-IN for a hostile trainer: its
// artifact is a symbolic link (first argument "sym") or a hard link ("hard")
// to the file named by its second argument, outside its output folder; it
// reports the artifact and exits 0.
const linkArtifactTrainer = `#!/bin/sh
if [ "$1" = hard ]; then ln "$2" "$LATHE_OUTPUT_DIR/adapter_model.safetensors"; else ln -s "$2" "$LATHE_OUTPUT_DIR/adapter_model.safetensors"; fi
echo '{"event":"artifact","path":"adapter_model.safetensors","format":"safetensors"}'
echo '{"event":"done","metrics":{}}'
`

// TestArtifactLinkIsNotUploaded: the agent refuses an artifact that is a
// link to a file outside the output folder: the attempt fails naming it
// and nothing is uploaded (S3 through moto_server, a FAKE).
func TestArtifactLinkIsNotUploaded(t *testing.T) {
	b := setup(t)
	secret := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(secret, []byte("root:$6$secret-hash"), 0o600); err != nil {
		t.Fatal(err)
	}
	sh := filepath.Join(t.TempDir(), "link-trainer.sh")
	if err := os.WriteFile(sh, []byte(linkArtifactTrainer), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"sym", "hard"} {
		t.Run(kind, func(t *testing.T) {
			id := "job-link-" + kind
			cfg := b.config(t, b.job(id, 1, 600, []string{"/bin/sh", sh, kind, secret}))
			got, err := Run(b.ctx, cfg)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if got.State != StateFailed || !strings.Contains(got.Error, "adapter_model.safetensors") || !strings.Contains(got.Error, "not a regular file of the output folder") {
				t.Fatalf("status %+v, want failed naming the artifact", got)
			}
			b.status(t, id, 1, got)
			if keys := b.list(t, prefix+"/"+id+"/1/"+ArtifactsFolder); len(keys) != 0 {
				t.Fatalf("uploaded %v", keys)
			}
		})
	}
}
