"""User mistakes replayed through the CLI (issue 12): each ends in exit code 2 and one
`error: file:line: message` line on stderr, no traceback, and a run directory whose
bytes are exactly what they were before the refused command (or no directory at all).

One tiny run is trained for the module (2 updates); every refusal after it is checked
before TensorFlow work, so each takes well under a second.
"""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mtl_framework import cli

REPO = Path(__file__).resolve().parents[1]
DEMO_DATA = REPO / "experiments" / "demo" / "data"
BASE = dict(
    data_root=str(DEMO_DATA),
    backbone=dict(num_layers=1, hidden_size=32, num_heads=2, vocab_size=500),
    tasks=["tnews"], tasks_per_update=2, batch_size=4, max_length=32, steps=2,
    checkpoint_every=1, keep_checkpoints=2)


def write(path, text_or_dict):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = text_or_dict if isinstance(text_or_dict, str) else \
        yaml.safe_dump(text_or_dict, sort_keys=False, allow_unicode=True)
    path.write_text(text, encoding="utf-8")
    return path


def experiment(folder, name="x.yaml", **changes):
    """The base experiment with `changes` (a value None drops the key), as a file."""
    data = {**BASE, **changes}
    return write(Path(folder) / name, {k: v for k, v in data.items() if v is not None})


def line_of(path, key):
    """1-based line of the first line of `path` that starts with `key` (an independent
    look at the file, not through the loader under test)."""
    for number, text in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if text.lstrip("- ").startswith(key):
            return number
    raise AssertionError(f"{key} not in {path}")


def snapshot(folder):
    """{relative path: sha256} of every file under `folder` (plus its folders), or None."""
    folder = Path(folder)
    if not folder.exists():
        return None
    out = {}
    for path in sorted(folder.rglob("*")):
        relative = str(path.relative_to(folder))
        out[relative] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
    return out


def refused(capsys, argv, run_dir=None, late=False):
    """Run `mtl ARGV` in-process; assert exit 2, one error line, no traceback, and
    `run_dir` unchanged byte for byte. Returns the message. `late`: a refusal that comes
    after progress bars (on stderr, as they should be): its `error:` line is the last."""
    before = snapshot(run_dir) if run_dir else None
    capsys.readouterr()
    code = cli.main([str(a) for a in argv])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert code == 2 and "Traceback" not in err, err
    assert len(errors) == 1 and lines[-1] == errors[0], err
    assert late or len(lines) == 1, err
    if run_dir:
        assert snapshot(run_dir) == before
    return errors[0][len("error: "):]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A real run directory with checkpoints (2 updates of a 1-layer model) and its experiment."""
    folder = tmp_path_factory.mktemp("trained")
    path = experiment(folder, "base.yaml", cache_dir=str(folder / "cache"))
    run = folder / "run"
    assert cli.main(["train", str(path), "--output", str(run)]) == 0
    assert sorted(os.listdir(run / "checkpoints")) == ["step-00000001", "step-00000002"]
    return path, run


# --- 1. check before writing: a refused command leaves the run directory as it was ----

def test_resume_with_changed_batch_size_is_refused_before_writing(trained, tmp_path, capsys):
    base, run = trained
    changed = experiment(tmp_path, batch_size=8, cache_dir=str(base.parent / "cache"))
    message = refused(capsys, ["train", changed, "--output", run, "--resume"], run)
    assert message.startswith(f"{changed}:{line_of(changed, 'batch_size')}: batch_size is 8, "
                              "the run's is 4")
    assert f"{run / 'experiment.yaml'}:{line_of(run / 'experiment.yaml', 'batch_size')}" in message
    # the run's record is intact: its own experiment still resumes (nothing left to do)
    assert yaml.safe_load((run / "experiment.yaml").read_text())["batch_size"] == 4


def test_resume_with_changed_tasks_is_refused(trained, tmp_path, capsys):
    base, run = trained
    changed = experiment(tmp_path, tasks=["tnews", "afqmc"], cache_dir=str(base.parent / "cache"))
    message = refused(capsys, ["train", changed, "--output", run, "--resume"], run)
    assert message.startswith(f"{changed}:{line_of(changed, 'tasks')}: tasks differ")
    assert "['afqmc']" in message


def test_other_experiment_into_an_existing_run_is_refused(trained, tmp_path, capsys):
    _, run = trained
    other = experiment(tmp_path, tasks=["afqmc"], steps=5)
    message = refused(capsys, ["train", other, "--output", run], run)
    assert message == (f"{run}: already holds checkpoints (step-00000002): pass --resume to "
                       "continue that run, or --output a new directory")


def test_same_experiment_without_resume_is_refused_too(trained, capsys):
    base, run = trained
    assert "already holds checkpoints" in refused(capsys, ["train", base, "--output", run], run)


# --- 2. one line per user error, nothing created -----------------------------------------

def assert_nothing_written(capsys, argv, run_dir):
    message = refused(capsys, argv + ["--output", run_dir])
    assert not Path(run_dir).exists()
    return message


def test_unknown_task_names_its_line(tmp_path, capsys):
    path = experiment(tmp_path, tasks=["tnews", "tnewz"])
    message = assert_nothing_written(capsys, ["train", path], tmp_path / "run")
    assert message.startswith(f"{path}:{line_of(path, 'tnewz')}: unknown task or dataset "
                              "'tnewz' (did you mean 'tnews'?)")


def test_missing_data_file_names_the_spec_and_the_flag(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    path = experiment(tmp_path, data_root=str(empty))
    message = assert_nothing_written(capsys, ["train", path], tmp_path / "run")
    spec = REPO / "task_specs" / "tnews.yaml"
    assert message.startswith(f"{spec}:{line_of(spec, 'name: tnews')}: train file of task "
                              f"'tnews' not found: {empty / 'tnews' / 'train.json'}")
    assert "--data-root DIR" in message


def test_data_root_flag_exists_and_wins(tmp_path, capsys):
    path = experiment(tmp_path, data_root=str(tmp_path / "nowhere"))
    message = assert_nothing_written(capsys, ["train", path, "--data-root", tmp_path / "gone"],
                                     tmp_path / "run")
    assert message.startswith(f"--data-root {tmp_path / 'gone'}: no such folder")
    message = assert_nothing_written(capsys, ["train", path], tmp_path / "run")
    assert message.startswith(f"{path}:{line_of(path, 'data_root')}: data_root "
                              f"{tmp_path / 'nowhere'}: no such folder")


def test_missing_label_file_names_the_spec(tmp_path, capsys):
    specs = tmp_path / "specs"
    spec = write(specs / "mytnews.yaml", (
        "dataset: mytnews\nformat: jsonl\nfiles:\n  train: tnews/train.json\n"
        "fields: {text: sentence, label: label_desc}\ntasks:\n  - name: mytnews\n"
        "    type: classification\n    label_file: mylabels.txt\n    max_length: 32\n"
        "    metric: accuracy\n"))
    path = experiment(tmp_path, tasks=["mytnews"], task_specs=[str(specs)])
    message = assert_nothing_written(capsys, ["train", path], tmp_path / "run")
    assert message.startswith(f"{spec}:{line_of(spec, 'name: mytnews')}: label file "
                              "'mylabels.txt' of task 'mytnews' not found")


@pytest.mark.parametrize("changes, key, text", [
    (dict(optimizer={"name": "adamw", "lr": "fast"}), "lr", "optimizer.lr must be a number >= 0, got 'fast'"),
    (dict(backbone=dict(num_layers=1, hidden_size=30, num_heads=4)), "num_heads",
     "backbone: hidden_size 30 is not divisible by num_heads 4"),
    (dict(keep_checkpoints=-1), "keep_checkpoints", "keep_checkpoints must be >= 1, got -1"),
    (dict(keep_checkpoints=0), "keep_checkpoints", "keep_checkpoints must be >= 1, got 0"),
    (dict(batch_size=0), "batch_size", "batch_size must be >= 1, got 0"),
    (dict(sampling={"method": "temperature", "temperature": 0}), "temperature",
     "sampling.temperature must be a number > 0, got 0"),
    (dict(tasks=[{"name": "tnews", "rate": 1.5}]), "rate",
     "task 'tnews': rate must be a number in (0, 1], got 1.5"),
    (dict(optimizer={"name": "sgd", "beta_1": 0.9}), "beta_1", "optimizer sgd has no setting 'beta_1'"),
    (dict(backbone=dict(num_layers=1, hidden_size=32, num_heads=2, dropout=1.5)), "dropout",
     "backbone.dropout must be a number in [0, 1), got 1.5"),
])
def test_impossible_values_are_refused_with_their_line(tmp_path, capsys, changes, key, text):
    path = experiment(tmp_path, **changes)
    message = assert_nothing_written(capsys, ["train", path], tmp_path / "run")
    assert message.startswith(f"{path}:{line_of(path, key + ':')}: {text}")


def test_duplicate_key_in_an_experiment_names_both_lines(tmp_path, capsys):
    path = write(tmp_path / "dup.yaml", experiment(tmp_path).read_text() + "steps: 3\n")
    first, second = [i for i, t in enumerate(path.read_text().splitlines(), 1) if t.startswith("steps:")]
    message = assert_nothing_written(capsys, ["train", path], tmp_path / "run")
    assert message == f"{path}:{second}: key 'steps' given twice (also on line {first}); keep one"


def test_duplicate_key_in_a_task_spec_names_its_line(tmp_path, capsys):
    spec = write(tmp_path / "specs" / "dup.yaml", (
        "dataset: duptnews\nformat: jsonl\nfiles:\n  train: tnews/train.json\n"
        "fields: {text: sentence, label: label_desc}\ntasks:\n  - name: duptnews\n"
        "    type: classification\n    labels: [a, b]\n    max_length: 32\n"
        "    max_length: 64\n    metric: accuracy\n"))
    path = experiment(tmp_path, tasks=["duptnews"], task_specs=[str(tmp_path / "specs")])
    message = assert_nothing_written(capsys, ["train", path], tmp_path / "run")
    assert message == f"{spec}:11: key 'max_length' given twice (also on line 10); keep one"


def test_missing_experiment_file_and_non_run_directories(tmp_path, capsys):
    assert refused(capsys, ["train", tmp_path / "nope.yaml"]) == f"{tmp_path / 'nope.yaml'}: no such file"
    assert refused(capsys, ["evaluate", tmp_path]).startswith(f"{tmp_path}: no experiment.yaml")
    # one opening of a run (assemble.open_run) for evaluate, predict and export: one message
    assert refused(capsys, ["export", tmp_path, "--format", "keras", "--output", tmp_path / "out"]) \
        .startswith(f"{tmp_path}: no experiment.yaml")
    assert not (tmp_path / "out").exists()
    assert refused(capsys, ["report", tmp_path]).startswith(f"{tmp_path / 'metrics.jsonl'}: not found")
    assert refused(capsys, ["vocab", "build", "--text", tmp_path / "no.txt", "--output",
                            tmp_path / "v.txt"]) == f"{tmp_path / 'no.txt'}: no such file (--text)"
    assert sorted(os.listdir(tmp_path)) == []  # nothing written by any of them


def test_evaluate_unknown_task_of_a_run(trained, capsys):
    _, run = trained
    message = refused(capsys, ["evaluate", run, "--tasks", "afqmc"], run)
    assert message == f"{run}: the run has no task(s) ['afqmc']; its tasks: tnews"


def test_a_bug_of_ours_keeps_its_traceback(monkeypatch, tmp_path):
    from mtl_framework import plan

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(plan, "plan_run", broken)
    with pytest.raises(ZeroDivisionError):
        cli.main(["train", str(experiment(tmp_path))])


def test_tensorflow_quiet_by_default_and_verbose_on_request(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    monkeypatch.setenv("MTL_VERBOSE", "1")
    cli.main(["train", str(tmp_path / "nope.yaml")])
    assert "TF_CPP_MIN_LOG_LEVEL" not in os.environ
    monkeypatch.delenv("MTL_VERBOSE")
    cli.main(["train", str(tmp_path / "nope.yaml")])
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "2"


def test_error_after_tensorflow_start_is_still_one_line(trained, tmp_path):
    """A fresh process that imports TensorFlow and builds the run, then is refused:
    stderr holds the error line and nothing else (no TF start-up lines, no warnings)."""
    _, run = trained
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "MTL_VERBOSE")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-m", "mtl_framework.cli", "evaluate", str(run),
                           "--tasks", "afqmc"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=600)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"error: {run}: the run has no task(s) ['afqmc']; its "
                                        "tasks: tnews"]


# --- 4. a checkpoint's own vocab, and vocabs that do not fit the embedding table --------

@pytest.fixture(scope="module")
def bert4keras_folder(tmp_path_factory):
    """A tiny released-style bert4keras folder: bert_config.json, bert_model.ckpt.*, vocab.txt
    (a vocab of the demo's TNEWS text, 300 tokens), written by our exporter."""
    from mtl_framework import RoFormerV2Backbone
    from mtl_framework.architectures.roformer_v2.bert4keras import save_bert4keras
    from mtl_framework.tokenizer import build_vocab, count_units, write_vocab

    folder = tmp_path_factory.mktemp("b4k")
    texts = [json.loads(line)["sentence"] for line in
             (DEMO_DATA / "tnews" / "train.json").read_text(encoding="utf-8").splitlines()]
    write_vocab(build_vocab(count_units(texts[::-1]), max_size=300), folder / "source_vocab.txt")
    backbone = RoFormerV2Backbone(vocab_size=300, num_layers=1, hidden_size=32, num_heads=2)
    backbone.build()
    save_bert4keras(backbone, str(folder / "roformer"), vocab_path=str(folder / "source_vocab.txt"))
    return folder / "roformer"


def test_checkpoint_without_backbone_vocab_trains_with_the_checkpoints_vocab(
        bert4keras_folder, tmp_path, capsys):
    path = experiment(tmp_path, backbone={"checkpoint": str(bert4keras_folder)}, steps=1,
                      cache_dir=str(tmp_path / "cache"))
    assert cli.main(["train", str(path), "--output", str(tmp_path / "run")]) == 0
    assert (tmp_path / "run" / "vocab.txt").read_bytes() == \
        (bert4keras_folder / "vocab.txt").read_bytes()
    state = json.loads((tmp_path / "run" / "checkpoints" / "step-00000001" / "trainer.json").read_text())
    assert state["backbone"]["vocab_size"] == 300


def test_vocab_that_does_not_fit_the_checkpoint_names_both_sizes(
        bert4keras_folder, trained, tmp_path, capsys):
    _, run = trained  # its vocab.txt: built from the demo's TNEWS text with a cap of 500
    size = len((run / "vocab.txt").read_text(encoding="utf-8").splitlines())
    assert size != 300
    path = experiment(tmp_path, backbone={"checkpoint": str(bert4keras_folder),
                                          "vocab": str(run / "vocab.txt")})
    message = assert_nothing_written(capsys, ["train", path], tmp_path / "run")
    assert message == (f"{path}:{line_of(path, 'vocab:')}: the vocab {run / 'vocab.txt'} has "
                       f"{size} tokens but {bert4keras_folder / 'bert_config.json'} has vocab_size "
                       "300 (rows of the embedding table): use the vocab.txt the weights were "
                       "trained with")
    # the checkpoint folder's own vocab.txt replaced by one of another size: same refusal
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    for name in os.listdir(bert4keras_folder):
        (wrong / name).write_bytes((bert4keras_folder / name).read_bytes())
    (wrong / "vocab.txt").write_bytes((run / "vocab.txt").read_bytes())
    path = experiment(tmp_path, "wrong.yaml", backbone={"checkpoint": str(wrong)})
    message = assert_nothing_written(capsys, ["train", path], tmp_path / "run")
    assert f"has {size} tokens but {wrong / 'bert_config.json'} has vocab_size 300" in message


def test_init_export_vocab_size_is_checked(trained, tmp_path, capsys):
    """backbone.init: a keras export's config.json against the vocab (no weights needed to
    refuse, so the export here is its config, vocab and an empty weights file)."""
    _, run = trained
    export = tmp_path / "export"
    write(export / "config.json", json.dumps({"format": "mtl_framework.RoFormerV2Backbone",
                                              "backbone": {"vocab_size": 300, "num_layers": 1,
                                                           "hidden_size": 32, "num_heads": 2}}))
    (export / "model.weights.h5").write_bytes(b"")  # the layout's marker; never read here
    (export / "vocab.txt").write_bytes((run / "vocab.txt").read_bytes())
    size = len((run / "vocab.txt").read_text(encoding="utf-8").splitlines())
    path = experiment(tmp_path, backbone={"init": str(export)})
    message = assert_nothing_written(capsys, ["train", path], tmp_path / "run")
    assert f"has {size} tokens but {export / 'config.json'} has vocab_size 300" in message


def test_init_and_checkpoint_together_are_refused(trained, tmp_path, capsys):
    """backbone.init starts a new run from a model, backbone.checkpoint continues one: both
    at once is refused before anything is read or written."""
    _, run = trained
    path = experiment(tmp_path, backbone={"checkpoint": str(run), "init": str(run)})
    message = assert_nothing_written(capsys, ["train", path], tmp_path / "run")
    assert message == f"{path}:{line_of(path, 'init:')}: backbone has both checkpoint and init: keep one"
