"""GGUF for llama.cpp and Ollama: a LoRA adapter, a base model, or the base
with the adapter merged in, written with the ``gguf`` package that
llama.cpp's authors maintain (the writer, the tensor-name map, the
SentencePiece vocabulary reader), never by hand.

    python -m lathe_trainer.export_gguf adapter MODEL ADAPTER_DIR OUT.gguf
    python -m lathe_trainer.export_gguf merged  MODEL ADAPTER_DIR OUT.gguf [--dtype f16]
    python -m lathe_trainer.export_gguf base    MODEL OUT.gguf [--dtype f16]

MODEL is a local Hugging Face model folder or a model id in the local cache
(offline: nothing is downloaded). ADAPTER_DIR is a PEFT LoRA folder
(``adapter_config.json`` + ``adapter_model.safetensors``).

What is supported, as llama.cpp's own ``convert_hf_to_gguf.py`` /
``convert_lora_to_gguf.py`` do it for the ``llama`` architecture:

- bases: ``LlamaForCausalLM`` and ``MistralForCausalLM`` (llama.cpp runs both
  as ``llama``), safetensors weights, no attention or MLP biases, RoPE
  without scaling or with linear scaling;
- the rows of ``q_proj`` and ``k_proj`` (and of their LoRA ``B``) permuted
  from Hugging Face's rotary layout to GGML's (``permute`` below);
- the adapter: ``blk.N.<tensor>.weight.lora_a`` / ``.lora_b`` in float32
  (``A`` [r, in], ``B`` [out, r]), ``general.type = adapter``,
  ``adapter.type = lora``, ``adapter.lora.alpha`` (llama.cpp scales by
  alpha / r, as PEFT does; an rsLoRA adapter's alpha is rescaled to match);
- base and merged models: a SentencePiece tokenizer (``tokenizer.model``,
  Llama 1/2, Mistral, TinyLlama). A tokenizer that is only BPE
  (``tokenizer.json``, Llama 3) is refused for those two, with the reason:
  its pre-tokenizer must be matched to one llama.cpp knows, which this
  exporter does not do. The adapter needs no tokenizer: it applies to any
  GGUF of the same base (an Ollama ``FROM``).

Not supported, refused with the reason: DoRA, ``modules_to_save``, LoRA on
embeddings, other architectures, quantised output types.
"""

import argparse
import json
import math
import os
import sys

LLAMA_ARCHS = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral"}


# ---------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------

def resolve_model_dir(model):
    """A local folder as given, else a model id looked up in the local
    Hugging Face cache only (offline)."""
    if os.path.isdir(model):
        return model
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(model, local_files_only=True)
    except Exception as e:  # noqa: BLE001 - any failure is "not here"
        raise ValueError("base model %r is neither a folder nor in the local Hugging Face cache: %s" % (model, e))


def _read_json_object(path, what):
    try:
        with open(path, "r", encoding="utf-8") as f:
            obj = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError("%s: cannot read the %s: %s" % (path, what, e))
    if not isinstance(obj, dict):
        raise ValueError("%s: the %s is not a JSON object" % (path, what))
    return obj


def read_config(model_dir):
    return _read_json_object(os.path.join(model_dir, "config.json"), "model's config")


def _rope_theta(cfg):
    rp = cfg.get("rope_parameters")
    if isinstance(rp, dict) and rp.get("rope_theta") is not None:
        return float(rp["rope_theta"])
    return float(cfg.get("rope_theta", 10000.0))


def _rope_scaling(cfg):
    """(type, factor) of the config's RoPE scaling; type None for none."""
    rs = cfg.get("rope_scaling")
    if not isinstance(rs, dict):
        rs = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), dict) else None
    if not rs:
        return None, None
    typ = rs.get("rope_type", rs.get("type"))
    if typ in (None, "default"):
        return None, None
    return typ, rs.get("factor")


def check_supported(model_dir, need_tokenizer=False):
    """Raise ValueError with the reason when the GGUF export cannot write
    this base (for a merged or base model, need_tokenizer: also its
    vocabulary). Cheap: reads config.json and lists files, so the reference
    trainer calls it before any training step."""
    cfg = read_config(model_dir)
    archs = cfg.get("architectures") or []
    arch = next((a for a in archs if a in LLAMA_ARCHS), None)
    if arch is None:
        raise ValueError("GGUF export supports llama-family bases (%s); %s is %s" % (
            ", ".join(sorted(LLAMA_ARCHS)), model_dir, ", ".join(map(str, archs)) or cfg.get("model_type", "unknown")))
    if cfg.get("attention_bias") or cfg.get("mlp_bias"):
        raise ValueError("GGUF export: %s has attention or MLP biases, which this exporter does not map" % model_dir)
    typ, _ = _rope_scaling(cfg)
    if typ not in (None, "linear"):
        raise ValueError("GGUF export: RoPE scaling %r is not supported (none or linear)" % typ)
    if not any(n.endswith(".safetensors") for n in os.listdir(model_dir)):
        raise ValueError("GGUF export: %s has no safetensors weights" % model_dir)
    if need_tokenizer and not os.path.isfile(os.path.join(model_dir, "tokenizer.model")):
        raise ValueError("GGUF export of a whole model needs a SentencePiece tokenizer (tokenizer.model) in %s; "
                         "a BPE-only tokenizer (Llama 3) is not supported: write the adapter (gguf) and apply it "
                         "to a GGUF of the base made by llama.cpp's convert_hf_to_gguf.py" % model_dir)
    return cfg


def _hparams(cfg):
    hidden = int(cfg["hidden_size"])
    heads = int(cfg["num_attention_heads"])
    kv = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    return {"hidden": hidden, "heads": heads, "kv": kv, "head_dim": head_dim, "layers": int(cfg["num_hidden_layers"]),
            "ff": int(cfg["intermediate_size"]), "ctx": int(cfg.get("max_position_embeddings", 2048)),
            "eps": float(cfg.get("rms_norm_eps", 1e-5)), "vocab": int(cfg["vocab_size"]),
            "tied": bool(cfg.get("tie_word_embeddings", False))}


def _load_safetensors(paths):
    """{name: float32 torch tensor} from safetensors files (bf16 included)."""
    import torch
    from safetensors import safe_open

    out = {}
    for p in paths:
        with safe_open(p, framework="pt") as f:
            for k in f.keys():
                out[k] = f.get_tensor(k).to(torch.float32)
    return out


def _model_tensors(model_dir):
    names = sorted(n for n in os.listdir(model_dir) if n.endswith(".safetensors"))
    return _load_safetensors([os.path.join(model_dir, n) for n in names])


def read_adapter(adapter_dir):
    """(config, {module: (A, B)}, scale) of a PEFT LoRA folder; module is the
    base's weight name without ``.weight`` (``model.layers.0.self_attn.q_proj``)."""
    acfg = _read_json_object(os.path.join(adapter_dir, "adapter_config.json"), "adapter's config")
    if acfg.get("peft_type", "LORA") != "LORA":
        raise ValueError("GGUF export: adapter type %r is not LoRA" % acfg.get("peft_type"))
    if acfg.get("use_dora"):
        raise ValueError("GGUF export: DoRA adapters are not supported by llama.cpp's LoRA format")
    if acfg.get("modules_to_save"):
        raise ValueError("GGUF export: modules_to_save (%s) is not a LoRA weight" % acfg.get("modules_to_save"))
    try:
        r = int(acfg["r"])
        alpha = float(acfg.get("lora_alpha", r))
    except (KeyError, TypeError, ValueError):
        raise ValueError("GGUF export: adapter_config.json has r=%r, lora_alpha=%r (want numbers)"
                         % (acfg.get("r"), acfg.get("lora_alpha")))
    if r < 1:
        raise ValueError("GGUF export: adapter_config.json has r=%d (want >= 1)" % r)
    if acfg.get("rank_pattern") or acfg.get("alpha_pattern"):
        raise ValueError("GGUF export: per-module rank_pattern/alpha_pattern is not supported")
    try:
        tensors = _load_safetensors([os.path.join(adapter_dir, "adapter_model.safetensors")])
    except OSError as e:
        raise ValueError("GGUF export: cannot read the adapter's weights: %s" % e)
    pairs = {}
    for k, t in tensors.items():
        for part in (".lora_A.weight", ".lora_B.weight"):
            if k.endswith(part):
                mod = k[:-len(part)]
                if mod.startswith("base_model.model."):
                    mod = mod[len("base_model.model."):]
                pairs.setdefault(mod, [None, None])["B" in part] = t
                break
        else:
            raise ValueError("GGUF export: adapter tensor %r is not a LoRA A/B weight" % k)
    for mod, (a, b) in pairs.items():
        if a is None or b is None:
            raise ValueError("GGUF export: adapter module %s lacks lora_A or lora_B" % mod)
        if a.dim() != 2 or b.dim() != 2 or a.shape[0] != b.shape[1]:
            raise ValueError("GGUF export: adapter module %s has shapes A %s, B %s" % (mod, tuple(a.shape), tuple(b.shape)))
    # PEFT scales by alpha/r (rsLoRA: alpha/sqrt(r)); llama.cpp by alpha/r.
    scale = alpha / math.sqrt(r) if acfg.get("use_rslora") else alpha / r
    return acfg, {m: (p[0], p[1]) for m, p in pairs.items()}, scale


# ---------------------------------------------------------------------------
# mapping
# ---------------------------------------------------------------------------

def permute(w, n_head, n_head_kv=None):
    """Rows of a q or k projection (or a LoRA B) from Hugging Face's rotary
    layout (halves) to GGML's (interleaved pairs): llama.cpp's
    convert_hf_to_gguf.py LlamaModel.permute."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2)
            .reshape(w.shape))


def _rows_fix(name, hp):
    """The row permutation for HF weight name (q/k projections), or None."""
    if name.endswith("self_attn.q_proj.weight"):
        return lambda w: permute(w, hp["heads"], hp["heads"])
    if name.endswith("self_attn.k_proj.weight"):
        return lambda w: permute(w, hp["heads"], hp["kv"])
    return None


def _gguf_name(tmap, hf_name):
    n = tmap.get_name(hf_name, try_suffixes=(".weight", ".bias"))
    if n is None:
        raise ValueError("GGUF export: no llama.cpp tensor for %r" % hf_name)
    return n


def _np(t, dtype):
    import numpy as np

    a = t.detach().cpu().contiguous().numpy()
    return a.astype(np.float32 if a.ndim == 1 or dtype == "f32" else np.float16)


# ---------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------

def _writer():
    import gguf

    return gguf.GGUFWriter(None, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.LLAMA])


def _finish(w, path):
    """Write w to a hidden temporary name beside path, then rename it into
    place: a reader never sees half a file."""
    from pathlib import Path

    d, base = os.path.split(os.path.abspath(path))
    tmp = os.path.join(d, ".%s.tmp-%d" % (base, os.getpid()))
    w.write_header_to_file(path=Path(tmp))
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, path)


def write_adapter_gguf(model_dir, adapter_dir, path):
    """Write the PEFT LoRA adapter in adapter_dir as a llama.cpp GGUF LoRA
    adapter at path (for ``llama-cli -m BASE.gguf --lora path`` and Ollama's
    ``ADAPTER``)."""
    import gguf

    cfg = check_supported(model_dir)
    hp = _hparams(cfg)
    acfg, pairs, scale = read_adapter(adapter_dir)
    r = int(acfg["r"])
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, hp["layers"])
    w = _writer()
    w.add_type(gguf.GGUFType.ADAPTER)
    w.add_string(gguf.Keys.Adapter.TYPE, "lora")
    w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(scale * r))
    w.add_name("LoRA adapter for %s" % (acfg.get("base_model_name_or_path") or os.path.basename(model_dir)))
    for mod in sorted(pairs):
        a, b = pairs[mod]
        if "embed_tokens" in mod:
            raise ValueError("GGUF export: LoRA on the embeddings (%s) is not supported" % mod)
        name = _gguf_name(tmap, mod + ".weight")
        fix = _rows_fix(mod + ".weight", hp)
        if fix is not None:
            b = fix(b)
        w.add_tensor(name + ".lora_a", _np(a, "f32"))
        w.add_tensor(name + ".lora_b", _np(b, "f32"))
    _finish(w, path)
    return path


def _add_vocab(w, model_dir, hp):
    import gguf
    from gguf.vocab import SentencePieceVocab, SpecialVocab
    from pathlib import Path

    vocab = SentencePieceVocab(Path(model_dir))
    tokens, scores, types = [], [], []
    for text, score, typ in vocab.all_tokens():
        tokens.append(text)
        scores.append(score)
        types.append(typ)
    # The model's embedding may have rows the tokenizer has no piece for.
    for i in range(len(tokens), hp["vocab"]):
        tokens.append(("[PAD%d]" % i).encode("utf-8"))
        scores.append(-1000.0)
        types.append(gguf.TokenType.UNUSED)
    if len(tokens) > hp["vocab"]:
        raise ValueError("GGUF export: the tokenizer has %d tokens, the model's vocab_size is %d" % (len(tokens), hp["vocab"]))
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    SpecialVocab(Path(model_dir), n_vocab=len(tokens)).add_to_gguf(w, quiet=True)


def write_model_gguf(model_dir, path, adapter_dir=None, dtype="auto"):
    """Write the base model in model_dir as a llama.cpp GGUF model at path,
    with the LoRA adapter in adapter_dir merged in when given
    (W + scale · B·A, computed in float32). dtype: ``f32``, ``f16``, or
    ``auto`` (f32 for a base stored in float32, else f16)."""
    import gguf

    cfg = check_supported(model_dir, need_tokenizer=True)
    hp = _hparams(cfg)
    if dtype == "auto":
        dtype = "f32" if cfg.get("torch_dtype", cfg.get("dtype")) in ("float32", None) else "f16"
    if dtype not in ("f32", "f16"):
        raise ValueError("GGUF export: dtype %r (want f32, f16 or auto)" % dtype)
    tensors = _model_tensors(model_dir)
    merged = set()
    if adapter_dir is not None:
        _, pairs, scale = read_adapter(adapter_dir)
        for mod, (a, b) in pairs.items():
            key = mod + ".weight"
            if key not in tensors:
                raise ValueError("GGUF export: the adapter's module %s is not in the base" % mod)
            base = tensors[key]
            if base.shape != (b.shape[0], a.shape[1]):
                raise ValueError("GGUF export: %s is %s, the adapter's B·A is %s" % (key, tuple(base.shape), (b.shape[0], a.shape[1])))
            tensors[key] = base + scale * (b @ a)
            merged.add(key)
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, hp["layers"])
    w = _writer()
    w.add_type(gguf.GGUFType.MODEL)
    base_name = os.path.basename(os.path.normpath(model_dir))
    w.add_name(("%s + LoRA (merged)" if adapter_dir else "%s") % base_name)
    w.add_context_length(hp["ctx"])
    w.add_embedding_length(hp["hidden"])
    w.add_block_count(hp["layers"])
    w.add_feed_forward_length(hp["ff"])
    w.add_head_count(hp["heads"])
    w.add_head_count_kv(hp["kv"])
    w.add_rope_dimension_count(hp["head_dim"])
    w.add_rope_freq_base(_rope_theta(cfg))
    typ, factor = _rope_scaling(cfg)
    if typ == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(float(factor))
    w.add_layer_norm_rms_eps(hp["eps"])
    w.add_vocab_size(hp["vocab"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32 if dtype == "f32" else gguf.LlamaFileType.MOSTLY_F16)
    _add_vocab(w, model_dir, hp)
    for name in sorted(tensors):
        if name.endswith("rotary_emb.inv_freq"):
            continue
        if hp["tied"] and name == "lm_head.weight":
            continue  # llama.cpp uses token_embd for a missing output
        t = tensors[name]
        fix = _rows_fix(name, hp)
        if fix is not None:
            t = fix(t)
        w.add_tensor(_gguf_name(tmap, name), _np(t, dtype))
    _finish(w, path)
    return path


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m lathe_trainer.export_gguf",
                                description="GGUF for llama.cpp and Ollama from a Hugging Face llama-family model "
                                            "and a PEFT LoRA adapter")
    sub = p.add_subparsers(dest="what", required=True)
    a = sub.add_parser("adapter", help="the LoRA adapter as a GGUF adapter (llama.cpp --lora, Ollama ADAPTER)")
    a.add_argument("model")
    a.add_argument("adapter_dir")
    a.add_argument("out")
    m = sub.add_parser("merged", help="the base with the adapter merged in, as a GGUF model")
    m.add_argument("model")
    m.add_argument("adapter_dir")
    m.add_argument("out")
    m.add_argument("--dtype", default="auto", choices=["auto", "f32", "f16"])
    b = sub.add_parser("base", help="the base model alone as a GGUF model (Ollama's FROM for the adapter)")
    b.add_argument("model")
    b.add_argument("out")
    b.add_argument("--dtype", default="auto", choices=["auto", "f32", "f16"])
    args = p.parse_args(argv)
    try:
        model_dir = resolve_model_dir(args.model)
        if args.what == "adapter":
            write_adapter_gguf(model_dir, args.adapter_dir, args.out)
        elif args.what == "merged":
            write_model_gguf(model_dir, args.out, adapter_dir=args.adapter_dir, dtype=args.dtype)
        else:
            write_model_gguf(model_dir, args.out, dtype=args.dtype)
    except ValueError as e:
        sys.stderr.write("export_gguf: %s\n" % e)
        return 3
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
