#!/usr/bin/env python3
"""Evaluate a LoRA adapter written by train_lora.py, with and without it.

    /usr/bin/python3 scripts/eval_adapter.py --adapter DIR --eval-dataset PATH_OR_FILE_URI \
        [--base-model tiny-char] [-o json]

Rebuilds the base model, computes the eval loss on the dataset without the
adapter and with it, by exactly the procedure of the trainer's final eval
(train_lora.evaluate: model.eval(), no dropout, all windows in a fixed order,
mean per-token cross-entropy accumulated in float64), so the adapter's loss
reproduces the trainer's final "eval_loss". Prints
{"base_eval_loss": ..., "adapter_eval_loss": ...} with -o json, otherwise a
readable line. Needs train_lora.py next to this file. Exit 3 on bad input
(missing adapter files, bad dataset, unknown base model), 1 on other errors.
"""

import argparse
import json
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ next to the scripts
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import train_lora as T  # noqa: E402  (shares the model, data and eval code)
except ImportError as e:  # pragma: no cover
    sys.stderr.write("eval_adapter: train_lora.py must sit next to eval_adapter.py: %s\n" % e)
    sys.exit(1)

torch = T.torch


def read_adapter_config(adapter_dir):
    path = os.path.join(adapter_dir, "adapter_config.json")
    try:
        with open(path, "r", encoding="utf-8") as f:
            cfg = json.load(f)
    except FileNotFoundError:
        raise T.TrainerError("%s does not exist" % path)
    except ValueError as e:
        raise T.TrainerError("%s is not valid JSON: %s" % (path, e))
    if cfg.get("peft_type", "LORA") != "LORA":
        raise T.TrainerError("%s: peft_type %r is not LORA" % (path, cfg.get("peft_type")))
    return cfg


def eval_tiny_char(adapter_dir, cfg, texts, device):
    model = T.build_tiny_char().to(device)
    model.eval()
    xs, ys = T.make_windows(T.tiny_char_encode(texts), model.seq_len)
    base = T.evaluate(model, xs, ys, device)

    targets = cfg.get("target_modules") or []
    if isinstance(targets, str):
        targets = [targets]
    r = int(cfg["r"])
    alpha = float(cfg.get("lora_alpha", r))
    T.apply_lora(model, targets, r, alpha, 0.0, allowed=T.TINY_TARGETS)
    path = os.path.join(adapter_dir, "adapter_model.safetensors")
    if not os.path.exists(path):
        raise T.TrainerError("%s does not exist" % path)
    tensors, _ = T.load_safetensors(path)
    try:
        T.load_lora_state_dict(model, tensors)
    except ValueError as e:
        raise T.TrainerError("%s does not fit tiny-char with %s: %s" % (path, "adapter_config.json", e))
    model.to(device)
    model.eval()
    return base, T.evaluate(model, xs, ys, device)


def eval_hf(adapter_dir, base_model, texts, device):
    """The Hugging Face path: the base from its local folder or the local
    cache (offline), the adapter with peft's PeftModel.from_pretrained."""
    T._import_hf(base_model)
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = T.hf_model_dir(base_model)
    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True, trust_remote_code=False)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, local_files_only=True,
                                                 trust_remote_code=False).to(device)
    model.eval()
    xs, ys = T.hf_windows(tok, texts, T.hf_seq_len(tok))

    def fwd(m):
        return lambda x: m(input_ids=x).logits

    base = T.evaluate(fwd(model), xs, ys, device)
    model = PeftModel.from_pretrained(model, adapter_dir).to(device)
    model.eval()
    return base, T.evaluate(fwd(model), xs, ys, device)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Eval loss of a base model with and without a LoRA adapter")
    ap.add_argument("--adapter", required=True, help="directory with adapter_config.json and adapter_model.safetensors")
    ap.add_argument("--eval-dataset", required=True, help="JSONL file: a path or a file:// URI")
    ap.add_argument("--base-model", default="", help="default: base_model_name_or_path from adapter_config.json")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    ap.add_argument("-o", "--output", default="text", choices=["text", "json"])
    args = ap.parse_args(argv)
    try:
        cfg = read_adapter_config(args.adapter)
        base_model = args.base_model or cfg.get("base_model_name_or_path") or T.TINY_CHAR
        texts = T.read_texts(args.eval_dataset)
        device = torch.device(args.device)
        torch.set_num_threads(1 if base_model == T.TINY_CHAR else max(1, min(os.cpu_count() or 1, 8)))
        if base_model == T.TINY_CHAR:
            base, adapted = eval_tiny_char(args.adapter, cfg, texts, device)
        else:
            base, adapted = eval_hf(args.adapter, base_model, texts, device)
    except T.TrainerError as e:
        sys.stderr.write("eval_adapter: error: %s\n" % e)
        return e.code
    except Exception as e:
        sys.stderr.write("eval_adapter: error: %s: %s\n" % (type(e).__name__, e))
        return T.EXIT_RETRY
    if args.output == "json":
        print(json.dumps({"base_eval_loss": base, "adapter_eval_loss": adapted}))
    else:
        print("base model %s: eval loss %.6f; with adapter %s: %.6f (%+.6f)"
              % (base_model, base, args.adapter, adapted, adapted - base))
    return 0


if __name__ == "__main__":
    sys.exit(main())
