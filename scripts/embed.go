// Package scripts holds Lathe's reference trainer and its helper scripts, and
// embeds the trainer so the daemon can write it into its data directory and
// run it with /usr/bin/python3 (see docs/trainer.md).
package scripts

import "embed"

// File names to write the embedded scripts under: eval_adapter.py imports
// train_lora, so both must sit in the same directory under these names.
const (
	TrainLoRAFile   = "train_lora.py"
	EvalAdapterFile = "eval_adapter.py"
)

// TrainLoRA is scripts/train_lora.py, the reference LoRA trainer that follows
// the trainer contract (docs/design.md "Trainer contract", docs/trainer.md). Run it
// as /usr/bin/python3 train_lora.py with the LATHE_* environment set.
//
//go:embed train_lora.py
var TrainLoRA []byte

// EvalAdapter is scripts/eval_adapter.py, which recomputes a trained
// adapter's eval loss and the base model's (same procedure as the trainer's
// final eval). It imports train_lora: write it next to TrainLoRA.
//
//go:embed eval_adapter.py
var EvalAdapter []byte

// Python is the lathe_trainer package (scripts/python/lathe_trainer): the
// contract for any training script, the GGUF export the reference trainer
// calls and the tiny Llama builder. The daemon writes it as
// python/lathe_trainer/ next to TrainLoRA, which imports it from there.
//
//go:embed python/lathe_trainer/*.py
var Python embed.FS

// PythonDir is where Python's files go, relative to TrainLoRA's folder.
const PythonDir = "python"
