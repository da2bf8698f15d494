package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/lathe-ml/lathe/internal/apiclient"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// pulledFile is one artifact pull wrote, as -o json prints it.
type pulledFile struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

func (a *app) pullCmd() *cobra.Command {
	var to string
	cmd := &cobra.Command{
		Use:   "pull ID",
		Short: "Download a job's artifacts, verifying each sha256",
		Long: `Download every artifact of a job into --to (default ./<job-name>-<id>/).
Each file is written to a temporary name, checked against the sha256 in the
job's artifact list, and only then renamed into place.`,
		Args: exactArgs("ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			return a.pull(cmd.Context(), args[0], to)
		}),
	}
	cmd.Flags().StringVar(&to, "to", "", "directory to write into (default ./<job-name>-<id>/)")
	return cmd
}

func (a *app) pull(ctx context.Context, id, to string) error {
	c := a.client()
	job, err := c.Get(ctx, id)
	if err != nil {
		return err
	}
	if len(job.Artifacts) == 0 {
		return failedErrorf("job %s has no artifacts (state %s)", job.ID, job.State)
	}
	// Refuse the whole pull before writing anything if any entry is unsafe.
	for _, art := range job.Artifacts {
		if err := checkArtifactName(art.Path); err != nil {
			return failedErrorf("job %s: refusing artifact %q: %v", job.ID, art.Path, err)
		}
		if art.SHA256 == "" {
			return failedErrorf("job %s: artifact %q has no sha256 to verify against", job.ID, art.Path)
		}
	}
	if to == "" {
		to = job.Name + "-" + job.ID
		if err := checkArtifactName(to); err != nil {
			return failedErrorf("job %s: cannot make a directory name from it (%v); use --to", job.ID, err)
		}
	}
	if err := os.MkdirAll(to, 0o755); err != nil {
		return failedErrorf("pull: %w", err)
	}
	var files []pulledFile
	for _, art := range job.Artifacts {
		dst := filepath.Join(to, art.Path)
		n, err := download(ctx, c, job.ID, art, dst)
		if err != nil {
			return err
		}
		files = append(files, pulledFile{Name: art.Path, Path: dst, Bytes: n, SHA256: art.SHA256})
		if a.output != outJSON {
			fmt.Fprintln(a.stdout, dst)
		}
	}
	if a.output == outJSON {
		return writeJSON(a.stdout, files)
	}
	return nil
}

// download fetches one artifact into a temporary file next to dst and
// renames it into place only when its sha256 matches art's.
func download(ctx context.Context, c *apiclient.Client, id string, art jobtype.Artifact, dst string) (int64, error) {
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-*")
	if err != nil {
		return 0, failedErrorf("pull %s: %w", art.Path, err)
	}
	keep := false
	defer func() {
		if !keep {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	sum, err := c.Artifact(ctx, id, art.Path, tmp)
	if err != nil {
		if errors.Is(err, apiclient.ErrChecksum) {
			return 0, failedErrorf("pull %s: %w", art.Path, err)
		}
		return 0, err
	}
	if !strings.EqualFold(sum, art.SHA256) {
		return 0, failedErrorf("pull %s: sha256 mismatch: got %s, the job lists %s; nothing written", art.Path, sum, art.SHA256)
	}
	n, err := tmp.Seek(0, 1)
	if err != nil {
		return 0, failedErrorf("pull %s: %w", art.Path, err)
	}
	if err := tmp.Sync(); err != nil {
		return 0, failedErrorf("pull %s: %w", art.Path, err)
	}
	if err := tmp.Close(); err != nil {
		return 0, failedErrorf("pull %s: %w", art.Path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return 0, failedErrorf("pull %s: %w", art.Path, err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return 0, failedErrorf("pull %s: %w", art.Path, err)
	}
	keep = true
	return n, nil
}

// checkArtifactName refuses a name that could leave the target directory or
// fool a terminal: empty, ".", anything with "/", "\", ".." or a control
// character, or anything else jobtype.ValidArtifactName refuses.
func checkArtifactName(name string) error {
	switch {
	case name == "" || name == ".":
		return errors.New("empty name")
	case strings.ContainsAny(name, `/\`):
		return errors.New("it contains a path separator")
	case strings.Contains(name, ".."):
		return errors.New(`it contains ".."`)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return errors.New("it contains a control character")
		}
	}
	if !jobtype.ValidArtifactName(name) {
		return errors.New("it is not a plain file name")
	}
	return nil
}
