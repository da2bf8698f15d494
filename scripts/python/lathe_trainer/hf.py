"""Lathe's trainer contract for a Hugging Face ``Trainer`` (and TRL's trainers,
which are Trainers): one callback, one helper for the arguments.

    from lathe_trainer.hf import LatheCallback, training_arguments

    args = training_arguments(per_device_train_batch_size=8, num_train_epochs=3,
                              learning_rate=2e-4, save_steps=50)
    trainer = Trainer(model=model, args=args, train_dataset=ds, eval_dataset=ev,
                      callbacks=[LatheCallback()])            # the one line
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    trainer.save_model(args.lathe_output_dir)                 # Lathe publishes this folder's files

``LatheCallback`` prints the contract's ``progress`` (from the Trainer's
logs, and once at the first step of every run), ``eval``, ``checkpoint``
(after the Trainer saved one) and ``done`` lines, on rank 0 only. It turns
SIGTERM into save-and-stop: the Trainer saves a checkpoint of the current
step and the process exits 143, which Lathe takes as "stopped, resume me".
Under ``torchrun`` the ranks agree on the step to stop at.

``training_arguments`` builds ``TrainingArguments`` with Lathe's folders:
``output_dir`` is ``LATHE_CHECKPOINT_DIR`` (so the Trainer's
``checkpoint-N`` folders survive into the next attempt) and
``resume_from_checkpoint`` the newest complete one there, or None. Any
argument you pass wins, except that a different ``output_dir`` is refused
while Lathe gave a checkpoint folder (the checkpoints would be lost).
"""

import os
import sys
import tempfile
import time

from . import contract

try:
    from transformers import TrainerCallback
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError("lathe_trainer.hf needs transformers (the Hugging Face virtualenv, scripts/setup.sh --hf): %s" % e)


def resume_from_checkpoint(directory=None):
    """The newest complete Trainer checkpoint (``checkpoint-N`` holding
    ``trainer_state.json``, which the Trainer writes after the weights and the
    optimizer) under directory (default ``LATHE_CHECKPOINT_DIR``), or None."""
    d = directory or contract.checkpoint_dir()
    if not d or not os.path.isdir(d):
        return None
    best, best_step = None, -1
    for name in os.listdir(d):
        if not name.startswith("checkpoint-"):
            continue
        try:
            step = int(name[len("checkpoint-"):])
        except ValueError:
            continue
        p = os.path.join(d, name)
        if os.path.islink(p) or not os.path.isfile(os.path.join(p, "trainer_state.json")):
            continue
        if step > best_step:
            best, best_step = p, step
    return best


def training_arguments(**kwargs):
    """``transformers.TrainingArguments`` for a run under Lathe.

    Defaults (each overridable): ``output_dir`` = ``LATHE_CHECKPOINT_DIR``
    (without one: a temporary folder and ``save_strategy="no"``),
    ``resume_from_checkpoint`` = the newest complete checkpoint there,
    ``seed`` = the job's ``training.seed``, ``logging_steps`` = 5 (progress
    lines are made from the Trainer's logs), ``report_to="none"``,
    ``disable_tqdm=True``; on simulated GPUs (``LATHE_SIMULATED_GPUS=1``)
    ``use_cpu=True``. The result also carries ``lathe_output_dir``: the
    folder to save the final model or adapter into."""
    from transformers import TrainingArguments

    ckpt = contract.checkpoint_dir()
    if ckpt and "output_dir" in kwargs and os.path.realpath(kwargs["output_dir"]) != os.path.realpath(ckpt):
        raise ValueError("training_arguments: output_dir=%r is not LATHE_CHECKPOINT_DIR (%s): the Trainer's "
                         "checkpoints would not reach the next attempt; leave output_dir out"
                         % (kwargs["output_dir"], ckpt))
    kw = {}
    if ckpt:
        kw["output_dir"] = ckpt
        kw["resume_from_checkpoint"] = resume_from_checkpoint(ckpt)
    else:
        kw["output_dir"] = tempfile.mkdtemp(prefix="lathe-hf-")
        kw["save_strategy"] = "no"
    seed = ((contract.job() or {}).get("training") or {}).get("seed")
    if isinstance(seed, int) and not isinstance(seed, bool):
        kw["seed"] = seed
    kw["logging_steps"] = 5
    kw["report_to"] = "none"
    kw["disable_tqdm"] = True
    if os.environ.get("LATHE_SIMULATED_GPUS") == "1":
        kw["use_cpu"] = True
    kw.update(kwargs)
    args = TrainingArguments(**kw)
    args.lathe_output_dir = contract.output_dir()
    return args


class LatheCallback(TrainerCallback):
    """Prints Lathe's contract events from a Hugging Face Trainer and turns
    SIGTERM into save-and-stop (exit 143). Add it to ``callbacks=[...]``.

    exit_on_stop: when SIGTERM stopped the run, exit 143 at the end of
    ``train()`` (default) instead of returning to a script that would save a
    half-trained model and exit 0."""

    def __init__(self, exit_on_stop=True):
        self.exit_on_stop = exit_on_stop
        self._first_step = True
        self._stopping = False
        self._last_step = None
        self._last_time = None
        self._last_loss = None
        self._last_eval = None
        self._train_loss = None

    # -- the run --------------------------------------------------------
    def on_train_begin(self, args, state, control, **kw):
        try:
            contract.handle_sigterm()
        except ValueError:  # not the main thread: the default action stays
            sys.stderr.write("[lathe] LatheCallback: train() is not on the main thread; SIGTERM ends the run "
                             "without a checkpoint\n")
        ckpt = contract.checkpoint_dir()
        if ckpt and os.path.realpath(args.output_dir) != os.path.realpath(ckpt) and contract.is_rank0():
            sys.stderr.write("[lathe] LatheCallback: output_dir %s is not LATHE_CHECKPOINT_DIR %s: checkpoints "
                             "will not reach the next attempt (use lathe_trainer.hf.training_arguments)\n"
                             % (args.output_dir, ckpt))
        self._last_step = state.global_step
        self._last_time = time.perf_counter()

    def on_step_end(self, args, state, control, **kw):
        if self._first_step:
            self._first_step = False
            control.should_log = True  # a progress line at once, whatever logging_steps is
        if self._agree_stop(args):
            self._stopping = True
            control.should_training_stop = True
            if contract.checkpoint_dir():
                control.should_save = True
        return control

    def on_log(self, args, state, control, logs=None, **kw):
        logs = logs or {}
        if "loss" in logs:
            now = time.perf_counter()
            steps = state.global_step - (self._last_step or 0)
            sps = None
            if steps > 0 and self._last_time is not None and now > self._last_time:
                per_step = args.train_batch_size * args.gradient_accumulation_steps * max(1, args.world_size)
                sps = round(steps * per_step / (now - self._last_time), 3)
            self._last_step, self._last_time = state.global_step, now
            self._last_loss = logs.get("loss")
            contract.progress(state.global_step, state.max_steps or None, loss=logs.get("loss"),
                              epoch=logs.get("epoch", state.epoch), learning_rate=logs.get("learning_rate"),
                              samples_per_s=sps)
        if "eval_loss" in logs:
            self._last_eval = logs["eval_loss"]
            contract.evaluation(state.global_step, logs["eval_loss"])
        if "train_loss" in logs:
            self._train_loss = logs["train_loss"]

    def on_save(self, args, state, control, **kw):
        path = os.path.join(args.output_dir, "checkpoint-%d" % state.global_step)
        ckpt = contract.checkpoint_dir()
        if ckpt and os.path.realpath(args.output_dir) == os.path.realpath(ckpt):
            path = "checkpoint-%d" % state.global_step
        contract.checkpoint(state.global_step, path)

    def on_train_end(self, args, state, control, **kw):
        if self._stopping:
            sys.stderr.write("[lathe] stopped by a signal at step %d%s\n" % (
                state.global_step, " after checkpointing" if contract.checkpoint_dir() else ""))
            if self.exit_on_stop:
                contract.exit_stopped()
            return
        metrics = {}
        loss = self._last_loss if self._last_loss is not None else self._train_loss
        if loss is not None:
            metrics["train_loss"] = loss
        if self._last_eval is not None:
            metrics["eval_loss"] = self._last_eval
        contract.done(metrics)

    # -- helpers ----------------------------------------------------------
    def _agree_stop(self, args):
        """Whether any rank got SIGTERM: one all-reduce per step under
        torch.distributed, so every rank stops at the same step."""
        mine = contract.stop_requested()
        try:
            import torch.distributed as dist
        except ImportError:
            return mine
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return mine
        import torch

        device = args.device if dist.get_backend() == "nccl" else "cpu"
        t = torch.tensor([1.0 if mine else 0.0], device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item() > 0)
