package jobspec

import (
	"math"
	"strings"
	"testing"
	"time"
)

// validSpec returns a spec that passes every rule; each case below breaks
// (or stretches) one.
func validSpec() *Spec {
	return &Spec{
		Name:        "support-bot-lora",
		BaseModel:   "tiny-char",
		Dataset:     "file:///data/support/train.jsonl",
		EvalDataset: "s3://lathe-eu-data/support/eval.jsonl",
		LoRA:        LoRA{Rank: 16, Alpha: 32, Dropout: 0.05, TargetModules: []string{"q_proj", "v_proj"}},
		Training:    Training{Epochs: 3, LearningRate: 2e-4, BatchSize: 8, Seed: 42},
		Resources:   Resources{GPUs: 1, GPUMemoryGB: 24, GPUModels: []string{"A100", "H100"}},
		Residency:   []string{"onprem", "eu"},
		Priority:    PriorityNormal,
		MaxWait:     Duration(2 * time.Hour),
		MaxRuntime:  Duration(8 * time.Hour),
		BudgetUSD:   50,
		Trainer:     "reference",
		Output:      Output{URI: "file:///models/support-bot", Formats: []string{"safetensors"}},
	}
}

func TestValidateValidSpec(t *testing.T) {
	if errs := validSpec().Validate(); len(errs) != 0 {
		t.Fatalf("Validate() = %v, want none", errs)
	}
}

func TestValidateRules(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	cases := []struct {
		name   string
		mutate func(*Spec)
		// field is the one FieldError.Field expected; "" means valid.
		field, value, msg string
	}{
		// name
		{"name shortest", func(s *Spec) { s.Name = "a" }, "", "", ""},
		{"name longest", func(s *Spec) { s.Name = long(63) }, "", "", ""},
		{"name digits and dashes", func(s *Spec) { s.Name = "0-a-9" }, "", "", ""},
		{"name missing", func(s *Spec) { s.Name = "" }, "name", "", "is required"},
		{"name too long", func(s *Spec) { s.Name = long(64) }, "name", long(64), "at most 63"},
		{"name upper case", func(s *Spec) { s.Name = "Bot" }, "name", "Bot", "lower-case"},
		{"name leading dash", func(s *Spec) { s.Name = "-bot" }, "name", "-bot", "lower-case"},
		{"name trailing dash", func(s *Spec) { s.Name = "bot-" }, "name", "bot-", "lower-case"},
		{"name underscore", func(s *Spec) { s.Name = "my_bot" }, "name", "my_bot", "lower-case"},

		// base_model
		{"base_model hf id", func(s *Spec) { s.BaseModel = "meta-llama/Llama-3.1-8B" }, "", "", ""},
		{"base_model 200 chars", func(s *Spec) { s.BaseModel = long(200) }, "", "", ""},
		{"base_model missing", func(s *Spec) { s.BaseModel = "" }, "base_model", "", "is required"},
		{"base_model too long", func(s *Spec) { s.BaseModel = long(201) }, "base_model", long(200) + "…", "at most 200"},
		{"base_model space", func(s *Spec) { s.BaseModel = "tiny char" }, "base_model", "tiny char", "spaces"},
		{"base_model tab", func(s *Spec) { s.BaseModel = "tiny\tchar" }, "base_model", "tiny\tchar", "control"},
		{"base_model newline", func(s *Spec) { s.BaseModel = "tiny\n" }, "base_model", "tiny\n", "control"},
		{"base_model bad utf-8", func(s *Spec) { s.BaseModel = "tiny\xff" }, "base_model", "tiny\uFFFD", "UTF-8"},

		// dataset
		{"dataset s3", func(s *Spec) { s.Dataset = "s3://my.bucket-1/a/b.jsonl" }, "", "", ""},
		{"dataset missing", func(s *Spec) { s.Dataset = "" }, "dataset", "", "is required"},
		{"dataset relative", func(s *Spec) { s.Dataset = "data/train.jsonl" }, "dataset", "data/train.jsonl", "file:///absolute/path or s3://"},
		{"dataset http", func(s *Spec) { s.Dataset = "https://x/y" }, "dataset", "https://x/y", "file:///absolute/path or s3://"},
		{"dataset file host", func(s *Spec) { s.Dataset = "file://host/data/x" }, "dataset", "file://host/data/x", "no host"},
		{"dataset dotdot", func(s *Spec) { s.Dataset = "file:///data/../etc/passwd" }, "dataset", "file:///data/../etc/passwd", "'..'"},
		{"dataset trailing dotdot", func(s *Spec) { s.Dataset = "file:///data/.." }, "dataset", "file:///data/..", "'..'"},
		{"dataset dot", func(s *Spec) { s.Dataset = "file:///data/./x" }, "dataset", "file:///data/./x", "clean path"},
		{"dataset double slash", func(s *Spec) { s.Dataset = "file:///data//x" }, "dataset", "file:///data//x", "clean path"},
		{"dataset directory", func(s *Spec) { s.Dataset = "file:///data/" }, "dataset", "file:///data/", "not a directory"},
		{"dataset root", func(s *Spec) { s.Dataset = "file:///" }, "dataset", "file:///", "not a directory"},
		{"dataset escaped dotdot", func(s *Spec) { s.Dataset = "file:///data/%2e%2e/x" }, "dataset", "file:///data/%2e%2e/x", "'..'"},
		{"dataset escaped slash dotdot", func(s *Spec) { s.Dataset = "file:///a%2F..%2Fb" }, "dataset", "file:///a%2F..%2Fb", "'..'"},
		{"dataset escaped NUL", func(s *Spec) { s.Dataset = "file:///a%00b" }, "dataset", "file:///a%00b", "control"},
		{"dataset bad escape", func(s *Spec) { s.Dataset = "file:///a%zz" }, "dataset", "file:///a%zz", "%XX"},
		{"dataset escaped space", func(s *Spec) { s.Dataset = "file:///my%20data/x.jsonl" }, "", "", ""},
		{"dataset raw space", func(s *Spec) { s.Dataset = "file:///my data/x.jsonl" }, "", "", ""},
		{"dataset tab", func(s *Spec) { s.Dataset = "file:///my\tdata/x" }, "dataset", "file:///my\tdata/x", "control"},
		{"dataset fragment", func(s *Spec) { s.Dataset = "file:///data/x#y" }, "dataset", "file:///data/x#y", "'#'"},
		{"dataset s3 percent", func(s *Spec) { s.Dataset = "s3://bucket/a%20b" }, "dataset", "s3://bucket/a%20b", "'%'"},
		{"dataset query", func(s *Spec) { s.Dataset = "s3://bucket/x?versionId=1" }, "dataset", "s3://bucket/x?versionId=1", "'?'"},
		{"dataset s3 space", func(s *Spec) { s.Dataset = "s3://bucket/my data" }, "dataset", "s3://bucket/my data", "spaces"},
		{"dataset s3 no key", func(s *Spec) { s.Dataset = "s3://bucket" }, "dataset", "s3://bucket", "must name an object"},
		{"dataset s3 prefix", func(s *Spec) { s.Dataset = "s3://bucket/dir/" }, "dataset", "s3://bucket/dir/", "must name an object"},
		{"dataset s3 dotdot key", func(s *Spec) { s.Dataset = "s3://bucket/a/../b" }, "dataset", "s3://bucket/a/../b", "'..'"},
		{"dataset s3 no bucket", func(s *Spec) { s.Dataset = "s3:///key" }, "dataset", "s3:///key", "must name a bucket"},
		{"dataset s3 upper bucket", func(s *Spec) { s.Dataset = "s3://Bucket/key" }, "dataset", "s3://Bucket/key", "bucket name"},
		{"dataset s3 short bucket", func(s *Spec) { s.Dataset = "s3://ab/key" }, "dataset", "s3://ab/key", "bucket name"},
		{"dataset s3 long bucket", func(s *Spec) { s.Dataset = "s3://" + long(64) + "/key" }, "dataset", "s3://" + long(64) + "/key", "bucket name"},
		{"dataset s3 bucket dotdot", func(s *Spec) { s.Dataset = "s3://a..b/key" }, "dataset", "s3://a..b/key", "'..'"},
		{"dataset s3 bucket ip", func(s *Spec) { s.Dataset = "s3://192.168.5.4/key" }, "dataset", "s3://192.168.5.4/key", "IP address"},
		{"dataset s3 bucket xn--", func(s *Spec) { s.Dataset = "s3://xn--abc/key" }, "dataset", "s3://xn--abc/key", "reserves"},
		{"dataset s3 key too long", func(s *Spec) { s.Dataset = "s3://bucket/" + long(1025) }, "dataset", "s3://bucket/" + long(188) + "…", "1024 bytes"},

		// eval_dataset
		{"eval_dataset empty", func(s *Spec) { s.EvalDataset = "" }, "", "", ""},
		{"eval_dataset bad", func(s *Spec) { s.EvalDataset = "file:///a/../b" }, "eval_dataset", "file:///a/../b", "'..'"},

		// lora
		{"rank 1", func(s *Spec) { s.LoRA.Rank = 1 }, "", "", ""},
		{"rank 1024", func(s *Spec) { s.LoRA.Rank = 1024 }, "", "", ""},
		{"rank 0", func(s *Spec) { s.LoRA.Rank = 0 }, "lora.rank", "0", "between 1 and 1024"},
		{"rank 1025", func(s *Spec) { s.LoRA.Rank = 1025 }, "lora.rank", "1025", "between 1 and 1024"},
		{"rank negative", func(s *Spec) { s.LoRA.Rank = -4 }, "lora.rank", "-4", "between 1 and 1024"},
		{"alpha small", func(s *Spec) { s.LoRA.Alpha = 0.001 }, "", "", ""},
		{"alpha 0", func(s *Spec) { s.LoRA.Alpha = 0 }, "lora.alpha", "0", "greater than 0"},
		{"alpha negative", func(s *Spec) { s.LoRA.Alpha = -1.5 }, "lora.alpha", "-1.5", "greater than 0"},
		{"alpha NaN", func(s *Spec) { s.LoRA.Alpha = math.NaN() }, "lora.alpha", "NaN", "finite"},
		{"alpha Inf", func(s *Spec) { s.LoRA.Alpha = math.Inf(1) }, "lora.alpha", "+Inf", "finite"},
		{"dropout 0", func(s *Spec) { s.LoRA.Dropout = 0 }, "", "", ""},
		{"dropout 0.99", func(s *Spec) { s.LoRA.Dropout = 0.99 }, "", "", ""},
		{"dropout 1", func(s *Spec) { s.LoRA.Dropout = 1 }, "lora.dropout", "1", "less than 1"},
		{"dropout negative", func(s *Spec) { s.LoRA.Dropout = -0.1 }, "lora.dropout", "-0.1", "at least 0"},
		{"dropout NaN", func(s *Spec) { s.LoRA.Dropout = math.NaN() }, "lora.dropout", "NaN", "finite"},
		{"target_modules dotted", func(s *Spec) { s.LoRA.TargetModules = []string{"model.layers.0.self_attn.q_proj"} }, "", "", ""},
		{"target_modules empty", func(s *Spec) { s.LoRA.TargetModules = nil }, "lora.target_modules", "", "at least one"},
		{"target_modules empty item", func(s *Spec) { s.LoRA.TargetModules = []string{"q_proj", ""} }, "lora.target_modules[1]", "", "must not be empty"},
		{"target_modules bad chars", func(s *Spec) { s.LoRA.TargetModules = []string{"q-proj"} }, "lora.target_modules[0]", "q-proj", "letters, digits"},
		{"target_modules repeat", func(s *Spec) { s.LoRA.TargetModules = []string{"q_proj", "v_proj", "q_proj"} }, "lora.target_modules[2]", "q_proj", "repeats lora.target_modules[0]"},

		// training
		{"max_steps only", func(s *Spec) { s.Training.Epochs, s.Training.MaxSteps = 0, 100 }, "", "", ""},
		{"epochs and max_steps", func(s *Spec) { s.Training.MaxSteps = 100 }, "", "", ""},
		{"neither epochs nor max_steps", func(s *Spec) { s.Training.Epochs = 0 }, "training.epochs", "0", "at least 1"},
		{"epochs negative", func(s *Spec) { s.Training.Epochs = -1 }, "training.epochs", "-1", "negative"},
		{"max_steps negative", func(s *Spec) { s.Training.MaxSteps = -1 }, "training.max_steps", "-1", "negative"},
		{"learning_rate 1", func(s *Spec) { s.Training.LearningRate = 1 }, "", "", ""},
		{"learning_rate 0", func(s *Spec) { s.Training.LearningRate = 0 }, "training.learning_rate", "0", "greater than 0"},
		{"learning_rate above 1", func(s *Spec) { s.Training.LearningRate = 1.5 }, "training.learning_rate", "1.5", "at most 1"},
		{"learning_rate Inf", func(s *Spec) { s.Training.LearningRate = math.Inf(-1) }, "training.learning_rate", "-Inf", "finite"},
		{"batch_size 1", func(s *Spec) { s.Training.BatchSize = 1 }, "", "", ""},
		{"batch_size 65536", func(s *Spec) { s.Training.BatchSize = 65536 }, "", "", ""},
		{"batch_size 0", func(s *Spec) { s.Training.BatchSize = 0 }, "training.batch_size", "0", "between 1 and 65536"},
		{"batch_size 65537", func(s *Spec) { s.Training.BatchSize = 65537 }, "training.batch_size", "65537", "between 1 and 65536"},
		{"seed negative", func(s *Spec) { s.Training.Seed = -7 }, "", "", ""},
		{"checkpoint_every", func(s *Spec) { s.Training.CheckpointEvery = 50 }, "", "", ""},
		{"checkpoint_every negative", func(s *Spec) { s.Training.CheckpointEvery = -1 }, "training.checkpoint_every", "-1", "negative"},
		{"eval_every negative", func(s *Spec) { s.Training.EvalEvery = -2 }, "training.eval_every", "-2", "negative"},
		{"stop_at_step given", func(s *Spec) { s.Training.StopAtStep = 100 }, "training.stop_at_step", "100", "set by Lathe for a sweep's ASHA rungs"},
		{"stop_at_step negative", func(s *Spec) { s.Training.StopAtStep = -1 }, "training.stop_at_step", "-1", "must not be given"},

		// resources
		{"gpus 0", func(s *Spec) { s.Resources.GPUs = 0 }, "", "", ""},
		{"gpus 64", func(s *Spec) { s.Resources.GPUs = 64 }, "", "", ""},
		{"gpus 65", func(s *Spec) { s.Resources.GPUs = 65 }, "resources.gpus", "65", "between 0 and 64"},
		{"gpus negative", func(s *Spec) { s.Resources.GPUs = -1 }, "resources.gpus", "-1", "between 0 and 64"},
		{"nodes unset", func(s *Spec) { s.Resources.Nodes = 0 }, "", "", ""},
		{"nodes 64", func(s *Spec) { s.Resources.GPUs, s.Resources.Nodes = 8, 64 }, "", "", ""},
		{"nodes 65", func(s *Spec) { s.Resources.GPUs, s.Resources.Nodes = 8, 65 }, "resources.nodes", "65", "between 1 and 64"},
		{"nodes negative", func(s *Spec) { s.Resources.Nodes = -1 }, "resources.nodes", "-1", "between 1 and 64"},
		{"nodes without gpus", func(s *Spec) { s.Resources.GPUs, s.Resources.Nodes = 0, 2 }, "resources.nodes", "2", "resources.gpus of at least 1"},
		{"one node without gpus", func(s *Spec) { s.Resources.GPUs, s.Resources.Nodes = 0, 1 }, "", "", ""},
		{"gpu_memory_gb 0", func(s *Spec) { s.Resources.GPUMemoryGB = 0 }, "", "", ""},
		{"gpu_memory_gb negative", func(s *Spec) { s.Resources.GPUMemoryGB = -1 }, "resources.gpu_memory_gb", "-1", "negative"},
		{"gpu_memory_gb NaN", func(s *Spec) { s.Resources.GPUMemoryGB = math.NaN() }, "resources.gpu_memory_gb", "NaN", "finite"},
		{"gpu_models none", func(s *Spec) { s.Resources.GPUModels = nil }, "", "", ""},
		{"gpu_models with space", func(s *Spec) { s.Resources.GPUModels = []string{"RTX 4090"} }, "", "", ""},
		{"gpu_models empty item", func(s *Spec) { s.Resources.GPUModels = []string{"A100", ""} }, "resources.gpu_models[1]", "", "must not be empty"},
		{"gpu_models padded", func(s *Spec) { s.Resources.GPUModels = []string{" A100"} }, "resources.gpu_models[0]", " A100", "spaces"},
		{"gpu_models control", func(s *Spec) { s.Resources.GPUModels = []string{"A\x00100"} }, "resources.gpu_models[0]", "A\x00100", "control"},

		// residency
		{"residency none", func(s *Spec) { s.Residency = nil }, "", "", ""},
		{"residency longest tag", func(s *Spec) { s.Residency = []string{"a" + long(31)} }, "", "", ""},
		{"residency tag too long", func(s *Spec) { s.Residency = []string{"onprem", "a" + long(32)} }, "residency[1]", "a" + long(32), "lower-case letter"},
		{"residency upper case", func(s *Spec) { s.Residency = []string{"EU"} }, "residency[0]", "EU", "lower-case letter"},
		{"residency leading digit", func(s *Spec) { s.Residency = []string{"1eu"} }, "residency[0]", "1eu", "lower-case letter"},
		{"residency empty tag", func(s *Spec) { s.Residency = []string{""} }, "residency[0]", "", "must not be empty"},
		{"residency repeat", func(s *Spec) { s.Residency = []string{"eu", "onprem", "eu"} }, "residency[2]", "eu", "repeats residency[0]"},

		// priority
		{"priority urgent", func(s *Spec) { s.Priority = PriorityUrgent }, "", "", ""},
		{"priority batch", func(s *Spec) { s.Priority = PriorityBatch }, "", "", ""},
		{"priority unknown", func(s *Spec) { s.Priority = "sometimes" }, "priority", "sometimes", "urgent, normal or batch"},
		{"priority empty", func(s *Spec) { s.Priority = "" }, "priority", "", "urgent, normal or batch"},

		// durations and budget
		{"max_wait 0", func(s *Spec) { s.MaxWait = 0 }, "", "", ""},
		{"max_wait negative", func(s *Spec) { s.MaxWait = Duration(-time.Hour) }, "max_wait", "-1h0m0s", "negative"},
		{"max_runtime negative", func(s *Spec) { s.MaxRuntime = Duration(-time.Second) }, "max_runtime", "-1s", "negative"},
		{"budget 0", func(s *Spec) { s.BudgetUSD = 0 }, "", "", ""},
		{"budget negative", func(s *Spec) { s.BudgetUSD = -0.01 }, "budget_usd", "-0.01", "negative"},
		{"budget Inf", func(s *Spec) { s.BudgetUSD = math.Inf(1) }, "budget_usd", "+Inf", "finite"},

		// trainer
		{"trainer axolotl", func(s *Spec) { s.Trainer = "axolotl_v2-gpu" }, "", "", ""},
		{"trainer longest", func(s *Spec) { s.Trainer = long(63) }, "", "", ""},
		{"trainer too long", func(s *Spec) { s.Trainer = long(64) }, "trainer", long(64), "1–63"},
		{"trainer empty", func(s *Spec) { s.Trainer = "" }, "trainer", "", "1–63"},
		{"trainer leading dash", func(s *Spec) { s.Trainer = "-x" }, "trainer", "-x", "1–63"},
		{"trainer path", func(s *Spec) { s.Trainer = "../bin/sh" }, "trainer", "../bin/sh", "1–63"},

		// output
		{"output uri empty", func(s *Spec) { s.Output.URI = "" }, "", "", ""},
		{"output uri s3 bucket only", func(s *Spec) { s.Output.URI = "s3://lathe-models" }, "", "", ""},
		{"output uri s3 prefix", func(s *Spec) { s.Output.URI = "s3://lathe-models/team/" }, "", "", ""},
		{"output uri file dir", func(s *Spec) { s.Output.URI = "file:///models/" }, "", "", ""},
		{"output uri relative", func(s *Spec) { s.Output.URI = "models" }, "output.uri", "models", "file:///absolute/path or s3://"},
		{"output uri dotdot", func(s *Spec) { s.Output.URI = "file:///models/../etc" }, "output.uri", "file:///models/../etc", "'..'"},
		{"output formats empty", func(s *Spec) { s.Output.Formats = nil }, "output.formats", "", "at least one"},
		{"output formats unknown", func(s *Spec) { s.Output.Formats = []string{"safetensors", "onnx"} }, "output.formats[1]", "onnx", `unknown format "onnx"`},
		{"output formats gguf", func(s *Spec) {
			s.BaseModel = "meta-llama/Llama-3.2-1B"
			s.Output.Formats = []string{"safetensors", "gguf", "gguf-merged"}
		}, "", "", ""},
		{"output formats gguf only", func(s *Spec) {
			s.BaseModel = "/models/llama"
			s.Output.Formats = []string{"gguf"}
		}, "", "", ""},
		{"output formats gguf of tiny-char", func(s *Spec) { s.Output.Formats = []string{"safetensors", "gguf"} }, "output.formats[1]", "gguf",
			"gguf needs a llama-family base model; tiny-char is Lathe's built-in demo model, which llama.cpp cannot represent"},
		{"output formats gguf-merged of tiny-char", func(s *Spec) { s.Output.Formats = []string{"gguf-merged"} }, "output.formats[0]", "gguf-merged",
			"gguf-merged needs a llama-family base model; tiny-char is"},
		{"output formats gguf repeat", func(s *Spec) {
			s.BaseModel = "meta-llama/Llama-3.2-1B"
			s.Output.Formats = []string{"gguf", "gguf"}
		}, "output.formats[1]", "gguf", "repeats"},
		{"output formats repeat", func(s *Spec) { s.Output.Formats = []string{"safetensors", "safetensors"} }, "output.formats[1]", "safetensors", "repeats"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := validSpec()
			tc.mutate(s)
			errs := s.Validate()
			if tc.field == "" {
				if len(errs) != 0 {
					t.Fatalf("Validate() = %v, want none", errs)
				}
				return
			}
			if len(errs) != 1 {
				t.Fatalf("Validate() = %v, want one error on %s", errs, tc.field)
			}
			e := errs[0]
			if e.Field != tc.field || e.Value != tc.value || !strings.Contains(e.Message, tc.msg) {
				t.Errorf("Validate() = %+v, want field %q value %q message containing %q", e, tc.field, tc.value, tc.msg)
			}
		})
	}
}

func TestValidateZeroSpecReportsRequiredFields(t *testing.T) {
	errs := (&Spec{}).Validate()
	want := map[string]bool{"name": true, "base_model": true, "dataset": true, "lora.rank": true,
		"lora.alpha": true, "training.learning_rate": true, "priority": true, "trainer": true}
	got := map[string]bool{}
	for _, e := range errs {
		got[e.Field] = true
	}
	for f := range want {
		if !got[f] {
			t.Errorf("no error for %s in %v", f, errs)
		}
	}
}

func TestFieldErrorString(t *testing.T) {
	e := FieldError{Field: "lora.rank", Value: "-4", Message: "must be between 1 and 1024"}
	if got, want := e.Error(), `lora.rank: must be between 1 and 1024 (got "-4")`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	ve := &ValidationError{Errors: []FieldError{e, {Message: "bad"}}}
	if got, want := ve.Error(), `invalid job spec: lora.rank: must be between 1 and 1024 (got "-4"); bad`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// TestResourcesNodes reads resources.nodes from YAML and counts a gang's
// GPUs as nodes × gpus: what cost and GPU-hours are figured from.
func TestResourcesNodes(t *testing.T) {
	spec := strings.Replace(designExample, "resources: {gpus: 1,", "resources: {gpus: 4, nodes: 3,", 1)
	s, err := Parse([]byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	if s.Resources.Nodes != 3 || s.Resources.NodeCount() != 3 || s.Resources.TotalGPUs() != 12 {
		t.Fatalf("nodes %d, count %d, total %d; want 3, 3, 12", s.Resources.Nodes, s.Resources.NodeCount(), s.Resources.TotalGPUs())
	}
	back, err := Parse(s.JSON())
	if err != nil || back.Resources.Nodes != 3 {
		t.Fatalf("JSON round trip: %v, nodes %d", err, back.Resources.Nodes)
	}
	one := Resources{GPUs: 2}
	if one.NodeCount() != 1 || one.TotalGPUs() != 2 {
		t.Fatalf("unset nodes: count %d, total %d; want 1, 2", one.NodeCount(), one.TotalGPUs())
	}
	if _, err := Parse([]byte(strings.Replace(designExample, "resources: {gpus: 1,", "resources: {gpus: 0, nodes: 2,", 1))); err == nil ||
		!strings.Contains(err.Error(), "resources.nodes") {
		t.Fatalf("nodes 2 with gpus 0: err %v, want one naming resources.nodes", err)
	}
}
