#!/usr/bin/env python3
"""Lathe reference LoRA trainer (plain PyTorch).

Runs under Lathe's trainer contract (docs/trainer.md, DESIGN.md "Trainer
contract"): the job comes from the environment (LATHE_JOB_FILE and friends),
machine-readable events go to stdout as one JSON object per line, every other
stdout line is a log line, and the exit code says whether a failure is
permanent (3) or may be retried (anything else but 0).

Two model paths:

* ``base_model: tiny-char`` -- a built-in, deterministic, character-level
  decoder-only transformer, fine-tuned with LoRA adapters implemented here.
  Runs on the CPU in seconds; this is the demo and what Lathe's tests run.
* any other ``base_model`` -- a Hugging Face causal LM (a model id found in
  the local Hugging Face cache, offline, or a local model folder), fine-tuned
  with ``peft`` (needs ``transformers`` and ``peft``: the virtualenv of
  ``scripts/setup.sh --hf``; exit 3 when they are missing).

Under ``torchrun`` (WORLD_SIZE > 1: a job of several GPUs) every rank trains
on its share of each batch with DistributedDataParallel (NCCL on GPUs, gloo
on the CPU); rank 0 alone prints the contract, evaluates and writes
checkpoints and artifacts.

Works with PyTorch 1.13 (Debian's python3-torch) and 2.x, on CPU or CUDA.
"""

import hashlib
import json
import math
import os
import random
import shutil
import signal
import struct
import sys
import time
import traceback
import urllib.parse

EXIT_OK = 0
EXIT_RETRY = 1  # unexpected failure: may be retried
EXIT_PERMANENT = 3  # bad data or bad config: do not retry
EXIT_SIGTERM = 143  # stopped by SIGTERM after saving a checkpoint (128 + 15)
EXIT_SIGINT = 130  # same for SIGINT (128 + 2)


class TrainerError(Exception):
    """A failure with the exit code the process should end with."""

    def __init__(self, message, code=EXIT_PERMANENT):
        super().__init__(message)
        self.code = code


def _is_rank0():
    return os.environ.get("RANK", "0") in ("", "0")


def _env_int(name, default):
    v = os.environ.get(name, "")
    try:
        return int(v) if v != "" else default
    except ValueError:
        raise SystemExit("train_lora: %s=%r is not an integer" % (name, v))


def emit(event):
    """Print one contract event as a JSON line on stdout (rank 0 only)."""
    if not _is_rank0():
        return
    sys.stdout.write(json.dumps(event, separators=(",", ":"), allow_nan=False) + "\n")
    sys.stdout.flush()


def log(msg):
    """Print a human log line (a non-JSON stdout line is a log line)."""
    if not _is_rank0():
        return
    sys.stdout.write("[train_lora] " + str(msg) + "\n")
    sys.stdout.flush()


try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as _e:  # pragma: no cover - environment problem
    sys.stderr.write("train_lora: PyTorch is not importable by %s: %s\n" % (sys.executable, _e))
    sys.exit(EXIT_PERMANENT)


# --------------------------------------------------------------------------
# Job spec

DEFAULTS = {
    "lora": {"rank": 8, "alpha": 0.0, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]},
    "training": {
        "epochs": 1,
        "learning_rate": 2e-4,
        "batch_size": 8,
        "max_steps": 0,
        "seed": 42,
        "checkpoint_every": 0,
        "eval_every": 0,
        "stop_at_step": 0,
    },
}


def load_job(path):
    """Read the normalised job spec (JSON) and fill in missing defaults."""
    if not path:
        raise TrainerError("LATHE_JOB_FILE is not set (or pass --job-file)")
    try:
        with open(path, "r", encoding="utf-8") as f:
            job = json.load(f)
    except FileNotFoundError:
        raise TrainerError("job file %s does not exist" % path)
    except (ValueError, UnicodeDecodeError) as e:
        raise TrainerError("job file %s is not valid JSON: %s" % (path, e))
    if not isinstance(job, dict):
        raise TrainerError("job file %s does not hold a JSON object" % path)
    for section, defaults in DEFAULTS.items():
        got = job.get(section) or {}
        if not isinstance(got, dict):
            raise TrainerError("job field %r must be an object" % section)
        merged = dict(defaults)
        merged.update({k: v for k, v in got.items() if v is not None})
        job[section] = merged
    lora, tr = job["lora"], job["training"]
    if not job.get("base_model"):
        raise TrainerError("job has no base_model")
    if not job.get("dataset"):
        raise TrainerError("job has no dataset")
    for k in ("base_model", "dataset", "eval_dataset"):
        if job.get(k) is not None and not isinstance(job[k], str):
            raise TrainerError("job field %r must be a string" % k)
    try:
        lora["rank"] = int(lora["rank"])
        lora["alpha"] = float(lora["alpha"]) or 2.0 * lora["rank"]
        lora["dropout"] = float(lora["dropout"])
        for k in ("epochs", "batch_size", "max_steps", "seed", "checkpoint_every", "eval_every", "stop_at_step"):
            tr[k] = int(tr[k])
        tr["learning_rate"] = float(tr["learning_rate"])
    except (TypeError, ValueError) as e:
        raise TrainerError("bad numeric field in job spec: %s" % e)
    tm = lora["target_modules"]
    if isinstance(tm, str):
        tm = [tm]
    if not isinstance(tm, list) or not tm or not all(isinstance(m, str) and m for m in tm):
        raise TrainerError("lora.target_modules must be a non-empty list of module names")
    lora["target_modules"] = list(dict.fromkeys(tm))  # dedupe, keep order
    if lora["rank"] < 1:
        raise TrainerError("lora.rank must be >= 1, got %d" % lora["rank"])
    if lora["alpha"] <= 0:
        raise TrainerError("lora.alpha must be > 0")
    if not 0.0 <= lora["dropout"] < 1.0:
        raise TrainerError("lora.dropout must be in [0, 1), got %g" % lora["dropout"])
    if tr["batch_size"] < 1:
        raise TrainerError("training.batch_size must be >= 1")
    if not tr["learning_rate"] > 0:
        raise TrainerError("training.learning_rate must be > 0")
    if tr["max_steps"] < 0 or tr["epochs"] < 0 or (tr["max_steps"] == 0 and tr["epochs"] == 0):
        raise TrainerError("need training.epochs >= 1 or training.max_steps >= 1")
    if tr["checkpoint_every"] < 0 or tr["eval_every"] < 0:
        raise TrainerError("training.checkpoint_every and eval_every must be >= 0")
    if tr["stop_at_step"] < 0:
        raise TrainerError("training.stop_at_step must be >= 0, got %d" % tr["stop_at_step"])
    return job


# --------------------------------------------------------------------------
# Datasets

def resolve_dataset(uri):
    """Turn a file:// URI or a plain path into a local path."""
    if uri.startswith("s3://"):
        raise TrainerError("s3 datasets are staged by the daemon; trainer got %s" % uri)
    if uri.startswith("file://"):
        p = urllib.parse.urlparse(uri)
        if p.netloc not in ("", "localhost"):
            raise TrainerError("file URI with a host is not supported: %s" % uri)
        return urllib.parse.unquote(p.path)
    if "://" in uri:
        raise TrainerError("unsupported dataset URI scheme: %s" % uri)
    return uri


def read_texts(uri):
    """Read a JSONL dataset: each non-blank line is {"text": s} or
    {"prompt": p, "completion": c} (used as p + c). Returns the texts."""
    path = resolve_dataset(uri)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise TrainerError("dataset file %s does not exist" % path)
    except IsADirectoryError:
        raise TrainerError("dataset path %s is a directory, not a JSONL file" % path)
    except PermissionError as e:
        raise TrainerError("cannot read dataset file %s: %s" % (path, e))
    if raw.startswith(b"\xef\xbb\xbf"):  # UTF-8 byte order mark
        raw = raw[3:]
    texts = []
    for lineno, line in enumerate(raw.split(b"\n"), 1):
        if not line.strip():
            continue
        where = "%s:%d" % (path, lineno)
        try:
            obj = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError:
            raise TrainerError("%s: line is not valid UTF-8" % where)
        except ValueError as e:
            raise TrainerError("%s: line is not valid JSON: %s" % (where, e))
        if not isinstance(obj, dict):
            raise TrainerError("%s: line must be a JSON object" % where)
        if "text" in obj:
            if not isinstance(obj["text"], str):
                raise TrainerError("%s: \"text\" must be a string" % where)
            text = obj["text"]
        elif "prompt" in obj and "completion" in obj:
            if not isinstance(obj["prompt"], str) or not isinstance(obj["completion"], str):
                raise TrainerError("%s: \"prompt\" and \"completion\" must be strings" % where)
            text = obj["prompt"] + obj["completion"]
        else:
            raise TrainerError("%s: line needs \"text\" or both \"prompt\" and \"completion\"" % where)
        if text:
            texts.append(text)
    if not texts:
        raise TrainerError("dataset %s holds no examples" % path)
    return texts


IGNORE = -100


def make_windows(stream, seq_len, pad_id=0):
    """Cut a token stream into training windows, deterministically.

    Window i holds inputs stream[i*L : i*L+L] and targets stream[i*L+1 :
    i*L+L+1] (L = seq_len); the last window is padded (inputs with pad_id,
    targets with IGNORE). Number of windows: ceil((len(stream) - 1) / L).
    Returns (x, y) as int64 tensors of shape [n, L]."""
    n = max(1, -(-(len(stream) - 1) // seq_len))
    xs, ys = [], []
    for i in range(n):
        chunk = stream[i * seq_len: i * seq_len + seq_len + 1]
        inp, tgt = chunk[:-1], chunk[1:]
        xs.append(inp + [pad_id] * (seq_len - len(inp)))
        ys.append(tgt + [IGNORE] * (seq_len - len(tgt)))
    return torch.tensor(xs, dtype=torch.long), torch.tensor(ys, dtype=torch.long)


# --------------------------------------------------------------------------
# The built-in tiny-char model

TINY_CHAR = "tiny-char"
TINY_CHAR_SEED = 1234  # the base weights never depend on the job's seed
TINY_VOCAB = 97  # "\n", printable ASCII, and one token for every other character
TINY_UNK = 96
TINY_D_MODEL = 48
TINY_LAYERS = 2
TINY_HEADS = 4
TINY_D_FF = 96
TINY_SEQ_LEN = 64
TINY_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj")
# Init standard deviations of the non-Linear weights (Linear weights use PyTorch's
# default bound 1/sqrt(in_features)).
TINY_INIT_STD = {
    "embed_tokens.weight": 1.0,
    "embed_prev1.weight": 0.7,
    "embed_prev2.weight": 0.5,
    "embed_positions.weight": 1.0,
    "lm_head.weight": 0.12,
}


def tiny_char_token(ch):
    """"\n" -> 0, " ".."~" -> 1..95, anything else -> TINY_UNK."""
    o = ord(ch)
    if o == 10:
        return 0
    if 32 <= o <= 126:
        return o - 31
    return TINY_UNK


def tiny_char_encode(texts):
    """Token stream of the texts, each followed by "\n"."""
    stream = []
    for t in texts:
        stream.extend(tiny_char_token(c) for c in t)
        stream.append(0)
    return stream


class TinyAttention(nn.Module):
    def __init__(self, d, heads, seq_len):
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)
        mask = torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool), diagonal=1)
        self.register_buffer("causal_mask", mask, persistent=False)

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        q = self.q_proj(x).view(b, t, h, d // h).transpose(1, 2)
        k = self.k_proj(x).view(b, t, h, d // h).transpose(1, 2)
        v = self.v_proj(x).view(b, t, h, d // h).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d // h)
        att = att.masked_fill(self.causal_mask[:t, :t], float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, d)
        return self.o_proj(y)


class TinyMLP(nn.Module):
    def __init__(self, d, ff):
        super().__init__()
        self.up_proj = nn.Linear(d, ff, bias=False)
        self.down_proj = nn.Linear(ff, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.gelu(self.up_proj(x)))


class TinyBlock(nn.Module):
    def __init__(self, d, heads, ff, seq_len):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(d)
        self.self_attn = TinyAttention(d, heads, seq_len)
        self.post_attention_layernorm = nn.LayerNorm(d)
        self.mlp = TinyMLP(d, ff)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class TinyCharLM(nn.Module):
    """Character-level decoder-only transformer (pre-LayerNorm blocks).

    Its input at position t is the sum of embeddings of the token at t, the
    tokens at t-1 and t-2 (a fixed "token shift", as in RWKV) and the
    position. With frozen random weights that gives the LoRA-adapted MLPs
    the recent characters directly, so a LoRA on a random base still learns
    visibly in a few hundred steps. There is no final norm: the adapters can
    scale the residual stream to reach confident logits."""

    def __init__(self):
        super().__init__()
        self.seq_len = TINY_SEQ_LEN
        self.embed_tokens = nn.Embedding(TINY_VOCAB, TINY_D_MODEL)
        self.embed_prev1 = nn.Embedding(TINY_VOCAB, TINY_D_MODEL)
        self.embed_prev2 = nn.Embedding(TINY_VOCAB, TINY_D_MODEL)
        self.embed_positions = nn.Embedding(TINY_SEQ_LEN, TINY_D_MODEL)
        self.layers = nn.ModuleList(
            [TinyBlock(TINY_D_MODEL, TINY_HEADS, TINY_D_FF, TINY_SEQ_LEN) for _ in range(TINY_LAYERS)]
        )
        self.lm_head = nn.Linear(TINY_D_MODEL, TINY_VOCAB, bias=False)

    def forward(self, input_ids):
        t = input_ids.shape[1]
        pos = torch.arange(t, device=input_ids.device)
        prev1 = F.pad(input_ids[:, :-1], (1, 0), value=0)  # "\n" before the window
        prev2 = F.pad(input_ids[:, :-2], (2, 0), value=0)
        x = (self.embed_tokens(input_ids) + self.embed_prev1(prev1) + self.embed_prev2(prev2)
             + self.embed_positions(pos)[None])
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(x)


def build_tiny_char():
    """Build the tiny-char base model with fixed, frozen weights.

    The weights come from Python's random.Random(TINY_CHAR_SEED) (whose
    random() sequence is stable across Python versions), not from torch's
    RNG, so every PyTorch version and device rebuilds the identical base."""
    model = TinyCharLM()
    rng = random.Random(TINY_CHAR_SEED)
    rnd = rng.random
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if "layernorm" in name:
                p.fill_(1.0 if name.endswith(".weight") else 0.0)
                continue
            if name in TINY_INIT_STD:
                bound = math.sqrt(3.0) * TINY_INIT_STD[name]  # uniform with that std
            else:  # nn.Linear weight [out, in]
                bound = 1.0 / math.sqrt(p.shape[1])
            vals = [(2.0 * rnd() - 1.0) * bound for _ in range(p.numel())]
            p.copy_(torch.tensor(vals, dtype=torch.float32).view(p.shape))
    for p in model.parameters():
        p.requires_grad_(False)
    return model


class LoRALinear(nn.Module):
    """y = base(x) + (dropout(x) @ A^T @ B^T) * alpha / r, base frozen.

    lora_A.weight is [r, in] (kaiming-uniform, like PEFT), lora_B.weight is
    [out, r] (zeros), so the wrapped model starts out equal to the base."""

    def __init__(self, base, r, alpha, dropout):
        super().__init__()
        self.base_layer = base
        self.lora_A = nn.Linear(base.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base.out_features, bias=False)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)
        self.lora_dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.scaling = alpha / r
        self.in_features = base.in_features
        self.out_features = base.out_features

    def forward(self, x):
        return self.base_layer(x) + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling


def apply_lora(model, targets, r, alpha, dropout, allowed=None):
    """Wrap every nn.Linear whose attribute name is in targets. Returns the
    wrapped module paths in a fixed order."""
    if allowed is not None:
        bad = [t for t in targets if t not in allowed]
        if bad:
            raise TrainerError(
                "unknown lora target module %s for base model tiny-char (allowed: %s)"
                % (", ".join(repr(b) for b in bad), ", ".join(allowed))
            )
    wrapped = []
    for parent_name, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            if child_name in targets and isinstance(child, nn.Linear):
                setattr(parent, child_name, LoRALinear(child, r, alpha, dropout))
                wrapped.append((parent_name + "." if parent_name else "") + child_name)
    missing = [t for t in targets if not any(w.split(".")[-1] == t for w in wrapped)]
    if missing:
        raise TrainerError("lora target module(s) not found in the model: %s" % ", ".join(missing))
    return wrapped


PEFT_PREFIX = "base_model.model."


def lora_state_dict(model):
    """The LoRA weights under PEFT's key names, as float32 CPU tensors."""
    out = {}
    for name, p in model.named_parameters():
        if ".lora_A." in name or ".lora_B." in name:
            out[PEFT_PREFIX + name] = p.detach().to("cpu", torch.float32).contiguous()
    return out


def load_lora_state_dict(model, tensors):
    """Copy PEFT-keyed LoRA weights into the model; every key must match."""
    params = dict(model.named_parameters())
    want = {PEFT_PREFIX + n for n in params if ".lora_A." in n or ".lora_B." in n}
    have = set(tensors)
    if want != have:
        raise ValueError(
            "adapter keys do not match the model (missing %s, unexpected %s)"
            % (sorted(want - have)[:3], sorted(have - want)[:3])
        )
    for key, t in tensors.items():  # validate everything before changing anything
        p = params[key[len(PEFT_PREFIX):]]
        if tuple(p.shape) != tuple(t.shape):
            raise ValueError("shape mismatch for %s: model %s, file %s" % (key, list(p.shape), list(t.shape)))
    with torch.no_grad():
        for key, t in tensors.items():
            p = params[key[len(PEFT_PREFIX):]]
            p.copy_(t.to(p.device, p.dtype))


# --------------------------------------------------------------------------
# safetensors, written and read by hand when the package is missing

_ST_DTYPES = {
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.float64: "F64",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}
_ST_DTYPES_REV = {v: k for k, v in _ST_DTYPES.items()}


def _tensor_bytes(t):
    t = t.detach().to("cpu").contiguous()
    if t.numel() == 0:
        return b""
    u8 = t.view(-1).view(torch.uint8) if t.dtype != torch.bool else t.view(-1).to(torch.uint8)
    if sys.byteorder != "little" and t.element_size() > 1:  # pragma: no cover
        u8 = u8.view(-1, t.element_size()).flip(1).reshape(-1)
    try:
        return u8.numpy().tobytes()
    except Exception:  # no numpy (possible with pip torch 2.x)
        return bytes(u8.tolist())


def save_safetensors(path, tensors, metadata=None):
    """Write tensors (name -> tensor) to path in the safetensors format."""
    metadata = dict(metadata or {"format": "pt"})
    try:
        from safetensors.torch import save_file
    except ImportError:
        save_file = None
    if save_file is not None:
        save_file({k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}, path, metadata=metadata)
        return
    header = {"__metadata__": metadata}
    blobs, offset = [], 0
    for name in sorted(tensors):
        t = tensors[name]
        if t.dtype not in _ST_DTYPES:
            raise ValueError("cannot store dtype %s in safetensors" % t.dtype)
        b = _tensor_bytes(t)
        header[name] = {"dtype": _ST_DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)
        f.flush()
        os.fsync(f.fileno())


def load_safetensors(path):
    """Read a safetensors file; returns (name -> CPU tensor, metadata)."""
    try:
        from safetensors import safe_open
    except ImportError:
        safe_open = None
    if safe_open is not None:
        with safe_open(path, framework="pt", device="cpu") as f:
            return {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata() or {})
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError("%s: too short for safetensors" % path)
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError("%s: header length %d past end of file" % (path, n))
    header = json.loads(data[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {}) or {}
    body = memoryview(data)[8 + n:]
    out = {}
    for name, info in header.items():
        dt = _ST_DTYPES_REV.get(info["dtype"])
        if dt is None:
            raise ValueError("%s: unsupported dtype %s for %s" % (path, info["dtype"], name))
        start, end = info["data_offsets"]
        if not 0 <= start <= end <= len(body):
            raise ValueError("%s: bad data_offsets for %s" % (path, name))
        raw = bytearray(body[start:end])
        shape = [int(s) for s in info["shape"]]
        if dt == torch.bool:
            t = torch.frombuffer(raw, dtype=torch.uint8).to(torch.bool) if raw else torch.empty(0, dtype=torch.bool)
        elif raw:
            t = torch.frombuffer(raw, dtype=dt)
            if sys.byteorder != "little" and t.element_size() > 1:  # pragma: no cover
                t = t.view(torch.uint8).view(-1, t.element_size()).flip(1).reshape(-1).view(dt)
        else:
            t = torch.empty(0, dtype=dt)
        want = 1
        for d in shape:
            want *= d
        if t.numel() != want:
            raise ValueError("%s: %s holds %d values, shape %s" % (path, name, t.numel(), shape))
        out[name] = t.reshape(shape).clone()
    return out, meta


# --------------------------------------------------------------------------
# Evaluation

EVAL_BATCH = 32  # fixed, so eval_adapter.py runs the identical computation


@torch.no_grad()
def evaluate(forward, xs, ys, device):
    """Mean per-token cross-entropy over all windows, in a fixed order,
    without dropout, accumulated in float64. forward(x) -> logits."""
    total, count = 0.0, 0
    for i in range(0, xs.shape[0], EVAL_BATCH):
        x = xs[i:i + EVAL_BATCH].to(device)
        y = ys[i:i + EVAL_BATCH].to(device)
        logits = forward(x).float()
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=IGNORE, reduction="none")
        mask = y.reshape(-1) != IGNORE
        total += ce[mask].double().sum().item()
        count += int(mask.sum().item())
    return total / max(count, 1)


# --------------------------------------------------------------------------
# Model backends

class TinyCharBackend:
    """tiny-char base + hand-written LoRA."""

    name = TINY_CHAR

    def __init__(self, job, device):
        lora = job["lora"]
        self.device = device
        self.model = build_tiny_char()
        self.wrapped = apply_lora(
            self.model, lora["target_modules"], lora["rank"], lora["alpha"], lora["dropout"], allowed=TINY_TARGETS
        )
        self.model.to(device)
        self.seq_len = self.model.seq_len
        self.lora = lora
        self.base_model = job["base_model"]
        self.train_module = self.model

    def windows(self, texts):
        return make_windows(tiny_char_encode(texts), self.seq_len)

    def forward(self, x):
        return self.model(x)

    def train_forward(self, x):
        return self.train_module(x)

    def trainable(self):
        return [p for n, p in self.model.named_parameters() if p.requires_grad]

    def lora_tensors(self):
        return lora_state_dict(self.model)

    def load_lora_tensors(self, tensors):
        load_lora_state_dict(self.model, tensors)

    def save_adapter(self, out_dir):
        """Write adapter_model.safetensors and adapter_config.json (atomically)."""
        targets = sorted({w.split(".")[-1] for w in self.wrapped})
        config = {
            "peft_type": "LORA",
            "task_type": "CAUSAL_LM",
            "base_model_name_or_path": self.base_model,
            "r": self.lora["rank"],
            "lora_alpha": int(self.lora["alpha"]) if float(self.lora["alpha"]).is_integer() else self.lora["alpha"],
            "lora_dropout": self.lora["dropout"],
            "target_modules": targets,
            "bias": "none",
            "fan_in_fan_out": False,
            "inference_mode": True,
            "init_lora_weights": True,
            "modules_to_save": None,
            "revision": None,
        }
        tmp_st = os.path.join(out_dir, ".adapter_model.safetensors.tmp")
        tmp_cfg = os.path.join(out_dir, ".adapter_config.json.tmp")
        save_safetensors(tmp_st, self.lora_tensors(), {"format": "pt"})
        with open(tmp_cfg, "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_st, os.path.join(out_dir, "adapter_model.safetensors"))
        os.replace(tmp_cfg, os.path.join(out_dir, "adapter_config.json"))
        return [("adapter_model.safetensors", "safetensors"), ("adapter_config.json", "json")]


HF_SEQ_LEN = 512


def hf_windows(tokenizer, texts, seq_len):
    """Windows for a Hugging Face tokenizer: each text's tokens, then EOS."""
    eos = tokenizer.eos_token_id
    stream = []
    for t in texts:
        stream.extend(tokenizer(t, add_special_tokens=False)["input_ids"])
        if eos is not None:
            stream.append(eos)
    pad = tokenizer.pad_token_id
    if pad is None:
        pad = eos if eos is not None else 0
    return make_windows(stream, seq_len, pad_id=pad)


def hf_seq_len(tokenizer):
    limit = getattr(tokenizer, "model_max_length", HF_SEQ_LEN) or HF_SEQ_LEN
    return int(min(HF_SEQ_LEN, limit))


HF_OFFLINE_HELP = (
    "Lathe never downloads a model (offline mode is on). Provide it offline: on a machine "
    "that reaches the hub run `hf download %s` and copy the cache folder to this node's "
    "Hugging Face cache (HF_HOME, default ~/.cache/huggingface, of the user the trainer runs as), "
    "or put the model folder (config.json, *.safetensors, tokenizer files) on the node and set "
    "base_model to its absolute path (file:///models/NAME)"
)


def resolve_base_model(name):
    """(where, is_local): a local model folder for an absolute path or a
    file:// URI, else a Hugging Face model id to find in the local cache."""
    if name.startswith("file:"):
        p = urllib.parse.urlparse(name)
        if p.netloc not in ("", "localhost"):
            raise TrainerError("base_model %r: a file URI with a host is not supported" % name)
        return urllib.parse.unquote(p.path), True
    if os.path.isabs(name):
        return name, True
    if "://" in name:
        raise TrainerError("base_model %r: unsupported URI scheme (want a model id, an absolute path or file://)" % name)
    return name, False


def _import_hf(base_model):
    # Offline whatever the environment says: a job never downloads.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import warnings
    warnings.filterwarnings("ignore", category=FutureWarning)
    try:
        import peft
        import transformers
    except ImportError as e:
        raise TrainerError(
            "base_model %r is not built in (only %r is) and needs the Hugging Face path, "
            "but transformers/peft are not importable by %s: %s (scripts/setup.sh --hf builds "
            "the virtualenv lathed runs it in)" % (base_model, TINY_CHAR, sys.executable, e)
        )
    transformers.logging.set_verbosity_error()
    return transformers, peft


def hf_model_dir(name):
    """The local folder of base_model: the folder itself, or the cached
    snapshot of a model id. Exit 3 naming the id when it is not there."""
    where, local = resolve_base_model(name)
    if local:
        if not os.path.isdir(where):
            raise TrainerError("base_model %r: %s is not a folder" % (name, where))
        if not os.path.isfile(os.path.join(where, "config.json")):
            raise TrainerError("base_model %r: %s has no config.json (a Hugging Face model folder holds "
                               "config.json, *.safetensors and the tokenizer files)" % (name, where))
        return where
    _import_hf(name)
    try:
        from huggingface_hub import snapshot_download
        return snapshot_download(where, local_files_only=True)
    except Exception as e:
        raise TrainerError("base_model %r is not in the local Hugging Face cache (%s: %s). %s"
                           % (name, type(e).__name__, str(e).splitlines()[0] if str(e) else "", HF_OFFLINE_HELP % name))


class HFBackend:
    """A Hugging Face causal LM + peft LoRA. Needs transformers and peft.
    Loads from a local folder or the local cache only (offline), never runs
    a model's own code (trust_remote_code off)."""

    def __init__(self, job, device):
        name = job["base_model"]
        transformers, peft = _import_hf(name)
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.peft = peft
        self.device = device
        self.model_dir = hf_model_dir(name)
        # A base the GGUF export cannot write is refused before loading it.
        check_gguf(output_formats(job), self.model_dir)
        lora = job["lora"]
        # bf16 base weights on GPUs that support it (no loss scaling needed),
        # float32 otherwise; the LoRA weights stay float32.
        dtype = torch.float32
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            dtype = torch.bfloat16
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir, local_files_only=True, trust_remote_code=False)
            model = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=dtype, local_files_only=True,
                                                         trust_remote_code=False)
        except (OSError, ValueError, KeyError) as e:
            # A folder without weights, a config of an architecture this
            # transformers does not know, one that needs remote code: the
            # same on a retry.
            raise TrainerError("cannot load base model %r from %s: %s: %s"
                               % (name, self.model_dir, type(e).__name__, str(e).splitlines()[0] if str(e) else ""))
        for p in model.parameters():
            p.requires_grad_(False)
        cfg = peft.LoraConfig(
            r=lora["rank"],
            lora_alpha=lora["alpha"],
            lora_dropout=lora["dropout"],
            target_modules=lora["target_modules"],
            bias="none",
            task_type="CAUSAL_LM",
        )
        try:
            self.model = peft.get_peft_model(model, cfg)
        except ValueError as e:
            raise TrainerError("cannot apply LoRA to %r: %s" % (name, e))
        # Keep the trainable LoRA weights in float32 even on a half-precision base.
        for p in self.model.parameters():
            if p.requires_grad and p.dtype != torch.float32:
                p.data = p.data.float()
        self.model.to(device)
        self.seq_len = hf_seq_len(self.tokenizer)
        self.base_model = name
        self.train_module = self.model

    def windows(self, texts):
        return hf_windows(self.tokenizer, texts, self.seq_len)

    def forward(self, x):
        return self.model(input_ids=x).logits

    def train_forward(self, x):
        return self.train_module(input_ids=x).logits

    def trainable(self):
        return [p for p in self.model.parameters() if p.requires_grad]

    def lora_tensors(self):
        sd = self.peft.get_peft_model_state_dict(self.model)
        return {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in sd.items()}

    def load_lora_tensors(self, tensors):
        res = self.peft.set_peft_model_state_dict(self.model, tensors)
        unexpected = getattr(res, "unexpected_keys", None) or []
        if unexpected:
            raise ValueError("checkpoint tensors the model does not have: %s" % ", ".join(sorted(unexpected)[:5]))

    def save_adapter(self, out_dir):
        # The job's own name for the base (an id or the folder it named),
        # not the cache snapshot's path.
        self.model.peft_config["default"].base_model_name_or_path = self.base_model
        self.model.save_pretrained(out_dir)
        files = []
        for name, fmt in (("adapter_model.safetensors", "safetensors"), ("adapter_model.bin", "bin"), ("adapter_config.json", "json")):
            if os.path.exists(os.path.join(out_dir, name)):
                files.append((name, fmt))
        return files


# --------------------------------------------------------------------------
# Checkpoints

CKPT_PREFIX = "ckpt-"
KEEP_CHECKPOINTS = 3


def _torch_load(path):
    try:
        return torch.load(path, map_location="cpu", weights_only=False)  # our own file
    except TypeError:  # very old torch without weights_only
        return torch.load(path, map_location="cpu")


def list_checkpoints(ckpt_dir):
    """Complete checkpoints (directories ckpt-<step>) as (step, path), newest first."""
    out = []
    if not ckpt_dir or not os.path.isdir(ckpt_dir):
        return out
    for name in os.listdir(ckpt_dir):
        if name.startswith(CKPT_PREFIX) and name[len(CKPT_PREFIX):].isdigit():
            path = os.path.join(ckpt_dir, name)
            if os.path.isfile(os.path.join(path, "trainer_state.json")):
                out.append((int(name[len(CKPT_PREFIX):]), path))
    out.sort(reverse=True)
    return out


def save_checkpoint(ckpt_dir, step, backend, optimizer, extra):
    """Write ckpt-<step> atomically: build it in a hidden temp dir, then rename."""
    os.makedirs(ckpt_dir, exist_ok=True)
    name = CKPT_PREFIX + str(step)
    final = os.path.join(ckpt_dir, name)
    tmp = os.path.join(ckpt_dir, ".tmp-%s-%d" % (name, os.getpid()))
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    save_safetensors(os.path.join(tmp, "adapter_model.safetensors"), backend.lora_tensors(), {"format": "pt"})
    rng = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and backend.device.type == "cuda":
        rng["cuda"] = torch.cuda.get_rng_state_all()
    torch.save({"optimizer": optimizer.state_dict(), "rng": rng}, os.path.join(tmp, "optimizer.pt"))
    state = dict(extra)
    state["step"] = step
    with open(os.path.join(tmp, "trainer_state.json"), "w", encoding="utf-8") as f:
        json.dump(state, f, indent=2, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    if os.path.exists(final):  # e.g. a rerun reached the same step again
        shutil.rmtree(final, ignore_errors=True)
    os.rename(tmp, final)
    for _, old in list_checkpoints(ckpt_dir)[KEEP_CHECKPOINTS:]:
        shutil.rmtree(old, ignore_errors=True)
    return name


def load_checkpoint(path, backend, optimizer):
    with open(os.path.join(path, "trainer_state.json"), "r", encoding="utf-8") as f:
        state = json.load(f)
    tensors, _ = load_safetensors(os.path.join(path, "adapter_model.safetensors"))
    blob = _torch_load(os.path.join(path, "optimizer.pt"))
    backend.load_lora_tensors(tensors)
    optimizer.load_state_dict(blob["optimizer"])
    rng = blob.get("rng") or {}
    if "torch" in rng:
        torch.set_rng_state(rng["torch"])
    if "cuda" in rng and backend.device.type == "cuda":
        try:
            torch.cuda.set_rng_state_all(rng["cuda"])
        except Exception:
            pass
    return state


def clean_stale_tmp(ckpt_dir):
    if ckpt_dir and os.path.isdir(ckpt_dir):
        for name in os.listdir(ckpt_dir):
            if name.startswith(".tmp-" + CKPT_PREFIX):
                shutil.rmtree(os.path.join(ckpt_dir, name), ignore_errors=True)


# --------------------------------------------------------------------------
# Training

_stop_signal = []


def _on_signal(signum, frame):
    if not _stop_signal:
        _stop_signal.append(signum)


class Dist:
    """The process's place among the ranks torchrun started (WORLD_SIZE,
    RANK, LOCAL_RANK); one rank when they are unset. With several ranks,
    init() joins the process group: NCCL when training on CUDA, gloo on the
    CPU (simulated GPUs)."""

    def __init__(self):
        self.world = _env_int("WORLD_SIZE", 1)
        self.rank = _env_int("RANK", 0)
        self.local_rank = _env_int("LOCAL_RANK", 0)
        self.on = self.world > 1
        self.backend = None
        if self.on:
            _die_with_parent()

    def init(self, device):
        if not self.on:
            return
        import datetime
        import torch.distributed as dist

        self.backend = "nccl" if device.type == "cuda" else "gloo"
        # A peer that died is noticed by torchrun, which stops the others;
        # the timeout only bounds a hang (rank 0 evaluating, the others
        # waiting at a barrier, is not one: evals take seconds to minutes).
        dist.init_process_group(backend=self.backend, timeout=datetime.timedelta(minutes=30))

    def barrier(self):
        if self.on:
            import torch.distributed as dist
            dist.barrier()

    def sum(self, values, device):
        """Sum a list of floats over the ranks (one all-reduce)."""
        if not self.on:
            return values
        import torch.distributed as dist
        t = torch.tensor(values, dtype=torch.float64 if device.type != "cuda" else torch.float32, device=device)
        dist.all_reduce(t)
        return [float(v) for v in t.tolist()]

    def close(self):
        if self.on:
            import torch.distributed as dist
            try:
                dist.destroy_process_group()
            except Exception:
                pass


def _die_with_parent():
    """Under torchrun, die with the launcher: torchrun starts each rank in a
    session of its own, so a launcher killed with SIGKILL would otherwise
    leave its ranks running where no cgroup holds them (Linux only)."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() == 1:  # the launcher is already gone
            os._exit(EXIT_RETRY)
    except Exception:
        pass


def pick_device(job, dist=None):
    """The device to train on, announced in one log line ("device: cpu (...)" or
    "device: cuda (...)") that says what the trainer was given. Simulated GPUs
    (LATHE_SIMULATED_GPUS=1) mean the CPU whatever torch sees: their UUIDs match
    no real GPU. Otherwise cuda:LOCAL_RANK (cuda:0 for one process) when the job
    asks for GPUs (resources.gpus >= 1) and CUDA sees one (Lathe puts the
    reserved GPUs' UUIDs in CUDA_VISIBLE_DEVICES), else the CPU."""
    dist = dist or Dist()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    given = "CUDA_VISIBLE_DEVICES unset" if visible is None else "CUDA_VISIBLE_DEVICES=" + visible
    ranks = "" if not dist.on else "; %d ranks under torchrun" % dist.world
    if os.environ.get("LATHE_SIMULATED_GPUS") == "1":
        log("device: cpu (LATHE_SIMULATED_GPUS=1, %s): the GPUs are simulated%s" % (given, ranks))
        return torch.device("cpu")
    gpus = int((job.get("resources") or {}).get("gpus") or 0)
    if gpus > 0 and torch.cuda.is_available():
        n = torch.cuda.device_count()
        idx = dist.local_rank if dist.on else 0
        if idx >= n:
            raise TrainerError("rank %d (LOCAL_RANK %d) has no GPU: CUDA sees %d, %s" % (dist.rank, idx, n, given), EXIT_RETRY)
        note = ""
        if not dist.on and (gpus > 1 or n > 1):
            note = "; one process uses one GPU (resources.gpus=%d): run it under torchrun for all of them" % gpus
        torch.cuda.set_device(idx)
        log("device: cuda (%d GPU%s visible, %s; using cuda:%d, %s%s%s)"
            % (n, "" if n == 1 else "s", given, idx, torch.cuda.get_device_name(idx), note, ranks))
        return torch.device("cuda", idx)
    if gpus > 0:
        log("device: cpu (resources.gpus=%d but CUDA sees no GPU, %s%s)" % (gpus, given, ranks))
    else:
        log("device: cpu (resources.gpus=0, %s%s)" % (given, ranks))
    return torch.device("cpu")


def set_threads(job, device, dist=None):
    """CPU threads for torch: 1 for tiny-char (its matrices are too small to
    gain from more), else up to 8 shared by the node's ranks;
    LATHE_TORCH_THREADS overrides."""
    env = os.environ.get("LATHE_TORCH_THREADS", "")
    local = _env_int("LOCAL_WORLD_SIZE", 1)
    if env.isdigit() and int(env) > 0:
        n = int(env)
    elif job["base_model"] == TINY_CHAR or device.type == "cuda":
        n = 1
    else:
        try:
            n = len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover
            n = os.cpu_count() or 1
        n = max(1, min(n // max(1, local), 8))
    torch.set_num_threads(n)
    return n


def lr_at(step, total, base_lr):
    """Linear warm-up over the first 5% of steps, then cosine decay to 10%."""
    warm = max(1, total // 20)
    if step <= warm:
        return base_lr * step / warm
    frac = (step - warm) / max(1, total - warm)
    return base_lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, frac))))


def epoch_order(n, seed, epoch):
    g = torch.Generator()
    g.manual_seed((seed * 1000003 + epoch) % (2 ** 63))
    return torch.randperm(n, generator=g)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


GGUF_FORMATS = ("gguf", "gguf-merged")
GGUF_FILES = {"gguf": "adapter_model.gguf", "gguf-merged": "merged_model.gguf"}


def output_formats(job):
    """The GGUF formats the job asks for (output.formats), checked."""
    formats = (job.get("output") or {}).get("formats") or []
    if not isinstance(formats, list) or not all(isinstance(f, str) for f in formats):
        raise TrainerError("output.formats must be a list of strings")
    want = [f for f in formats if f in GGUF_FORMATS]
    unknown = [f for f in formats if f not in GGUF_FORMATS and f != "safetensors"]
    if unknown:
        raise TrainerError("output.formats: unknown format %r (known: safetensors, gguf, gguf-merged)" % unknown[0])
    if want and job["base_model"] == TINY_CHAR:
        raise TrainerError("output.formats %s needs a llama-family base model; %s is Lathe's built-in demo model, "
                           "which llama.cpp cannot represent" % (want[0], TINY_CHAR))
    return want


def _gguf_module():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "python"))
    try:
        from lathe_trainer import export_gguf
    except ImportError as e:
        raise TrainerError("output.formats asks for GGUF, but lathe_trainer.export_gguf (scripts/python) or the gguf "
                           "package is not importable by %s: %s" % (sys.executable, e))
    return export_gguf


def check_gguf(formats, model_dir):
    """Refuse, before the base is loaded, a base the GGUF export cannot write."""
    if not formats:
        return
    export_gguf = _gguf_module()
    for fmt in formats:
        try:
            export_gguf.check_supported(model_dir, need_tokenizer=(fmt == "gguf-merged"))
        except ValueError as e:
            raise TrainerError("output.formats %s: %s" % (fmt, e))


def write_gguf(formats, backend, out_dir):
    """Write the GGUF files formats asks for into out_dir (after the PEFT
    adapter): [(name, format)]."""
    if not formats:
        return []
    export_gguf = _gguf_module()
    files = []
    for fmt in formats:
        name = GGUF_FILES[fmt]
        path = os.path.join(out_dir, name)
        try:
            if fmt == "gguf":
                export_gguf.write_adapter_gguf(backend.model_dir, out_dir, path)
            else:
                export_gguf.write_model_gguf(backend.model_dir, path, adapter_dir=out_dir)
        except ValueError as e:
            raise TrainerError("output.formats %s: %s" % (fmt, e))
        log("wrote %s (%s)" % (name, fmt))
        files.append((name, fmt))
    return files


def run(job, out_dir, ckpt_dir):
    tr, lora = job["training"], job["lora"]
    dist = Dist()
    formats = output_formats(job)
    device = pick_device(job, dist)
    dist.init(device)
    threads = set_threads(job, device, dist)
    log(
        "job %s attempt %s: base_model=%s rank=%d alpha=%g dropout=%g targets=%s threads=%d"
        % (os.environ.get("LATHE_JOB_ID", "?"), os.environ.get("LATHE_ATTEMPT", "?"), job["base_model"],
           lora["rank"], lora["alpha"], lora["dropout"], ",".join(lora["target_modules"]), threads)
    )

    # Data first: bad data is a permanent failure, found before any heavy lifting.
    train_texts = read_texts(job["dataset"])
    eval_texts = read_texts(job["eval_dataset"]) if job.get("eval_dataset") else None

    seed = tr["seed"]
    torch.manual_seed(seed % (2 ** 63))  # LoRA init and dropout (the base does not use torch's RNG)
    if job["base_model"] == TINY_CHAR:
        backend = TinyCharBackend(job, device)
    else:
        backend = HFBackend(job, device)

    train_x, train_y = backend.windows(train_texts)
    if eval_texts is not None:
        eval_x, eval_y = backend.windows(eval_texts)
    else:
        eval_x, eval_y = train_x[:256], train_y[:256]
        log("no eval_dataset: evaluating on the first %d training windows" % eval_x.shape[0])
    n = train_x.shape[0]
    bs = tr["batch_size"]
    steps_per_epoch = -(-n // bs)
    total = tr["max_steps"] if tr["max_steps"] > 0 else tr["epochs"] * steps_per_epoch
    # stop_at_step (an ASHA rung, set by Lathe): train to that step on the
    # full run's schedule, then pause (see pause() below). At or past the
    # last step it is no stop: the run ends as usual.
    stop_at = tr["stop_at_step"] if 0 < tr["stop_at_step"] < total else 0
    if tr["stop_at_step"] and not stop_at:
        log("stop_at_step %d is at or past the last step %d: no pause" % (tr["stop_at_step"], total))
    if stop_at and not ckpt_dir:
        raise TrainerError("training.stop_at_step %d needs LATHE_CHECKPOINT_DIR: a paused run resumes from its checkpoint" % stop_at)
    ckpt_every = tr["checkpoint_every"] or max(1, total // 4)
    eval_every = tr["eval_every"] or max(1, total // 4)
    log_every = 5 if total <= 1000 else max(5, total // 200)
    log(
        "%d training windows of %d tokens, %d eval windows, batch %d: %d steps/epoch, %d steps"
        % (n, backend.seq_len, eval_x.shape[0], bs, steps_per_epoch, total)
    )

    params = backend.trainable()
    optimizer = torch.optim.AdamW(params, lr=tr["learning_rate"], weight_decay=0.0)
    n_params = sum(p.numel() for p in params)
    log("%d trainable LoRA parameters in %d tensors" % (n_params, len(params)))
    if dist.on:
        from torch.nn.parallel import DistributedDataParallel as DDP
        ids = [device.index] if device.type == "cuda" else None
        # Every rank starts from the same LoRA init (same seed); DDP also
        # broadcasts rank 0's parameters here.
        backend.train_module = DDP(backend.model, device_ids=ids)
        log("%d ranks (%s): each takes every %d-th window of a batch of %d; gradients averaged"
            % (dist.world, dist.backend, dist.world, bs))

    start, last_loss = 0, None
    if ckpt_dir:
        clean_stale_tmp(ckpt_dir)
        for step, path in list_checkpoints(ckpt_dir):
            try:
                state = load_checkpoint(path, backend, optimizer)
            except Exception as e:
                log("ignoring checkpoint %s: %s" % (path, e))
                continue
            start = min(int(state["step"]), total)
            last_loss = state.get("last_loss")
            log("resuming from step %d (%s)" % (start, os.path.basename(path)))
            break
    if stop_at:
        log("stop_at_step %d: pausing there (final eval, checkpoint, no adapter) on the schedule of %d steps" % (stop_at, total))

    saved = [start]  # the newest step with a checkpoint on disk
    agreed = []  # several ranks: every rank saw a stop in the last all-reduce

    def stopping():
        """Stop now? One process: a signal arrived. Several ranks: the
        last all-reduce said some rank got one, so all stop at one step."""
        return bool(agreed) if dist.on else bool(_stop_signal)

    def checkpoint(step):
        if dist.rank == 0:
            name = save_checkpoint(ckpt_dir, step, backend, optimizer,
                                   {"total_steps": total, "last_loss": last_loss, "seed": seed,
                                    "base_model": job["base_model"], "world_size": dist.world})
            emit({"event": "checkpoint", "step": step, "path": name})
        dist.barrier()  # the others go on only once it is on disk
        saved[0] = step

    def evaluate_all():
        """The eval loss, computed on rank 0 (the others wait)."""
        model.eval()
        loss = evaluate(backend.forward, eval_x, eval_y, device) if dist.rank == 0 else 0.0
        dist.barrier()
        return loss

    def stop_now(step):
        """A stop signal arrived: checkpoint the progress made, pick the exit code."""
        sig = _stop_signal[0] if _stop_signal else signal.SIGTERM  # a peer's signal
        if not ckpt_dir:
            log("received signal %d at step %d: no LATHE_CHECKPOINT_DIR, nothing saved" % (sig, step))
        elif step > saved[0]:
            log("received signal %d at step %d: checkpointing and exiting" % (sig, step))
            checkpoint(step)
        else:
            log("received signal %d at step %d: checkpoint ckpt-%d is current, exiting" % (sig, step, saved[0]))
        return {signal.SIGTERM: EXIT_SIGTERM, signal.SIGINT: EXIT_SIGINT}.get(sig, 128 + sig)

    def pause(step):
        """Reached stop_at (or resumed at or past it): the eval at step, a
        checkpoint at step (unless it is on disk already), then done with
        paused_at and no adapter. Exit 0."""
        eval_loss = evaluate_all()
        emit({"event": "eval", "step": step, "eval_loss": round(eval_loss, 6)})
        if stopping():
            return stop_now(step)
        if saved[0] != step:
            checkpoint(step)
        metrics = {"eval_loss": round(eval_loss, 6)}
        if last_loss is not None:
            metrics["train_loss"] = round(last_loss, 6)
        log("paused at step %d of %d (stop_at_step): checkpoint ckpt-%d, no adapter" % (step, total, step))
        emit({"event": "done", "metrics": metrics, "paused_at": step})
        return EXIT_OK

    model = backend.model
    if stopping():
        return stop_now(start)
    if stop_at and start >= stop_at:
        return pause(start)

    loss_sum, loss_n, samples, t0 = 0.0, 0, 0, time.time()
    order = (None, None)  # (epoch, its window permutation)
    for step in range(start + 1, total + 1):
        epoch, pos = divmod(step - 1, steps_per_epoch)
        if order[0] != epoch:
            order = (epoch, epoch_order(n, seed, epoch))
        idx = order[1][pos * bs:(pos + 1) * bs]
        lr = lr_at(step, total, tr["learning_rate"])
        for g in optimizer.param_groups:
            g["lr"] = lr
        model.train()
        if not dist.on:
            x = train_x[idx].to(device)
            y = train_y[idx].to(device)
            logits = backend.train_forward(x).float()
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=IGNORE)
        else:
            # Rank r takes windows r, r+W, r+2W, ... of the batch. Its loss
            # is its summed token loss over the whole batch's token count,
            # times W: DDP averages gradients over the W ranks, so the
            # step is the one process's step on the whole batch.
            tokens = int((train_y[idx] != IGNORE).sum().item())
            mine = idx[dist.rank::dist.world]
            x = train_x[mine].to(device)
            y = train_y[mine].to(device)
            logits = backend.train_forward(x).float()
            tok_loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=IGNORE,
                                       reduction="sum")
            loss = tok_loss * (dist.world / max(tokens, 1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        if not dist.on:
            lv = float(loss.item())
        else:
            # One all-reduce carries the batch's loss and whether any rank
            # was asked to stop, so all ranks stop at the same step.
            total_loss, stops = dist.sum([float(tok_loss.item()), 1.0 if _stop_signal else 0.0], device)
            lv = total_loss / max(tokens, 1)
            if stops:
                agreed.append(True)
        x = train_x[idx]  # samples_per_s counts the whole batch
        if not math.isfinite(lv):
            raise TrainerError("training loss is %s at step %d (try a lower learning_rate)" % (lv, step))
        loss_sum += lv
        loss_n += 1
        samples += x.shape[0]
        if step == start + 1 or step % log_every == 0 or step == total or step == stop_at:
            dt = max(time.time() - t0, 1e-9)
            last_loss = loss_sum / loss_n
            emit({
                "event": "progress",
                "step": step,
                "total_steps": total,
                "epoch": round(step / steps_per_epoch, 4),
                "loss": round(last_loss, 6),
                "learning_rate": lr,
                "samples_per_s": round(samples / dt, 2),
            })
            loss_sum, loss_n, samples, t0 = 0.0, 0, 0, time.time()
        if stopping():
            return stop_now(step)
        if step == stop_at:
            return pause(step)
        if step % eval_every == 0 and step != total:
            emit({"event": "eval", "step": step, "eval_loss": round(evaluate_all(), 6)})
        if ckpt_dir and step % ckpt_every == 0:
            checkpoint(step)
        if stopping():
            return stop_now(step)

    # Final, deterministic evaluation (what eval_adapter.py reproduces).
    eval_loss = evaluate_all()
    emit({"event": "eval", "step": total, "eval_loss": round(eval_loss, 6)})
    if dist.on:
        _, stops = dist.sum([0.0, 1.0 if _stop_signal else 0.0], device)
        if stops:
            agreed.append(True)
    if stopping():
        return stop_now(total)

    if dist.rank != 0:
        dist.barrier()  # rank 0 writes the artifacts
        return EXIT_OK
    os.makedirs(out_dir, exist_ok=True)
    files = backend.save_adapter(out_dir)
    files += write_gguf(formats, backend, out_dir)
    for name, fmt in files:
        path = os.path.join(out_dir, name)
        emit({"event": "artifact", "path": name, "format": fmt, "bytes": os.path.getsize(path), "sha256": sha256_file(path)})
    metrics = {"eval_loss": round(eval_loss, 6)}
    if last_loss is not None:
        metrics["train_loss"] = round(last_loss, 6)
    emit({"event": "done", "metrics": metrics})
    dist.barrier()
    return EXIT_OK


def main(argv=None):
    import argparse

    ap = argparse.ArgumentParser(description="Lathe reference LoRA trainer (reads LATHE_* environment variables)")
    ap.add_argument("--job-file", default=os.environ.get("LATHE_JOB_FILE"), help="default: $LATHE_JOB_FILE")
    ap.add_argument("--output-dir", default=os.environ.get("LATHE_OUTPUT_DIR"), help="default: $LATHE_OUTPUT_DIR")
    ap.add_argument("--checkpoint-dir", default=os.environ.get("LATHE_CHECKPOINT_DIR"), help="default: $LATHE_CHECKPOINT_DIR")
    args = ap.parse_args(argv)

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        job = load_job(args.job_file)
        if not args.output_dir:
            raise TrainerError("LATHE_OUTPUT_DIR is not set (or pass --output-dir)")
        return run(job, args.output_dir, args.checkpoint_dir)
    except TrainerError as e:
        sys.stderr.write("train_lora: error: %s\n" % e)
        sys.stderr.flush()
        return e.code
    except Exception as e:  # unexpected: retryable
        traceback.print_exc()
        sys.stderr.write("train_lora: error: unexpected %s: %s\n" % (type(e).__name__, e))
        sys.stderr.flush()
        return EXIT_RETRY


if __name__ == "__main__":
    sys.exit(main())
