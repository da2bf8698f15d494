package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/lathe-ml/lathe/internal/pathpolicy"
	"github.com/lathe-ml/lathe/internal/trainer"
)

// uploadArtifacts hashes each artifact the trainer reported in outDir (the
// output folder, opened before the trainer started), checks its size and
// sha256 against the report, and puts it under artifacts/. With no report,
// every regular file at the top of outDir is an artifact (as for the local
// worker). Each artifact is opened once with pathpolicy.OpenArtifact, which
// refuses a symbolic link, a hard link, a FIFO and anything but a regular
// file of the folder; the digest and the upload both read that one open
// file, and the upload is hashed again so a file changed in between is
// refused, not sent.
func uploadArtifacts(ctx context.Context, st ObjectStore, uri JobURI, outDir *os.File, reported []trainer.TrainerEvent) ([]Artifact, error) {
	reported, err := trainer.PublishSet(outDir, reported)
	if err != nil {
		return nil, err
	}
	out := make([]Artifact, 0, len(reported))
	for _, r := range reported {
		art, err := uploadArtifact(ctx, st, uri, outDir, r)
		if err != nil {
			return nil, err
		}
		out = append(out, art)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// uploadArtifact checks and uploads one artifact from one descriptor.
func uploadArtifact(ctx context.Context, st ObjectStore, uri JobURI, outDir *os.File, r trainer.TrainerEvent) (Artifact, error) {
	f, size, err := pathpolicy.OpenArtifact(outDir, r.Path)
	if err != nil {
		return Artifact{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return Artifact{}, fmt.Errorf("artifact %s: %w", r.Path, err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if n != size {
		return Artifact{}, fmt.Errorf("artifact %s: changed while being read (%d bytes at open, %d read)", r.Path, size, n)
	}
	if err := r.VerifyArtifact(n, sum); err != nil {
		return Artifact{}, err
	}
	// No timeout of its own (artifacts may be large): the guard bounds it.
	err = retry(ctx, 3, func(ctx context.Context) error {
		// At most the n bytes hashed are sent, from the descriptor checked.
		if err := st.Put(ctx, uri.Bucket, uri.Key(ArtifactsFolder+r.Path), io.NewSectionReader(f, 0, n), n); err != nil {
			return err
		}
		h := sha256.New()
		if _, err := io.Copy(h, io.NewSectionReader(f, 0, n)); err != nil {
			return err
		}
		if again := hex.EncodeToString(h.Sum(nil)); again != sum {
			return fmt.Errorf("file changed during the upload: sha256 %s before, %s after", sum, again)
		}
		return nil
	})
	if err != nil {
		return Artifact{}, fmt.Errorf("artifact %s: %w", r.Path, err)
	}
	return Artifact{Name: r.Path, Format: r.Format, Bytes: n, SHA256: sum}, nil
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
