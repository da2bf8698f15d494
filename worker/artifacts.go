package worker

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
	"github.com/lathe-ml/lathe/worker/runner"
)

// publishArtifacts copies the attempt's artifacts from outDir (the output
// folder, opened before the trainer started) into the job's output folder
// (outputURI, a per-job file:// folder), computing each file's size and
// sha256 and checking them against what the trainer reported. Each artifact
// is opened through outDir with pathpolicy.OpenArtifact: a symbolic link, a
// hard link (a second name of a file elsewhere), a FIFO or anything but a
// regular file of the folder is refused, and the copy and the digest are
// made from that one open file. Each file is written to a temporary name
// and renamed, so a reader never sees half a file. When the trainer
// reported no artifact, every regular file at the top of outDir is
// published.
func publishArtifacts(outDir *os.File, outputURI string, reported []runner.TrainerEvent) ([]jobtype.Artifact, error) {
	dest, err := fileuri.Path(outputURI)
	if err != nil {
		return nil, err
	}
	reported, err = runner.ArtifactsIn(outDir, reported)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return nil, fmt.Errorf("make %s: %w", dest, err)
	}
	seen := map[string]bool{}
	out := make([]jobtype.Artifact, 0, len(reported))
	for _, r := range reported {
		if !jobtype.ValidArtifactName(r.Path) {
			return nil, fmt.Errorf("artifact name %q: must be a plain file name (no '/', '..' or control characters)", r.Path)
		}
		if seen[r.Path] {
			continue
		}
		seen[r.Path] = true
		n, sum, err := copyArtifact(outDir, r.Path, filepath.Join(dest, r.Path))
		if err != nil {
			return nil, err
		}
		if r.SHA256 != "" && r.SHA256 != sum {
			return nil, fmt.Errorf("artifact %s: trainer reported sha256 %s, file has %s", r.Path, r.SHA256, sum)
		}
		if r.Bytes != 0 && r.Bytes != n {
			return nil, fmt.Errorf("artifact %s: trainer reported %d bytes, file has %d", r.Path, r.Bytes, n)
		}
		out = append(out, jobtype.Artifact{Path: r.Path, Format: r.Format, Bytes: n, SHA256: sum})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// copyArtifact copies the artifact name of dir to dst and returns its size
// and sha256, both from the one descriptor pathpolicy.OpenArtifact checked.
func copyArtifact(dir *os.File, name, dst string) (int64, string, error) {
	in, _, err := pathpolicy.OpenArtifact(dir, name)
	if err != nil {
		return 0, "", err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".tmp-"+filepath.Base(dst)+"-*")
	if err != nil {
		return 0, "", fmt.Errorf("artifact: %w", err)
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), in)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		return 0, "", fmt.Errorf("artifact %s: %w", filepath.Base(dst), err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}
