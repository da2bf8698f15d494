"""Lathe's trainer contract as plain functions, for a hand-written loop.

Lathe starts a trainer with the ``LATHE_*`` environment and reads JSON lines
from its stdout (docs/trainer.md). These functions print those lines, so a
loop needs no knowledge of the format::

    import lathe_trainer as lathe

    lathe.handle_sigterm()                      # SIGTERM sets a flag instead of killing
    start = lathe.resume_step()                 # 0, or the step of the newest checkpoint
    for step in range(start + 1, total + 1):
        loss = train_one_step(...)
        lathe.progress(step, total, loss=loss, learning_rate=lr)
        if step % 100 == 0 or lathe.stop_requested():
            save(lathe.checkpoint_path(step))   # a folder under LATHE_CHECKPOINT_DIR
            lathe.checkpoint(step)
        if lathe.stop_requested():
            lathe.exit_stopped()                # exit 143: Lathe retries from the checkpoint
    lathe.evaluation(total, eval_loss)
    save_adapter(lathe.output_dir())
    lathe.done({"eval_loss": eval_loss})

Only rank 0 prints (``RANK`` unset or ``0``): under ``torchrun`` every rank
may call these functions. Each line is written whole and flushed, to the
process's real standard output (file descriptor 1), so a library that
replaced ``sys.stdout`` does not swallow it. Values that JSON cannot carry
(NaN, infinities) are left out of the line rather than breaking it.

Nothing here imports torch or transformers: the module runs under any
Python 3.8+.
"""

import hashlib
import json
import math
import os
import re
import signal
import sys
import threading

#: Exit code of a trainer stopped by SIGTERM after checkpointing (128 + 15).
EXIT_STOPPED = 143
#: Exit code for a permanent failure (bad data, bad config): Lathe does not retry.
EXIT_PERMANENT = 3

_lock = threading.Lock()
_stop = threading.Event()
_CKPT_RE = re.compile(r"^(?:checkpoint|ckpt)-(\d+)$")


def is_rank0():
    """True unless this process is a rank other than 0 of a distributed run
    (``RANK`` set and not ``0``)."""
    return os.environ.get("RANK", "0").strip() in ("", "0")


def job():
    """The job spec Lathe normalised (``LATHE_JOB_FILE``, JSON) as a dict;
    an empty dict when the variable is unset (a run outside Lathe)."""
    path = os.environ.get("LATHE_JOB_FILE")
    if not path:
        return {}
    with open(path, "r", encoding="utf-8") as f:
        return json.load(f)


def output_dir():
    """``LATHE_OUTPUT_DIR``, where the artifacts go (made if missing). Outside
    Lathe: ``./output``."""
    d = os.environ.get("LATHE_OUTPUT_DIR") or "output"
    os.makedirs(d, exist_ok=True)
    return d


def checkpoint_dir():
    """``LATHE_CHECKPOINT_DIR``, where checkpoints go and are resumed from,
    or None when Lathe gave none (no checkpoints for this job)."""
    d = os.environ.get("LATHE_CHECKPOINT_DIR")
    return d or None


def checkpoint_path(step, prefix="checkpoint"):
    """The folder for the checkpoint of step: ``LATHE_CHECKPOINT_DIR/<prefix>-<step>``
    (the name Hugging Face's Trainer uses). Raises RuntimeError without a
    checkpoint folder."""
    d = checkpoint_dir()
    if d is None:
        raise RuntimeError("LATHE_CHECKPOINT_DIR is not set: this job has no checkpoint folder")
    return os.path.join(d, "%s-%d" % (prefix, int(step)))


def latest_checkpoint(directory=None):
    """The newest checkpoint folder (``checkpoint-N`` or ``ckpt-N``, highest N)
    under directory (default ``LATHE_CHECKPOINT_DIR``), or None. A folder
    whose name does not match, a symbolic link and a non-folder are ignored."""
    d = directory or checkpoint_dir()
    if not d or not os.path.isdir(d):
        return None
    best, best_step = None, -1
    for name in os.listdir(d):
        m = _CKPT_RE.match(name)
        if not m:
            continue
        p = os.path.join(d, name)
        if os.path.islink(p) or not os.path.isdir(p):
            continue
        if int(m.group(1)) > best_step:
            best, best_step = p, int(m.group(1))
    return best


def resume_step(directory=None):
    """The step of latest_checkpoint(directory), 0 when there is none."""
    p = latest_checkpoint(directory)
    if p is None:
        return 0
    return int(_CKPT_RE.match(os.path.basename(p)).group(1))


def _clean(v):
    if isinstance(v, bool):
        return v
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if hasattr(v, "item") and callable(v.item):  # a 0-d tensor or numpy scalar
        try:
            return _clean(v.item())
        except (TypeError, ValueError):
            return v
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items() if _clean(x) is not None}
    return v


def emit(event, **fields):
    """Print one contract line ``{"event": event, **fields}`` on rank 0.
    Fields whose value is None (or NaN, ±inf) are left out."""
    if not is_rank0():
        return
    line = {"event": event}
    for k, v in fields.items():
        v = _clean(v)
        if v is not None:
            line[k] = v
    data = (json.dumps(line, separators=(",", ":"), allow_nan=False) + "\n").encode("utf-8")
    with _lock:
        try:
            sys.stdout.flush()  # what the script printed before comes first
        except (AttributeError, ValueError, OSError):
            pass
        view = memoryview(data)
        while view:
            n = os.write(1, view)
            view = view[n:]


def progress(step, total_steps=None, loss=None, epoch=None, learning_rate=None, samples_per_s=None):
    """A progress line: the step just finished (1-based), of total_steps."""
    emit("progress", step=int(step), total_steps=None if total_steps is None else int(total_steps),
         epoch=_float(epoch), loss=_float(loss), learning_rate=_float(learning_rate),
         samples_per_s=_float(samples_per_s))


def evaluation(step, eval_loss, **metrics):
    """An eval line: the eval loss at step (and any other numbers, kept as
    fields of the line)."""
    emit("eval", step=int(step), eval_loss=_float(eval_loss), **{k: _float(v) for k, v in metrics.items()})


def checkpoint(step, path=None):
    """A checkpoint line: a complete checkpoint of step was written. path is
    the folder (absolute or relative to ``LATHE_CHECKPOINT_DIR``); default
    ``checkpoint-<step>``."""
    if path is None:
        path = "checkpoint-%d" % int(step)
    d = checkpoint_dir()
    if d and os.path.isabs(path):
        path = os.path.relpath(path, d)
    emit("checkpoint", step=int(step), path=path)


def artifact(path, format=None):
    """An artifact line for a file in ``LATHE_OUTPUT_DIR`` (path relative to
    it, or absolute inside it): its size and sha256 are computed here. Lathe
    publishes the files reported; without any artifact line it publishes
    every regular file at the top of the output folder."""
    base = output_dir()
    full = path if os.path.isabs(path) else os.path.join(base, path)
    rel = os.path.relpath(full, base)
    if rel.startswith(os.pardir) or os.sep in rel:
        raise ValueError("artifact %r is not a file at the top of LATHE_OUTPUT_DIR (%s)" % (path, base))
    h = hashlib.sha256()
    n = 0
    with open(full, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
            n += len(chunk)
    if format is None:
        format = _format_of(rel)
    emit("artifact", path=rel, format=format, bytes=n, sha256=h.hexdigest())


def artifacts(directory=None):
    """artifact() for every regular file at the top of directory (default
    the output folder), in name order; hidden files and links are skipped."""
    base = directory or output_dir()
    for name in sorted(os.listdir(base)):
        p = os.path.join(base, name)
        if name.startswith(".") or os.path.islink(p) or not os.path.isfile(p):
            continue
        artifact(p)


def done(metrics=None, paused_at=None):
    """The last line of a successful run, with its final metrics (numbers)."""
    emit("done", metrics={k: _float(v) for k, v in (metrics or {}).items()},
         paused_at=None if paused_at is None else int(paused_at))


def _float(v):
    if v is None:
        return None
    try:
        f = float(v.item() if hasattr(v, "item") else v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _format_of(name):
    if name.endswith(".safetensors"):
        return "safetensors"
    if name.endswith(".gguf"):
        return "gguf"
    if name.endswith(".json"):
        return "json"
    return os.path.splitext(name)[1].lstrip(".") or "file"


def _on_term(signum, frame):
    _stop.set()


def handle_sigterm(signals=(signal.SIGTERM, signal.SIGINT)):
    """Make SIGTERM (and SIGINT) set a flag instead of ending the process:
    the loop checks stop_requested(), saves a checkpoint and calls
    exit_stopped(). Lathe sends SIGKILL to the process group after its grace
    period (``worker.stop_grace``). Call it from the main thread."""
    for s in signals:
        signal.signal(s, _on_term)


def stop_requested():
    """True once SIGTERM (or SIGINT) arrived after handle_sigterm()."""
    return _stop.is_set()


def exit_stopped():
    """Exit with 143, the code of a trainer that checkpointed and stopped
    because Lathe asked it to (preemption, cancel, a worker going down)."""
    try:
        sys.stdout.flush()
    except (AttributeError, ValueError, OSError):
        pass
    raise SystemExit(EXIT_STOPPED)


def fail_permanently(message):
    """Print message on stderr and exit 3: Lathe marks the job failed and does
    not retry (bad data, bad configuration)."""
    sys.stderr.write(message.rstrip("\n") + "\n")
    raise SystemExit(EXIT_PERMANENT)
