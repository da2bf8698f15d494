"""The plain contract functions, run in real child processes (as Lathe runs
a trainer), their stdout read line by line as the worker reads it."""

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.dirname(HERE)


def run_child(code, env=None, timeout=60):
    e = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": PKG_ROOT}
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, capture_output=True, text=True,
                          timeout=timeout)


def events(stdout):
    out = []
    for line in stdout.splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


class ContractTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.out = os.path.join(self.tmp.name, "out")
        self.ckpt = os.path.join(self.tmp.name, "ckpt")
        os.makedirs(self.ckpt)
        self.env = {"LATHE_OUTPUT_DIR": self.out, "LATHE_CHECKPOINT_DIR": self.ckpt}

    def test_a_hand_loop_prints_every_event(self):
        r = run_child("""
            import os, lathe_trainer as lathe
            print("a log line, not an event")
            lathe.progress(1, 10, loss=2.5, epoch=0.1, learning_rate=1e-3, samples_per_s=12.0)
            lathe.progress(2, 10, loss=float("nan"))          # NaN is left out, the line stays valid
            lathe.evaluation(2, 1.75, accuracy=0.5)
            os.makedirs(lathe.checkpoint_path(2))
            lathe.checkpoint(2, lathe.checkpoint_path(2))      # an absolute path becomes relative
            with open(os.path.join(lathe.output_dir(), "adapter.bin"), "wb") as f:
                f.write(b"weights")
            lathe.artifacts()
            lathe.done({"eval_loss": 1.75, "train_loss": 2.0})
        """, self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        evs = events(r.stdout)
        self.assertEqual([e["event"] for e in evs], ["progress", "progress", "eval", "checkpoint", "artifact", "done"])
        self.assertEqual(evs[0], {"event": "progress", "step": 1, "total_steps": 10, "epoch": 0.1, "loss": 2.5,
                                  "learning_rate": 1e-3, "samples_per_s": 12.0})
        self.assertEqual(evs[1], {"event": "progress", "step": 2, "total_steps": 10})
        self.assertEqual(evs[2], {"event": "eval", "step": 2, "eval_loss": 1.75, "accuracy": 0.5})
        self.assertEqual(evs[3], {"event": "checkpoint", "step": 2, "path": "checkpoint-2"})
        self.assertEqual(evs[4], {"event": "artifact", "path": "adapter.bin", "format": "bin", "bytes": 7,
                                  "sha256": hashlib.sha256(b"weights").hexdigest()})
        self.assertEqual(evs[5], {"event": "done", "metrics": {"eval_loss": 1.75, "train_loss": 2.0}})
        self.assertIn("a log line, not an event", r.stdout.splitlines()[0])

    def test_only_rank_0_speaks(self):
        code = """
            import lathe_trainer as lathe
            lathe.progress(1, 2, loss=1.0)
            lathe.done({})
        """
        r1 = run_child(code, dict(self.env, RANK="1"))
        r0 = run_child(code, dict(self.env, RANK="0"))
        self.assertEqual((r1.returncode, r1.stdout), (0, ""))
        self.assertEqual(len(events(r0.stdout)), 2)

    def test_sigterm_checkpoints_and_exits_143(self):
        p = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
            import os, time, lathe_trainer as lathe
            lathe.handle_sigterm()
            step = lathe.resume_step()
            while True:
                step += 1
                lathe.progress(step, 1000, loss=1.0)
                time.sleep(0.01)
                if lathe.stop_requested():
                    os.makedirs(lathe.checkpoint_path(step))
                    lathe.checkpoint(step)
                    lathe.exit_stopped()
        """)], env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": PKG_ROOT, **self.env},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = p.stdout.readline()
        self.assertEqual(json.loads(first)["step"], 1)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 143, err)
        evs = events(first + out)
        self.assertEqual(evs[-1]["event"], "checkpoint")
        stopped = evs[-1]["step"]
        self.assertTrue(os.path.isdir(os.path.join(self.ckpt, "checkpoint-%d" % stopped)))
        # A second run resumes after that step.
        r = run_child("""
            import lathe_trainer as lathe
            lathe.progress(lathe.resume_step() + 1, 1000)
        """, self.env)
        self.assertEqual(events(r.stdout)[0]["step"], stopped + 1)

    def test_latest_checkpoint_ignores_links_and_strangers(self):
        for name in ("checkpoint-5", "checkpoint-20", "ckpt-7", "checkpoint-x", "notes"):
            os.makedirs(os.path.join(self.ckpt, name))
        os.symlink(os.path.join(self.ckpt, "checkpoint-5"), os.path.join(self.ckpt, "checkpoint-99"))
        with open(os.path.join(self.ckpt, "checkpoint-50"), "w") as f:
            f.write("a file, not a checkpoint")
        r = run_child("""
            import lathe_trainer as lathe
            print(lathe.latest_checkpoint(), lathe.resume_step())
        """, self.env)
        self.assertEqual(r.stdout.split(), [os.path.join(self.ckpt, "checkpoint-20"), "20"], r.stderr)

    def test_artifact_outside_the_output_folder_is_refused(self):
        r = run_child("""
            import lathe_trainer as lathe
            try:
                lathe.artifact("../escape.bin")
            except ValueError as e:
                print("refused:", e)
        """, self.env)
        self.assertIn("refused:", r.stdout)
        self.assertEqual(events(r.stdout), [])

    def test_fail_permanently_exits_3(self):
        r = run_child("""
            import lathe_trainer as lathe
            lathe.fail_permanently("dataset line 3: not JSON")
        """, self.env)
        self.assertEqual(r.returncode, 3)
        self.assertIn("dataset line 3", r.stderr)

    def test_a_replaced_sys_stdout_does_not_swallow_events(self):
        r = run_child("""
            import io, sys, lathe_trainer as lathe
            sys.stdout = io.StringIO()        # a library that captures prints
            lathe.progress(3, 4, loss=0.5)
        """, self.env)
        self.assertEqual(events(r.stdout), [{"event": "progress", "step": 3, "total_steps": 4, "loss": 0.5}])


if __name__ == "__main__":
    unittest.main()
