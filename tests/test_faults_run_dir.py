"""Faults in a run directory, replayed through the CLI (issue 12 items 4, 5, 7): damaged
checkpoints, killed writes, a full disk, two writers, exports over earlier exports and
a non-finite stop. A refused command exits 2 with one line and no traceback, and
leaves the run directory's bytes as they were."""
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mtl_framework.cli import main as mtl
from mtl_framework.rundir import RunDir, records
from mtl_framework.rundir import checkpoint as ckpt
from mtl_framework.rundir import run_dir as layout

REPO = Path(__file__).resolve().parents[1]
DEMO_DATA = REPO / "experiments" / "demo" / "data"

EXPERIMENT = """
data_root: {data}
cache_dir: {cache}
backbone: {{num_layers: 1, hidden_size: 16, num_heads: 2, intermediate_size: 32, dropout: 0.1,
           vocab_size: 300}}
tasks: [tnews, cluener]
sampling: uniform
tasks_per_update: 2
batch_size: 2
max_length: 16
optimizer: {{name: adamw, lr: {lr}}}
steps: 4
seed: 1
checkpoint_every: {every}
keep_checkpoints: 3
eval_every: 0
"""


def write_experiment(folder, lr=0.001, every=2):
    path = folder / f"experiment-{lr}.yaml"
    path.write_text(EXPERIMENT.format(data=DEMO_DATA, cache=folder / "cache", lr=lr, every=every),
                    encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished 4-update run with checkpoints at 2 and 4 (never modified: tests copy it)."""
    folder = tmp_path_factory.mktemp("faults")
    experiment = write_experiment(folder)
    assert mtl(["train", str(experiment), "--output", str(folder / "run")]) == 0
    return {"experiment": experiment, "run": folder / "run", "folder": folder}


def copy_run(trained, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained["run"], run)
    return run


def snapshot(folder):
    """{relative path: bytes} of every file under `folder`."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(Path(folder).rglob("*"))
            if p.is_file()}


def truncate(run, step):
    path = run / "checkpoints" / f"step-{step:08d}" / "state.npz"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return path.parent


def one_line_error(capsys):
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def arrays(checkpoint_dir):
    with np.load(Path(checkpoint_dir) / "state.npz") as values:
        return {name: values[name] for name in values.files}


# --- a damaged latest checkpoint ----------------------------------------------------------

def test_resume_falls_back_past_a_damaged_checkpoint_and_trains_its_steps_again(
        trained, tmp_path, capsys):
    run = copy_run(trained, tmp_path)
    intact = arrays(run / "checkpoints" / "step-00000004")
    bad = truncate(run, 4)
    capsys.readouterr()
    assert mtl(["train", str(trained["experiment"]), "--output", str(run), "--resume"]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert f"warning: checkpoint {bad} cannot be read" in captured.err  # a warning: stderr
    assert f"resumed from {run / 'checkpoints' / 'step-00000002'} (step 2)" in out
    assert (run / "checkpoints" / "damaged-step-00000004").is_dir()  # set aside, not deleted
    again = arrays(run / "checkpoints" / "step-00000004")
    assert sorted(again) == sorted(intact)
    for name, value in intact.items():  # updates 3-4 redone: the same state as before
        np.testing.assert_allclose(again[name], value, atol=1e-6, err_msg=name)


def test_export_and_evaluate_fall_back_and_name_the_damaged_checkpoint(trained, tmp_path, capsys):
    run = copy_run(trained, tmp_path)
    bad = truncate(run, 4)
    before = snapshot(run)
    capsys.readouterr()
    out = tmp_path / "export"
    assert mtl(["export", str(run), "--format", "keras", "--output", str(out)]) == 0
    assert f"{bad}" in capsys.readouterr().err
    assert snapshot(run) == before
    config = json.loads((out / "config.json").read_text())
    assert config["run"]["checkpoint"] == "checkpoints/step-00000002"  # inside the run
    from mtl_framework import RoFormerV2Backbone

    exported = RoFormerV2Backbone.from_preset(str(out))
    step2 = arrays(run / "checkpoints" / "step-00000002")
    np.testing.assert_array_equal(exported.token_embedding.embeddings.numpy(),
                                  step2["backbone/token_embedding/embeddings"])
    assert mtl(["evaluate", str(run), "--max-examples", "2", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["step"] == 2 and f"{bad}" in captured.err


def test_no_intact_checkpoint_is_one_line_and_changes_nothing(trained, tmp_path, capsys):
    run = copy_run(trained, tmp_path)
    truncate(run, 2), truncate(run, 4)
    before = snapshot(run)
    commands = [["train", str(trained["experiment"]), "--output", str(run), "--resume"],
                ["evaluate", str(run)],
                ["export", str(run), "--format", "keras", "--output", str(tmp_path / "x")]]
    for command in commands:
        capsys.readouterr()
        assert mtl(command) == 2, command
        line = one_line_error(capsys)
        assert "step-00000002/state.npz: " in line and "no intact checkpoint" in line, line
        assert snapshot(run) == before, command
    assert not (tmp_path / "x").exists()


# --- killed writes and a full disk --------------------------------------------------------

def test_leftover_temporary_writes_are_removed_on_the_next_start(trained, tmp_path, capsys):
    run = copy_run(trained, tmp_path)
    leftover = run / "checkpoints" / ".tmp-0123abcd"
    leftover.mkdir()
    (leftover / "state.npz").write_bytes(b"PK\x03\x04 half a write")
    half_yaml = run / f"{layout.EXPERIMENT}{records.TEMPORARY}0123abcd"
    half_yaml.write_text("data_root: /da")
    capsys.readouterr()
    assert mtl(["train", str(trained["experiment"]), "--output", str(run), "--resume"]) == 0
    assert "removed 2 unfinished write(s) a killed run left" in capsys.readouterr().out
    assert not leftover.exists() and not half_yaml.exists()
    assert RunDir(run).checkpoint_names() == ["step-00000002", "step-00000004"]


def test_disk_full_while_checkpointing(trained, tmp_path, capsys, monkeypatch):
    run = copy_run(trained, tmp_path)
    shutil.rmtree(run / "checkpoints" / "step-00000004")
    previous = snapshot(run / "checkpoints")
    save = ckpt.save_arrays

    def full_disk(path, values):
        with open(path, "wb") as f:  # part of the file lands, then the device is full
            f.write(b"PK\x03\x04" + b"\0" * 100)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    monkeypatch.setattr(ckpt, "save_arrays", full_disk)
    capsys.readouterr()
    assert mtl(["train", str(trained["experiment"]), "--output", str(run), "--resume"]) == 2
    line = one_line_error(capsys)
    assert line.startswith(f"error: {run / 'checkpoints' / 'step-00000004'}: no space left")
    assert f"{run / 'checkpoints' / 'step-00000002'} is intact" in line
    assert snapshot(run / "checkpoints") == previous  # no partial write, step 2 untouched
    monkeypatch.setattr(ckpt, "save_arrays", save)
    assert ckpt.read_checkpoint(run / "checkpoints" / "step-00000002").step == 2


# --- one writer per run directory -------------------------------------------------------------

def test_a_second_writer_is_refused_with_the_holders_pid_and_a_killed_one_holds_nothing(
        trained, tmp_path, capsys):
    run = copy_run(trained, tmp_path)
    holder = subprocess.Popen(  # holds the lock exactly as `mtl train` does, then waits
        [sys.executable, "-c", "import sys, time; from mtl_framework.rundir.lock import RunLock; "
         "lock = RunLock(sys.argv[1]); print('locked', flush=True); time.sleep(300)", str(run)],
        cwd=REPO, stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout.readline().strip() == b"locked"
        before = snapshot(run)
        capsys.readouterr()
        assert mtl(["train", str(trained["experiment"]), "--output", str(run), "--resume"]) == 2
        line = one_line_error(capsys)
        assert f"another `mtl train` (pid {holder.pid}) is writing this run directory" in line
        assert snapshot(run) == before
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=60)
    capsys.readouterr()  # the killed holder left no lock behind
    assert mtl(["train", str(trained["experiment"]), "--output", str(run), "--resume"]) == 0
    assert "nothing to do: the run already has 4 of 4 steps" in capsys.readouterr().out


def test_export_refuses_a_non_empty_folder_unless_forced_and_force_keeps_nothing(
        trained, tmp_path, capsys):
    run, out = trained["run"], tmp_path / "export"
    assert mtl(["export", str(run), "--format", "keras", "--with-heads", "--output", str(out)]) == 0
    heads_export = snapshot(out)
    assert "heads.json" in heads_export
    capsys.readouterr()
    assert mtl(["export", str(run), "--format", "bert4keras", "--output", str(out)]) == 2
    assert "holds an earlier export" in one_line_error(capsys) and snapshot(out) == heads_export
    (tmp_path / f"export{records.TEMPORARY}dead").mkdir()  # a killed export's folder
    assert mtl(["export", str(run), "--format", "bert4keras", "--output", str(out),
                "--force"]) == 0
    assert sorted(os.listdir(out)) == sorted(
        ["bert_config.json", "vocab.txt", "README.md", "provenance.json", "export-manifest.json"] +
        [f for f in os.listdir(out) if f.startswith("bert_model.ckpt")])
    assert sorted(os.listdir(tmp_path)) == ["export"]  # no temporary folder left beside it
    other = tmp_path / "notes"
    other.mkdir()
    (other / "mine.txt").write_text("not an export")
    for target in (other, run.parent):  # no earlier export there; holds the run
        capsys.readouterr()
        assert mtl(["export", str(run), "--format", "keras", "--output", str(target),
                    "--force"]) == 2
        assert "--force" in one_line_error(capsys)
    assert (other / "mine.txt").read_text() == "not an export" and run.is_dir()


# --- a non-finite stop ----------------------------------------------------------------------

def test_non_finite_stop_names_the_task_and_the_checkpoint_before_it(trained, tmp_path, capsys):
    experiment = write_experiment(trained["folder"], lr=1e30, every=1)
    experiment.write_text(experiment.read_text().replace("steps: 4", "steps: 40"))
    run = tmp_path / "run"
    capsys.readouterr()
    assert mtl(["train", str(experiment), "--output", str(run)]) == 2
    err = capsys.readouterr().err
    lines = [text for text in err.splitlines() if text.strip()]
    errors = [text for text in lines if text.startswith("error: ")]
    assert "Traceback" not in err and errors == [lines[-1]], err
    line = errors[0]
    assert "micro-batches in a row had a non-finite loss" in line
    task = next(t for t in ("tnews", "cluener") if f"task {t!r}" in line)
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    first_bad = next(r["step"] for r in records if r["skipped"][task])
    assert f"first skipped in update {first_bad}" in line
    # each run of skipped micro-batches is said on the console when it starts (issue 35)
    assert any(text.startswith(f"warning: update {first_bad}: a micro-batch of {task} had a "
                               "non-finite loss or gradient and was skipped") for text in lines)
    kept = RunDir(run).checkpoint_names()
    assert kept and all(layout.checkpoint_step(d) < first_bad for d in kept)
    assert f"the newest checkpoint before it is {run / 'checkpoints' / kept[-1]}" in line
    for name in kept:  # every checkpoint on disk is finite
        assert all(np.isfinite(a).all() for a in arrays(run / "checkpoints" / name).values()
                   if a.dtype.kind == "f")
