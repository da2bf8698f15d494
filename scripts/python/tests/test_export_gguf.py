"""The GGUF export against real llama.cpp (llama-cpp-python, built from its
source by scripts/setup.sh --test): the adapter applied to the base GGUF,
and the merged GGUF, give the next-token logits that transformers + peft
give on the same tokens."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(PKG_ROOT))
DATA = os.path.join(REPO, "configs", "examples", "data")

# Logits of float32 weights, computed by two libraries with their own
# kernels (llama.cpp's GGML, torch's), llama.cpp with an f32 KV cache
# (type_k=type_v=0; its default f16 cache alone moves these logits by up
# to 8e-3): measured differences are ~1e-5 on logits of magnitude ~0.6.
# The tolerance leaves room for summation order, and is far below what a
# wrong permutation, a missing adapter or a wrong alpha changes (the
# adapter moves the logits by ~0.9).
TOL = 1e-3
PROMPT = "The support bot answers the question about the order"

_state = {}


def setUpModule():
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from lathe_trainer import tiny_llama

    work = tempfile.mkdtemp(prefix="lathe-test-gguf-")
    model_dir = tiny_llama.build(os.path.join(work, "model"), os.path.join(DATA, "tiny-train.jsonl"), seed=1)
    # An adapter with non-zero weights everywhere (init_lora_weights=False:
    # B is random too), on every projection llama.cpp maps, q and k
    # included (their rows are permuted).
    torch.manual_seed(5)
    base = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, dtype=torch.float32)
    peft = get_peft_model(base, LoraConfig(r=4, lora_alpha=12, lora_dropout=0.0, init_lora_weights=False,
                                            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                            "up_proj", "down_proj"], task_type="CAUSAL_LM"))
    with torch.no_grad():
        for n, p in peft.named_parameters():
            if "lora_B" in n:
                p.mul_(20.0)  # big enough to move the logits well past TOL
    adapter_dir = os.path.join(work, "adapter")
    peft.save_pretrained(adapter_dir)
    _state.update(work=work, model=model_dir, adapter=adapter_dir)


def tearDownModule():
    shutil.rmtree(_state.get("work", ""), ignore_errors=True)


def hf_logits(with_adapter):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(_state["model"], local_files_only=True)
    ids = tok(PROMPT)["input_ids"]
    model = AutoModelForCausalLM.from_pretrained(_state["model"], local_files_only=True, dtype=torch.float32)
    if with_adapter:
        model = PeftModel.from_pretrained(model, _state["adapter"])
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float().numpy()
    return ids, logits


def llama_cpp_logits(model_path, ids, lora_path=None):
    from llama_cpp import Llama

    llm = Llama(model_path=model_path, lora_path=lora_path, n_ctx=64, n_batch=64, logits_all=True,
                n_threads=2, verbose=False, seed=0, type_k=0, type_v=0)
    try:
        llm.eval(ids)
        return llm.scores[: len(ids)].copy()
    finally:
        llm.close()


class ExportGGUFTest(unittest.TestCase):
    def path(self, name):
        return os.path.join(_state["work"], name)

    def test_adapter_on_the_base_and_the_merged_model_match_peft(self):
        import numpy as np

        from lathe_trainer import export_gguf

        base_gguf = export_gguf.write_model_gguf(_state["model"], self.path("base.gguf"))
        adapter_gguf = export_gguf.write_adapter_gguf(_state["model"], _state["adapter"], self.path("adapter.gguf"))
        merged_gguf = export_gguf.write_model_gguf(_state["model"], self.path("merged.gguf"), adapter_dir=_state["adapter"])

        ids, ref_base = hf_logits(False)
        _, ref_lora = hf_logits(True)
        self.assertGreater(float(np.abs(ref_lora - ref_base).max()), 100 * TOL, "the adapter must change the logits")

        got_base = llama_cpp_logits(base_gguf, ids)
        got_lora = llama_cpp_logits(base_gguf, ids, lora_path=adapter_gguf)
        got_merged = llama_cpp_logits(merged_gguf, ids)
        d_base = float(np.abs(got_base - ref_base).max())
        d_lora = float(np.abs(got_lora - ref_lora).max())
        d_merged = float(np.abs(got_merged - ref_lora).max())
        sys.stderr.write("\n[test_export_gguf] %d tokens, max |logit diff| vs transformers(+peft): base %.3g, "
                         "base+adapter %.3g, merged %.3g (tolerance %g)\n" % (len(ids), d_base, d_lora, d_merged, TOL))
        self.assertLess(d_base, TOL)
        self.assertLess(d_lora, TOL)
        self.assertLess(d_merged, TOL)

    def test_adapter_file_is_llama_cpps_lora_format(self):
        import gguf

        from lathe_trainer import export_gguf

        p = export_gguf.write_adapter_gguf(_state["model"], _state["adapter"], self.path("a2.gguf"))
        r = gguf.GGUFReader(p)

        def field(name):
            f = r.fields[name]
            v = f.parts[f.data[0]]
            return bytes(v).decode() if f.types[0] == gguf.GGUFValueType.STRING else float(v[0])

        self.assertEqual(field("general.architecture"), "llama")
        self.assertEqual(field("general.type"), "adapter")
        self.assertEqual(field("adapter.type"), "lora")
        self.assertEqual(field("adapter.lora.alpha"), 12.0)
        names = {t.name: t for t in r.tensors}
        a, b = names["blk.0.attn_q.weight.lora_a"], names["blk.1.ffn_down.weight.lora_b"]
        # GGML lists dimensions innermost first: A [r, in] is (in, r), B [out, r] is (r, out).
        self.assertEqual(list(a.shape), [64, 4])
        self.assertEqual(list(b.shape), [4, 64])
        self.assertEqual(len(names), 2 * 7 * 2)
        self.assertFalse([n for n in os.listdir(_state["work"]) if n.startswith(".")], "no temporary file is left")

    def test_refusals_name_the_reason(self):
        import json

        from lathe_trainer import export_gguf

        gpt2 = os.path.join(_state["work"], "gpt2")
        os.makedirs(gpt2, exist_ok=True)
        with open(os.path.join(gpt2, "config.json"), "w") as f:
            json.dump({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}, f)
        with self.assertRaisesRegex(ValueError, "llama-family.*GPT2LMHeadModel"):
            export_gguf.check_supported(gpt2)

        bpe = os.path.join(_state["work"], "bpe")
        shutil.copytree(_state["model"], bpe, dirs_exist_ok=True)
        os.remove(os.path.join(bpe, "tokenizer.model"))
        export_gguf.check_supported(bpe)  # the adapter needs no tokenizer
        with self.assertRaisesRegex(ValueError, "SentencePiece tokenizer"):
            export_gguf.check_supported(bpe, need_tokenizer=True)

        dora = os.path.join(_state["work"], "dora")
        shutil.copytree(_state["adapter"], dora, dirs_exist_ok=True)
        with open(os.path.join(dora, "adapter_config.json")) as f:
            cfg = json.load(f)
        cfg["use_dora"] = True
        with open(os.path.join(dora, "adapter_config.json"), "w") as f:
            json.dump(cfg, f)
        with self.assertRaisesRegex(ValueError, "DoRA"):
            export_gguf.write_adapter_gguf(_state["model"], dora, self.path("dora.gguf"))
        self.assertFalse(os.path.exists(self.path("dora.gguf")))

    def test_command_line(self):
        out = self.path("cli-adapter.gguf")
        r = subprocess.run([sys.executable, "-m", "lathe_trainer.export_gguf", "adapter", _state["model"],
                            _state["adapter"], out], cwd=PKG_ROOT, capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.getsize(out) > 0)
        r = subprocess.run([sys.executable, "-m", "lathe_trainer.export_gguf", "base", "lathe-test/not-cached",
                            self.path("x.gguf")], cwd=PKG_ROOT, capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, HF_HUB_OFFLINE="1"))
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("lathe-test/not-cached", r.stderr)


if __name__ == "__main__":
    unittest.main()
