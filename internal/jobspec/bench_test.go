package jobspec

import "testing"

// The specs the benchmarks parse: the smallest the CLI sends, and a full one.
const (
	benchJSONSmall = `{"name":"bench","base_model":"tiny-char","dataset":"file:///data/train.jsonl","resources":{"gpus":0}}`
	benchJSONFull  = `{"name":"support-bot-lora","base_model":"tiny-char","dataset":"file:///data/support/train.jsonl",` +
		`"eval_dataset":"file:///data/support/eval.jsonl",` +
		`"lora":{"rank":16,"alpha":32,"dropout":0.05,"target_modules":["q_proj","v_proj"]},` +
		`"training":{"epochs":3,"learning_rate":0.0002,"batch_size":8,"max_steps":0,"seed":42},` +
		`"resources":{"gpus":1,"gpu_memory_gb":24,"gpu_models":["A100","H100"]},` +
		`"residency":["onprem","eu"],"priority":"normal","max_wait":"2h","max_runtime":"8h",` +
		`"budget_usd":50,"trainer":"reference",` +
		`"output":{"uri":"file:///models/support-bot","formats":["safetensors"]}}`
)

func benchParse(b *testing.B, src string) {
	data := []byte(src)
	if _, err := Parse(data); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseJSON(b *testing.B) {
	b.Run("small", func(b *testing.B) { benchParse(b, benchJSONSmall) })
	b.Run("full", func(b *testing.B) { benchParse(b, benchJSONFull) })
}

func BenchmarkParseYAML(b *testing.B) {
	b.Run("small", func(b *testing.B) { benchParse(b, minimal+"resources: {gpus: 0}\n") })
	b.Run("full", func(b *testing.B) { benchParse(b, designExample) })
}
