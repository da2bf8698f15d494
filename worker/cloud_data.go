package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/lathe-ml/lathe/backends/aws/agent"
	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/ledger"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
	"github.com/lathe-ml/lathe/internal/redact"
	"github.com/lathe-ml/lathe/internal/trainer"
)

// permanentError is a refusal that no retry can fix.
type permanentError struct{ msg string }

func (e *permanentError) Error() string { return e.msg }

func permanent(format string, args ...any) error {
	return &permanentError{msg: fmt.Sprintf(format, args...)}
}

// LedgerKindStaging is the ledger record kind of a dataset copied to a
// cloud backend's bucket.
const LedgerKindStaging = "staging"

// stagingRecord is the body of a staging ledger record.
type stagingRecord struct {
	What      string   `json:"what"` // dataset | eval_dataset
	From      string   `json:"from"`
	FromSite  string   `json:"from_site"`
	To        string   `json:"to"`
	ToSite    string   `json:"to_site"`
	Backend   string   `json:"backend"`
	Attempt   int      `json:"attempt"`
	Bytes     int64    `json:"bytes"`
	SHA256    string   `json:"sha256"`
	Residency []string `json:"residency"`
	Why       string   `json:"why"`
}

// stage returns the s3:// URI the agent downloads data named by uri from.
// s3:// data is used where it is (its bucket's site carries the job's tags:
// checkResidency). A file:// dataset is copied once per job to the
// backend's work bucket, WORK/JOB/data/SHA-NAME; the copy is recorded in
// the ledger before it is made, and without a ledger it is not made.
func (a *cloudAttempt) stage(ctx context.Context, what, uri string) (string, error) {
	switch {
	case strings.HasPrefix(uri, "s3://"):
		if _, err := agent.ParseS3URI(uri); err != nil {
			return "", permanent("%s %q: %v", what, redact.URL(uri), redact.Text(err.Error(), uri))
		}
		return uri, nil
	case !strings.HasPrefix(uri, "file:"):
		return "", permanent("%s %q: only file:// and s3:// data can reach a cloud instance", what, redact.URL(uri))
	}
	f, p, err := a.openDataset(what, uri)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	size, err := io.Copy(h, f)
	if err != nil {
		return "", fmt.Errorf("%s: read %s: %w", what, p, err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	work, _ := agent.ParseS3URI(a.c.b.WorkURI)
	key := joinKey(work.Key, a.job.ID, "data", sum[:16]+"-"+filepath.Base(p))
	to := "s3://" + work.Bucket + "/" + key
	existing, err := a.c.cfg.S3.List(ctx, work.Bucket, key)
	if err != nil {
		return "", fmt.Errorf("%s: look for %s: %w", what, to, err)
	}
	for _, k := range existing {
		if k == key {
			return to, nil // staged by an earlier attempt (and recorded then)
		}
	}
	rec := stagingRecord{What: what, From: uri, FromSite: siteOfURI(a.c.cfg.Routing, uri), To: to, ToSite: a.c.b.Site, Backend: a.c.b.Name,
		Attempt: a.n, Bytes: size, SHA256: sum, Residency: a.job.Spec.Residency,
		Why: "the job was routed to " + a.c.b.Name + ", whose instances read data from S3"}
	if err := a.recordStaging(ctx, rec); err != nil {
		return "", err
	}
	if err := a.c.cfg.S3.Put(ctx, work.Bucket, key, io.NewSectionReader(f, 0, size), size); err != nil {
		return "", fmt.Errorf("%s: copy to %s: %w", what, to, err)
	}
	a.note(ctx, fmt.Sprintf("staged %s %s (%d bytes, sha256 %s) to %s (site %s); recorded in the ledger", what, uri, size, sum[:12], to, a.c.b.Site))
	return to, nil
}

// openDataset opens the file a file:// uri names, once, through the
// allowed roots of the job's team where there are some (its own, else the
// worker's): the bytes hashed, recorded and
// uploaded are those of the file checked, whatever happens to its name
// meanwhile. It returns the file and its path; a folder is refused.
func (a *cloudAttempt) openDataset(what, uri string) (*os.File, string, error) {
	p, err := fileuri.Path(uri)
	if err != nil {
		return nil, "", permanent("%s: %v", what, err)
	}
	var f *os.File
	if roots, key := a.c.cfg.TeamRoots.For(a.job.Team, a.c.cfg.AllowedRoots); roots != nil {
		f, err = roots.Open(p, dataDenyOf(a.c.cfg.DataDir, "", "", a.c.cfg.Deny))
		if err != nil {
			return nil, "", permanent("%s: %v%s", what, err, rootsHint(err, key))
		}
	} else if f, err = os.Open(p); err != nil {
		return nil, "", fmt.Errorf("%s: %w", what, err)
	}
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		f.Close()
		return nil, "", permanent("%s %s: is a folder; only a file can be staged to a cloud backend", what, uri)
	}
	return f, p, nil
}

// recordStaging appends rec, a copy about to be made, to the ledger.
// Recorded before the copy, on purpose, and not in one script with it (an
// S3 upload is no Redis write): a record of a copy that then failed is
// acceptable (the record says it was about to be made, and why); a copy
// without a record is not. No ledger, or an append that fails: an error,
// and the caller makes no copy.
func (a *cloudAttempt) recordStaging(ctx context.Context, rec stagingRecord) error {
	if a.c.cfg.Ledger == nil {
		return permanent("%s %s must be copied to %s, but this worker has no ledger key: a copy that cannot be recorded is not made", rec.What, rec.From, rec.To)
	}
	body, _ := json.Marshal(rec)
	if _, err := a.c.cfg.Ledger.Append(ctx, ledger.Record{Kind: LedgerKindStaging, JobID: a.job.ID, Team: a.job.Team,
		Token: a.job.Submitter, ConfigHash: a.c.cfg.Routing.Hash(), Body: body}); err != nil {
		return fmt.Errorf("%s: record the copy in the ledger (not copied): %w", rec.What, err)
	}
	return nil
}

// collect brings a succeeded attempt's artifacts from the work bucket to
// the job's output: a file:// output folder (copied through the worker,
// checked against the sizes and digests the agent reported), or an s3://
// output (copied there, checked the same way). checkResidency has checked
// the output's site.
func (a *cloudAttempt) collect(ctx context.Context, arts []agent.Artifact) ([]jobtype.Artifact, error) {
	if len(arts) == 0 {
		return nil, errors.New("the agent reported no artifacts")
	}
	tmp := a.c.tmpDir(a.job.ID, a.n)
	if err := os.RemoveAll(tmp); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	reported, err := a.downloadArtifacts(ctx, arts, tmp)
	if err != nil {
		return nil, err
	}
	tmpFD, err := pathpolicy.OpenDir(tmp)
	if err != nil {
		return nil, err
	}
	defer tmpFD.Close()
	out := a.job.OutputURI
	site := siteOfURI(a.c.cfg.Routing, out)
	var res []jobtype.Artifact
	switch {
	case strings.HasPrefix(out, "file:"):
		res, err = a.publishToFolder(tmpFD, out, reported)
	case strings.HasPrefix(out, "s3://"):
		res, err = a.uploadToS3(ctx, tmp, out, reported)
	default:
		err = fmt.Errorf("output %q: want file:// or s3://", out)
	}
	if err != nil {
		return nil, err
	}
	for i := range res {
		res[i].Residency, res[i].Site = a.job.Spec.Residency, site
	}
	a.log.Info("artifacts at the output", slog.String("output", out), slog.Int("artifacts", len(res)))
	return res, nil
}

// downloadArtifacts copies the artifacts the agent reported from the work
// bucket into tmp, and returns them as the trainer events publishing
// checks the copies against.
func (a *cloudAttempt) downloadArtifacts(ctx context.Context, arts []agent.Artifact, tmp string) ([]trainer.TrainerEvent, error) {
	reported := make([]trainer.TrainerEvent, 0, len(arts))
	for _, art := range arts {
		if !jobtype.ValidArtifactName(art.Name) {
			return nil, fmt.Errorf("artifact name %q: must be a plain file name", art.Name)
		}
		if _, err := agent.Download(ctx, a.c.cfg.S3, a.work.Bucket, a.work.Key+agent.ArtifactsFolder+art.Name, filepath.Join(tmp, art.Name)); err != nil {
			return nil, err
		}
		reported = append(reported, trainer.TrainerEvent{Kind: trainer.EventArtifact, Path: art.Name, Format: art.Format, Bytes: art.Bytes, SHA256: art.SHA256})
	}
	return reported, nil
}

// publishToFolder publishes the reported artifacts from tmp into the
// file:// output folder out, through the allowed roots of the job's team.
func (a *cloudAttempt) publishToFolder(tmp *os.File, out string, reported []trainer.TrainerEvent) ([]jobtype.Artifact, error) {
	roots, key := a.c.cfg.TeamRoots.For(a.job.Team, a.c.cfg.AllowedRoots)
	dest, err := openOutput(roots, key, outputDenyOf(a.c.cfg.DataDir, "", a.c.cfg.Deny), out)
	if err != nil {
		return nil, err
	}
	defer dest.Close()
	return publishArtifacts(tmp, dest, reported)
}

// uploadToS3 copies the reported artifacts from tmp to the s3:// output
// out, each checked first against the size and digest the agent reported.
func (a *cloudAttempt) uploadToS3(ctx context.Context, tmp, out string, reported []trainer.TrainerEvent) ([]jobtype.Artifact, error) {
	dest, err := agent.ParseS3URI(out)
	if err != nil {
		return nil, fmt.Errorf("output %q: %w", out, err)
	}
	var res []jobtype.Artifact
	for _, r := range reported {
		p := filepath.Join(tmp, r.Path)
		n, sum, err := agent.HashFile(p)
		if err != nil {
			return nil, err
		}
		if (r.SHA256 != "" && r.SHA256 != sum) || (r.Bytes != 0 && r.Bytes != n) {
			return nil, fmt.Errorf("artifact %s: reported %d bytes sha256 %s, the copy in S3 has %d bytes sha256 %s", r.Path, r.Bytes, r.SHA256, n, sum)
		}
		key := joinKey(dest.Key, r.Path)
		if _, err := agent.UploadFile(ctx, a.c.cfg.S3, dest.Bucket, key, p); err != nil {
			return nil, fmt.Errorf("artifact %s to s3://%s/%s: %w", r.Path, dest.Bucket, key, err)
		}
		res = append(res, jobtype.Artifact{Path: r.Path, Format: r.Format, Bytes: n, SHA256: sum})
	}
	return res, nil
}
