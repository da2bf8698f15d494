package trainer

import (
	"fmt"
	"os"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
)

// ArtifactsIn returns the artifacts of an attempt: those the trainer
// reported, or, when it reported none, every regular file at the top of
// outDir (an error when there is none). outDir is the output folder opened
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
		return nil, fmt.Errorf("the trainer wrote no artifacts in %s", outDir.Name())
	}
	return reported, nil
}

// PublishSet returns the artifacts an attempt publishes, in the order
// reported: ArtifactsIn, each name checked with jobtype.ValidArtifactName
// (a plain file name of outDir), a name reported twice kept once. The local
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
			return nil, fmt.Errorf("artifact name %q: must be a plain file name (no '/', '..' or control characters)", r.Path)
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
// hex sha256 is sum.
func (e TrainerEvent) VerifyArtifact(n int64, sum string) error {
	if e.SHA256 != "" && e.SHA256 != sum {
		return fmt.Errorf("artifact %s: trainer reported sha256 %s, file has %s", e.Path, e.SHA256, sum)
	}
	if e.Bytes != 0 && e.Bytes != n {
		return fmt.Errorf("artifact %s: trainer reported %d bytes, file has %d", e.Path, e.Bytes, n)
	}
	return nil
}
