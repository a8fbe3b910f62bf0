"""Kill-and-resume exactness: `mtl train` killed (SIGKILL) between checkpoints and
run again with --resume ends with the very same state as an uninterrupted run:
model, optimizer, residual alpha, dropout seeds, sampler and stream positions, and the
balancing's state (dwa: window sums and counts, two window means, the weights;
tests/test_balancing_resume.py does the same for the other stateful methods, `slow`)."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEMO_DATA = REPO / "experiments" / "demo" / "data"
STEPS, CHECKPOINT_EVERY = 24, 4

# Tiny and fast, but with everything a resume must carry: dropout (seed generator
# state), alpha warm-up, lr warm-up and decay, AdamW moments, three task streams
# and the sampler. max_length 16 truncates nearly every row: few retraces.
EXPERIMENT = """
data_root: {data}
cache_dir: {cache}
backbone:
  num_layers: 2
  hidden_size: 32
  num_heads: 2
  intermediate_size: 64
  dropout: 0.1
  vocab_size: 2000
  alpha_warmup_steps: 6
tasks: [tnews, afqmc, cluener]
balancing: {{normalize: gradient_norm, weights: dwa, window: 2}}
sampling: uniform
tasks_per_update: 2
batch_size: 4
max_length: 16
optimizer:
  name: adamw
  lr: 0.001
  warmup_steps: 3
  weight_decay: 0.01
steps: {steps}
seed: 3
checkpoint_every: {every}
"""


def train(experiment, run_dir, log, resume=False):
    command = [sys.executable, "-m", "mtl_framework.cli", "train", str(experiment),
               "--output", str(run_dir)] + (["--resume"] if resume else [])
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.Popen(command, cwd=REPO, env=env, stdout=open(log, "ab"),
                            stderr=subprocess.STDOUT)


def checkpoint_steps(run_dir):
    root = run_dir / "checkpoints"
    return sorted(int(d.name.split("-")[1]) for d in root.glob("step-*")) if root.is_dir() else []


def updates_logged(run_dir):
    path = run_dir / "metrics.jsonl"
    return path.read_bytes().count(b"\n") if path.exists() else 0


def final_state(run_dir):
    path = run_dir / "checkpoints" / f"step-{STEPS:08d}"
    with open(path / "trainer.json", encoding="utf-8") as f:
        trainer = json.load(f)
    with np.load(path / "state.npz") as values:
        return trainer, {name: values[name] for name in values.files}


def finished(process, log):
    assert process.wait(timeout=300) == 0, Path(log).read_text(errors="replace")[-3000:]


def test_killed_and_resumed_run_equals_uninterrupted_run(tmp_path):
    experiment = tmp_path / "experiment.yaml"
    experiment.write_text(EXPERIMENT.format(data=DEMO_DATA, cache=tmp_path / "cache", steps=STEPS,
                                            every=CHECKPOINT_EVERY), encoding="utf-8")
    a, b = tmp_path / "A", tmp_path / "B"
    # The two runs overlap to halve the wall time (the feature cache is written
    # atomically, so they may race to build it).
    uninterrupted = train(experiment, a, tmp_path / "A.log")
    killed = train(experiment, b, tmp_path / "B.log")

    # Kill between checkpoints: after the first one and at least one more update,
    # so the resumed run redoes the updates the kill lost.
    deadline = time.time() + 240
    while updates_logged(b) <= CHECKPOINT_EVERY:
        assert killed.poll() is None, "run B ended before it was killed"
        assert time.time() < deadline, f"run B logged no update past {CHECKPOINT_EVERY} in 240 s"
        time.sleep(0.01)
    os.kill(killed.pid, signal.SIGKILL)
    assert killed.wait(timeout=60) == -signal.SIGKILL
    steps_at_kill = checkpoint_steps(b)
    assert STEPS not in steps_at_kill, "the kill came after the run had finished"
    updates_at_kill = updates_logged(b)
    assert steps_at_kill and updates_at_kill < STEPS
    print(f"killed after update {updates_at_kill}, checkpoints {steps_at_kill}")

    finished(uninterrupted, tmp_path / "A.log")
    resumed = train(experiment, b, tmp_path / "B.log", resume=True)
    finished(resumed, tmp_path / "B.log")
    assert f"resumed from {b / 'checkpoints'}" in (tmp_path / "B.log").read_text(errors="replace")

    trainer_a, state_a = final_state(a)
    trainer_b, state_b = final_state(b)
    assert trainer_a["variables"] == trainer_b["variables"]
    assert trainer_a["mixture"] == trainer_b["mixture"]
    assert trainer_a["step"] == trainer_b["step"] == STEPS
    differences = {name: float(np.abs(state_a[key].astype("float64") - state_b[key]).max())
                   for name, key in zip(trainer_a["variables"], sorted(state_a))}
    assert len(state_a) == len(state_b) == len(differences)
    worst = {name: d for name, d in differences.items() if d > 1e-6}
    assert not worst, f"killed at checkpoint steps {steps_at_kill}; differing variables: {worst}"
    own = [name for name in trainer_a["variables"] if name.startswith("balancing/dwa/")]
    assert len(own) == 5 * 3, "dwa's state is checkpointed under balancing/dwa/<field>/<task>"
    assert all(differences[name] == 0 for name in own), {name: differences[name] for name in own}
    logged = [[json.loads(line).get("balancing_weights") for line in open(run / "metrics.jsonl")]
              for run in (a, b)]
    assert logged[0][-1] is not None and len(set(map(str, logged[0][-1].values()))) > 1
    assert logged[0][-1] == logged[1][-1]
