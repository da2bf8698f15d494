"""LatheCallback and training_arguments with a real Hugging Face Trainer:
the example user script (configs/examples/trainers/hf_sft.py) on a tiny
Llama built locally, run as Lathe runs a trainer (a child process, the
LATHE_* environment, stdout read line by line), stopped by SIGTERM and
resumed."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(PKG_ROOT))
DATA = os.path.join(REPO, "configs", "examples", "data")
SCRIPT = os.path.join(REPO, "configs", "examples", "trainers", "hf_sft.py")

_model = {}


def tiny_llama():
    """The tiny Llama (hidden 64, 2 layers), built once per test run."""
    if "dir" not in _model:
        from lathe_trainer import tiny_llama as tl

        d = tempfile.mkdtemp(prefix="lathe-test-llama-")
        _model["dir"] = tl.build(os.path.join(d, "model"), os.path.join(DATA, "tiny-train.jsonl"))
    return _model["dir"]


def tearDownModule():
    if "dir" in _model:
        shutil.rmtree(os.path.dirname(_model["dir"]), ignore_errors=True)


def child_env(job_file, out, ckpt):
    return {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/root"), "PYTHONPATH": PKG_ROOT,
            "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "LATHE_JOB_ID": "t", "LATHE_ATTEMPT": "1",
            "LATHE_JOB_FILE": job_file, "LATHE_OUTPUT_DIR": out, "LATHE_CHECKPOINT_DIR": ckpt,
            "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


class CallbackTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="lathe-test-cb-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def job(self, name, steps):
        job = {"name": name, "base_model": "file://" + tiny_llama(),
               "dataset": "file://" + os.path.join(DATA, "tiny-train.jsonl"),
               "eval_dataset": "file://" + os.path.join(DATA, "tiny-eval.jsonl"),
               "lora": {"rank": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]},
               "training": {"epochs": 1, "max_steps": steps, "batch_size": 4, "learning_rate": 0.01, "seed": 3,
                            "checkpoint_every": 10, "eval_every": 10},
               "resources": {"gpus": 0}}
        d = os.path.join(self.tmp, name)
        os.makedirs(d)
        p = os.path.join(d, "job.json")
        with open(p, "w") as f:
            json.dump(job, f)
        return p, os.path.join(d, "out"), os.path.join(d, "ckpt")

    def run_script(self, job_file, out, ckpt, stop_after_step=None):
        """Run the user script; with stop_after_step, SIGTERM once a
        progress line past that step is read. Returns (code, events, stderr)."""
        p = subprocess.Popen([sys.executable, SCRIPT], env=child_env(job_file, out, ckpt), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=self.tmp)
        evs, signalled = [], False
        for line in p.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue  # a log line (the Trainer prints its logs as Python dicts)
            if not isinstance(ev, dict) or "event" not in ev:
                continue
            evs.append(ev)
            if (stop_after_step is not None and not signalled and ev["event"] == "progress"
                    and ev["step"] > stop_after_step):
                p.send_signal(signal.SIGTERM)
                signalled = True
        err = p.stderr.read()
        p.stdout.close()
        p.stderr.close()
        return p.wait(timeout=300), evs, err

    def test_events_sigterm_and_resume(self):
        job, out, ckpt = self.job("resume", 30)
        code, evs, err = self.run_script(job, out, ckpt, stop_after_step=12)
        self.assertEqual(code, 143, err[-3000:])
        kinds = [e["event"] for e in evs]
        self.assertNotIn("done", kinds)
        progress = [e for e in evs if e["event"] == "progress"]
        self.assertEqual(progress[0]["step"], 1, "a progress line at the first step, whatever logging_steps is")
        for e in progress:
            self.assertEqual(e["total_steps"], 30)
            self.assertGreater(e["loss"], 0)
            self.assertIn("learning_rate", e)
        self.assertTrue(any(e["event"] == "eval" and e["step"] == 10 and e["eval_loss"] > 0 for e in evs), evs)
        ckpts = [e for e in evs if e["event"] == "checkpoint"]
        self.assertEqual(ckpts[0], {"event": "checkpoint", "step": 10, "path": "checkpoint-10"})
        stopped = ckpts[-1]["step"]
        self.assertGreater(stopped, 12, "SIGTERM must save the current step, not fall back to the last interval")
        self.assertEqual(ckpts[-1]["path"], "checkpoint-%d" % stopped)
        self.assertTrue(os.path.isfile(os.path.join(ckpt, "checkpoint-%d" % stopped, "trainer_state.json")))
        self.assertFalse(os.path.exists(os.path.join(out, "adapter_model.safetensors")), "a stopped run saves no model")

        code, evs2, err = self.run_script(job, out, ckpt)
        self.assertEqual(code, 0, err[-3000:])
        progress2 = [e for e in evs2 if e["event"] == "progress"]
        self.assertEqual(progress2[0]["step"], stopped + 1, "the second run resumes after the checkpointed step")
        self.assertEqual(evs2[-1]["event"], "done")
        self.assertIn("eval_loss", evs2[-1]["metrics"])
        self.assertIn("train_loss", evs2[-1]["metrics"])
        for name in ("adapter_model.safetensors", "adapter_config.json"):
            self.assertTrue(os.path.isfile(os.path.join(out, name)), name)

        # The same job uninterrupted ends with the same adapter.
        job3, out3, ckpt3 = self.job("straight", 30)
        code, _, err = self.run_script(job3, out3, ckpt3)
        self.assertEqual(code, 0, err[-3000:])
        from safetensors.torch import load_file

        a = load_file(os.path.join(out, "adapter_model.safetensors"))
        b = load_file(os.path.join(out3, "adapter_model.safetensors"))
        self.assertEqual(sorted(a), sorted(b))
        worst = max(float((a[k] - b[k]).abs().max()) for k in a)
        sys.stderr.write("\n[test_hf] stopped at step %d; resumed adapter vs uninterrupted: max |diff| %.3g\n"
                         % (stopped, worst))
        self.assertLess(worst, 1e-5)

    def test_training_arguments_keeps_checkpoints_in_lathes_folder(self):
        job, out, ckpt = self.job("args", 5)
        os.makedirs(os.path.join(ckpt, "checkpoint-4"))
        with open(os.path.join(ckpt, "checkpoint-4", "trainer_state.json"), "w") as f:
            f.write("{}")
        os.makedirs(os.path.join(ckpt, "checkpoint-9"))  # incomplete: no trainer_state.json
        r = subprocess.run([sys.executable, "-c", """
from lathe_trainer.hf import training_arguments
a = training_arguments(per_device_train_batch_size=2)
print(a.output_dir, a.resume_from_checkpoint, a.seed, a.report_to, a.lathe_output_dir)
try:
    training_arguments(output_dir="/tmp/elsewhere")
except ValueError as e:
    print("refused:", e)
"""], env=child_env(job, out, ckpt), capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0].split(), [ckpt, os.path.join(ckpt, "checkpoint-4"), "3", "[]", out])
        self.assertTrue(lines[1].startswith("refused: training_arguments: output_dir='/tmp/elsewhere'"), lines)


if __name__ == "__main__":
    unittest.main()
