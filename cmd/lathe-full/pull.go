package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/lathe-ml/lathe/internal/apiclient"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// pulledFile is one file pull wrote (an artifact, or the Modelfile), as -o
// json prints it.
type pulledFile struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

func (a *app) pullCmd() *cobra.Command {
	var o pullOptions
	cmd := &cobra.Command{
		Use:   "pull ID",
		Short: "Download a job's artifacts, verifying each sha256",
		Long: `Download a job's artifacts into --to (default ./<job-name>-<id>/): every
one, or those of the --format values. Each file is written to a temporary
name, checked against the sha256 in the job's artifact list, and only then
renamed into place.

--format picks what to download (repeat it or give a comma list):
  safetensors   the PEFT adapter folder: adapter_model.safetensors (or .bin)
                and adapter_config.json, for transformers/peft and vLLM
  gguf          every GGUF the job has: adapter_model.gguf (format gguf)
                and merged_model.gguf (format gguf-merged)
  gguf-merged   merged_model.gguf only
A value the job has no artifact of fails before anything is written.

When a GGUF is pulled, an Ollama Modelfile is written beside it
(ollama create NAME -f Modelfile): FROM --ollama-from (default
./base_model.gguf, which the comments say how to make) with ADAPTER
./adapter_model.gguf, or FROM ./merged_model.gguf when only the merged
model is pulled. docs/gguf.md has the details.`,
		Args: exactArgs("ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if err := o.check(cmd); err != nil {
				return err
			}
			return a.pull(cmd.Context(), args[0], o)
		}),
	}
	o.flags(cmd, "job")
	return cmd
}

// pullOptions are the flags of lathe pull and lathe sweep pull.
type pullOptions struct {
	// to is the directory to write into; "" = ./<job-name>-<id>/.
	to string
	// formats are the --format values, checked by check; none = every
	// artifact.
	formats []string
	// ollamaFrom is the Modelfile's FROM beside an adapter GGUF; "" =
	// defaultOllamaFrom.
	ollamaFrom string
}

// defaultOllamaFrom is the Modelfile's FROM without --ollama-from: the base
// model's GGUF, which the user makes beside the adapter.
const defaultOllamaFrom = "./base_model.gguf"

// modelfileName is the Ollama Modelfile pull writes beside a GGUF.
const modelfileName = "Modelfile"

func (o *pullOptions) flags(cmd *cobra.Command, what string) {
	cmd.Flags().StringVar(&o.to, "to", "", "directory to write into (default ./<"+what+"-name>-<id>/)")
	cmd.Flags().StringSliceVar(&o.formats, "format", nil,
		"download only these: safetensors (the PEFT folder), gguf (every GGUF), gguf-merged; repeat or comma-separate (default all)")
	cmd.Flags().StringVar(&o.ollamaFrom, "ollama-from", "",
		"the Modelfile's FROM beside adapter_model.gguf: an Ollama model name or the base model's GGUF, the exact base the adapter was trained on (default "+defaultOllamaFrom+")")
}

// check refuses, as usage errors, a --format value pull does not know and
// an --ollama-from that would not stay on its one Modelfile line.
func (o *pullOptions) check(cmd *cobra.Command) error {
	if cmd.Flags().Changed("format") && len(o.formats) == 0 {
		return usageErrorf("--format \"\": want %s", strings.Join(pullFormatNames, ", "))
	}
	for i, f := range o.formats {
		f = strings.TrimSpace(f)
		if _, ok := pullSelectors[f]; !ok {
			return usageErrorf("--format %q: want %s", f, strings.Join(pullFormatNames, ", "))
		}
		o.formats[i] = f
	}
	if cmd.Flags().Changed("ollama-from") {
		switch {
		case strings.TrimSpace(o.ollamaFrom) == "":
			return usageErrorf("--ollama-from: must not be empty (an Ollama model name or a path to the base model's GGUF)")
		case !lineSafe(o.ollamaFrom):
			return usageErrorf("--ollama-from %q: must not contain a newline or control character", o.ollamaFrom)
		}
	}
	return nil
}

// Artifact formats the trainer reports beside the jobspec ones (the PEFT
// folder's config, and the weights of a PEFT that does not write
// safetensors).
const (
	artifactJSON = "json"
	artifactBin  = "bin"
)

// pullSelector is what one --format value downloads: the artifacts of the
// formats in want, at least one of which the job must have, and with them
// those of the formats in with.
type pullSelector struct{ want, with []string }

// pullSelectors maps each --format value to what it downloads.
var pullSelectors = map[string]pullSelector{
	jobspec.FormatSafetensors: {want: []string{jobspec.FormatSafetensors, artifactBin}, with: []string{artifactJSON}},
	jobspec.FormatGGUF:        {want: []string{jobspec.FormatGGUF, jobspec.FormatGGUFMerged}},
	jobspec.FormatGGUFMerged:  {want: []string{jobspec.FormatGGUFMerged}},
}

// pullFormatNames are pullSelectors' keys, in the order messages name them.
var pullFormatNames = []string{jobspec.FormatSafetensors, jobspec.FormatGGUF, jobspec.FormatGGUFMerged}

// selectArtifacts returns the artifacts of job that formats pick, in the
// job's order; every artifact when formats is empty. A format that picks
// none of the job's artifacts is an error naming the job, the format and the
// formats the job has.
func selectArtifacts(job *jobtype.Job, formats []string) ([]jobtype.Artifact, error) {
	if len(formats) == 0 {
		return job.Artifacts, nil
	}
	picked := map[string]bool{} // artifact formats to download
	for _, f := range formats {
		sel := pullSelectors[f]
		if !slices.ContainsFunc(job.Artifacts, func(a jobtype.Artifact) bool { return slices.Contains(sel.want, a.Format) }) {
			return nil, failedErrorf("job %s has no %s artifact (its artifacts' formats: %s); nothing written",
				termSafe(job.ID), f, artifactFormats(job.Artifacts))
		}
		for _, af := range slices.Concat(sel.want, sel.with) {
			picked[af] = true
		}
	}
	var out []jobtype.Artifact
	for _, art := range job.Artifacts {
		if picked[art.Format] {
			out = append(out, art)
		}
	}
	return out, nil
}

// artifactFormats lists the distinct formats of arts, in order, for a
// message ("(none)" for an artifact without one).
func artifactFormats(arts []jobtype.Artifact) string {
	var seen []string
	for _, a := range arts {
		f := a.Format
		if f == "" {
			f = "(none)"
		}
		if f = termSafe(f); !slices.Contains(seen, f) {
			seen = append(seen, f)
		}
	}
	return strings.Join(seen, ", ")
}

func (a *app) pull(ctx context.Context, id string, o pullOptions) error {
	c := a.client()
	job, err := c.Get(ctx, id)
	if err != nil {
		return err
	}
	if len(job.Artifacts) == 0 {
		return failedErrorf("job %s has no artifacts (state %s)", job.ID, job.State)
	}
	arts, err := selectArtifacts(job, o.formats)
	if err != nil {
		return err
	}
	// Refuse the whole pull before writing anything if any entry is unsafe.
	if err := checkPullable(job.ID, arts); err != nil {
		return err
	}
	mf := a.pullModelfile(job, arts, o.ollamaFrom)
	to, err := pullDir(job, o.to)
	if err != nil {
		return err
	}
	files, err := a.downloadAll(ctx, c, job.ID, arts, to)
	if err != nil {
		return err
	}
	if mf != nil {
		f, err := writeModelfile(to, mf)
		if err != nil {
			return err
		}
		a.printPulled(f)
		files = append(files, f)
	}
	if a.output == outJSON {
		return writeJSON(a.stdout, files)
	}
	return nil
}

// checkPullable refuses artifacts with an unsafe name or no sha256.
func checkPullable(jobID string, arts []jobtype.Artifact) error {
	for _, art := range arts {
		if err := checkArtifactName(art.Path); err != nil {
			return failedErrorf("job %s: refusing artifact %q: %v", jobID, art.Path, err)
		}
		if art.SHA256 == "" {
			return failedErrorf("job %s: artifact %q has no sha256 to verify against", jobID, art.Path)
		}
	}
	return nil
}

// pullModelfile returns the Modelfile to write beside arts, or nil: none
// without a GGUF, nor when the job has a Modelfile of its own (said on
// stderr). It also warns when --ollama-from (from) has no adapter to serve.
func (a *app) pullModelfile(job *jobtype.Job, arts []jobtype.Artifact, from string) []byte {
	mf := modelfile(job, arts, from)
	if mf != nil && slices.ContainsFunc(arts, func(a jobtype.Artifact) bool { return a.Path == modelfileName }) {
		fmt.Fprintf(a.stderr, "lathe: job %s has a %s of its own; writing none\n", termSafe(job.ID), modelfileName)
		mf = nil
	}
	if from != "" && !slices.ContainsFunc(arts, func(a jobtype.Artifact) bool { return a.Format == jobspec.FormatGGUF }) {
		fmt.Fprintf(a.stderr, "lathe: --ollama-from unused: no adapter GGUF (format %s) pulled\n", jobspec.FormatGGUF)
	}
	return mf
}

// pullDir makes the directory to pull into: to, or <job-name>-<id> when to
// is empty.
func pullDir(job *jobtype.Job, to string) (string, error) {
	if to == "" {
		to = job.Name + "-" + job.ID
		if err := checkArtifactName(to); err != nil {
			return "", failedErrorf("job %s: cannot make a directory name from it (%v); use --to", job.ID, err)
		}
	}
	if err := os.MkdirAll(to, 0o755); err != nil {
		return "", failedErrorf("pull: %w", err)
	}
	return to, nil
}

// downloadAll downloads arts into dir, each verified against its sha256,
// and returns what it wrote.
func (a *app) downloadAll(ctx context.Context, c *apiclient.Client, jobID string, arts []jobtype.Artifact, dir string) ([]pulledFile, error) {
	var files []pulledFile
	for _, art := range arts {
		dst := filepath.Join(dir, art.Path)
		n, err := download(ctx, c, jobID, art, dst)
		if err != nil {
			return nil, err
		}
		f := pulledFile{Name: art.Path, Path: dst, Bytes: n, SHA256: art.SHA256}
		a.printPulled(f)
		files = append(files, f)
	}
	return files, nil
}

// writeModelfile writes the Modelfile mf into dir, replacing any there.
func writeModelfile(dir string, mf []byte) (pulledFile, error) {
	dst := filepath.Join(dir, modelfileName)
	if err := writeReplacing(dst, mf); err != nil {
		return pulledFile{}, failedErrorf("pull: %w", err)
	}
	sum := sha256.Sum256(mf)
	return pulledFile{Name: modelfileName, Path: dst, Bytes: int64(len(mf)), SHA256: hex.EncodeToString(sum[:])}, nil
}

// printPulled prints the path of a file pull wrote, as it is written (not
// with -o json, which lists them all at the end).
func (a *app) printPulled(f pulledFile) {
	if a.output != outJSON {
		fmt.Fprintln(a.stdout, f.Path)
	}
}

// modelfile returns the Ollama Modelfile for the GGUF artifacts among arts,
// or nil when there are none. With an adapter GGUF (format gguf) it is FROM
// from (default defaultOllamaFrom, with comments saying how to make it) and
// ADAPTER the adapter; with only a merged model (format gguf-merged), FROM
// the merged model. What comes from the job record (untrusted) is made
// lineSafe in the comments; from was checked by pullOptions.check.
func modelfile(job *jobtype.Job, arts []jobtype.Artifact, from string) []byte {
	var adapter, merged string
	for _, a := range arts {
		switch {
		case a.Format == jobspec.FormatGGUF && adapter == "":
			adapter = a.Path
		case a.Format == jobspec.FormatGGUFMerged && merged == "":
			merged = a.Path
		}
	}
	if adapter == "" && merged == "" {
		return nil
	}
	base := commentSafe(job.Spec.BaseModel)
	if base == "" {
		base = "(unknown)"
	}
	name := commentSafe(job.Name)
	var b strings.Builder
	fmt.Fprintf(&b, "# Ollama Modelfile written by lathe pull for job %s (%s), base model %s.\n", commentSafe(job.ID), name, base)
	fmt.Fprintf(&b, "# ollama create %s -f %s\n", name, modelfileName)
	if adapter == "" {
		fmt.Fprintf(&b, "FROM ./%s\n", merged)
		return []byte(b.String())
	}
	if from == "" {
		from = defaultOllamaFrom
		fmt.Fprintf(&b, "# FROM is the base model the adapter was trained on (exactly that one) as GGUF: make %s in this folder with\n", from)
		b.WriteString("#   pip install ./scripts/python   # in a Lathe checkout: the lathe_trainer package\n")
		fmt.Fprintf(&b, "#   python -m lathe_trainer.export_gguf base %s %s\n", base, path.Base(from))
		b.WriteString("# or give lathe pull --ollama-from an Ollama model name or another GGUF of that base.\n")
	}
	if merged != "" {
		fmt.Fprintf(&b, "# or, without the base: FROM ./%s (the adapter merged in; drop the ADAPTER line)\n", merged)
	}
	fmt.Fprintf(&b, "FROM %s\n", from)
	fmt.Fprintf(&b, "ADAPTER ./%s\n", adapter)
	return []byte(b.String())
}

// lineSafe reports whether s is valid UTF-8 with only printable characters
// and spaces: nothing that could end a Modelfile line or hide text.
func lineSafe(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r != ' ' && (!unicode.IsPrint(r) || unsafeRune(r)) {
			return false
		}
	}
	return true
}

// commentSafe is s with every character lineSafe refuses shown as a Go
// escape (termSafe's, then \uXXXX for the rest: tabs, line separators), so
// text from the job record stays on its one comment line.
func commentSafe(s string) string {
	s = termSafe(s)
	if lineSafe(s) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if r != ' ' && !unicode.IsPrint(r) {
			fmt.Fprintf(&b, `\u%04x`, r)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// writeReplacing writes b to a temporary file beside dst and renames it onto
// dst: an existing dst, a symlink included, is replaced, never written
// through.
func writeReplacing(dst string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-*")
	if err != nil {
		return err
	}
	keep := false
	defer func() {
		if !keep {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(b); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return err
	}
	keep = true
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
			return 0, failedErrorf("pull %s: sha256 mismatch: got %s, not the sha256 the scheduler announced; nothing written", art.Path, sum)
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
