"""`mtl` on KERAS_BACKEND=jax in an environment without TensorFlow (.venv-jax, made by
`make interop-jax`): a run killed (SIGKILL) between checkpoints and resumed ends with the
very state of an uninterrupted one (tests/test_resume.py's check), with TensorBoard logs
written without TensorFlow; the JAX-trained run evaluates, predicts, exports, and its
exports load under TensorFlow (this process) with the weights the run holds.

Skips when .venv-jax is absent."""
import json
import subprocess
import sys

import numpy as np
import pytest
import run_harness
from run_harness import (
    DEMO_DATA,
    JAX_PYTHON,
    RESUMABLE,
    assert_same_final_state,
    final_state,
    finished,
    kill_between_checkpoints,
    write_experiment,
)

STEPS, CHECKPOINT_EVERY = 12, 4

pytestmark = pytest.mark.skipif(not JAX_PYTHON.exists(),
                                reason=".venv-jax is absent (make interop-jax)")


def mtl(*args, python=JAX_PYTHON, log=None):
    """`mtl ARGS` in a child: on JAX with .venv-jax's python unless told otherwise."""
    return run_harness.mtl(*args, python=python, log=log)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run A uninterrupted, run B killed after its first checkpoint and resumed."""
    root = tmp_path_factory.mktemp("jax_runs")
    # tests/test_resume.py's experiment without its balancing
    experiment = write_experiment(root / "experiment.yaml", **RESUMABLE, steps=STEPS,
                                  checkpoint_every=CHECKPOINT_EVERY)
    a, b = root / "A", root / "B"
    finished(mtl("train", experiment, "--output", a, log=root / "A.log"), root / "A.log")
    killed = mtl("train", experiment, "--output", b, log=root / "B.log")
    steps_at_kill = kill_between_checkpoints(killed, b, CHECKPOINT_EVERY, 300)
    assert steps_at_kill and STEPS not in steps_at_kill
    finished(mtl("train", experiment, "--output", b, "--resume", log=root / "B.log"), root / "B.log")
    return root, a, b, steps_at_kill


def test_jax_run_killed_and_resumed_equals_uninterrupted_run(runs):
    root, a, b, steps_at_kill = runs
    assert f"resumed from {b / 'checkpoints'}" in (root / "B.log").read_text(errors="replace")
    assert_same_final_state(a, b, STEPS, steps_at_kill)
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
    from mtl_framework.step.variable_names import layer_variable_names

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
    _, state = final_state(a, STEPS)
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
