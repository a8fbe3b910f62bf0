"""Python first (issue 22, point 4): `Run(Experiment.from_dict(...), callbacks=[...])` with
stock Keras callbacks. A run's Keras epoch is eval_every updates; per-task losses, rates
and dev scores are in Keras's logs, so EarlyStopping, CSVLogger and TensorBoard (a
tracker's callback) work unchanged. Values are checked against metrics.jsonl and
evaluations.jsonl, which the run writes independently of the logs."""
import csv
import hashlib
import json
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from mtl_framework import cli
from mtl_framework.config.experiment import Experiment
from mtl_framework.loop.run import Run

from conftest import DEMO_DATA

EVAL_EVERY = 2
# What these tests check (callbacks, logs, --set, threads) does not depend on the model's
# size: the smallest backbone and rows keep each run's tracing and steps cheap.
BACKBONE = {"num_layers": 1, "hidden_size": 16, "num_heads": 2, "intermediate_size": 32,
            "dropout": 0.0, "vocab_size": 800, "alpha_warmup_steps": 0}


def config(tmp_path, **changes):
    return {"name": "tiny", "data_root": str(DEMO_DATA), "cache_dir": str(tmp_path / "cache"),
            "backbone": dict(BACKBONE), "tasks": ["tnews", "afqmc"],
            "batch_size": 4, "max_length": 24, "tasks_per_update": 2, "steps": 12,
            "checkpoint_every": 0, "eval_every": EVAL_EVERY, "eval_batches": 1, "seed": 0,
            "optimizer": {"name": "adamw", "lr": 0.003}, **changes}


def read_jsonl(path):
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


def test_early_stopping_csv_logger_and_tensorboard_unchanged(tmp_path):
    # lr 0 (and no residual warm-up, no dropout): the weights never move, so the dev
    # score never improves and EarlyStopping(patience=1) must stop after 2 epochs.
    experiment = Experiment.from_dict(config(tmp_path, optimizer={"name": "adamw", "lr": 0}))
    stop = keras.callbacks.EarlyStopping(monitor="dev/tnews", mode="max", patience=1)
    seen = []

    class Tracker(keras.callbacks.Callback):  # what a tracker (W&B, MLflow...) receives
        def on_epoch_end(self, epoch, logs=None):
            seen.append(dict(logs))

    run_dir = tmp_path / "run"
    messages = []
    run = Run(experiment, output=str(run_dir), log=messages.append, callbacks=[
        stop, keras.callbacks.CSVLogger(str(tmp_path / "log.csv")), Tracker(),
        keras.callbacks.TensorBoard(str(tmp_path / "tb"), write_graph=False, profile_batch=0)])
    run.train()

    assert stop.stopped_epoch == 1 and run.step == 2 * EVAL_EVERY  # 4 of 12 updates
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    evaluations = read_jsonl(run_dir / "evaluations.jsonl")
    assert [m["step"] for m in metrics] == [1, 2, 3, 4]
    assert [e["step"] for e in evaluations] == [2, 4]
    assert (run_dir / "checkpoints" / "step-00000004").is_dir()  # the stop's final checkpoint

    with open(tmp_path / "log.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2
    for key in ("epoch", "loss", "loss/tnews", "loss/afqmc", "rate/tnews", "rate/afqmc",
                "dev/tnews", "dev/afqmc", "dev/aggregate"):
        assert key in rows[0], key
    assert len(seen) == 2 and all("dev/aggregate" in logs and "loss/tnews" in logs for logs in seen)
    for epoch, (row, logs, evaluation) in enumerate(zip(rows, seen, evaluations)):
        lines = metrics[epoch * EVAL_EVERY:(epoch + 1) * EVAL_EVERY]
        for task in ("tnews", "afqmc"):
            assert float(row[f"dev/{task}"]) == pytest.approx(evaluation["tasks"][task]["score"])
            assert logs[f"dev/{task}"] == pytest.approx(evaluation["tasks"][task]["score"])
            assert float(row[f"rate/{task}"]) == pytest.approx(lines[-1]["rates"][task])
            drawn = [(m["tasks"][task]["loss"], m["tasks"][task]["count"]) for m in lines
                     if task in m["tasks"]]
            expected = (sum(l * c for l, c in drawn) / sum(c for _, c in drawn)) if drawn else None
            if expected is None:
                assert row[f"loss/{task}"] == "nan"
            else:
                assert float(row[f"loss/{task}"]) == pytest.approx(expected, rel=1e-5)
        assert float(row["dev/aggregate"]) == pytest.approx(evaluation["aggregate"])

    scalars = {}
    for event_file in (tmp_path / "tb").rglob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(event_file)):
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append(float(tf.make_ndarray(value.tensor)))
    assert scalars["epoch_dev/tnews"] == pytest.approx([e["tasks"]["tnews"]["score"]
                                                        for e in evaluations])
    assert "epoch_loss/afqmc" in scalars and "epoch_rate/tnews" in scalars


def snapshot(folder):
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path(folder).rglob("*")) if p.is_file()}


def test_set_overrides_and_resume(tmp_path, capsys):
    """The run directory keeps the experiment with its --set values: a resume compares
    against it, so a --set that changes training is refused naming itself, and one that
    only extends the run (steps) is taken."""
    path = tmp_path / "x.yaml"
    path.write_text(json.dumps(config(tmp_path, eval_every=0, checkpoint_every=1)))
    run_dir = tmp_path / "run"
    assert cli.main(["train", str(path), "--output", str(run_dir), "--set", "steps=2",
                     "--set", "optimizer.lr=1e-3"]) == 0
    stored = (run_dir / "experiment.yaml").read_text(encoding="utf-8")
    assert "steps: 2" in stored and "lr: 0.001" in stored
    capsys.readouterr()
    before = snapshot(run_dir)
    assert cli.main(["train", str(path), "--output", str(run_dir), "--resume",
                     "--set", "steps=3"]) == 2  # lr from the file (0.003) is not the run's
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "optimizer.lr is 0.003, the run's is 0.001" in err[0]
    assert snapshot(run_dir) == before
    assert cli.main(["train", str(path), "--output", str(run_dir), "--resume",
                     "--set", "steps=3", "--set", "optimizer.lr=0.5"]) == 2
    assert capsys.readouterr().err.startswith("error: --set optimizer.lr=0.5: optimizer.lr is 0.5")
    assert cli.main(["train", str(path), "--output", str(run_dir), "--resume",
                     "--set", "steps=3", "--set", "optimizer.lr=1e-3"]) == 0
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2, 3]
    assert np.array_equal(sorted(p.name for p in (run_dir / "checkpoints").iterdir()),
                          ["step-00000001", "step-00000002", "step-00000003"])


def test_a_run_as_a_context_manager_closes_its_threads(tmp_path):
    """`with Run(...) as run:` stops the micro-step threads on the way out (a process that
    trains many runs, as bench/runs.py does, would otherwise keep each run's)."""
    import threading

    def new_lane_threads():  # other tests' models may still hold theirs
        return [t for t in set(threading.enumerate()) - before if t.name.startswith("micro_step")]

    before = set(threading.enumerate())
    experiment = Experiment.from_dict(config(tmp_path, steps=3, eval_every=0))
    with Run(experiment, output=str(tmp_path / "run"), log=lambda *a: None) as run:
        run.train()
        # two lanes by default on a CPU with 2+ cores (MultiTaskModel._lanes)
        assert bool(new_lane_threads()) == (run.model.lanes > 1)
    assert not new_lane_threads()
    assert run.evaluate("dev", max_examples=4)["tnews"]["examples"] == 4  # still usable
