package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// The files of a job that asked for every format, as the reference trainer
// reports them (name → format).
var ggufJobFormats = []struct{ name, format string }{
	{"adapter_model.safetensors", "safetensors"},
	{"adapter_config.json", "json"},
	{"adapter_model.gguf", "gguf"},
	{"merged_model.gguf", "gguf-merged"},
}

// addFormatJob stores a succeeded job named support-bot, trained on
// meta-llama/Llama-3.2-1B, with the files of ggufJobFormats whose names
// are in names (all when names is empty), in ggufJobFormats' order. The
// fake scheduler (fake_test.go) serves them.
func addFormatJob(f *fakeScheduler, id string, names ...string) {
	j := &jobtype.Job{ID: id, Name: "support-bot", State: jobtype.StateSucceeded, Attempt: 1, CreatedAt: time.Now(),
		Spec: jobspec.Spec{Name: "support-bot", BaseModel: "meta-llama/Llama-3.2-1B"}}
	files := map[string][]byte{}
	for _, a := range ggufJobFormats {
		if len(names) == 0 || slices.Contains(names, a.name) {
			j.Artifacts = append(j.Artifacts, jobtype.Artifact{Path: a.name, Format: a.format})
			files[a.name] = []byte("bytes of " + a.name)
		}
	}
	f.addJob(j, nil, files)
}

// dirNames lists the names in dir, sorted; nil when it does not exist.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// fetched lists the artifacts f served, by name, in order.
func fetched(f *fakeScheduler) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var names []string
	for _, r := range f.requests {
		if _, name, ok := strings.Cut(r, "/artifacts/"); ok {
			names = append(names, name)
		}
	}
	return names
}

func TestPullFormat(t *testing.T) {
	cases := []struct {
		name  string
		flags []string
		want  []string // the folder's names, sorted
	}{
		{"all", nil, []string{"Modelfile", "adapter_config.json", "adapter_model.gguf", "adapter_model.safetensors", "merged_model.gguf"}},
		{"safetensors", []string{"--format", "safetensors"}, []string{"adapter_config.json", "adapter_model.safetensors"}},
		{"gguf", []string{"--format", "gguf"}, []string{"Modelfile", "adapter_model.gguf", "merged_model.gguf"}},
		{"gguf-merged", []string{"--format", "gguf-merged"}, []string{"Modelfile", "merged_model.gguf"}},
		{"comma list", []string{"--format", "safetensors, gguf-merged"}, []string{"Modelfile", "adapter_config.json", "adapter_model.safetensors", "merged_model.gguf"}},
		{"repeated", []string{"--format", "gguf-merged", "--format", "gguf"}, []string{"Modelfile", "adapter_model.gguf", "merged_model.gguf"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeScheduler(t)
			addFormatJob(f, "j-1")
			dir := filepath.Join(t.TempDir(), "out")
			r := lathe(t, f.srv.URL, append([]string{"pull", "j-1", "--to", dir}, tc.flags...)...)
			if r.code != exitOK {
				t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
			}
			if got := dirNames(t, dir); !slices.Equal(got, tc.want) {
				t.Errorf("folder holds %q, want %q", got, tc.want)
			}
			got := fetched(f)
			slices.Sort(got)
			want := slices.DeleteFunc(slices.Clone(tc.want), func(s string) bool { return s == "Modelfile" })
			if !slices.Equal(got, want) {
				t.Errorf("fetched %q, want %q", got, want)
			}
			for _, name := range want {
				if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != "bytes of "+name {
					t.Errorf("%s = %q, %v", name, b, err)
				}
			}
		})
	}
}

func TestPullFormatUsageErrors(t *testing.T) {
	f := newFakeScheduler(t)
	addFormatJob(f, "j-1")
	dir := filepath.Join(t.TempDir(), "out")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"pull", "j-1", "--to", dir, "--format", "onnx"}, `--format "onnx": want safetensors, gguf, gguf-merged`},
		{[]string{"pull", "j-1", "--to", dir, "--format", "safetensors,GGUF"}, `--format "GGUF"`},
		{[]string{"pull", "j-1", "--to", dir, "--format", ""}, `--format ""`},
		{[]string{"pull", "j-1", "--to", dir, "--ollama-from", "llama3\nADAPTER /etc/passwd"}, "--ollama-from \"llama3\\nADAPTER /etc/passwd\": must not contain a newline or control character"},
		{[]string{"pull", "j-1", "--to", dir, "--ollama-from", "a\x1b[2Jb"}, "--ollama-from"},
		{[]string{"pull", "j-1", "--to", dir, "--ollama-from", " "}, "--ollama-from: must not be empty"},
		{[]string{"sweep", "pull", "s-1", "--best", "--to", dir, "--format", "onnx"}, `--format "onnx"`},
	} {
		r := lathe(t, f.srv.URL, tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%q: exit %d, want %d with %q; stderr:\n%s", tc.args, r.code, exitUsage, tc.want, r.stderr)
		}
	}
	if n := f.requestCount(); n != 0 {
		t.Errorf("%d requests sent for usage errors", n)
	}
	if names := dirNames(t, dir); names != nil {
		t.Errorf("written: %q", names)
	}
}

// TestPullFormatMissing: a format the job has no artifact of fails before
// anything is fetched or written, naming the job, the format and the
// formats the job has.
func TestPullFormatMissing(t *testing.T) {
	for _, tc := range []struct {
		has     []string
		formats string
		want    string
	}{
		{[]string{"adapter_model.safetensors", "adapter_config.json"}, "gguf",
			"job j-1 has no gguf artifact (its artifacts' formats: safetensors, json); nothing written"},
		{[]string{"adapter_model.safetensors", "adapter_config.json"}, "safetensors,gguf-merged",
			"job j-1 has no gguf-merged artifact (its artifacts' formats: safetensors, json)"},
		{[]string{"adapter_model.safetensors", "adapter_config.json", "adapter_model.gguf"}, "gguf-merged",
			"job j-1 has no gguf-merged artifact (its artifacts' formats: safetensors, json, gguf)"},
		{[]string{"merged_model.gguf"}, "safetensors",
			"job j-1 has no safetensors artifact (its artifacts' formats: gguf-merged)"},
	} {
		f := newFakeScheduler(t)
		addFormatJob(f, "j-1", tc.has...)
		dir := filepath.Join(t.TempDir(), "out")
		r := lathe(t, f.srv.URL, "pull", "j-1", "--to", dir, "--format", tc.formats)
		if r.code != exitFailed || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v --format %s: exit %d, want %d with %q; stderr:\n%s", tc.has, tc.formats, r.code, exitFailed, tc.want, r.stderr)
		}
		if got := fetched(f); len(got) != 0 {
			t.Errorf("%v --format %s: fetched %q", tc.has, tc.formats, got)
		}
		if names := dirNames(t, dir); names != nil {
			t.Errorf("%v --format %s: written %q", tc.has, tc.formats, names)
		}
	}
}

// The Modelfile's header, for job j-1 of addFormatJob.
const modelfileHeader = `# Ollama Modelfile written by lathe pull for job j-1 (support-bot), base model meta-llama/Llama-3.2-1B.
# ollama create support-bot -f Modelfile
`

// modelfileMakeBase is what the Modelfile says about the default FROM.
const modelfileMakeBase = `# FROM is the base model the adapter was trained on (exactly that one) as GGUF: make ./base_model.gguf in this folder with
#   pip install ./scripts/python   # in a Lathe checkout: the lathe_trainer package
#   python -m lathe_trainer.export_gguf base meta-llama/Llama-3.2-1B base_model.gguf
# or give lathe pull --ollama-from an Ollama model name or another GGUF of that base.
`

func TestPullModelfile(t *testing.T) {
	cases := []struct {
		name  string
		has   []string
		flags []string
		want  string
	}{
		{"adapter", []string{"adapter_model.safetensors", "adapter_config.json", "adapter_model.gguf"}, nil,
			modelfileHeader + modelfileMakeBase + "FROM ./base_model.gguf\nADAPTER ./adapter_model.gguf\n"},
		{"merged", []string{"adapter_model.safetensors", "adapter_config.json", "merged_model.gguf"}, nil,
			modelfileHeader + "FROM ./merged_model.gguf\n"},
		{"both", nil, nil,
			modelfileHeader + modelfileMakeBase +
				"# or, without the base: FROM ./merged_model.gguf (the adapter merged in; drop the ADAPTER line)\n" +
				"FROM ./base_model.gguf\nADAPTER ./adapter_model.gguf\n"},
		{"both, merged only pulled", nil, []string{"--format", "gguf-merged"},
			modelfileHeader + "FROM ./merged_model.gguf\n"},
		{"ollama-from", []string{"adapter_model.gguf"}, []string{"--ollama-from", "llama3.2:1b"},
			modelfileHeader + "FROM llama3.2:1b\nADAPTER ./adapter_model.gguf\n"},
		{"ollama-from, both", nil, []string{"--ollama-from", "/models/Llama 3.2 1B.gguf"},
			modelfileHeader + "# or, without the base: FROM ./merged_model.gguf (the adapter merged in; drop the ADAPTER line)\n" +
				"FROM /models/Llama 3.2 1B.gguf\nADAPTER ./adapter_model.gguf\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeScheduler(t)
			addFormatJob(f, "j-1", tc.has...)
			dir := t.TempDir()
			r := lathe(t, f.srv.URL, append([]string{"pull", "j-1", "--to", dir}, tc.flags...)...)
			if r.code != exitOK {
				t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
			}
			b, err := os.ReadFile(filepath.Join(dir, "Modelfile"))
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Errorf("Modelfile:\n%s\nwant:\n%s", b, tc.want)
			}
			if !strings.Contains(r.stdout, filepath.Join(dir, "Modelfile")+"\n") {
				t.Errorf("stdout does not list the Modelfile:\n%s", r.stdout)
			}
		})
	}
}

// TestPullModelfileNone: no GGUF pulled, no Modelfile; an --ollama-from
// that has nothing to apply to is said to be unused.
func TestPullModelfileNone(t *testing.T) {
	f := newFakeScheduler(t)
	addFormatJob(f, "j-1")
	dir := t.TempDir()
	r := lathe(t, f.srv.URL, "pull", "j-1", "--to", dir, "--format", "safetensors", "--ollama-from", "llama3.2:1b")
	if r.code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	if _, err := os.Lstat(filepath.Join(dir, "Modelfile")); !os.IsNotExist(err) {
		t.Errorf("a Modelfile was written (%v)", err)
	}
	if !strings.Contains(r.stderr, "--ollama-from unused") {
		t.Errorf("stderr does not say --ollama-from is unused:\n%s", r.stderr)
	}
}

// TestPullModelfileJSON: -o json lists the Modelfile with the size and
// sha256 of what was written.
func TestPullModelfileJSON(t *testing.T) {
	f := newFakeScheduler(t)
	addFormatJob(f, "j-1", "merged_model.gguf")
	dir := t.TempDir()
	r := lathe(t, f.srv.URL, "-o", "json", "pull", "j-1", "--to", dir)
	if r.code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	var files []pulledFile
	if err := json.Unmarshal([]byte(r.stdout), &files); err != nil {
		t.Fatalf("stdout is not a file list: %v\n%s", err, r.stdout)
	}
	if len(files) != 2 || files[0].Name != "merged_model.gguf" || files[1].Name != "Modelfile" {
		t.Fatalf("files = %+v, want merged_model.gguf then Modelfile", files)
	}
	mf := files[1]
	b, err := os.ReadFile(filepath.Join(dir, "Modelfile"))
	if err != nil {
		t.Fatal(err)
	}
	if mf.Path != filepath.Join(dir, "Modelfile") || mf.Bytes != int64(len(b)) || mf.SHA256 != sha256Hex(b) {
		t.Errorf("Modelfile entry %+v; the file has %d bytes, sha256 %s", mf, len(b), sha256Hex(b))
	}
}

// TestPullModelfileReplacesSymlink: a Modelfile already there as a symlink
// is replaced by the new file; the file it pointed to is left as it was.
func TestPullModelfileReplacesSymlink(t *testing.T) {
	f := newFakeScheduler(t)
	addFormatJob(f, "j-1", "adapter_model.gguf")
	dir, elsewhere := t.TempDir(), t.TempDir()
	target := writeFile(t, elsewhere, "precious", "do not touch\n")
	if err := os.Symlink(target, filepath.Join(dir, "Modelfile")); err != nil {
		t.Fatal(err)
	}
	r := lathe(t, f.srv.URL, "pull", "j-1", "--to", dir)
	if r.code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "do not touch\n" {
		t.Errorf("the link's target = %q, %v; want it unchanged", b, err)
	}
	fi, err := os.Lstat(filepath.Join(dir, "Modelfile"))
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("Modelfile: %v, %v; want a regular file", fi, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "Modelfile")); !strings.HasPrefix(string(b), modelfileHeader) {
		t.Errorf("Modelfile:\n%s", b)
	}
	if got, want := dirNames(t, dir), []string{"Modelfile", "adapter_model.gguf"}; !slices.Equal(got, want) {
		t.Errorf("folder holds %q, want %q (no temporary files left)", got, want)
	}
}

// TestPullModelfileHostileRecord: a job record whose id, name or base model
// holds newlines or control characters cannot add a line to the Modelfile;
// they are shown escaped in the comments.
func TestPullModelfileHostileRecord(t *testing.T) {
	f := newFakeScheduler(t)
	f.addJob(&jobtype.Job{ID: "j-1", Name: "bot\nFROM /evil\x1b[2J", State: jobtype.StateSucceeded, Attempt: 1, CreatedAt: time.Now(),
		Spec:      jobspec.Spec{BaseModel: "m\r\nADAPTER /etc/passwd\u2028x\ty"},
		Artifacts: []jobtype.Artifact{{Path: "adapter_model.gguf", Format: "gguf"}}},
		nil, map[string][]byte{"adapter_model.gguf": []byte("a")})
	dir := t.TempDir()
	r := lathe(t, f.srv.URL, "pull", "j-1", "--to", dir)
	if r.code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	b, err := os.ReadFile(filepath.Join(dir, "Modelfile"))
	if err != nil {
		t.Fatal(err)
	}
	var commands []string
	for line := range strings.Lines(string(b)) {
		if !lineSafe(strings.TrimSuffix(line, "\n")) {
			t.Errorf("line %q holds a character lineSafe refuses", line)
		}
		if !strings.HasPrefix(line, "#") {
			commands = append(commands, line)
		}
	}
	if want := []string{"FROM ./base_model.gguf\n", "ADAPTER ./adapter_model.gguf\n"}; !slices.Equal(commands, want) {
		t.Errorf("Modelfile commands %q, want %q; Modelfile:\n%s", commands, want, b)
	}
	if !strings.Contains(string(b), `(bot\x0aFROM /evil\x1b[2J), base model m\x0d\x0aADAPTER /etc/passwd\u2028x\u0009y.`) {
		t.Errorf("Modelfile does not show the record's text escaped:\n%s", b)
	}
}
