package runner

import (
	"fmt"
	"os"

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
