"""Keep the best, stop when done (issue 22, point 6): `keep_best` keeps the best-by-dev
checkpoint beside the newest ones, `patience` stops the run, and both survive a crash and
`--resume` exactly. The best step and the stop step are recomputed here from
evaluations.jsonl; the interrupted run is compared with an uninterrupted one."""
from pathlib import Path

import keras
import numpy as np
import pytest

from mtl_framework.config.experiment import Experiment
from mtl_framework.errors import UserError
from mtl_framework.loop.run import Run
from mtl_framework.rundir import RunDir
from mtl_framework.rundir import checkpoint as ckpt
from mtl_framework.saving.writer import export
from mtl_framework.step import variable_names as names

from conftest import DEMO_DATA, TINY_BACKBONE

PATIENCE, CRASH_AT, CHECKPOINT_EVERY = 4, 7, 4


def experiment(tmp_path):
    return Experiment.from_dict({
        "data_root": str(DEMO_DATA), "cache_dir": str(tmp_path / "cache"),
        "backbone": {**TINY_BACKBONE, "dropout": 0.1}, "tasks": ["tnews", "afqmc"],
        "batch_size": 4, "max_length": 48, "tasks_per_update": 2, "steps": 14,
        "checkpoint_every": CHECKPOINT_EVERY, "keep_checkpoints": 1, "eval_every": 1,
        "eval_batches": 2, "seed": 0, "optimizer": {"name": "adamw", "lr": 0.003},
        "keep_best": {"metric": "aggregate", "mode": "max"}, "patience": PATIENCE})


class Crash(Exception):
    pass


class CrashAt(keras.callbacks.Callback):
    """Raises after the run's own callbacks handled update `step` of a fresh run (its
    evaluation and best checkpoint written, no checkpoint since step 4), as a kill would
    leave it: no on_train_end, no final checkpoint."""

    def __init__(self, step):
        super().__init__()
        self.step, self.updates = step, 0

    def on_train_batch_end(self, batch, logs=None):
        self.updates += 1
        if self.updates == self.step:
            raise Crash(self.step)


def train(tmp_path, name, callbacks=(), resume=False):
    run = Run(experiment(tmp_path), output=str(tmp_path / name), log=lambda *_: None,
              callbacks=list(callbacks))
    run.train(resume=resume)
    return run


def expected_best_and_stop(evaluations):
    """(best step, stop step or None) from the aggregate scores, strictly better counting."""
    best, best_step, since = None, None, 0
    for line in evaluations:
        if best is None or line["aggregate"] > best:
            best, best_step, since = line["aggregate"], line["step"], 0
        else:
            since += 1
            if since >= PATIENCE:
                return best_step, line["step"]
    return best_step, None


def arrays(path):
    return ckpt.read_checkpoint(str(path)).arrays


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("keep_best")
    whole = train(tmp_path, "whole")
    with pytest.raises(Crash):
        train(tmp_path, "cut", [CrashAt(CRASH_AT)])
    cut_dir = tmp_path / "cut"
    before = {"checkpoints": RunDir(cut_dir).checkpoint_names(), "best": RunDir(cut_dir).best_names()}
    resumed = train(tmp_path, "cut", resume=True)
    return tmp_path, whole, resumed, before


def test_best_and_patience_follow_the_evaluations(runs):
    tmp_path, whole, _, _ = runs
    evaluations = RunDir(tmp_path / "whole").read_evaluations()
    best_step, stop_step = expected_best_and_stop(evaluations)
    assert whole.step == (stop_step or 14) == evaluations[-1]["step"]
    assert RunDir(tmp_path / "whole").best_names() == [f"best-step-{best_step:08d}"]
    last = RunDir(str(tmp_path / "whole")).latest_checkpoint()
    assert last.step == whole.step  # the stop's checkpoint, beside the best one
    assert last.trainer["best"]["best_step"] == best_step
    assert last.trainer["best"]["best"] == pytest.approx(
        max(e["aggregate"] for e in evaluations))
    if best_step != last.step:  # the best is a different state, kept through the rotation
        best = arrays(tmp_path / "whole" / "checkpoints" / f"best-step-{best_step:08d}")
        assert any(not np.array_equal(best[n], last.arrays[n]) for n in best)


def test_a_crashed_and_resumed_run_keeps_and_stops_as_the_whole_one(runs):
    tmp_path, whole, resumed, before = runs
    assert before["checkpoints"] == [f"step-{CHECKPOINT_EVERY:08d}"]  # resumed from step 4
    # The crash left a best checkpoint (one written after step 4 is removed by the resume
    # and written again).
    assert before["best"]
    assert resumed.step == whole.step
    assert resumed.best.state() == whole.best.state()
    assert RunDir(tmp_path / "cut").best_names() == RunDir(tmp_path / "whole").best_names()
    whole_run = RunDir(tmp_path / "whole")
    for folder in (whole_run.best_names()[0], whole_run.checkpoint_names()[-1]):
        a = arrays(tmp_path / "whole" / "checkpoints" / folder)
        b = arrays(tmp_path / "cut" / "checkpoints" / folder)
        assert sorted(a) == sorted(b)
        assert all(np.array_equal(a[n], b[n]) for n in a), folder


def test_a_run_stopped_by_patience_resumes_to_nothing(runs):
    tmp_path, whole, _, _ = runs
    if whole.step == 14:
        pytest.skip("patience did not stop this run before its last step")
    messages = []
    run = Run(experiment(tmp_path), output=str(tmp_path / "whole"), log=messages.append)
    run.train(resume=True)
    assert run.step == whole.step
    assert any(m.startswith(f"nothing to do: the run stopped at update {whole.step}: dev "
                            f"aggregate has not improved (max) for {PATIENCE} evaluation(s)")
               for m in messages)


def test_export_best_and_a_step(runs, tmp_path):
    run_tmp, whole, _, _ = runs
    run_dir = str(run_tmp / "whole")
    best_step = whole.best.best_step
    out = export(run_dir, "keras", str(tmp_path / "best"), checkpoint="best", log=None)
    from mtl_framework import RoFormerV2Backbone

    backbone = RoFormerV2Backbone.from_preset(out)
    saved = arrays(Path(run_dir) / "checkpoints" / f"best-step-{best_step:08d}")
    for name, variable in names.layer_variable_names(backbone, "backbone").items():
        if "seed_generator" in name:
            continue  # dropout seed states are training state, not weights: not exported
        assert np.array_equal(variable.numpy(), saved[name]), name
    assert f"best-step-{best_step:08d}" in (Path(out) / "README.md").read_text()
    assert RunDir(run_dir).trained_checkpoint(str(whole.step), None).step == whole.step
    with pytest.raises(UserError, match="no checkpoint of step 2; its steps: "):
        export(run_dir, "keras", str(tmp_path / "two"), checkpoint="2", log=None)
    assert not (tmp_path / "two").exists()


def test_patience_is_refused_for_multi_worker(tmp_path):
    raw = {**experiment(tmp_path).raw, "distribution": "multi_worker"}
    with pytest.raises(UserError, match="Experiment.from_dict patience: patience stops on the "
                                        "chief's evaluations"):
        Run(Experiment.from_dict(raw), output=str(tmp_path / "run"), log=lambda *_: None)
    assert not (tmp_path / "run").exists()
