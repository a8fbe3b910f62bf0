"""Issue 44's cases of commands, disks and backends, replayed through the CLI: each ends in
exit 2 and one `error:` line (or a warning where the command succeeds), with nothing left
on disk that blocks the retry, and the retry works.

One tiny BERT run (max_positions 64; tnews, which reads a pair, and chnsenticorp, which
reads one text; 2 updates) serves the module; cases that damage something copy it first.
A full disk is a patched `open` whose writes under one folder stop half-way with ENOSPC;
the backend cases run a child `mtl` (Keras picks its backend once, at import).
"""
import builtins
import errno
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_faults import DEMO_DATA, REPO, experiment, line_of, refused, snapshot
from test_faults_commands import refused_late
from test_faults_round3 import train_overflowing_float16

from mtl_framework import cli

JAX_PYTHON = REPO / ".venv-jax" / "bin" / "python"  # JAX, no TensorFlow (tests/run_harness.py)
BERT = dict(architecture="bert", num_layers=1, hidden_size=32, num_heads=2,
            intermediate_size=64, vocab_size=500, max_positions=64)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("round4")
    path = experiment(folder, "base.yaml", backbone=BERT, tasks=["tnews", "chnsenticorp"],
                      cache_dir=str(folder / "cache"))
    run, export = folder / "run", folder / "export"
    assert cli.main(["train", str(path), "--output", str(run)]) == 0
    assert cli.main(["export", str(run), "--format", "keras", "--output", str(export)]) == 0
    return {"experiment": path, "run": run, "export": export, "folder": folder}


def copy_run(trained, tmp_path):
    shutil.copytree(trained["run"], tmp_path / "run")
    return tmp_path / "run"


class FullDisk:
    """A file whose writes stop half-way with ENOSPC, as on a full disk."""

    def __init__(self, file):
        self.file = file

    def write(self, text):
        self.file.write(text[: len(text) // 2])
        self.file.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self.file.name)

    def writelines(self, lines):
        self.write("".join(lines))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()

    def __getattr__(self, name):
        return getattr(self.file, name)


def full_disk_under(monkeypatch, folder, name=""):
    """Every file opened for writing under `folder` (named `name`...) from now on: a
    FullDisk."""
    real_open, folder = builtins.open, os.path.realpath(folder) + os.sep

    def open_on_a_full_disk(file, mode="r", *args, **kwargs):
        opened = real_open(file, mode, *args, **kwargs)
        inside = isinstance(file, (str, os.PathLike)) and \
            os.path.realpath(file).startswith(folder) and Path(file).name.startswith(name)
        return FullDisk(opened) if inside and any(c in mode for c in "wax") else opened

    monkeypatch.setattr(builtins, "open", open_on_a_full_disk)


def no_temporaries(folder):
    return [str(p) for p in Path(folder).rglob("*") if ".tmp-" in p.name]


# --- a full disk (D02, D03, D06) -----------------------------------------------------------

def test_d02_evaluate_on_a_full_disk_prints_the_scores_then_one_line(trained, tmp_path, capsys,
                                                                    monkeypatch):
    run = copy_run(trained, tmp_path)
    before = snapshot(run)
    full_disk_under(monkeypatch, run)
    capsys.readouterr()
    assert cli.main(["evaluate", str(run)]) == 2
    out, err = capsys.readouterr()
    assert "aggregate (mean score over 2 tasks)" in out and "[step 2, split dev]" in out
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert "Traceback" not in err and errors == [
        f"error: {run / 'evaluations.jsonl'}: no space left on the device: the evaluation of "
        "step 2 could not be recorded; the file is as it was: free space, then run the "
        "command again"], err
    assert snapshot(run) == before  # the half-written line was removed with the file
    monkeypatch.undo()
    assert cli.main(["evaluate", str(run)]) == 0
    lines = (run / "evaluations.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["step"] == 2


def test_d02_a_half_appended_line_is_cut_back_to_the_file_as_it_was(trained, tmp_path,
                                                                   capsys, monkeypatch):
    run = copy_run(trained, tmp_path)
    assert cli.main(["evaluate", str(run), "--max-examples", "4"]) == 0
    before = snapshot(run)
    full_disk_under(monkeypatch, run)
    capsys.readouterr()
    assert cli.main(["evaluate", str(run), "--max-examples", "4", "--json"]) == 2
    out, err = capsys.readouterr()
    assert json.loads(out)["step"] == 2  # the scores, as JSON, before the error
    assert err.strip().splitlines()[-1].startswith(f"error: {run / 'evaluations.jsonl'}: no space")
    assert snapshot(run) == before


def test_d03_resume_on_a_full_disk_leaves_no_temporary(trained, tmp_path, capsys, monkeypatch):
    run = copy_run(trained, tmp_path)
    shutil.rmtree(run / "checkpoints" / "step-00000002")  # the resume starts at 1: trims line 2
    before = snapshot(run)
    full_disk_under(monkeypatch, run)
    message = refused_late(capsys, ["train", trained["experiment"], "--output", run, "--resume"],
                           run)
    assert message == (f"{run / 'metrics.jsonl'}: no space left on the device while cutting it "
                       "back to the updates <= 1 for the resume; it is as it was: free space, "
                       "then resume again")
    assert no_temporaries(run) == [] and snapshot(run) == before
    monkeypatch.undo()
    assert cli.main(["train", str(trained["experiment"]), "--output", str(run), "--resume"]) == 0
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]


def test_d06_finetune_on_a_full_disk_leaves_nothing_that_refuses_the_retry(
        trained, tmp_path, capsys, monkeypatch):
    output = tmp_path / "ft"
    argv = ["finetune", trained["export"], "chnsenticorp", "--data-root", DEMO_DATA,
            "--output", output, "--steps", "1", "--batch-size", "2", "--max-length", "16",
            "--eval-max-examples", "4", "--cache-dir", trained["folder"] / "cache"]
    full_disk_under(monkeypatch, output)
    message = refused_late(capsys, argv)
    assert message.startswith(f"{output / 'finetune.yaml'}: could not be written (No space left "
                              "on device); it is as it was")
    assert not output.exists()
    monkeypatch.undo()
    assert cli.main([str(a) for a in argv]) == 0
    assert (output / "finetune.yaml").stat().st_size > 0


def test_d06_a_full_disk_at_the_finetunes_evaluation_shows_its_scores(trained, tmp_path,
                                                                      capsys, monkeypatch):
    output = tmp_path / "ft"
    full_disk_under(monkeypatch, output, "evaluations.jsonl")
    capsys.readouterr()
    assert cli.main(["finetune", str(trained["export"]), "chnsenticorp", "--data-root",
                     str(DEMO_DATA), "--output", str(output), "--steps", "1", "--batch-size", "2",
                     "--max-length", "16", "--eval-max-examples", "4", "--cache-dir",
                     str(trained["folder"] / "cache")]) == 2
    out, err = capsys.readouterr()
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert "Traceback" not in err and len(errors) == 1 and errors[0].startswith(
        f"error: {output / 'evaluations.jsonl'}: no space left on the device: the evaluation "
        "of step 1 could not be recorded"), err
    assert "chnsenticorp" in out and "[step 1, split dev]" in out  # the scores, shown first
    assert not (output / "evaluations.jsonl").exists()


# --- predict: lengths, bytes, empty texts, pairs, outputs (N75, N29-N34, N25, N81) ---------

def test_n75a_a_length_past_the_position_table_is_refused_before_building(trained, capsys):
    for command in (["predict", trained["run"], "--task", "tnews", "--text", "你好"],
                    ["predict", trained["export"], "--task", "tnews", "--text", "你好"],
                    ["evaluate", trained["run"]]):
        message = refused(capsys, [*command, "--max-length", "128"], trained["run"])
        assert message == (f"--max-length 128: longer than the backbone's max_positions 64 "
                           f"({command[1]}: its learned position table has no rows past it): "
                           "give --max-length 64 or less"), command
    # at the table's length it predicts (no NaN, a label)
    capsys.readouterr()
    assert cli.main(["predict", str(trained["run"]), "--task", "chnsenticorp", "--text", "很好",
                     "--max-length", "64"]) == 0
    assert json.loads(capsys.readouterr().out)["prediction"] in ("negative", "positive")


@pytest.mark.skipif(not JAX_PYTHON.exists(), reason=".venv-jax is absent (make interop-jax)")
def test_n75b_on_jax_the_same_length_is_refused_not_predicted_as_nothing(trained):
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(REPO)}
    done = subprocess.run([str(JAX_PYTHON), "-m", "mtl_framework", "predict", str(trained["run"]),
                           "--task", "tnews", "--text", "你好", "--max-length", "128"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: --max-length 128: longer than the backbone's max_positions 64 "
        f"({trained['run']}: its learned position table has no rows past it): give "
        "--max-length 64 or less"]


def stdin_of(monkeypatch, data):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def test_n29_n30_n34_bytes_that_are_not_utf8_are_named_by_offset(trained, capsys, monkeypatch):
    predict = ["predict", trained["run"], "--task", "chnsenticorp", "--text"]
    stdin_of(monkeypatch, b"ok\n" + bytes(range(0x80, 0x90)))  # N29: binary
    assert refused(capsys, [*predict, "-"], trained["run"]) == (
        "--text - (stdin): not UTF-8 (byte 0x80 at byte offset 3, line 2): "
        "convert it, e.g. `iconv -f GBK -t UTF-8`")
    stdin_of(monkeypatch, "很好\n".encode() + "酒店不错\n".encode("gbk"))  # N30: GBK
    assert refused(capsys, [*predict, "-"]).startswith(
        f"--text - (stdin): not UTF-8 (byte 0x{'酒'.encode('gbk')[0]:02x} at byte "
        "offset 7, line 2)")
    # N34: an argument's bytes, as Python hands undecodable argv bytes (surrogateescape)
    argument = "好".encode("gbk").decode("utf-8", "surrogateescape")
    assert refused(capsys, [*predict, "很好", "--text", argument]).startswith(
        f"--text #2: not UTF-8 (byte 0x{'好'.encode('gbk')[0]:02x} at byte offset 0")


def test_n25_n31_n32_empty_texts_halves_and_a_separator_on_one_text_are_refused(trained,
                                                                              capsys):
    run = trained["run"]
    assert refused(capsys, ["predict", run, "--task", "chnsenticorp", "--text", "很好", "--text",
                            ""], run) == (
        "--text #2 is empty: give a text (training skips empty texts, so a "
        "prediction for one means nothing)")
    assert refused(capsys, ["predict", run, "--task", "tnews", "--text", "A|||",
                            "--separator", "|||"], run) == (
        "--text 'A|||': its second text is empty: give TEXT|||TEXT_B, both non-empty")
    assert refused(capsys, ["predict", run, "--task", "tnews", "--text", " |||B",
                            "--separator", "|||"]).startswith("--text ' |||B': its first text")
    message = refused(capsys, ["predict", run, "--task", "chnsenticorp", "--text", "a|||b",
                               "--separator", "|||"], run)
    assert message.startswith("--separator '|||': task 'chnsenticorp' reads one text (its spec ")
    assert message.endswith("chnsenticorp.yaml has no text_b): drop --separator")
    capsys.readouterr()  # a pair task still takes the pair
    assert cli.main(["predict", str(run), "--task", "tnews", "--text", "A|||B",
                     "--separator", "|||"]) == 0
    assert json.loads(capsys.readouterr().out)["text_b"] == "B"


def test_n81_clue_files_are_never_written_into_the_run(trained, tmp_path, capsys):
    run = copy_run(trained, tmp_path)
    for output in (run, run / "checkpoints" / "step-00000002", run / "new"):
        message = refused(capsys, ["predict", run, "--clue", "--output", output], run)
        assert message == (f"--output {output}: {run} or a folder inside it (a checkpoint's, "
                           "whose files the CLUE files would mix with or replace): write them "
                           "outside it")


# --- backends (J01, J02, J07, J08) ---------------------------------------------------------

def child_mtl(python, backend, *args):
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    env.update({"PYTHONPATH": str(REPO), **({"KERAS_BACKEND": backend} if backend else {})})
    return subprocess.run([str(python), "-m", "mtl_framework", *map(str, args)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=600)


def one_error_line(done):
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0][len("error: "):]


def test_j02_j07_an_absent_or_unknown_backend_is_one_line(tmp_path):
    predict = ("predict", tmp_path, "--task", "tnews", "--text", "a")
    python = sys.executable
    has = {name: subprocess.run([python, "-c", f"import {name}"], capture_output=True).returncode
           == 0 for name in ("jax", "torch")}
    assert one_error_line(child_mtl(python, "bogus", *predict)) == (
        f"KERAS_BACKEND=bogus: mtl runs on tensorflow or jax only (this Python, {python}): set "
        "KERAS_BACKEND=tensorflow (installed here)")
    if not has["torch"]:
        assert one_error_line(child_mtl(python, "torch", *predict)).startswith(
            "KERAS_BACKEND=torch: mtl runs on tensorflow or jax only")
    if not has["jax"]:
        assert one_error_line(child_mtl(python, "jax", *predict)) == (
            f"KERAS_BACKEND=jax, which is not installed in this Python, {python}: set "
            "KERAS_BACKEND=tensorflow (installed here), or install jax")
    # a command that needs no Keras runs whatever KERAS_BACKEND says
    assert child_mtl(python, "bogus", "tasks", "list").returncode == 0


@pytest.mark.skipif(not JAX_PYTHON.exists(), reason=".venv-jax is absent (make interop-jax)")
def test_j01_no_backend_set_where_only_jax_is_installed(tmp_path):
    done = child_mtl(JAX_PYTHON, None, "predict", tmp_path, "--task", "tnews", "--text", "a")
    assert one_error_line(done) == (
        f"KERAS_BACKEND is not set, so mtl uses tensorflow, which is not installed in this "
        f"Python, {JAX_PYTHON}: set KERAS_BACKEND=jax (installed here), or install tensorflow")


@pytest.mark.skipif(not JAX_PYTHON.exists(), reason=".venv-jax is absent (make interop-jax)")
def test_j08_exact_padding_on_jax_without_x64_is_refused(tmp_path):
    path = experiment(tmp_path, backbone=dict(num_layers=1, hidden_size=32, num_heads=2,
                                              vocab_size=500, exact_padding=True))
    env_x64 = os.environ.pop("JAX_ENABLE_X64", None)
    try:
        done = child_mtl(JAX_PYTHON, "jax", "train", path, "--output", tmp_path / "run")
    finally:
        if env_x64 is not None:
            os.environ["JAX_ENABLE_X64"] = env_x64
    assert one_error_line(done) == (
        f"{path}:{line_of(path, 'exact_padding')}: exact_padding: true needs float64, which JAX "
        "computes only with JAX_ENABLE_X64=1 (else float32, silently): set JAX_ENABLE_X64=1, "
        "or exact_padding: null (auto) or false")
    assert not (tmp_path / "run").exists()


# --- precision (P02) and from_preset -------------------------------------------------------

def test_p02_a_final_update_without_its_checkpoint_is_said(tmp_path, capsys):
    # the first micro-batches are skipped while the scale halves, so a 2-update run ends
    # inside the skips
    run, err, records = train_overflowing_float16(tmp_path, capsys, steps=2, checkpoint_every=1)
    assert records[-1]["skipped"]["tnews"] >= 2  # the last update's micro-batches were skipped
    assert not (run / "checkpoints" / "step-00000002").exists()
    kept = sorted(p.name for p in (run / "checkpoints").iterdir()) if \
        (run / "checkpoints").exists() else []
    newest = (f"the newest checkpoint is {run / 'checkpoints' / kept[-1]}" if kept
              else "the run has no checkpoint")
    assert (f"warning: the final update 2 has no checkpoint: the last micro-batches of tnews "
            "were non-finite and skipped (under mixed_float16, loss-scale overflows while the "
            f"scale settles); {newest}: `mtl train ... --resume` trains the updates after it "
            "again") in err.splitlines(), err


def test_from_preset_of_a_size_name_is_built(trained):
    from mtl_framework import AlbertBackbone, BertBackbone, RoFormerV2Backbone

    for cls, size in ((RoFormerV2Backbone, "small"), (BertBackbone, "small"),
                      (AlbertBackbone, "small")):
        backbone = cls.from_preset(size)
        assert type(backbone) is cls and backbone.built
        assert backbone.count_params() == sum(int(np.prod(w.shape)) for w in backbone.weights)
    # a preset folder still loads, as its own architecture
    loaded = BertBackbone.from_preset(trained["export"])
    assert type(loaded) is BertBackbone and loaded.config["max_positions"] == 64
