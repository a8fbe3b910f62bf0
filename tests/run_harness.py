"""What the tests that train small `mtl` runs on the demo data share (test_resume.py,
test_jax_train.py, test_scale_invariance.py): their backbone and experiment, `mtl` in a
child process, and the pieces of the kill-and-resume check (kill a run between
checkpoints, compare two runs' final named state)."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from conftest import DEMO_DATA, REPO

JAX_PYTHON = REPO / ".venv-jax" / "bin" / "python"  # `make interop-jax`: no TensorFlow
SMALL_BACKBONE = {"num_layers": 2, "hidden_size": 32, "num_heads": 2, "intermediate_size": 64,
                  "vocab_size": 2000}
# Tiny and fast, but with everything a resume must carry: dropout (seed generator
# state), alpha warm-up, lr warm-up and decay, AdamW moments, three task streams and
# the sampler. max_length 16 truncates nearly every row: few retraces (and few shapes
# for JAX to compile).
RESUMABLE = {
    "backbone": {**SMALL_BACKBONE, "dropout": 0.1, "alpha_warmup_steps": 6},
    "tasks": ["tnews", "afqmc", "cluener"], "sampling": "uniform", "tasks_per_update": 2,
    "batch_size": 4, "max_length": 16,
    "optimizer": {"name": "adamw", "lr": 0.001, "warmup_steps": 3, "weight_decay": 0.01},
    "seed": 3,
}
# Two workers (tf.distribute, test_distributed.py; JAX, test_jax_distributed.py): tnews
# (loss = mean over rows) + mlm (mean over masked tokens), so the per-replica shares must
# follow the masked-token counts. Dropout 0; constant learning rate. The chief also
# evaluates on dev (tnews) every 2 updates while the other worker waits. Each file sets
# batch_size and max_length.
TWO_WORKERS = {
    "backbone": {"num_layers": 1, "hidden_size": 32, "num_heads": 2, "intermediate_size": 64,
                 "dropout": 0.0, "vocab_size": 600},
    "tasks": ["tnews", {"name": "mlm", "rate": 0.5}],
    "sampling": "uniform", "tasks_per_update": 3,
    "optimizer": {"name": "adamw", "lr": 0.01, "final_lr_fraction": 1.0},
    "steps": 4, "seed": 3, "checkpoint_every": 2, "keep_checkpoints": 2,
    "eval_every": 2, "eval_batches": 1,
}


def write_experiment(path, **fields):
    """An experiment of `fields` on the demo data at `path` (its feature cache beside it),
    written as JSON (JSON is YAML)."""
    path.write_text(json.dumps({"data_root": str(DEMO_DATA), "cache_dir": str(path.parent / "cache"),
                                **fields}), encoding="utf-8")
    return path


def mtl(*args, python=sys.executable, log=None):
    """`mtl ARGS` in a child process: on JAX with .venv-jax's python, else on TensorFlow
    with `python`; its output appended to `log`, else piped."""
    backend = "jax" if Path(python) == JAX_PYTHON else "tensorflow"
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.Popen([str(python), "-m", "mtl_framework.cli", *map(str, args)], cwd=REPO,
                            env=env, stdout=open(log, "ab") if log else subprocess.PIPE,
                            stderr=subprocess.STDOUT)


def finished(process, log=None):
    """The output of a child `mtl` that must end with exit 0 (its tail on failure)."""
    output = process.communicate(timeout=600)[0]
    text = Path(log).read_text(errors="replace") if log else output.decode(errors="replace")
    assert process.returncode == 0, text[-3000:]
    return text


def updates_logged(run_dir):
    path = run_dir / "metrics.jsonl"
    return path.read_bytes().count(b"\n") if path.exists() else 0


def checkpoint_steps(run_dir):
    root = run_dir / "checkpoints"
    return sorted(int(d.name.split("-")[1]) for d in root.glob("step-*")) if root.is_dir() else []


def kill_between_checkpoints(process, run_dir, every, seconds):
    """SIGKILL the `mtl train` writing `run_dir` (checkpoints every `every` updates) once it
    has logged an update past its first checkpoint, so that its resumed run redoes the
    updates the kill lost; the checkpoint steps it left."""
    deadline = time.time() + seconds
    while updates_logged(run_dir) <= every:
        assert process.poll() is None, f"{run_dir.name} ended before it was killed"
        assert time.time() < deadline, f"{run_dir.name} logged no update past {every} in {seconds} s"
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGKILL)
    assert process.wait(timeout=60) == -signal.SIGKILL
    return checkpoint_steps(run_dir)


def final_state(run_dir, steps):
    """trainer.json and the named state (state.npz) of a run's checkpoint at `steps`."""
    path = run_dir / "checkpoints" / f"step-{steps:08d}"
    with open(path / "trainer.json", encoding="utf-8") as f:
        trainer = json.load(f)
    with np.load(path / "state.npz") as values:
        return trainer, {name: values[name] for name in values.files}


def assert_same_final_state(a, b, steps, steps_at_kill):
    """Runs `a` and `b` end with the same variables, mixture state and named state (each
    variable within 1e-6); (trainer.json of a, of b, {variable: max abs difference})."""
    trainer_a, state_a = final_state(a, steps)
    trainer_b, state_b = final_state(b, steps)
    assert trainer_a["variables"] == trainer_b["variables"]
    assert trainer_a["mixture"] == trainer_b["mixture"]
    differences = {name: float(np.abs(state_a[key].astype("float64") - state_b[key]).max())
                   for name, key in zip(trainer_a["variables"], sorted(state_a))}
    assert len(state_a) == len(state_b) == len(differences)
    worst = {name: d for name, d in differences.items() if d > 1e-6}
    assert not worst, f"killed at checkpoint steps {steps_at_kill}; differing variables: {worst}"
    return trainer_a, trainer_b, differences


# --- processes that train together (tests/test_distributed.py, tests/test_jax_distributed.py)

def wait_all(processes, timeout, what, expect_success=True):
    """Each process's output once all have ended, within `timeout` seconds in all (killed
    and failed past it); each must have succeeded (or failed, `expect_success` False)."""
    import pytest

    deadline, outputs = time.time() + timeout, []
    try:
        for process in processes:
            outputs.append(process.communicate(timeout=max(1, deadline - time.time()))[0])
    except subprocess.TimeoutExpired:
        for process in processes:
            process.kill()
        pytest.fail(f"{what} did not finish in {timeout} s")
    for process, text in zip(processes, outputs):
        assert (process.returncode == 0) == expect_success, text[-3000:]
    return outputs


def load_state(path):
    """A worker's dumped state (.npz) in name order."""
    with np.load(path) as values:
        return [values[k] for k in sorted(values.files)]


def checkpoint_state(run_dir, step):
    """A checkpoint's arrays in state order (the order trainer.json lists their names)."""
    trainer, state = final_state(Path(run_dir), step)
    return [state[name] for name in trainer["variables"]]
