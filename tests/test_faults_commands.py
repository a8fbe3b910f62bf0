"""Issue 24's cases, replayed through `cli.main`: export --force, predict outputs and
row alignment, finetune refusals, cached vocabs, unlabelled NER, unwritable outputs,
resumes over changed data and the messages. Each refusal is exit 2 with one `error:`
line and no traceback, and the run directory and the user's other files hash the same
before and after (`refused`, from tests/test_faults.py).

One tiny run (tnews + cluener, 2 updates) and its --with-heads export are made for the
module; every case copies what it damages.
"""
import errno
import functools
import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from test_faults import DEMO_DATA, experiment, refused, snapshot, write

from mtl_framework import cli

TASKS = ["tnews", "cluener"]


refused_late = functools.partial(refused, late=True)  # after progress bars on stderr


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("commands")
    path = experiment(folder, "base.yaml", tasks=TASKS, cache_dir=str(folder / "cache"),
                      steps=2, checkpoint_every=1)
    run, export = folder / "run", folder / "export"
    assert cli.main(["train", str(path), "--output", str(run)]) == 0
    assert cli.main(["export", str(run), "--format", "keras", "--with-heads",
                     "--output", str(export)]) == 0
    return {"experiment": path, "run": run, "export": export, "folder": folder}


def lines_of(path):
    return Path(path).read_text(encoding="utf-8").splitlines()


def demo_lines(task, split, n):
    return lines_of(DEMO_DATA / task / f"{split}.json")[:n]


# --- 1. export --force replaces only an earlier export of ours --------------------------

def test_export_force_keeps_a_folder_that_merely_holds_a_config_json(trained, tmp_path, capsys):
    project = tmp_path / "proj"
    write(project / "config.json", "{}")
    write(project / "notes.txt", "n\n")
    write(project / "src" / "main.py", "print(1)\n")
    message = refused(capsys, ["export", trained["run"], "--format", "keras", "--output", project,
                               "--force"], project)
    assert message.startswith(f"{project}: not wholly an earlier export (no export-manifest.json")


def test_export_force_replaces_an_export_and_refuses_one_with_a_file_added(trained, tmp_path,
                                                                            capsys):
    out = tmp_path / "export"
    args = ["export", trained["run"], "--format", "bert4keras", "--output", out]
    assert cli.main([str(a) for a in args]) == 0
    manifest = json.loads((out / "export-manifest.json").read_text())["files"]
    assert sorted(manifest) == sorted(p.name for p in out.iterdir() if p.name != "export-manifest.json")
    assert cli.main([str(a) for a in args + ["--force"]]) == 0  # wholly ours: replaced
    write(out / "my_notes.txt", "mine\n")
    message = refused(capsys, args + ["--force"], out)
    assert "my_notes.txt is not part of the export" in message
    (out / "my_notes.txt").unlink()
    (out / "vocab.txt").write_text("[PAD]\n")  # a file of the export changed by the user
    assert "vocab.txt changed since the export" in refused(capsys, args + ["--force"], out)


def test_export_force_onto_a_symlink_and_into_a_file_are_refused(trained, tmp_path, capsys):
    real = tmp_path / "real"
    assert cli.main(["export", str(trained["run"]), "--format", "keras", "--output", str(real)]) == 0
    link = tmp_path / "link"
    link.symlink_to(real)
    before = snapshot(tmp_path)
    assert refused(capsys, ["export", trained["run"], "--format", "keras", "--output", link,
                            "--force"]).startswith(f"{link}: a symbolic link")
    write(tmp_path / "file", "x")
    before = snapshot(tmp_path)
    assert "not a folder" in refused(capsys, ["export", trained["run"], "--format", "keras",
                                              "--output", tmp_path / "file"])
    assert snapshot(tmp_path) == before


def test_export_disk_full_leaves_the_earlier_export_and_no_temporary(trained, tmp_path, capsys,
                                                                     monkeypatch):
    from mtl_framework.saving import writer as export

    out = tmp_path / "export"
    assert cli.main(["export", str(trained["run"]), "--format", "keras", "--output", str(out)]) == 0
    before = snapshot(tmp_path)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(export, "write_manifest", full)
    message = refused(capsys, ["export", trained["run"], "--format", "keras", "--output", out,
                               "--force"])
    assert "No space left on device" in message and "intact" in message
    assert snapshot(tmp_path) == before  # the old export whole, nothing beside it


def test_export_of_a_run_without_vocab(trained, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained["run"], run)
    (run / "vocab.txt").unlink()
    message = refused(capsys, ["export", run, "--format", "keras", "--output", tmp_path / "o"], run)
    assert message.startswith(f"{run / 'vocab.txt'}: not found")
    assert not (tmp_path / "o").exists()
    message = refused(capsys, ["evaluate", run, "--max-examples", "2"], run)
    assert message.startswith(f"{run / 'vocab.txt'}: not found")


def test_a_cut_run_vocab_is_refused_by_every_reader(trained, tmp_path, capsys):
    """A vocab shorter than the embedding table would tokenize into other ids, silently."""
    run = tmp_path / "run"
    shutil.copytree(trained["run"], run)
    size = len(lines_of(run / "vocab.txt"))
    (run / "vocab.txt").write_text("\n".join(lines_of(run / "vocab.txt")[:100]) + "\n")
    five = write(tmp_path / "in.json", "\n".join(demo_lines("tnews", "dev", 5)) + "\n")
    for argv in (["evaluate", run, "--max-examples", "2"],
                 ["export", run, "--format", "keras", "--output", tmp_path / "o"],
                 ["predict", run, "--task", "tnews", "--input", five, "--output",
                  tmp_path / "o.jsonl"],
                 ["train", trained["experiment"], "--output", run, "--resume"]):
        message = refused(capsys, argv, run)
        assert message.startswith(f"{run / 'vocab.txt'}: 100 tokens, but the checkpoint ")
        assert "cut or replaced" in message
        assert f"has {size} embedding rows" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.json", "run"]


def test_evaluate_repairs_a_cut_last_line_before_appending(trained, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained["run"], run)
    (run / "evaluations.jsonl").write_text('{"step": 1, "split": "dev", "tasks": {}}\n{"step": 2, "spl')
    assert cli.main(["evaluate", str(run), "--max-examples", "2", "--json"]) == 0
    assert "removed an unfinished last line" in capsys.readouterr().err
    steps = [json.loads(line)["step"] for line in lines_of(run / "evaluations.jsonl")]
    assert steps == [1, 2]  # the cut line gone, the new evaluation (step 2) a line of its own


# --- 2. and 6. predict: outputs checked first, one line per input record ---------------

@pytest.fixture()
def five(tmp_path):
    path = tmp_path / "in.json"
    path.write_text("\n".join(demo_lines("tnews", "dev", 5)) + "\n", encoding="utf-8")
    return path


def test_predict_never_writes_over_its_input_or_a_run_file(trained, five, tmp_path, capsys):
    run = trained["run"]
    for force in ([], ["--force"]):
        message = refused(capsys, ["predict", run, "--task", "tnews", "--input", five,
                                   "--output", five] + force, tmp_path)
        assert message == (f"--output {five}: is the input {five}: write the predictions to "
                           "another file")
        message = refused(capsys, ["predict", run, "--task", "tnews", "--input", five,
                                   "--output", run / "metrics.jsonl"] + force, run)
        assert "a file of" in message and "write them outside it" in message


def test_predict_refuses_an_existing_output_unless_forced(trained, five, tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    out.write_text("keep me\n")
    args = ["predict", trained["run"], "--task", "tnews", "--input", five, "--output", out]
    message = refused(capsys, args, tmp_path)
    assert message == f"--output {out}: exists: pass --force to replace it, or give a new file"
    assert cli.main([str(a) for a in args + ["--force"]]) == 0
    assert len(lines_of(out)) == 5
    mode = stat.S_IMODE(out.stat().st_mode)
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o666 & ~umask  # like any file `open()` writes, not mkstemp's 0600


def test_predict_checks_its_output_before_loading_the_model(trained, five, tmp_path, capsys,
                                                            monkeypatch):
    from mtl_framework.evaluation import predict

    def never(*args, **kwargs):
        raise AssertionError("the model was loaded before the output was checked")

    monkeypatch.setattr(predict, "load_model", never)
    base = ["predict", trained["run"], "--task", "tnews", "--input", five, "--output"]
    assert refused(capsys, base + [tmp_path / "missing" / "o.jsonl"]).endswith(
        "does not exist: create it first")
    assert "is a folder" in refused(capsys, base + [tmp_path])
    write(tmp_path / "afile", "x")
    assert "exists and is not a folder" in refused(
        capsys, ["predict", trained["run"], "--clue", "--output", tmp_path / "afile"])
    assert refused(capsys, base[:5] + [tmp_path / "nope.json", "--output", tmp_path / "o"]) == \
        f"--input {tmp_path / 'nope.json'}: no such file"


def test_predict_writes_a_null_line_for_each_unreadable_row(trained, tmp_path, capsys):
    good = demo_lines("tnews", "dev", 4)
    rows = [good[0], "{not json", good[1], '{"keywords": "no sentence"}', good[2], good[3]]
    source = write(tmp_path / "in.json", "\n".join(rows) + "\n")
    out = tmp_path / "out.jsonl"
    assert cli.main(["predict", str(trained["run"]), "--task", "tnews", "--input", str(source),
                     "--output", str(out)]) == 0
    written = [json.loads(line) for line in lines_of(out)]
    assert len(written) == len(rows)
    bad = [i for i, line in enumerate(written) if line["prediction"] is None]
    assert bad == [1, 3]
    assert written[1]["error"].endswith(f"at {source}:2")
    assert written[3]["error"].endswith(f"at {source}:4")
    ids = [json.loads(rows[i]).get("id") for i in (0, 2, 4, 5)]
    assert [written[i].get("id") for i in (0, 2, 4, 5)] == ids  # realigned: input order


# --- 3. finetune: refusals write nothing ---------------------------------------------------

def test_finetune_into_an_existing_run_changes_nothing(trained, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained["run"], run)
    message = refused(capsys, ["finetune", trained["export"], "tnews", "--data-root", DEMO_DATA,
                               "--output", run, "--lr", "0.5"], run)
    assert message == (f"--output {run}: already holds a run (experiment.yaml); a fine-tune "
                       "starts fresh: give --output a new folder")
    assert "--resume" not in message


def test_finetune_into_a_run_being_trained_is_refused(trained, tmp_path, capsys):
    from mtl_framework.rundir.lock import RunLock

    busy = tmp_path / "busy"
    busy.mkdir()
    lock = RunLock(str(busy))
    try:
        message = refused(capsys, ["finetune", trained["export"], "tnews", "--data-root",
                                   DEMO_DATA, "--output", busy], busy)
    finally:
        lock.release()
    assert message == (f"--output {busy}: `mtl train` (pid {os.getpid()}) is writing it: give "
                       "--output a new folder")


def test_finetune_from_a_folder_without_vocab_or_with_cut_weights(trained, tmp_path, capsys):
    novocab = tmp_path / "novocab"
    shutil.copytree(trained["export"], novocab)
    (novocab / "vocab.txt").unlink()
    out = tmp_path / "ft"
    message = refused(capsys, ["finetune", novocab, "tnews", "--data-root", DEMO_DATA,
                               "--output", out])
    assert message.startswith(f"{novocab / 'vocab.txt'}: not found")
    cut = tmp_path / "cut"
    shutil.copytree(trained["export"], cut)
    weights = cut / "model.weights.h5"
    weights.write_bytes(weights.read_bytes()[:3000])
    message = refused(capsys, ["finetune", cut, "tnews", "--data-root", DEMO_DATA, "--output", out,
                               "--steps", "1"])
    assert message.startswith(f"{cut}: its keras weights cannot be read")
    assert not out.exists()
    message = refused(capsys, ["finetune", trained["export"], "tnews", "--output", out,
                               "--data-root", tmp_path / "nowhere"])
    assert message == f"--data-root {tmp_path / 'nowhere'}: no such folder"
    assert not out.exists()


# --- 4. the cached vocab is checked like the feature arrays -----------------------------

def test_a_cut_cached_vocab_is_rebuilt_with_a_warning(tmp_path, capsys):
    from mtl_framework.config.registry import load_registry
    from mtl_framework.prepare.pipeline import cached_vocab

    tasks = load_registry().select(["tnews"])
    path = cached_vocab(tasks, str(DEMO_DATA), 300, str(tmp_path), workers=None)
    whole = path.read_bytes()
    assert len(whole.splitlines()) == 300
    path.write_bytes(b"".join(whole.splitlines(True)[:50]))  # cut to 50 lines
    capsys.readouterr()
    assert cached_vocab(tasks, str(DEMO_DATA), 300, str(tmp_path)) == path
    err = capsys.readouterr().err
    assert f"{path.parent}: vocab.txt (50 lines) is not the vocab meta.json describes (300 " \
           "tokens): cut or changed; rebuilding it" in err
    assert path.read_bytes() == whole
    (path.parent / "meta.json").unlink()  # a folder from before meta.json, or a killed build
    assert cached_vocab(tasks, str(DEMO_DATA), 300, str(tmp_path)) == path
    assert "no meta.json" in capsys.readouterr().err and path.read_bytes() == whole


def test_a_vocab_that_is_not_utf8_is_one_line(tmp_path, capsys):
    vocab = write(tmp_path / "vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
    with open(vocab, "ab") as f:
        f.write(b"\xff\xfe\n")
    path = experiment(tmp_path, vocab=str(vocab))
    message = refused(capsys, ["train", path, "--output", tmp_path / "run"])
    assert f"{vocab}:6: not UTF-8" in message
    assert not (tmp_path / "run").exists()


# --- 5. evaluate: no score without gold ------------------------------------------------

def test_evaluate_unlabelled_ner_has_no_score(trained, tmp_path, capsys):
    data = tmp_path / "data"
    shutil.copytree(DEMO_DATA / "cluener", data / "cluener")
    shutil.copytree(DEMO_DATA / "tnews", data / "tnews")
    texts = [json.loads(line)["text"] for line in demo_lines("cluener", "dev", 20)]
    write(data / "cluener" / "test.json",
          "".join(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n"
                  for i, t in enumerate(texts)))
    run = trained["run"]
    capsys.readouterr()
    assert cli.main(["evaluate", str(run), "--split", "test", "--tasks", "cluener",
                     "--data-root", str(data), "--json"]) == 0
    entry = json.loads(capsys.readouterr().out)["tasks"]["cluener"]
    assert entry["score"] is None and entry["note"] == "no gold spans in this split (unlabelled?)"


def test_evaluate_a_split_no_task_has_is_refused(trained, capsys):
    run = trained["run"]
    before = snapshot(run)
    message = refused(capsys, ["evaluate", run, "--split", "bogus"], run)
    assert message.startswith("--split bogus: none of the run's tasks has it")
    assert snapshot(run) == before


# --- 8. what used to be a traceback ---------------------------------------------------

def test_a_train_split_without_usable_rows_names_its_rows(tmp_path, capsys):
    data = tmp_path / "data"
    write(data / "tnews" / "train.json", '{"sentence": 1}\nnot json\n')
    path = experiment(tmp_path, data_root=str(data), cache_dir=str(tmp_path / "cache"))
    message = refused_late(capsys, ["train", path, "--output", tmp_path / "run"])
    assert "task 'tnews' has no usable train rows (0 examples read; skipped 2:" in message
    assert f"{data / 'tnews' / 'train.json'}:2" in message
    assert not (tmp_path / "run").exists()


def test_cache_dir_that_is_a_file(tmp_path, capsys, monkeypatch):
    write(tmp_path / "afile", "x")
    monkeypatch.setenv("MTL_CACHE_DIR", str(tmp_path / "afile"))
    path = experiment(tmp_path)
    message = refused_late(capsys, ["train", path, "--output", tmp_path / "run"])
    assert message.startswith(f"{tmp_path / 'afile'}/") and "MTL_CACHE_DIR" in message
    assert not (tmp_path / "run").exists()


def test_resume_after_the_train_data_changed(trained, tmp_path, capsys):
    data = tmp_path / "data"
    for task in TASKS:
        shutil.copytree(DEMO_DATA / task, data / task)
    (data / "tnews" / "train.json").write_text(
        "\n".join(demo_lines("tnews", "train", 100)) + "\n", encoding="utf-8")
    run = tmp_path / "run"
    shutil.copytree(trained["run"], run)
    changed = experiment(tmp_path, "more.yaml", tasks=TASKS, steps=4, checkpoint_every=1,
                         cache_dir=str(trained["folder"] / "cache"))
    message = refused_late(capsys, ["train", changed, "--output", run, "--resume", "--data-root", data],
                      run)
    assert "cannot resume task 'tnews': the saved stream had rows=" in message
    assert message.endswith("restore the data the run trained on, or train into a new --output")


def test_disk_full_when_the_run_files_are_written(tmp_path, capsys, monkeypatch):
    from test_faults_round4_cli import full_disk_under  # (it imports this module)

    # the vocab's write stops half-way with ENOSPC, as on a full disk
    full_disk_under(monkeypatch, tmp_path / "run", "vocab.txt")
    path = experiment(tmp_path, cache_dir=str(tmp_path / "cache"))
    message = refused_late(capsys, ["train", path, "--output", tmp_path / "run"])
    assert "cannot write the run's files (No space left on device)" in message
    assert not (tmp_path / "run" / "vocab.txt").exists()  # no cut vocab left in the run
    assert [p.name for p in (tmp_path / "run").iterdir() if p.name.startswith("vocab")] == []


def test_unwritable_outputs_of_other_commands(trained, tmp_path, capsys):
    text = write(tmp_path / "t.txt", "今天天气不错\n")
    assert refused(capsys, ["vocab", "build", "--text", text, "--output",
                            tmp_path / "no" / "v.txt"]).endswith("does not exist: create it first")
    assert "is a folder" in refused(capsys, ["vocab", "build", "--text", text, "--output", tmp_path])
    write(tmp_path / "afile", "x")
    run = trained["run"]
    assert "exists and is not a folder" in refused(capsys, ["report", run, "--output",
                                                            tmp_path / "afile"], run)
    assert "exists and is not a folder" in refused(capsys, [
        "benchmark", trained["export"], "--suite", Path(__file__).parents[1] / "suites" /
        "clue_small.yaml", "--data-root", DEMO_DATA, "--output", tmp_path / "afile"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "t.txt"]


def test_folders_where_the_run_keeps_files(trained, tmp_path, capsys):
    """A folder named metrics.jsonl in a run resumed for more updates: one line, nothing
    written (the run's lock is the directory itself: no train.lock file is made; a resume
    with nothing to do reads no record file)."""
    name = "metrics.jsonl"
    run = tmp_path / name.replace(".", "_")
    shutil.copytree(trained["run"], run)
    (run / name).unlink()
    (run / name).mkdir()
    message = refused_late(capsys, ["train", trained["experiment"], "--output", run,
                                    "--resume", "--set", "steps=3"], run)
    assert message.startswith(f"{run / name}: ")


def test_finetune_eval_split_and_predict_with_cut_heads(trained, tmp_path, capsys):
    out = tmp_path / "ft"
    message = refused(capsys, ["finetune", trained["export"], "tnews", "--data-root", DEMO_DATA,
                               "--output", out, "--eval-split", "bogus"])
    assert message.startswith("--eval-split bogus: task 'tnews' has no such split; its splits: "
                              "train, dev")
    assert not out.exists()
    cut = tmp_path / "cut"
    shutil.copytree(trained["export"], cut)
    (cut / "heads.weights.npz").write_bytes((cut / "heads.weights.npz").read_bytes()[:100])
    five = write(tmp_path / "in.json", "\n".join(demo_lines("tnews", "dev", 5)) + "\n")
    message = refused(capsys, ["predict", cut, "--task", "tnews", "--input", five, "--output",
                               tmp_path / "o.jsonl", "--data-root", DEMO_DATA], cut)
    assert message.startswith(f"{cut}: its heads cannot be read")
    assert not (tmp_path / "o.jsonl").exists()


# --- 10. messages -------------------------------------------------------------------------

def test_vocab_build_from_no_text_keeps_the_vocab(tmp_path, capsys):
    vocab = write(tmp_path / "vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n好\n")
    empty = write(tmp_path / "empty.txt", "\n\n")
    message = refused(capsys, ["vocab", "build", "--text", empty, "--output", vocab,
                                "--force"], tmp_path)
    assert message.startswith(f"--text {empty}: no text to build a vocab from")


def test_tasks_validate_max_length_and_builtin_names(tmp_path, capsys):
    spec = write(tmp_path / "specs" / "x.yaml", (
        "dataset: mytnews\nformat: jsonl\nfiles:\n  train: tnews/train.json\n"
        "fields: {text: sentence, label: label_desc}\ntasks:\n  - name: tnews\n"
        "    type: classification\n    labels: [a, b]\n    max_length: 3\n    metric: accuracy\n"))
    capsys.readouterr()
    assert cli.main(["tasks", "validate", str(spec)]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.splitlines() == [f"error: {spec}:10: task 'tnews': max_length must be a whole "
                                    "number >= 4 ([CLS] text [SEP] takes 3), got 3"]
    spec.write_text(spec.read_text().replace("max_length: 3", "max_length: 32"))
    message = refused(capsys, ["tasks", "validate", spec])
    assert message.startswith(f"{spec}:7: task name 'tnews' is also a built-in name (")


@pytest.mark.parametrize("value", ["0", "-5"])
def test_data_stats_max_length_is_a_usage_error(value, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["data", "stats", "tnews", "--vocab", "v.txt", "--max-length", value])
    assert stop.value.code == 2
    assert f"argument --max-length: must be >= 4, got {value}" in capsys.readouterr().err


def test_filtered_entities_keep_their_place(tmp_path):
    from data_adapters import ReadReport, read_files

    path = write(tmp_path / "ner.json", json.dumps(
        {"text": "张三在北京", "label": {"name": {"张三": [[0, 1]]}, "address": {"北京": [[3, 4]]}}},
        ensure_ascii=False) + "\n")
    report = ReadReport()
    list(read_files("span_json", [path], {"style": "cluener", "end_inclusive": True},
                    {"text": "text", "entities": "label"}, "extraction_ner", ["name"], report))
    reason = "entity type 'address' is not in the task's labels"
    assert report.as_dict()["filtered"] == {reason: 1}
    assert report.as_dict()["filtered_places"] == {reason: [f"{path}:1"]}
