package worker

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
	"github.com/lathe-ml/lathe/internal/trainer"
)

// TestPublishReasons: what the trainer got wrong is trainer_fault; a disk
// that is full stays internal; an output the config no longer allows, as
// written, is permanent.
func TestPublishReasons(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{trainer.Faultf("the trainer wrote no artifacts in /x"), jobtype.ReasonTrainerFault},
		{fmt.Errorf("artifact a: %w: it is a FIFO", pathpolicy.ErrNotArtifact), jobtype.ReasonTrainerFault},
		{fmt.Errorf("artifact a: %w", pathpolicy.ErrSymlink), jobtype.ReasonTrainerFault},
		{fmt.Errorf("artifact a: open a: %w", fs.ErrNotExist), jobtype.ReasonTrainerFault},
		{fmt.Errorf("artifact a: write: %w", syscall.ENOSPC), jobtype.ReasonInternal},
		{errors.New("read: input/output error"), jobtype.ReasonInternal},
	} {
		if got := artifactsReason(tc.err); got != tc.want {
			t.Errorf("artifactsReason(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
	roots, err := pathpolicy.New([]string{"/models"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		uri  string
		err  error
		want string
	}{
		{"file:///models/j-1", fmt.Errorf("/models/j-1 (resolved /etc): %w", pathpolicy.ErrOutside), jobtype.ReasonTrainerFault},
		{"file:///models/j-1", fmt.Errorf("/models/j-1: %w", pathpolicy.ErrSymlink), jobtype.ReasonTrainerFault},
		{"file:///elsewhere/j-1", fmt.Errorf("/elsewhere/j-1: %w", pathpolicy.ErrOutside), jobtype.ReasonPermanent},
		{"file:///models/j-1", fmt.Errorf("/models/j-1: %w", pathpolicy.ErrDenied), jobtype.ReasonPermanent},
		{"file:///models/j-1", fmt.Errorf("make /models/j-1: %w", syscall.ENOSPC), jobtype.ReasonInternal},
	} {
		if got := outputReason(roots, tc.uri, tc.err); got != tc.want {
			t.Errorf("outputReason(%s, %v) = %s, want %s", tc.uri, tc.err, got, tc.want)
		}
	}
}
