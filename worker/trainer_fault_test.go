package worker_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// Trainers that exit 0 but break the trainer contract: /bin/sh STAND-INs.
const (
	// noArtifactTrainer writes nothing into its output folder.
	noArtifactTrainer = `#!/bin/sh
echo '{"event":"done","metrics":{}}'
`
	// badNameTrainer reports an artifact whose name leaves the folder.
	badNameTrainer = `#!/bin/sh
printf 'adapter' > "$LATHE_OUTPUT_DIR/adapter_model.safetensors"
echo '{"event":"artifact","path":"../adapter_model.safetensors","format":"safetensors"}'
echo '{"event":"done","metrics":{}}'
`
	// wrongDigestTrainer reports a sha256 its artifact does not have.
	wrongDigestTrainer = `#!/bin/sh
printf 'adapter' > "$LATHE_OUTPUT_DIR/adapter_model.safetensors"
echo '{"event":"artifact","path":"adapter_model.safetensors","format":"safetensors","sha256":"` + "0000000000000000000000000000000000000000000000000000000000000000" + `"}'
echo '{"event":"done","metrics":{}}'
`
	// swappedOutputTrainer moves its output folder away and writes its
	// artifact into a new folder of the same name.
	swappedOutputTrainer = `#!/bin/sh
mv "$LATHE_OUTPUT_DIR" "$LATHE_OUTPUT_DIR.moved"
mkdir "$LATHE_OUTPUT_DIR"
printf 'adapter' > "$LATHE_OUTPUT_DIR/adapter_model.safetensors"
echo '{"event":"artifact","path":"adapter_model.safetensors","format":"safetensors"}'
echo '{"event":"done","metrics":{}}'
`
	// swappedOutputSilentTrainer does the same and reports nothing, so
	// the folder is listed.
	swappedOutputSilentTrainer = `#!/bin/sh
mv "$LATHE_OUTPUT_DIR" "$LATHE_OUTPUT_DIR.moved"
mkdir "$LATHE_OUTPUT_DIR"
printf 'adapter' > "$LATHE_OUTPUT_DIR/adapter_model.safetensors"
echo '{"event":"done","metrics":{}}'
`
)

// TestTrainerFaultsHaveTheirOwnReason: a trainer that exits 0 with no
// artifact, a bad artifact name, an artifact whose sha256 is not what it
// reported, or its output folder swapped for another, fails its job with
// reason trainer_fault (not internal, which is Lathe's own failure), at
// once (not retried), naming what is wrong.
func TestTrainerFaultsHaveTheirOwnReason(t *testing.T) {
	cases := []struct{ trainer, body, says string }{
		{"noart", noArtifactTrainer, "wrote no artifacts"},
		{"badname", badNameTrainer, `artifact name "../adapter_model.safetensors": must be a plain file name`},
		{"digest", wrongDigestTrainer, "trainer reported sha256 0000"},
		{"swapped", swappedOutputTrainer, "adapter_model.safetensors"},
		{"swappedsilent", swappedOutputSilentTrainer, "wrote no artifacts"},
	}
	trainers := map[string]string{}
	for _, c := range cases {
		trainers[c.trainer] = c.body
	}
	b := setup(t, trainers)
	for _, c := range cases {
		t.Run(c.trainer, func(t *testing.T) {
			id := b.submit(t, c.trainer, time.Hour)
			j := b.wait(t, id, terminal)
			if j.State != jobtype.StateFailed || j.Reason != jobtype.ReasonTrainerFault || j.Attempt != 1 || !strings.Contains(j.Error, c.says) {
				t.Fatalf("got %s/%s (attempt %d): %q; want failed, %s, attempt 1, saying %q", j.State, j.Reason, j.Attempt, j.Error, jobtype.ReasonTrainerFault, c.says)
			}
		})
	}
}
