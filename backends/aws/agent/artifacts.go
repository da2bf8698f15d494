package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/worker/runner"
)

// uploadArtifacts hashes each artifact the trainer reported in outDir,
// checks its size and sha256 against the report, and puts it under
// artifacts/. With no report, every regular file at the top of outDir is
// an artifact (as for the local worker).
func uploadArtifacts(ctx context.Context, st ObjectStore, uri JobURI, outDir string, reported []runner.TrainerEvent) ([]Artifact, error) {
	reported, err := runner.ArtifactsIn(outDir, reported)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	out := make([]Artifact, 0, len(reported))
	for _, r := range reported {
		if !jobtype.ValidArtifactName(r.Path) {
			return nil, fmt.Errorf("artifact name %q: must be a plain file name (no '/', '..' or control characters)", r.Path)
		}
		if seen[r.Path] {
			continue
		}
		seen[r.Path] = true
		src := filepath.Join(outDir, r.Path)
		n, sum, err := HashFile(src)
		if err != nil {
			return nil, fmt.Errorf("artifact %s: %w", r.Path, err)
		}
		if r.SHA256 != "" && r.SHA256 != sum {
			return nil, fmt.Errorf("artifact %s: trainer reported sha256 %s, file has %s", r.Path, r.SHA256, sum)
		}
		if r.Bytes != 0 && r.Bytes != n {
			return nil, fmt.Errorf("artifact %s: trainer reported %d bytes, file has %d", r.Path, r.Bytes, n)
		}
		// No timeout of its own (artifacts may be large): the guard bounds it.
		err = retry(ctx, 3, func(ctx context.Context) error {
			put, err := UploadFile(ctx, st, uri.Bucket, uri.Key(ArtifactsFolder+r.Path), src)
			if err == nil && put != n {
				err = fmt.Errorf("file changed during the upload: %d bytes hashed, %d sent", n, put)
			}
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("artifact %s: %w", r.Path, err)
		}
		out = append(out, Artifact{Name: r.Path, Format: r.Format, Bytes: n, SHA256: sum})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// HashFile returns the size and hex sha256 of the file at p (the agent and
// the AWS worker check artifacts with it).
func HashFile(p string) (int64, string, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}
