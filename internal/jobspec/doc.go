// Package jobspec defines a Lathe job specification: the YAML or JSON a user
// submits, its strict parser, its validation (every bad field reported at
// once, each with its path and value) and its normalisation (defaults filled
// in). It is a leaf package: it imports nothing of Lathe's.
//
// The life of a spec:
//
//	spec, err := jobspec.Parse(body)   // strict decode + built-in defaults + Validate
//	if err != nil { ... }              // *ValidationError (400) or ErrTooLarge (413)
//	spec.Normalize(daemonDefaults)     // residency, max_runtime, output.uri from config
//	fields := spec.Validate()          // again, if the daemon defaults need checking
//	payload := spec.JSON()             // canonical JSON: LATHE_JOB_FILE, the job record
//
// Parse walks the YAML node tree itself, against a schema taken from the
// json tags of [Spec], so it can report every unknown key, wrong type and bad
// value at once, each as a [FieldError] with a dotted path ("lora.rank",
// "residency[1]") and the value as the user wrote it. YAML anchors and
// aliases, duplicate keys and several documents in one input are refused.
// Valid JSON is read with encoding/json's rules (YAML parsers disagree with
// JSON on some escapes), anything else as YAML.
package jobspec
