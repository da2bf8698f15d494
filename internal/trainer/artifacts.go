package trainer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
)

// ErrFault marks an error that is the trainer's, not Lathe's: it broke the
// trainer contract (no artifact, an artifact name that is not a plain file
// name, a size or sha256 other than it reported). errors.Is finds it; the
// workers fail the job with reason jobtype.ReasonTrainerFault, not retried.
var ErrFault = errors.New("trainer fault")

// faultError is an error of the trainer's whose message is msg alone.
type faultError struct{ msg string }

func (e *faultError) Error() string        { return e.msg }
func (e *faultError) Is(target error) bool { return target == ErrFault }

// Faultf formats an error that is the trainer's (errors.Is(err, ErrFault)),
// with the message as given.
func Faultf(format string, a ...any) error { return &faultError{msg: fmt.Sprintf(format, a...)} }

// IsFault reports whether err, from publishing an attempt's artifacts out
// of the output folder the trainer wrote (PublishSet, VerifyArtifact,
// pathpolicy.OpenArtifact), is the trainer's doing: ErrFault, an artifact
// that is a link or not a regular file of its own
// (pathpolicy.ErrNotArtifact, pathpolicy.ErrSymlink), or one it reported
// that its output folder does not hold (fs.ErrNotExist: it moved the
// folder or the file away). The rest (a full disk, an I/O or upload error)
// is not.
func IsFault(err error) bool {
	return errors.Is(err, ErrFault) || errors.Is(err, pathpolicy.ErrNotArtifact) || errors.Is(err, pathpolicy.ErrSymlink) ||
		errors.Is(err, fs.ErrNotExist)
}

// ArtifactsIn returns the artifacts of an attempt: those the trainer
// reported, or, when it reported none, every regular file at the top of
// outDir (an error wrapping ErrFault when there is none). outDir is the output folder opened
// with pathpolicy.OpenDir before the trainer started, so the listing reads
// that folder even if the trainer renamed it or put a link in its place.
// The local worker and the cloud agent publish the same set, each opening
// every artifact with pathpolicy.OpenArtifact.
func ArtifactsIn(outDir *os.File, reported []TrainerEvent) ([]TrainerEvent, error) {
	if len(reported) > 0 {
		return reported, nil
	}
	names, err := pathpolicy.ListRegular(outDir)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		reported = append(reported, TrainerEvent{Path: n})
	}
	if len(reported) == 0 {
		return nil, Faultf("the trainer wrote no artifacts in %s", outDir.Name())
	}
	return reported, nil
}

// PublishSet returns the artifacts an attempt publishes, in the order
// reported: ArtifactsIn, each name checked with jobtype.ValidArtifactName
// (a plain file name of outDir), a name reported twice kept once. Its
// errors about what the trainer wrote or reported wrap ErrFault. The local
// worker and the cloud agent both publish this set and check each file
// with [TrainerEvent.VerifyArtifact].
func PublishSet(outDir *os.File, reported []TrainerEvent) ([]TrainerEvent, error) {
	reported, err := ArtifactsIn(outDir, reported)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	out := make([]TrainerEvent, 0, len(reported))
	for _, r := range reported {
		if !jobtype.ValidArtifactName(r.Path) {
			return nil, Faultf("artifact name %q: must be a plain file name (no '/', '..' or control characters)", r.Path)
		}
		if seen[r.Path] {
			continue
		}
		seen[r.Path] = true
		out = append(out, r)
	}
	return out, nil
}

// VerifyArtifact checks what the trainer reported of artifact e (its
// sha256 and size, when given) against what the file has: n bytes whose
// hex sha256 is sum; a mismatch wraps ErrFault.
func (e TrainerEvent) VerifyArtifact(n int64, sum string) error {
	if e.SHA256 != "" && e.SHA256 != sum {
		return Faultf("artifact %s: trainer reported sha256 %s, file has %s", e.Path, e.SHA256, sum)
	}
	if e.Bytes != 0 && e.Bytes != n {
		return Faultf("artifact %s: trainer reported %d bytes, file has %d", e.Path, e.Bytes, n)
	}
	return nil
}
