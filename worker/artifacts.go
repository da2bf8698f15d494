package worker

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
	"github.com/lathe-ml/lathe/internal/trainer"
)

// publishArtifacts copies the attempt's artifacts from outDir (the output
// folder, opened before the trainer started) into dest, the job's output
// folder (opened with openOutput), computing each file's size and sha256 and
// checking them against what the trainer reported. Each artifact is opened
// through outDir with pathpolicy.OpenArtifact: a symbolic link, a hard link
// (a second name of a file elsewhere), a FIFO or anything but a regular file
// of the folder is refused, and the copy and the digest are made from that
// one open file. Each file is written through dest's descriptor to a
// temporary name and renamed (pathpolicy.CreateIn), so a reader never sees
// half a file and nothing is written through a link. When the trainer
// reported no artifact, every regular file at the top of outDir is
// published.
func publishArtifacts(outDir, dest *os.File, reported []trainer.TrainerEvent) ([]jobtype.Artifact, error) {
	reported, err := trainer.PublishSet(outDir, reported)
	if err != nil {
		return nil, err
	}
	out := make([]jobtype.Artifact, 0, len(reported))
	for _, r := range reported {
		n, sum, err := copyArtifact(outDir, r.Path, dest)
		if err != nil {
			return nil, err
		}
		if err := r.VerifyArtifact(n, sum); err != nil {
			return nil, err
		}
		out = append(out, jobtype.Artifact{Path: r.Path, Format: r.Format, Bytes: n, SHA256: sum})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// artifactsReason is the reason of a job whose artifacts could not be
// published (publishArtifacts' err): ReasonTrainerFault for what the
// trainer wrote or reported (no artifact, a bad name, a link or a file not
// its own, a size or digest other than reported; a retry would do the
// same), ReasonInternal for the rest (a disk that is full, an I/O error).
func artifactsReason(err error) string {
	if trainer.IsFault(err) {
		return jobtype.ReasonTrainerFault
	}
	return jobtype.ReasonInternal
}

// outputReason is the reason of a job whose file:// output folder
// outputURI openOutput refused (err) when its artifacts were to be
// published: ReasonTrainerFault when the folder, or one on its way, became a
// link while the trainer ran (a link met in the walk, or a path that the
// roots allow as written but not resolved); ReasonPermanent when the
// output is not allowed as written (the config changed since the job was
// submitted); ReasonInternal for the rest.
func outputReason(roots pathpolicy.Roots, outputURI string, err error) string {
	switch {
	case errors.Is(err, pathpolicy.ErrSymlink):
		return jobtype.ReasonTrainerFault
	case errors.Is(err, pathpolicy.ErrOutside) || errors.Is(err, pathpolicy.ErrDenied):
		if p, perr := fileuri.Path(outputURI); perr == nil && errors.Is(err, pathpolicy.ErrOutside) && roots.Allows(p) {
			return jobtype.ReasonTrainerFault // allowed as written, not as resolved: a link
		}
		return jobtype.ReasonPermanent
	}
	return jobtype.ReasonInternal
}

// openOutput opens (making it) the job's file:// output folder for
// publishArtifacts. Under allowed roots it is pathpolicy.Roots.MakeDir:
// checked again now, walked without following links, so a folder swapped for
// a link while the trainer ran is refused, not written through; it is made
// mode 0750, its artifacts 0640 (pathpolicy.CreateIn). Without
// roots (nil: tests only) it is made and opened by name.
func openOutput(roots pathpolicy.Roots, key string, deny pathpolicy.Deny, outputURI string) (*os.File, error) {
	dest, err := fileuri.Path(outputURI)
	if err != nil {
		return nil, fmt.Errorf("output: %w", err)
	}
	if roots != nil {
		d, err := roots.MakeDir(dest, deny)
		if err != nil {
			return nil, fmt.Errorf("output: %w%s", err, rootsHint(err, key))
		}
		// The job's own folder is not for others (a trainer running as a
		// user of its own must not read another job's artifacts): 0750.
		if err := d.Chmod(0o750); err != nil {
			d.Close()
			return nil, fmt.Errorf("output: %w", err)
		}
		return d, nil
	}
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return nil, fmt.Errorf("output: make %s: %w", dest, err)
	}
	d, err := pathpolicy.OpenDir(dest)
	if err != nil {
		return nil, fmt.Errorf("output: %w", err)
	}
	return d, nil
}

// copyArtifact copies the artifact name of dir into dest and returns its
// size and sha256, both from the one descriptor pathpolicy.OpenArtifact
// checked.
func copyArtifact(dir *os.File, name string, dest *os.File) (int64, string, error) {
	in, _, err := pathpolicy.OpenArtifact(dir, name)
	if err != nil {
		return 0, "", err
	}
	defer in.Close()
	h := sha256.New()
	n, err := pathpolicy.CreateIn(dest, name, io.TeeReader(in, h))
	if err != nil {
		return 0, "", fmt.Errorf("artifact %s: %w", name, err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}
