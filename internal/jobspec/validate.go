package jobspec

import (
	"fmt"
	"math"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The output.formats values, each an artifact the trainer writes into the
// job's output folder and reports with that format.
const (
	// FormatSafetensors is the PEFT adapter: adapter_model.safetensors next
	// to adapter_config.json. The default; the reference trainer writes it
	// whatever else is asked for.
	FormatSafetensors = "safetensors"
	// FormatGGUF is adapter_model.gguf, a GGUF LoRA adapter for llama.cpp
	// (--lora) and Ollama (ADAPTER), applied to the base model's GGUF.
	FormatGGUF = "gguf"
	// FormatGGUFMerged is merged_model.gguf, a full-model GGUF: the base
	// model with the adapter merged in.
	FormatGGUFMerged = "gguf-merged"
)

// knownFormats lists the accepted output.formats values, in the order error
// messages name them.
var knownFormats = []string{FormatSafetensors, FormatGGUF, FormatGGUFMerged}

// BaseModelTinyChar is Lathe's built-in demo model, a character-level model
// the reference trainer builds itself; llama.cpp cannot represent it, so no
// GGUF format may be asked of it.
const BaseModelTinyChar = "tiny-char"

// Limits enforced by Validate.
const (
	maxNameLen      = 63
	maxBaseModelLen = 200
	maxRank         = 1024
	maxBatchSize    = 65536
	maxGPUs         = 64
	maxNodes        = 64
	maxGPUModelLen  = 100
	maxS3KeyLen     = 1024
)

// The syntax rules below are plain byte loops, each the regular expression
// in its comment (fastpath_test.go checks them against it), which a spec
// would otherwise run through the regexp package a dozen times.

// lowerDigit reports whether b is in [a-z0-9].
func lowerDigit(b byte) bool { return 'a' <= b && b <= 'z' || '0' <= b && b <= '9' }

// all reports whether every byte of s[from:to] is in class.
func all(s string, from, to int, class func(byte) bool) bool {
	for i := from; i < to; i++ {
		if !class(s[i]) {
			return false
		}
	}
	return true
}

// validName: ^[a-z0-9]([a-z0-9-]*[a-z0-9])?$
func validName(s string) bool {
	return s != "" && lowerDigit(s[0]) && lowerDigit(s[len(s)-1]) &&
		all(s, 1, len(s)-1, func(b byte) bool { return lowerDigit(b) || b == '-' })
}

// validTargetModule: ^[A-Za-z0-9_.]+$
func validTargetModule(s string) bool {
	return s != "" && all(s, 0, len(s), func(b byte) bool {
		return lowerDigit(b) || 'A' <= b && b <= 'Z' || b == '_' || b == '.'
	})
}

// validResidencyTag: ^[a-z][a-z0-9-]{0,31}$
func validResidencyTag(s string) bool {
	return s != "" && len(s) <= 32 && 'a' <= s[0] && s[0] <= 'z' &&
		all(s, 1, len(s), func(b byte) bool { return lowerDigit(b) || b == '-' })
}

// validTrainer: ^[a-z0-9][a-z0-9_-]{0,62}$
func validTrainer(s string) bool {
	return s != "" && len(s) <= 63 && lowerDigit(s[0]) &&
		all(s, 1, len(s), func(b byte) bool { return lowerDigit(b) || b == '_' || b == '-' })
}

// validBucket: ^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$
func validBucket(s string) bool {
	return len(s) >= 3 && len(s) <= 63 && lowerDigit(s[0]) && lowerDigit(s[len(s)-1]) &&
		all(s, 1, len(s)-1, func(b byte) bool { return lowerDigit(b) || b == '.' || b == '-' })
}

// looksIPv4: ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$
func looksIPv4(s string) bool {
	dots, run := 0, 0 // the dots so far, the digits since the last
	for i := 0; i < len(s); i++ {
		switch b := s[i]; {
		case '0' <= b && b <= '9':
			run++
		case b == '.' && run > 0 && dots < 3:
			dots, run = dots+1, 0
		default:
			return false
		}
	}
	return dots == 3 && run > 0
}

// Valid reports whether p is urgent, normal or batch.
func (p Priority) Valid() bool {
	return p == PriorityUrgent || p == PriorityNormal || p == PriorityBatch
}

// Validate checks every rule of the job spec (docs/design.md, "Job spec") and
// returns one FieldError per broken rule, in schema order; nil means the spec
// is valid. It checks the spec as it stands: it fills in no defaults, so a
// zero Spec built in Go fails on every required field. Values are formatted
// plainly ("-4", "NaN"); Parse replaces them with the text as written.
//
// Validate does not check what needs the daemon's config: that the dataset
// lies under an allowed root or in a configured bucket, that the trainer
// exists, that the residency tags name real sites.
func (s *Spec) Validate() []FieldError {
	var c checker
	c.identity(s)
	c.data(s)
	c.lora(&s.LoRA)
	c.training(&s.Training)
	c.resources(&s.Resources)
	c.scheduling(s)
	c.output(s)
	return c.errs
}

// identity checks name and base_model.
func (c *checker) identity(s *Spec) {
	switch {
	case s.Name == "":
		c.add("name", "", "is required")
	case len(s.Name) > maxNameLen:
		c.add("name", s.Name, fmt.Sprintf("must be at most %d characters", maxNameLen))
	case !validName(s.Name):
		c.add("name", s.Name, "must be lower-case letters, digits and '-', starting and ending with a letter or digit")
	}

	switch {
	case s.BaseModel == "":
		c.add("base_model", "", "is required")
	case !utf8.ValidString(s.BaseModel):
		c.add("base_model", s.BaseModel, "must be valid UTF-8")
	case utf8.RuneCountInString(s.BaseModel) > maxBaseModelLen:
		c.add("base_model", s.BaseModel, fmt.Sprintf("must be at most %d characters", maxBaseModelLen))
	case !graphic(s.BaseModel, false):
		c.add("base_model", s.BaseModel, "must not contain spaces or control characters")
	}
}

// data checks dataset and eval_dataset.
func (c *checker) data(s *Spec) {
	if s.Dataset == "" {
		c.add("dataset", "", "is required")
	} else if msg := uriProblem(s.Dataset, true); msg != "" {
		c.add("dataset", s.Dataset, msg)
	}
	if s.EvalDataset != "" {
		if msg := uriProblem(s.EvalDataset, true); msg != "" {
			c.add("eval_dataset", s.EvalDataset, msg)
		}
	}
}

// lora checks the lora section.
func (c *checker) lora(l *LoRA) {
	if l.Rank < 1 || l.Rank > maxRank {
		c.add("lora.rank", itoa(l.Rank), fmt.Sprintf("must be between 1 and %d", maxRank))
	}
	c.float("lora.alpha", l.Alpha, func(f float64) string {
		if f <= 0 {
			return "must be greater than 0"
		}
		return ""
	})
	c.float("lora.dropout", l.Dropout, func(f float64) string {
		if f < 0 || f >= 1 {
			return "must be at least 0 and less than 1"
		}
		return ""
	})
	if len(l.TargetModules) == 0 {
		c.add("lora.target_modules", "", "must list at least one module")
	}
	c.list("lora.target_modules", l.TargetModules, true, func(m string) string {
		if !validTargetModule(m) {
			return "must be letters, digits, '_' and '.'"
		}
		return ""
	})
}

// training checks the training section.
func (c *checker) training(t *Training) {
	if t.Epochs < 0 {
		c.add("training.epochs", itoa(t.Epochs), "must not be negative")
	}
	if t.MaxSteps < 0 {
		c.add("training.max_steps", itoa(t.MaxSteps), "must not be negative")
	}
	if t.Epochs == 0 && t.MaxSteps == 0 {
		c.add("training.epochs", "0", "must be at least 1 when training.max_steps is 0")
	}
	c.float("training.learning_rate", t.LearningRate, func(f float64) string {
		if f <= 0 || f > 1 {
			return "must be greater than 0 and at most 1"
		}
		return ""
	})
	if t.BatchSize < 1 || t.BatchSize > maxBatchSize {
		c.add("training.batch_size", itoa(t.BatchSize), fmt.Sprintf("must be between 1 and %d", maxBatchSize))
	}
	if t.CheckpointEvery < 0 {
		c.add("training.checkpoint_every", itoa(t.CheckpointEvery), "must not be negative")
	}
	if t.EvalEvery < 0 {
		c.add("training.eval_every", itoa(t.EvalEvery), "must not be negative")
	}
	if t.StopAtStep != 0 {
		c.add("training.stop_at_step", itoa(t.StopAtStep), "is set by Lathe for a sweep's ASHA rungs and must not be given in a job spec")
	}
}

// resources checks the resources section.
func (c *checker) resources(r *Resources) {
	if r.GPUs < 0 || r.GPUs > maxGPUs {
		c.add("resources.gpus", itoa(r.GPUs), fmt.Sprintf("must be between 0 and %d", maxGPUs))
	}
	switch {
	case r.Nodes < 0 || r.Nodes > maxNodes:
		c.add("resources.nodes", itoa(r.Nodes), fmt.Sprintf("must be between 1 and %d", maxNodes))
	case r.Nodes > 1 && r.GPUs < 1:
		c.add("resources.nodes", itoa(r.Nodes), "needs resources.gpus of at least 1: a job that spans nodes runs GPUs on each")
	}
	c.float("resources.gpu_memory_gb", r.GPUMemoryGB, func(f float64) string {
		if f < 0 {
			return "must not be negative"
		}
		return ""
	})
	c.list("resources.gpu_models", r.GPUModels, false, func(m string) string {
		switch {
		case strings.TrimSpace(m) != m:
			return "must not start or end with spaces"
		case utf8.RuneCountInString(m) > maxGPUModelLen:
			return fmt.Sprintf("must be at most %d characters", maxGPUModelLen)
		case !graphic(m, true):
			return "must not contain control characters"
		}
		return ""
	})
}

// scheduling checks what routing and the queue read: residency, priority,
// the time limits, the budget, the value of time and the trainer.
func (c *checker) scheduling(s *Spec) {
	c.list("residency", s.Residency, true, func(tag string) string {
		if !validResidencyTag(tag) {
			return "must be a lower-case letter followed by up to 31 lower-case letters, digits or '-'"
		}
		return ""
	})

	if !s.Priority.Valid() {
		c.add("priority", string(s.Priority), "must be urgent, normal or batch")
	}
	if s.MaxWait < 0 {
		c.add("max_wait", s.MaxWait.D().String(), "must not be negative")
	}
	if s.MaxRuntime < 0 {
		c.add("max_runtime", s.MaxRuntime.D().String(), "must not be negative")
	}
	if s.ExpectedRuntime < 0 {
		c.add("expected_runtime", s.ExpectedRuntime.D().String(), "must not be negative")
	}
	c.float("budget_usd", s.BudgetUSD, func(f float64) string {
		if f < 0 {
			return "must not be negative"
		}
		return ""
	})
	c.float("value_per_hour_usd", s.ValuePerHourUSD, func(f float64) string {
		if f < 0 {
			return "must not be negative"
		}
		return ""
	})
	if !validTrainer(s.Trainer) {
		c.add("trainer", s.Trainer, "must be 1–63 lower-case letters, digits, '_' or '-', starting with a letter or digit")
	}
}

// output checks the output section, and that a GGUF format is asked only of
// a base model llama.cpp can represent: tiny-char is refused here; a Hugging
// Face id or a model folder is checked by the trainer before it trains.
func (c *checker) output(s *Spec) {
	o := &s.Output
	if o.URI != "" {
		if msg := uriProblem(o.URI, false); msg != "" {
			c.add("output.uri", o.URI, msg)
		}
	}
	if len(o.Formats) == 0 {
		c.add("output.formats", "", "must list at least one format")
	}
	c.list("output.formats", o.Formats, true, func(f string) string {
		if !slices.Contains(knownFormats, f) {
			return fmt.Sprintf("unknown format %q (known: %s)", f, strings.Join(knownFormats, ", "))
		}
		if (f == FormatGGUF || f == FormatGGUFMerged) && s.BaseModel == BaseModelTinyChar {
			return fmt.Sprintf("%s needs a llama-family base model; %s is Lathe's built-in demo model, which llama.cpp cannot represent",
				f, BaseModelTinyChar)
		}
		return ""
	})
}

// smallList is the longest list checker.list checks for repeats without a
// map.
const smallList = 16

// checker collects FieldErrors.
type checker struct{ errs []FieldError }

func (c *checker) add(field, value, msg string) {
	c.errs = append(c.errs, FieldError{Field: field, Value: truncate(value), Message: msg})
}

// float checks that f is finite, then applies rule.
func (c *checker) float(field string, f float64, rule func(float64) string) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		c.add(field, ftoa(f), "must be a finite number")
		return
	}
	if msg := rule(f); msg != "" {
		c.add(field, ftoa(f), msg)
	}
}

// list checks each item of a list of strings: not empty, rule, and (when
// unique) no repeats.
func (c *checker) list(field string, items []string, unique bool, rule func(string) string) {
	item := func(i int) string { return field + "[" + strconv.Itoa(i) + "]" }
	// The index of the first good occurrence of each item; a short list
	// (as a spec's are) is searched instead.
	var first map[string]int
	if unique && len(items) > smallList {
		first = make(map[string]int, len(items))
	}
	for i, it := range items {
		if it == "" {
			c.add(item(i), "", "must not be empty")
			continue
		}
		if msg := rule(it); msg != "" {
			c.add(item(i), it, msg)
			continue
		}
		if !unique {
			continue
		}
		j, dup := -1, false
		if first != nil {
			j, dup = first[it]
			if !dup {
				first[it] = i
			}
		} else {
			// An earlier equal item passed the same checks as it did.
			for k := 0; k < i && !dup; k++ {
				j, dup = k, items[k] == it
			}
		}
		if dup {
			c.add(item(i), it, fmt.Sprintf("repeats %s[%d]", field, j))
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// graphic reports whether s is valid UTF-8 made only of printable characters;
// the ASCII space is allowed only when space is true. Other whitespace,
// control characters and unassigned code points are never allowed.
func graphic(s string, space bool) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r == ' ' {
			if !space {
				return false
			}
			continue
		}
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// uriProblem checks a dataset URI (object true: it must name one file or
// object) or an output URI (object false: a folder or prefix) and returns ""
// or what is wrong with it.
//
// Accepted: file:///absolute/path (fileURIProblem) and s3://bucket/key
// (s3URIProblem). Raw '?', '#' and '\' are refused, since a URI parser would
// read them as a query, a fragment, or (elsewhere) a separator.
func uriProblem(u string, object bool) string {
	if !graphic(u, true) {
		return "must not contain control characters"
	}
	if strings.ContainsAny(u, `?#\`) {
		return `must not contain '?', '#' or '\'`
	}
	switch {
	case strings.HasPrefix(u, "file://"):
		return fileURIProblem(u, object)
	case strings.HasPrefix(u, "s3://"):
		return s3URIProblem(u, object)
	default:
		return "must be file:///absolute/path or s3://bucket/key"
	}
}

// fileURIProblem checks file URI u for uriProblem. A file URI has no host;
// its path may hold spaces and %XX escapes, and is checked as decoded (as
// net/url and internal/fileuri read it): absolute, clean (no ".", ".." or
// empty segments), no control characters.
func fileURIProblem(u string, object bool) string {
	p, err := url.PathUnescape(strings.TrimPrefix(u, "file://"))
	switch {
	case err != nil:
		return "must use valid %XX escapes"
	case !strings.HasPrefix(p, "/"):
		return "must be file:///absolute/path (three slashes, no host)"
	case !graphic(p, true):
		return "must not contain control characters"
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == ".." {
			return "must not contain '..' segments"
		}
	}
	trimmed := p
	if len(p) > 1 {
		trimmed = strings.TrimSuffix(p, "/")
	}
	if path.Clean(trimmed) != trimmed {
		return "must be a clean path (no '.' or empty segments)"
	}
	if object && strings.HasSuffix(p, "/") {
		return "must name a file, not a directory"
	}
	return ""
}

// s3URIProblem checks s3 URI u for uriProblem. An s3 URI has a valid
// bucket name and a key with no "." or ".." segments; whitespace, control
// characters, '%', '?', '#' and '\' are refused, so every reader takes the
// key literally.
func s3URIProblem(u string, object bool) string {
	if strings.ContainsAny(u, " %") {
		return "must not contain spaces or '%' (an S3 key is taken literally)"
	}
	bucket, key, _ := strings.Cut(strings.TrimPrefix(u, "s3://"), "/")
	if msg := bucketProblem(bucket); msg != "" {
		return msg
	}
	if object && (key == "" || strings.HasSuffix(key, "/")) {
		return "must name an object: s3://bucket/key"
	}
	if len(key) > maxS3KeyLen {
		return fmt.Sprintf("object key must be at most %d bytes", maxS3KeyLen)
	}
	for seg := range strings.SplitSeq(key, "/") {
		if seg == "." || seg == ".." {
			return "must not contain '.' or '..' segments"
		}
	}
	return ""
}

// bucketProblem applies the S3 general-purpose bucket naming rules.
func bucketProblem(b string) string {
	switch {
	case b == "":
		return "must name a bucket: s3://bucket/key"
	case !validBucket(b):
		return "bucket name must be 3–63 lower-case letters, digits, '.' or '-', starting and ending with a letter or digit"
	case strings.Contains(b, ".."):
		return "bucket name must not contain '..'"
	case looksIPv4(b):
		return "bucket name must not look like an IP address"
	case strings.HasPrefix(b, "xn--"), strings.HasPrefix(b, "sthree-"),
		strings.HasSuffix(b, "-s3alias"), strings.HasSuffix(b, "--ol-s3"):
		return "bucket name uses a prefix or suffix S3 reserves"
	}
	return ""
}

// ValidResidencyTag reports whether tag is a well-formed residency tag
// (a lower-case word: `^[a-z][a-z0-9-]{0,31}$`).
func ValidResidencyTag(tag string) bool { return validResidencyTag(tag) }

// Under is fe named under prefix: "jobs[3]" and "lora.rank" make
// "jobs[3].lora.rank"; a field-less error takes the prefix as its field.
func (fe FieldError) Under(prefix string) FieldError {
	if fe.Field == "" {
		fe.Field = prefix
	} else {
		fe.Field = prefix + "." + fe.Field
	}
	return fe
}
