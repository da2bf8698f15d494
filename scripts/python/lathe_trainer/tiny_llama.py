"""Build a tiny Llama locally: random weights from a config, a tokenizer trained
on a local text file. Nothing comes from a model hub.

    python -m lathe_trainer.tiny_llama OUT_DIR --corpus data.jsonl [--seed 0]
        [--hidden 64] [--layers 2] [--heads 4] [--kv-heads 2] [--vocab 384]

OUT_DIR becomes a Hugging Face model folder that ``AutoModelForCausalLM`` and
``AutoTokenizer`` load with ``local_files_only=True``: ``config.json``,
``model.safetensors``, ``generation_config.json``, ``tokenizer.json``,
``tokenizer_config.json`` and the SentencePiece ``tokenizer.model`` the
tokenizer was converted from (the GGUF export reads its scores).

The tokenizer is a SentencePiece BPE model with byte fallback (as Llama 2's),
trained on the corpus (JSONL lines of ``{"text": ...}`` or
``{"prompt": ..., "completion": ...}``, or plain text). The same corpus, seed
and sizes give the same folder, byte for byte, on the same library versions.

Needs ``transformers``, ``sentencepiece``, ``protobuf`` and ``torch``: the
Hugging Face virtualenv that ``scripts/setup.sh --hf`` builds.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile


def corpus_texts(path):
    """The texts of a JSONL dataset (text, or prompt + completion), else the
    file's lines."""
    texts = []
    with open(path, "r", encoding="utf-8-sig") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                texts.append(line)
                continue
            if isinstance(obj, dict) and isinstance(obj.get("text"), str):
                texts.append(obj["text"])
            elif isinstance(obj, dict) and isinstance(obj.get("prompt"), str):
                texts.append(obj["prompt"] + str(obj.get("completion", "")))
            else:
                texts.append(line)
    if not texts:
        raise SystemExit("tiny_llama: %s: no text to train a tokenizer on" % path)
    return texts


def train_tokenizer(texts, vocab_size, work):
    """A SentencePiece BPE model (byte fallback, <unk>=0 <s>=1 </s>=2) trained
    on texts; returns the path of its .model file."""
    import sentencepiece as spm

    corpus = os.path.join(work, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("\n".join(texts))
        f.write("\n")
    prefix = os.path.join(work, "tokenizer")
    spm.SentencePieceTrainer.train(
        input=corpus,
        model_prefix=prefix,
        vocab_size=vocab_size,
        model_type="bpe",
        byte_fallback=True,
        character_coverage=1.0,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        num_threads=1,  # deterministic
        minloglevel=2,
        hard_vocab_limit=False,
    )
    return prefix + ".model"


def build(out_dir, corpus, seed=0, hidden=64, layers=2, heads=4, kv_heads=2, vocab=384, intermediate=None,
          max_positions=256):
    """Write the tiny Llama model folder out_dir; returns it."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    texts = corpus_texts(corpus)
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        spm_model = train_tokenizer(texts, vocab, work)
        shutil.copyfile(spm_model, os.path.join(out_dir, "tokenizer.model"))
        with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump({"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
                       "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False,
                       "model_max_length": max_positions}, f, indent=2)
        tok = AutoTokenizer.from_pretrained(out_dir, local_files_only=True)
        tok.save_pretrained(out_dir)  # adds tokenizer.json (the fast tokenizer)

    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=intermediate or 2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
        rms_norm_eps=1e-5,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(out_dir, safe_serialization=True)
    return out_dir


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m lathe_trainer.tiny_llama", description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--corpus", required=True, help="JSONL dataset or text file to train the tokenizer on")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=384)
    a = p.parse_args(argv)
    build(a.out_dir, a.corpus, seed=a.seed, hidden=a.hidden, layers=a.layers, heads=a.heads,
          kv_heads=a.kv_heads, vocab=a.vocab)
    print(a.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
