"""`mtl` on KERAS_BACKEND=jax in an environment without TensorFlow (.venv-jax, made by
`make interop-jax`): a run killed (SIGKILL) between checkpoints and resumed ends with the
very state of an uninterrupted one (tests/test_resume.py's check), with TensorBoard logs
written without TensorFlow; the JAX-trained run evaluates, predicts, exports, and its
exports load under TensorFlow (this process) with the weights the run holds.

Skips when .venv-jax is absent."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
DEMO_DATA = REPO / "experiments" / "demo" / "data"
JAX_PYTHON = REPO / ".venv-jax" / "bin" / "python"
STEPS, CHECKPOINT_EVERY = 12, 4

pytestmark = pytest.mark.skipif(not JAX_PYTHON.exists(),
                                reason=".venv-jax is absent (make interop-jax)")

# tests/test_resume.py's experiment: dropout, alpha and lr warm-up, AdamW, three task
# streams and the sampler; max_length 16 keeps the shapes JAX compiles for few.
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


def mtl(*args, python=JAX_PYTHON, log=None):
    """`mtl ARGS` in a child: on JAX with .venv-jax's python, else this environment's."""
    backend = "jax" if python == JAX_PYTHON else "tensorflow"
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.Popen([str(python), "-m", "mtl_framework.cli", *map(str, args)], cwd=REPO,
                            env=env, stdout=open(log, "ab") if log else subprocess.PIPE,
                            stderr=subprocess.STDOUT)


def finished(process, log=None):
    output = process.communicate(timeout=600)[0]
    text = Path(log).read_text(errors="replace") if log else output.decode(errors="replace")
    assert process.returncode == 0, text[-3000:]
    return text


def updates_logged(run_dir):
    path = run_dir / "metrics.jsonl"
    return path.read_bytes().count(b"\n") if path.exists() else 0


def final_state(run_dir):
    path = run_dir / "checkpoints" / f"step-{STEPS:08d}"
    with open(path / "trainer.json", encoding="utf-8") as f:
        trainer = json.load(f)
    with np.load(path / "state.npz") as values:
        return trainer, {name: values[name] for name in values.files}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run A uninterrupted, run B killed after its first checkpoint and resumed."""
    root = tmp_path_factory.mktemp("jax_runs")
    experiment = root / "experiment.yaml"
    experiment.write_text(EXPERIMENT.format(data=DEMO_DATA, cache=root / "cache", steps=STEPS,
                                            every=CHECKPOINT_EVERY), encoding="utf-8")
    a, b = root / "A", root / "B"
    finished(mtl("train", experiment, "--output", a, log=root / "A.log"), root / "A.log")
    killed = mtl("train", experiment, "--output", b, log=root / "B.log")
    deadline = time.time() + 300
    while updates_logged(b) <= CHECKPOINT_EVERY:
        assert killed.poll() is None, "run B ended before it was killed"
        assert time.time() < deadline, f"run B logged no update past {CHECKPOINT_EVERY} in 300 s"
        time.sleep(0.01)
    os.kill(killed.pid, signal.SIGKILL)
    assert killed.wait(timeout=60) == -signal.SIGKILL
    steps_at_kill = sorted(int(d.name.split("-")[1]) for d in (b / "checkpoints").glob("step-*"))
    assert steps_at_kill and STEPS not in steps_at_kill
    finished(mtl("train", experiment, "--output", b, "--resume", log=root / "B.log"), root / "B.log")
    return root, a, b, steps_at_kill


def test_jax_run_killed_and_resumed_equals_uninterrupted_run(runs):
    root, a, b, steps_at_kill = runs
    assert f"resumed from {b / 'checkpoints'}" in (root / "B.log").read_text(errors="replace")
    trainer_a, state_a = final_state(a)
    trainer_b, state_b = final_state(b)
    assert trainer_a["variables"] == trainer_b["variables"]
    assert trainer_a["mixture"] == trainer_b["mixture"]
    differences = {name: float(np.abs(state_a[key].astype("float64") - state_b[key]).max())
                   for name, key in zip(trainer_a["variables"], sorted(state_a))}
    assert len(state_a) == len(state_b) == len(differences)
    worst = {name: d for name, d in differences.items() if d > 1e-6}
    assert not worst, f"killed at checkpoint steps {steps_at_kill}; differing variables: {worst}"
    start = json.loads((a / "provenance.jsonl").read_text().splitlines()[0])
    assert start["keras_backend"] == "jax" and start["tensorflow"] is None


def test_jax_run_writes_tensorboard_scalars_without_tensorflow(runs):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    _, a, _, _ = runs
    events = EventAccumulator(str(a / "logs"), size_guidance={"tensors": 0})  # keep every step
    events.Reload()
    loss = events.Tensors("loss")  # scalars as tensor summaries, as tf.summary v2 writes them
    assert [e.step for e in loss] == list(range(1, STEPS + 1))
    metrics = [json.loads(line) for line in (a / "metrics.jsonl").read_text().splitlines()]
    np.testing.assert_allclose([float(make_ndarray(e.tensor_proto)) for e in loss],
                               [m["loss"] for m in metrics], rtol=1e-6)
    assert "tnews/gradient_norm" in events.Tags()["tensors"]


def test_jax_trained_run_evaluates_exports_and_loads_under_tensorflow(runs):
    """evaluate and predict on JAX; every export format (bert4keras's TensorFlow
    checkpoint with this environment's TensorFlow, the others on JAX; keras-hub where both
    environments have it) loads here with the run's backbone weights: equal outputs within
    1e-5. On JAX the bert4keras export is refused in one line, exit 2, nothing written."""
    from mtl_framework import RoFormerV2Backbone
    from mtl_framework.architectures import layout, load_backbone
    from mtl_framework.architectures.roformer_v2.keras_hub import keras_hub_available
    from mtl_framework.run_dir import layer_variable_names

    root, a, _, _ = runs
    text = finished(mtl("evaluate", a))
    assert "aggregate" in text
    finished(mtl("predict", a, "--task", "tnews", "--input", DEMO_DATA / "tnews" / "dev.json",
                 "--output", root / "tnews.jsonl"))
    assert len((root / "tnews.jsonl").read_text().splitlines()) > 0
    exports = {}
    hub_here = keras_hub_available()
    hub_there = subprocess.run([str(JAX_PYTHON), "-c", "import importlib.util as u; "
                                "raise SystemExit(u.find_spec('keras_hub') is None)"]).returncode == 0
    names = ["keras", "roformer-pytorch", "bert4keras"] + (["keras-hub"] if hub_here and hub_there else [])
    for name in names:
        python = sys.executable if name == "bert4keras" else JAX_PYTHON
        exports[name] = root / f"export-{name}"
        finished(mtl("export", a, "--format", name, "--output", exports[name], python=python))
    refused = mtl("export", a, "--format", "bert4keras", "--output", root / "refused")
    output = refused.communicate(timeout=600)[0].decode(errors="replace")
    assert refused.returncode == 2 and "TensorFlow is not installed" in output, output[-2000:]
    assert not (root / "refused").exists()
    _, state = final_state(a)
    ours = RoFormerV2Backbone.from_preset(str(exports["keras"]))
    for name, variable in layer_variable_names(ours, "backbone").items():  # state.npz: by name
        if variable.trainable:  # (a seed generator's state is not part of an export)
            np.testing.assert_array_equal(np.asarray(variable.numpy()), state[name], err_msg=name)
    ids = np.array([[2, 15, 27, 99, 3, 0, 0]], "int32")
    inputs = {"token_ids": ids, "segment_ids": np.zeros_like(ids)}
    expected = np.asarray(ours(inputs))
    for name, folder in exports.items():
        if name in ("keras", "keras-hub"):  # keras-hub presets are keras_hub's to load, not ours
            continue
        loaded = load_backbone(str(folder), layout(str(folder)))
        got = np.asarray(loaded(inputs))
        np.testing.assert_allclose(got[:, :5], expected[:, :5], atol=1e-5, err_msg=name)
