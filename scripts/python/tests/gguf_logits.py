"""Compare next-token logits of transformers + peft with llama.cpp's for a
pulled job: the GGUF adapter applied to the base (written here as GGUF by
lathe_trainer.export_gguf), and the merged GGUF. Used by
cmd/lathed/hf_e2e_test.go; prints one JSON line.

    python gguf_logits.py MODEL_DIR PULLED_DIR "prompt"
"""

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    model_dir, pulled, prompt = sys.argv[1:4]
    import numpy as np
    import torch
    from llama_cpp import Llama
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lathe_trainer import export_gguf

    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    ids = tok(prompt)["input_ids"]
    base = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, dtype=torch.float32)
    with torch.no_grad():
        ref_base = base(input_ids=torch.tensor([ids])).logits[0].float().numpy()
    model = PeftModel.from_pretrained(base, pulled)
    model.eval()
    with torch.no_grad():
        ref = model(input_ids=torch.tensor([ids])).logits[0].float().numpy()

    def cpp(path, lora=None):
        llm = Llama(model_path=path, lora_path=lora, n_ctx=64, n_batch=64, logits_all=True, n_threads=2,
                    verbose=False, type_k=0, type_v=0)  # an f32 KV cache (llama.cpp's default is f16)
        try:
            llm.eval(ids)
            return llm.scores[: len(ids)].copy()
        finally:
            llm.close()

    with tempfile.TemporaryDirectory() as d:
        base_gguf = export_gguf.write_model_gguf(model_dir, os.path.join(d, "base_model.gguf"))
        lora = cpp(base_gguf, os.path.join(pulled, "adapter_model.gguf"))
    merged = cpp(os.path.join(pulled, "merged_model.gguf"))
    print(json.dumps({"tokens": len(ids), "adapter_effect": float(np.abs(ref - ref_base).max()),
                      "adapter_diff": float(np.abs(lora - ref).max()), "merged_diff": float(np.abs(merged - ref).max())}))


if __name__ == "__main__":
    main()
