"""What Lathe's wrapper costs a Hugging Face training step.

    /opt/lathe/hf-venv/bin/python scripts/bench/hf_overhead.py [--rounds 3] [--steps 40]

Builds one Llama locally (lathe_trainer.tiny_llama, hidden 256, 4 layers:
big enough that a step is a real step, small enough for a CPU) and times,
in alternating rounds on the same machine in the same run:

  plain     a plain transformers + peft loop written here: the same windows
            (256 tokens), batch, optimizer (AdamW, LoRA weights only) and
            gradient clipping, no Lathe at all;
  lathe     the reference trainer (scripts/train_lora.py, the Hugging Face
            path) run as Lathe's worker runs it: a child process with the
            LATHE_* environment, its stdout read line by line and every
            contract event parsed;
  trainer   a Hugging Face Trainer with the same model and batch;
  callback  the same Trainer with lathe_trainer's LatheCallback added.

Each variant's step time is the median over steps after the first 5 (the
warm-up), from the trainer's own clock: the plain loop's and the Trainer
variants' timed around each step, the reference trainer's from the
samples_per_s of its progress lines (windows per second between two lines).
Prints one JSON object: the medians per round, and lathe/plain and
callback/trainer as the median of the per-round ratios.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "scripts", "python"))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

DATA = os.path.join(ROOT, "configs", "examples", "data", "tiny-train.jsonl")
BATCH = 8
LR = 2e-4
WARMUP = 5


def plain(model_dir, steps, threads):
    """A plain transformers + peft loop; returns its step times (s)."""
    import torch
    import train_lora as T  # only for reading the dataset and cutting windows the same way
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(threads)
    torch.manual_seed(7)
    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0,
                                             target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], task_type="CAUSAL_LM"))
    xs, ys = T.hf_windows(tok, T.read_texts(DATA), T.hf_seq_len(tok))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=LR, weight_decay=0.0)
    model.train()
    times = []
    for step in range(steps):
        i = (step * BATCH) % (xs.shape[0] - BATCH)
        x, y = xs[i:i + BATCH], ys[i:i + BATCH]
        t0 = time.perf_counter()
        logits = model(input_ids=x).logits.float()
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        float(loss.item())
        times.append(time.perf_counter() - t0)
    return times[WARMUP:]


def lathe(model_dir, steps, threads, work):
    """The reference trainer as Lathe runs it; step times from its progress lines."""
    job = {"name": "bench", "base_model": model_dir, "dataset": "file://" + DATA,
           "lora": {"rank": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]},
           "training": {"max_steps": steps, "batch_size": BATCH, "learning_rate": LR, "seed": 7,
                        "checkpoint_every": 10 ** 6, "eval_every": 10 ** 6},
           "resources": {"gpus": 0}}
    d = tempfile.mkdtemp(dir=work)
    with open(os.path.join(d, "job.json"), "w") as f:
        json.dump(job, f)
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/root"),
           "LATHE_JOB_ID": "bench", "LATHE_ATTEMPT": "1", "LATHE_JOB_FILE": os.path.join(d, "job.json"),
           "LATHE_OUTPUT_DIR": os.path.join(d, "out"), "LATHE_TORCH_THREADS": str(threads)}
    p = subprocess.Popen([sys.executable, os.path.join(ROOT, "scripts", "train_lora.py")], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    times = []
    for line in p.stdout:
        if line.startswith("{"):
            ev = json.loads(line)
            if ev.get("event") == "progress" and ev["step"] > WARMUP and ev.get("samples_per_s"):
                times.append(BATCH / ev["samples_per_s"])
    if p.wait() != 0:
        raise SystemExit("train_lora.py exited %d" % p.returncode)
    return times


def hf_trainer(model_dir, steps, threads, work, with_callback):
    """An HF Trainer run, with or without LatheCallback; its step times."""
    import torch
    import train_lora as T
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainerCallback, TrainingArguments

    torch.set_num_threads(threads)
    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0,
                                             target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], task_type="CAUSAL_LM"))
    xs, ys = T.hf_windows(tok, T.read_texts(DATA), T.hf_seq_len(tok))
    rows = [{"input_ids": xs[i], "labels": ys[i]} for i in range(xs.shape[0])]

    times = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            times.append(time.perf_counter() - self.t0)

    callbacks = [Clock()]
    env = {}
    if with_callback:
        from lathe_trainer.hf import LatheCallback
        callbacks.append(LatheCallback())
        env = {"LATHE_JOB_ID": "bench", "LATHE_OUTPUT_DIR": os.path.join(work, "cb-out")}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    devnull = open(os.devnull, "w")
    stdout, sys.stdout = sys.stdout, devnull  # the callback's lines go where Lathe would read them
    try:
        args = TrainingArguments(output_dir=tempfile.mkdtemp(dir=work), max_steps=steps, per_device_train_batch_size=BATCH,
                                 learning_rate=LR, lr_scheduler_type="constant", max_grad_norm=1.0, weight_decay=0.0,
                                 logging_steps=5, save_strategy="no", report_to="none", use_cpu=True, seed=7,
                                 dataloader_num_workers=0, disable_tqdm=True)
        Trainer(model=model, args=args, train_dataset=rows, callbacks=callbacks).train()
    finally:
        sys.stdout = stdout
        devnull.close()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return times[WARMUP:]


def child(variant, model_dir, steps, threads, work):
    """Run one in-process variant in a fresh interpreter (no state shared)."""
    out = subprocess.run([sys.executable, __file__, "--child", variant, "--model", model_dir, "--steps", str(steps),
                          "--threads", str(threads), "--work", work], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit("%s failed:\n%s" % (variant, out.stderr[-3000:]))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--threads", type=int, default=max(1, min(len(os.sched_getaffinity(0)), 8)))
    ap.add_argument("--variants", default="plain,lathe,trainer,callback")
    ap.add_argument("--child")
    ap.add_argument("--model")
    ap.add_argument("--work")
    a = ap.parse_args()
    if a.child:
        if a.child == "plain":
            t = plain(a.model, a.steps, a.threads)
        elif a.child == "trainer":
            t = hf_trainer(a.model, a.steps, a.threads, a.work, False)
        else:
            t = hf_trainer(a.model, a.steps, a.threads, a.work, True)
        print(json.dumps(t))
        return
    from lathe_trainer import tiny_llama

    work = tempfile.mkdtemp(prefix="lathe-hf-bench-")
    model = tiny_llama.build(os.path.join(work, "model"), DATA, hidden=256, layers=4, heads=8, kv_heads=4)
    rounds = []
    for r in range(a.rounds):
        med = {}
        for v in a.variants.split(","):
            t = lathe(model, a.steps, a.threads, work) if v == "lathe" else child(v, model, a.steps, a.threads, work)
            med[v] = statistics.median(t)
        rounds.append(med)
        sys.stderr.write("round %d: %s\n" % (r + 1, json.dumps({k: round(v * 1000, 2) for k, v in med.items()})))
    print(json.dumps({
        "steps": a.steps, "batch": BATCH, "threads": a.threads, "model": "llama hidden 256, 4 layers, 8 heads, seq 256",
        "step_ms": [{k: round(v * 1000, 2) for k, v in m.items()} for m in rounds],
        "lathe_over_plain": ratio(rounds, "lathe", "plain"),
        "callback_over_trainer": ratio(rounds, "callback", "trainer"),
    }, indent=1))


def ratio(rounds, a, b):
    if not all(a in m and b in m for m in rounds):
        return None
    return round(statistics.median(m[a] / m[b] for m in rounds), 4)


if __name__ == "__main__":
    main()
