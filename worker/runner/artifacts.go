package runner

import (
	"fmt"
	"os"
)

// ArtifactsIn returns the artifacts of an attempt: those the trainer
// reported, or, when it reported none, every regular file at the top of
// outDir (an error when there is none). The local worker and the cloud
// agent publish the same set.
func ArtifactsIn(outDir string, reported []TrainerEvent) ([]TrainerEvent, error) {
	if len(reported) > 0 {
		return reported, nil
	}
	entries, err := os.ReadDir(outDir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", outDir, err)
	}
	for _, e := range entries {
		if e.Type().IsRegular() {
			reported = append(reported, TrainerEvent{Path: e.Name()})
		}
	}
	if len(reported) == 0 {
		return nil, fmt.Errorf("the trainer wrote no artifacts in %s", outDir)
	}
	return reported, nil
}
