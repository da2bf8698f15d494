"""lathe_trainer: Lathe's trainer contract for any training script.

- ``lathe_trainer`` (this module): plain functions for a hand-written loop
  (``progress``, ``evaluation``, ``checkpoint``, ``artifact``, ``done``,
  ``handle_sigterm``/``stop_requested``/``exit_stopped``, the ``LATHE_*``
  folders). No dependency beyond Python.
- ``lathe_trainer.hf``: ``LatheCallback`` for a Hugging Face ``Trainer`` (or
  TRL's) and ``training_arguments`` (Lathe's folders and resume).
- ``lathe_trainer.export_gguf``: GGUF for llama.cpp and Ollama (a LoRA
  adapter, a base or a merged model), through the ``gguf`` package.
- ``lathe_trainer.tiny_llama``: a tiny Llama built locally, for tests.

Install from a checkout: ``pip install ./scripts/python``. See docs/trainer.md.
"""

from .contract import (  # noqa: F401
    EXIT_PERMANENT,
    EXIT_STOPPED,
    artifact,
    artifacts,
    checkpoint,
    checkpoint_dir,
    checkpoint_path,
    done,
    emit,
    evaluation,
    exit_stopped,
    fail_permanently,
    handle_sigterm,
    is_rank0,
    job,
    latest_checkpoint,
    output_dir,
    progress,
    resume_step,
    stop_requested,
)

__version__ = "0.1.0"
