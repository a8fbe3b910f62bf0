"""Bit-exact resume after SIGKILL for every balancing method with state across updates
(tests/test_resume.py's approach, on a smaller run): `mtl train` killed between
checkpoints and resumed ends with the very state of an uninterrupted run, the method's
named variables (balancing/<method>/...) included, and metrics.jsonl's task weights equal."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import DEMO_DATA, write_tiny_experiment

REPO = Path(__file__).resolve().parents[1]
STEPS, EVERY = 9, 3
# All `slow` (make test-slow): in the default suite tests/test_resume.py kills and
# resumes a run with dwa (the most state: window sums and counts, two window means),
# and tests/balancing_harness.py resumes every method exactly from its named state in
# process; this adds the kill and the files for each stateful method.
STATEFUL = [pytest.param(config, id=name, marks=pytest.mark.slow) for name, config in (
    ("dwa", {"normalize": "none", "weights": "dwa", "window": 2}), ("loss_rate", "loss_rate"),
    ("uncertainty", "uncertainty"), ("rlw", "rlw"), ("gradnorm", "gradnorm"))]


def train(experiment, run_dir, log, resume=False):
    command = [sys.executable, "-m", "mtl_framework.cli", "train", str(experiment),
               "--output", str(run_dir)] + (["--resume"] if resume else [])
    return subprocess.Popen(command, cwd=REPO, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT)


def lines(run_dir):
    path = run_dir / "metrics.jsonl"
    return path.read_bytes().count(b"\n") if path.exists() else 0


def final(run_dir):
    path = run_dir / "checkpoints" / f"step-{STEPS:08d}"
    with np.load(path / "state.npz") as values:
        return json.loads((path / "trainer.json").read_text()), {k: values[k] for k in values.files}


def weights(run_dir):
    return [json.loads(line).get("balancing_weights") for line in open(run_dir / "metrics.jsonl")]


@pytest.mark.parametrize("balancing", STATEFUL)
def test_killed_and_resumed_run_has_the_same_balancing_state(tmp_path, balancing):
    experiment = write_tiny_experiment(
        tmp_path / "experiment.yaml", balancing=balancing, steps=STEPS, checkpoint_every=EVERY,
        data_root=str(DEMO_DATA), max_length=16, batch_size=4, sampling="uniform",
        backbone={"num_layers": 1, "hidden_size": 16, "num_heads": 2, "intermediate_size": 32,
                  "dropout": 0.1, "vocab_size": 800})
    a, b = tmp_path / "A", tmp_path / "B"
    uninterrupted = train(experiment, a, tmp_path / "A.log")
    killed = train(experiment, b, tmp_path / "B.log")
    deadline = time.time() + 240
    while lines(b) <= EVERY:  # past the first checkpoint, before the last
        assert killed.poll() is None, (tmp_path / "B.log").read_text(errors="replace")[-2000:]
        assert time.time() < deadline
        time.sleep(0.01)
    os.kill(killed.pid, signal.SIGKILL)
    assert killed.wait(timeout=60) == -signal.SIGKILL
    assert uninterrupted.wait(timeout=300) == 0, (tmp_path / "A.log").read_text(errors="replace")[-2000:]
    resumed = train(experiment, b, tmp_path / "B.log", resume=True)
    assert resumed.wait(timeout=300) == 0, (tmp_path / "B.log").read_text(errors="replace")[-2000:]

    (trainer_a, state_a), (trainer_b, state_b) = final(a), final(b)
    assert trainer_a["mixture"] == trainer_b["mixture"]
    own = [n for n in trainer_a["variables"] if n.startswith("balancing/")]
    assert own, "the method's state is checkpointed under balancing/<method>/..."
    assert sorted(state_a) == sorted(state_b)
    for key in state_a:
        np.testing.assert_array_equal(state_a[key], state_b[key], err_msg=key)
    logged_a, logged_b = weights(a), weights(b)
    assert logged_a[-1] is not None and logged_a[-1] == logged_b[-1]
