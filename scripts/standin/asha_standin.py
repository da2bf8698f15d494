#!/usr/bin/env python3
"""ASHA stand-in trainer: NOT a trainer. It trains nothing.

A stand-in for tests of sweeps (ASHA's pause and promotion, median
stopping): it speaks Lathe's trainer contract (docs/trainer.md,
internal/trainer/doc.go) exactly as the reference trainer does, but its
"loss" is a known function of the learning rate and the step, so a test
knows which trial is best and when. It needs only the Python standard
library (no torch), and its steps take no time unless asked to.

Contract:

* LATHE_JOB_FILE (the job spec as JSON), LATHE_OUTPUT_DIR,
  LATHE_CHECKPOINT_DIR (optional without stop_at_step): as the reference
  trainer reads them.
* Steps: training.max_steps, or training.epochs x 10 when max_steps is 0.
* Objective, at step s with lr = training.learning_rate:
      eval_loss(s) = (log10(lr) + 2.5)^2 + 1 + 5 / sqrt(s)
  best at lr = 10^-2.5 (about 0.00316), falling with the step. The
  divergence knob: with training.seed == 666 the loss grows instead,
  eval_loss(s) = 10 + s (a trial the median rule must stop).
  train_loss(s) = eval_loss(s) + 0.1.
* stdout, one JSON object a line: a progress line every step; an eval line
  every training.eval_every steps (default 1) and at the end; a checkpoint
  line each time ckpt.json is written (every training.checkpoint_every
  steps, default 1, written atomically as {"step": N} in
  LATHE_CHECKPOINT_DIR); at the end adapter_model.safetensors and
  adapter_config.json (small files, not a real adapter) with an artifact
  line each (bytes, sha256), then done with eval_loss and train_loss,
  exit 0.
* training.stop_at_step s (0 < s < steps; Lathe sets it for an ASHA rung):
  at step s the eval, a checkpoint at s, then done with "paused_at": s and
  no artifact; exit 0. A run resumed at or past s pauses at once.
* Resume: a ckpt.json in LATHE_CHECKPOINT_DIR holding step N makes the run
  go on at step N+1 ("resuming from step N" in a log line).
* SIGTERM (or SIGINT): at the next step boundary (or within 50 ms of a
  step's sleep) a checkpoint of the step reached, then exit 143 (130).
* Time per step: --step-seconds S (a float), default the environment's
  ASHA_STANDIN_STEP_S, default 0. A worker gives a trainer none of its own
  environment unless the trainer's pass_env names it (LATHE_* names can
  never be passed), so the flag in the trainer's command is the plain way.
* Exit 3 (permanent) for a job file it cannot use; 1 for anything else.
"""

import argparse
import hashlib
import json
import math
import os
import signal
import sys
import time

EXIT_OK = 0
EXIT_RETRY = 1
EXIT_PERMANENT = 3
DIVERGE_SEED = 666
CKPT_FILE = "ckpt.json"

_stop = []


class JobError(Exception):
    """A job file the stand-in cannot use: exit 3."""


def emit(event):
    sys.stdout.write(json.dumps(event, separators=(",", ":"), allow_nan=False) + "\n")
    sys.stdout.flush()


def log(msg):
    sys.stdout.write("[asha_standin] " + msg + "\n")
    sys.stdout.flush()


def _on_signal(signum, frame):
    if not _stop:
        _stop.append(signum)


def _int(tr, key, default):
    v = tr.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v):
        raise JobError("training.%s must be an integer, got %r" % (key, v))
    return int(v)


def load_job(path):
    """The training settings the stand-in reads, checked."""
    if not path:
        raise JobError("LATHE_JOB_FILE is not set")
    try:
        with open(path, "r", encoding="utf-8") as f:
            job = json.load(f)
    except (OSError, ValueError) as e:
        raise JobError("job file %s: %s" % (path, e))
    tr = job.get("training") if isinstance(job, dict) else None
    if not isinstance(tr, dict):
        raise JobError("job file %s has no training object" % path)
    lr = tr.get("learning_rate", 2e-4)
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0 or not math.isfinite(lr):
        raise JobError("training.learning_rate must be a number > 0, got %r" % (lr,))
    max_steps, epochs = _int(tr, "max_steps", 0), _int(tr, "epochs", 1)
    s = {
        "lr": float(lr),
        "total": max_steps if max_steps > 0 else epochs * 10,
        "seed": _int(tr, "seed", 42),
        "eval_every": _int(tr, "eval_every", 0) or 1,
        "checkpoint_every": _int(tr, "checkpoint_every", 0) or 1,
        "stop_at": _int(tr, "stop_at_step", 0),
    }
    if s["total"] < 1:
        raise JobError("need training.max_steps >= 1 or training.epochs >= 1")
    for k in ("eval_every", "checkpoint_every", "stop_at"):
        if s[k] < 0:
            raise JobError("training.%s must be >= 0, got %d" % ({"stop_at": "stop_at_step"}.get(k, k), s[k]))
    if not 0 < s["stop_at"] < s["total"]:
        s["stop_at"] = 0  # at or past the end: no stop
    return s


def eval_loss(s, step):
    """The objective (module docstring)."""
    if s["seed"] == DIVERGE_SEED:
        return 10.0 + step
    return (math.log10(s["lr"]) + 2.5) ** 2 + 1.0 + 5.0 / math.sqrt(step)


def write_atomic(path, data):
    tmp = "%s.tmp-%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)


def read_checkpoint(ckpt_dir):
    """The step of ckpt.json, 0 when there is none."""
    if not ckpt_dir:
        return 0
    try:
        with open(os.path.join(ckpt_dir, CKPT_FILE), "r", encoding="utf-8") as f:
            step = json.load(f)["step"]
    except FileNotFoundError:
        return 0
    except (OSError, ValueError, KeyError, TypeError) as e:
        log("ignoring checkpoint %s: %s" % (CKPT_FILE, e))
        return 0
    return int(step) if isinstance(step, int) and step > 0 else 0


class Run:
    """One attempt: its settings, folders, and the newest step on disk."""

    def __init__(self, s, out_dir, ckpt_dir, step_s):
        self.s, self.out_dir, self.ckpt_dir, self.step_s = s, out_dir, ckpt_dir, step_s
        self.saved = 0

    def checkpoint(self, step):
        if not self.ckpt_dir or self.saved == step:
            return
        os.makedirs(self.ckpt_dir, exist_ok=True)
        write_atomic(os.path.join(self.ckpt_dir, CKPT_FILE), (json.dumps({"step": step}) + "\n").encode())
        self.saved = step
        emit({"event": "checkpoint", "step": step, "path": CKPT_FILE})

    def stopped(self, step):
        sig = _stop[0]
        log("received signal %d at step %d: checkpointing and exiting" % (sig, step))
        if step > self.saved:
            self.checkpoint(step)
        return {signal.SIGTERM: 143, signal.SIGINT: 130}.get(sig, 128 + sig)

    def sleep(self):
        end = time.monotonic() + self.step_s
        while not _stop and time.monotonic() < end:
            time.sleep(min(0.05, max(0.0, end - time.monotonic())))

    def eval(self, step):
        loss = eval_loss(self.s, step)
        emit({"event": "eval", "step": step, "eval_loss": round(loss, 6)})
        return loss

    def finish(self, step, paused):
        """The eval at step, then a pause (checkpoint, paused_at) or the
        artifacts; done either way."""
        loss = self.eval(step)
        metrics = {"eval_loss": round(loss, 6), "train_loss": round(loss + 0.1, 6)}
        if paused:
            self.checkpoint(step)
            log("paused at step %d of %d (stop_at_step): %s kept, no adapter" % (step, self.s["total"], CKPT_FILE))
            emit({"event": "done", "metrics": metrics, "paused_at": step})
            return EXIT_OK
        os.makedirs(self.out_dir, exist_ok=True)
        files = {
            "adapter_model.safetensors": b"asha stand-in: not an adapter\n",
            "adapter_config.json": (json.dumps({"standin": "asha", "learning_rate": self.s["lr"], "steps": step}) + "\n").encode(),
        }
        for name, data in files.items():
            write_atomic(os.path.join(self.out_dir, name), data)
            fmt = "safetensors" if name.endswith(".safetensors") else "json"
            emit({"event": "artifact", "path": name, "format": fmt, "bytes": len(data),
                  "sha256": hashlib.sha256(data).hexdigest()})
        emit({"event": "done", "metrics": metrics})
        return EXIT_OK

    def run(self):
        s = self.s
        start = min(read_checkpoint(self.ckpt_dir), s["total"])
        self.saved = start
        if start:
            log("resuming from step %d (%s)" % (start, CKPT_FILE))
        if _stop:
            return self.stopped(start)
        if s["stop_at"] and start >= s["stop_at"]:
            return self.finish(start, paused=True)
        for step in range(start + 1, s["total"] + 1):
            self.sleep()
            emit({"event": "progress", "step": step, "total_steps": s["total"], "epoch": round(step / s["total"], 4),
                  "loss": round(eval_loss(s, step) + 0.1, 6), "learning_rate": s["lr"], "samples_per_s": 1.0})
            if _stop:
                return self.stopped(step)
            if step == s["stop_at"]:
                return self.finish(step, paused=True)
            if step == s["total"]:
                break
            if step % s["eval_every"] == 0:
                self.eval(step)
            if step % s["checkpoint_every"] == 0:
                self.checkpoint(step)
        return self.finish(s["total"], paused=False)


def main(argv=None):
    ap = argparse.ArgumentParser(description="ASHA stand-in trainer (not a trainer: for tests of sweeps)")
    ap.add_argument("--step-seconds", type=float, default=None,
                    help="seconds each step takes (default: $ASHA_STANDIN_STEP_S, else 0)")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        step_s = args.step_seconds
        if step_s is None:
            step_s = float(os.environ.get("ASHA_STANDIN_STEP_S") or 0)
        if not step_s >= 0:
            raise JobError("--step-seconds must be >= 0, got %r" % step_s)
        s = load_job(os.environ.get("LATHE_JOB_FILE"))
        out_dir = os.environ.get("LATHE_OUTPUT_DIR")
        if not out_dir:
            raise JobError("LATHE_OUTPUT_DIR is not set")
        ckpt_dir = os.environ.get("LATHE_CHECKPOINT_DIR") or ""
        if s["stop_at"] and not ckpt_dir:
            raise JobError("training.stop_at_step needs LATHE_CHECKPOINT_DIR: a paused run resumes from its checkpoint")
        log("not a trainer: lr=%g steps=%d stop_at_step=%d seed=%d step_seconds=%g"
            % (s["lr"], s["total"], s["stop_at"], s["seed"], step_s))
        return Run(s, out_dir, ckpt_dir, step_s).run()
    except (JobError, ValueError) as e:
        sys.stderr.write("asha_standin: error: %s\n" % e)
        return EXIT_PERMANENT
    except Exception as e:  # unexpected: retryable
        sys.stderr.write("asha_standin: error: unexpected %s: %s\n" % (type(e).__name__, e))
        return EXIT_RETRY


if __name__ == "__main__":
    sys.exit(main())
