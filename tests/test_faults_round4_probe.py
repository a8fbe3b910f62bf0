"""Issue 44's own probe (docs/errors.md, "Probe of 40 more cases"): each fast case that
holds or was fixed, replayed as a user meets it: through `cli.main` (exit code, one
`error:` line with its key words, nothing written), or through the Python API.

Refusals come before TensorFlow work; one tiny run and its keras export (2 updates of a
1-layer model, tnews) serve the cases on a run directory.
"""
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_faults import BASE, DEMO_DATA, REPO, experiment, line_of, refused, snapshot, write
from test_faults_commands import refused_late

from mtl_framework import cli
from mtl_framework.config import registry
from mtl_framework.errors import UserError


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("probe")
    path = experiment(folder, "base.yaml", cache_dir=str(folder / "cache"))
    run, export = folder / "run", folder / "export"
    assert cli.main(["train", str(path), "--output", str(run)]) == 0
    assert cli.main(["export", str(run), "--format", "keras", "--with-heads",
                     "--output", str(export)]) == 0
    return {"experiment": path, "run": run, "export": export, "folder": folder}


def train_refused(capsys, tmp_path, path):
    """`mtl train PATH --output NEW`: the message; the output never made."""
    message = refused(capsys, ["train", path, "--output", tmp_path / "run"])
    assert not (tmp_path / "run").exists()
    return message


# --- experiment values and types (Q01-Q09) ---------------------------------------------------

@pytest.mark.parametrize("changes, key, words", [
    ({"steps": True}, "steps", "steps must be an integer, got True"),  # Q01
    ({"steps": 2.0}, "steps", "steps must be an integer, got 2.0"),  # Q02
    ({"tasks": {"tnews": 1}}, "tasks", "tasks must be a list, got {'tnews': 1}"),  # Q03
    ({"optimizer": "adamw"}, "optimizer", "optimizer must be a mapping, got 'adamw'"),  # Q06
    ({"tasks": [{"name": "tnews", "rate": True}]}, "rate",
     "task 'tnews': rate must be a number in (0, 1], got True"),  # Q07
])
def test_q01_q07_values_of_the_wrong_type(tmp_path, capsys, changes, key, words):
    path = experiment(tmp_path, **changes)
    assert train_refused(capsys, tmp_path, path) == f"{path}:{line_of(path, key)}: {words}"


@pytest.mark.parametrize("backbone", ["[1, 2]", ""])  # a list; null
def test_q04_a_backbone_that_is_not_a_mapping_is_one_line(tmp_path, capsys, backbone):
    path = write(tmp_path / "x.yaml", f"data_root: {DEMO_DATA}\nbackbone: {backbone}\n"
                                      "tasks: [tnews]\nsteps: 2\n")
    message = train_refused(capsys, tmp_path, path)  # was two: "needs num_layers" too
    assert message == f"{path}:2: backbone must be a mapping, got {yaml.safe_load(backbone)!r}"


def test_q05_a_task_name_with_a_zero_width_space_is_shown_and_matched(tmp_path, capsys):
    message = train_refused(capsys, tmp_path, experiment(tmp_path, tasks=["tnews\u200b"]))
    assert "unknown task or dataset 'tnews\\u200b' (did you mean 'tnews'?)" in message


def test_q08_q09_extends_a_list_file_or_a_list_of_files(tmp_path, capsys):
    write(tmp_path / "mid.yaml", "- a\n- b\n")
    top = write(tmp_path / "top.yaml", "extends: mid.yaml\nsteps: 2\n")
    assert train_refused(capsys, tmp_path, top) == \
        f"{tmp_path / 'mid.yaml'}:1: an experiment is a mapping of keys (backbone, tasks, ...)"
    both = write(tmp_path / "both.yaml", "extends: [mid.yaml, top.yaml]\nsteps: 2\n")
    assert "extends must be the path of another experiment file (relative to this one), " \
           "got ['mid.yaml', 'top.yaml']" in train_refused(capsys, tmp_path, both)


# --- task specs and label files (Q10-Q19) ----------------------------------------------------

SENTI = """dataset: senti
format: delimited
files: {{train: senti/train.tsv, dev: senti/dev.tsv}}
options: {{delimiter: "\\t"}}
fields: {fields}
tasks:
  - name: {name}
    type: classification
    {labels}
    max_length: 32
    metric: accuracy
"""


def senti(folder, fields="{text: 0, label: 1}", labels="label_file: senti/labels.txt",
          name="senti", label_file="negative\npositive\n"):
    """A spec of our own over 60 chnsenticorp rows (its labels in a label file), and an
    experiment training it; returns (experiment path, spec path, data root)."""
    rows = (DEMO_DATA / "chnsenticorp" / "train.tsv").read_text(encoding="utf-8").splitlines()
    data = folder / "data"
    write(data / "senti" / "train.tsv", "\n".join(rows[:60]) + "\n")
    write(data / "senti" / "dev.tsv", "\n".join(rows[60:90]) + "\n")
    if label_file is not None:
        write(data / "senti" / "labels.txt", label_file)
    spec = write(folder / "specs" / "senti.yaml",
                 SENTI.format(fields=fields, name=name, labels=labels))
    path = experiment(folder, data_root=str(data), task_specs=[str(folder / "specs")],
                      tasks=[name], cache_dir=str(folder / "cache"))
    return path, spec, data


def labels_of(folder):
    task = registry.load_paths([folder / "specs"], data_root=folder / "data").tasks["senti"]
    return task.resolve_labels(folder / "data")


@pytest.mark.parametrize("text", ["negative\n\npositive\n",  # Q10: a blank line between
                                  "negative \npositive\t\r\n"])  # Q11: trailing blanks, CRLF
def test_q10_q11_label_file_blank_lines_and_trailing_blanks_are_read(tmp_path, text):
    senti(tmp_path, label_file=text)
    assert labels_of(tmp_path) == ["negative", "positive"]


def test_q12_an_empty_label_file_is_one_line(tmp_path, capsys):
    path, _, data = senti(tmp_path, label_file="")
    assert train_refused(capsys, tmp_path, path).endswith(
        f"{data / 'senti' / 'labels.txt'} has no labels")


def test_q13_a_label_file_that_is_a_folder_says_so(tmp_path, capsys):
    path, spec, data = senti(tmp_path, label_file=None)
    (data / "senti" / "labels.txt").mkdir()
    message = train_refused(capsys, tmp_path, path)
    assert message.startswith(f"{spec}:7: label file 'senti/labels.txt' of task 'senti' not found")
    assert message.endswith(f"({data / 'senti' / 'labels.txt'} is a folder, not a file of "
                            "labels one a line)")


@pytest.mark.parametrize("fields, words", [
    ("{text: 0, label: 0}", "fields 'text' and 'label' both read 0; give each its own source"),
    ("{text: 0, text_b: 0, label: 1}",  # Q15
     "fields 'text' and 'text_b' both read 0; give each its own source"),
    ("{text: -1, label: 1}", "fields 'text' is column -1: columns count from 0 at the left "
                             "(no index from the end); give an index >= 0"),  # Q16
])
def test_q14_q16_fields_reading_one_source_twice_or_from_the_end(tmp_path, capsys, fields, words):
    path, spec, _ = senti(tmp_path, fields=fields)
    assert refused(capsys, ["tasks", "validate", spec]) == f"{spec}:5: the top level: {words}"
    assert train_refused(capsys, tmp_path, path) == f"{spec}:5: the top level: {words}"


def test_q17_a_column_past_the_row_is_counted_per_row(tmp_path, capsys):
    _, spec, data = senti(tmp_path, fields="{text: 5, label: 1}")
    capsys.readouterr()
    assert cli.main(["data", "stats", "senti", "--specs", str(spec.parent), "--data-root",
                     str(data), "--split", "train"]) == 0
    assert f"skipped 60: missing field 5 (fields.text) (first: {data / 'senti' / 'train.tsv'}:1)" \
        in capsys.readouterr().out


def test_q18_a_classification_with_one_label_is_refused(tmp_path, capsys):
    path, spec, _ = senti(tmp_path, labels="labels: [positive]")
    words = "task 'senti': type classification needs at least 2 labels to choose from, got " \
            "['positive']; list every class"
    assert refused(capsys, ["tasks", "validate", spec]) == f"{spec}:9: {words}"
    assert train_refused(capsys, tmp_path, path) == f"{spec}:9: {words}"


def test_q19_a_task_name_that_leaves_its_folder_is_refused(tmp_path, capsys):
    _, spec, _ = senti(tmp_path, name="../evil", labels="labels: [negative, positive]")
    assert refused(capsys, ["tasks", "validate", spec]) == (
        f"{spec}:7: task '../evil': names may use only letters, digits, '_', '.' and '-' "
        "(they become file names)")


# --- data files (Q20-Q24) ---------------------------------------------------------------------

@pytest.mark.parametrize("content", ["", "\n\n\n\n"])  # Q20: 0 bytes; Q21: blank lines only
def test_q20_q21_a_train_file_without_rows_is_named(tmp_path, capsys, content):
    path, spec, data = senti(tmp_path)
    (data / "senti" / "train.tsv").write_text(content, encoding="utf-8")
    message = refused_late(capsys, ["train", path, "--output", tmp_path / "run"])
    assert message == (f"{spec}:7: task 'senti' has no usable train rows (0 examples read): "
                       f"fix its train file ({data / 'senti' / 'train.tsv'}) or leave the "
                       "task out")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("target", ["train.tsv", "/nonexistent/x.tsv"])  # Q22 loop, Q23
def test_q22_q23_a_train_file_that_is_a_link_to_nowhere_is_one_line(tmp_path, capsys, target):
    path, spec, data = senti(tmp_path)
    link = data / "senti" / "train.tsv"
    link.unlink()
    link.symlink_to(target)
    assert train_refused(capsys, tmp_path, path) == (
        f"{spec}:7: train file of task 'senti' is a symbolic link that leads to no file: "
        f"{link} -> {target} (a missing target or a loop of links); point it at the file, "
        "or put the file there")


def test_q24_a_train_file_linked_to_dev_null_has_no_rows(tmp_path, capsys):
    path, spec, data = senti(tmp_path)
    (data / "senti" / "train.tsv").unlink()
    (data / "senti" / "train.tsv").symlink_to("/dev/null")
    message = refused_late(capsys, ["train", path, "--output", tmp_path / "run"])
    assert message.startswith(f"{spec}:7: task 'senti' has no usable train rows (0 examples")
    assert not (tmp_path / "run").exists()


# --- run directories (Q25, Q26) --------------------------------------------------------------

def copy_run(trained, tmp_path):
    shutil.copytree(trained["run"], tmp_path / "run")
    return tmp_path / "run"


def test_q25_a_file_named_like_a_checkpoint_is_passed_over(trained, tmp_path, capsys):
    run = copy_run(trained, tmp_path)
    (run / "checkpoints" / "step-00000009").write_text("mine", encoding="utf-8")
    before = snapshot(run)
    capsys.readouterr()
    assert cli.main(["export", str(run), "--format", "keras", "--output",
                     str(tmp_path / "out")]) == 0
    assert f"warning: checkpoint {run / 'checkpoints' / 'step-00000009'} cannot be read" \
        in capsys.readouterr().err
    assert snapshot(run) == before  # the user's file stays where it is
    assert '"step": 2' in (tmp_path / "out" / "config.json").read_text(encoding="utf-8")


def test_q26_a_checkpoint_folder_with_files_of_the_users_exports(trained, tmp_path):
    run = copy_run(trained, tmp_path)
    (run / "checkpoints" / "step-00000002" / "notes.txt").write_text("x", encoding="utf-8")
    (run / "checkpoints" / "step-00000002" / "sub").mkdir()
    assert cli.main(["export", str(run), "--format", "keras", "--output",
                     str(tmp_path / "out")]) == 0
    assert '"step": 2' in (tmp_path / "out" / "config.json").read_text(encoding="utf-8")


# --- commands and output paths (Q28-Q32) -----------------------------------------------------

def test_q28_predict_with_both_text_and_input(trained, tmp_path, capsys):
    rows = write(tmp_path / "in.json", '{"sentence": "今天天气很好", "keywords": ""}\n')
    assert refused(capsys, ["predict", trained["run"], "--task", "tnews", "--text", "你好",
                            "--input", rows], trained["run"]) == \
        "mtl predict: give --input FILE or --text TEXT, not both"


def test_q29_output_dash_is_refused_by_every_command(trained, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where a file or folder named `-` would appear
    run, export = trained["run"], trained["export"]
    rows = write(tmp_path / "in.json", '{"sentence": "今天天气很好", "keywords": ""}\n')
    for argv in (["predict", run, "--task", "tnews", "--input", rows, "--output", "-"],
                 ["export", run, "--format", "keras", "--output", "-"],
                 ["report", run, "--output", "-"],
                 ["vocab", "build", "--text", rows, "--output", "-"],
                 ["finetune", export, "tnews", "--data-root", DEMO_DATA, "--output", "-"],
                 ["train", trained["experiment"], "--output", "-"]):
        assert refused(capsys, argv, run).startswith(
            "--output -: mtl writes no file to stdout through `-`: give a path"), argv
    assert sorted(os.listdir(tmp_path)) == ["in.json"]


@pytest.mark.parametrize("link", [os.symlink, os.link])
def test_q30_predict_output_a_link_to_its_input(trained, tmp_path, capsys, link):
    rows = write(tmp_path / "in.json", '{"sentence": "今天天气很好", "keywords": ""}\n')
    link(rows, tmp_path / "out.json")
    before = snapshot(tmp_path)
    assert refused(capsys, ["predict", trained["run"], "--task", "tnews", "--input", rows,
                            "--output", tmp_path / "out.json", "--force"]) == \
        f"--output {tmp_path / 'out.json'}: is the input {rows}: write the predictions to " \
        "another file"
    assert snapshot(tmp_path) == before


def test_q31_an_export_inside_its_run_leaves_the_run_as_it_was(trained, tmp_path):
    """README's own layout (runs/demo/export/keras): the run's files are not touched."""
    run = copy_run(trained, tmp_path)
    before = snapshot(run)
    assert cli.main(["export", str(run), "--format", "keras", "--output",
                     str(run / "export" / "keras")]) == 0
    after = snapshot(run)
    assert {k: v for k, v in after.items() if not k.startswith("export")} == before
    assert cli.main(["evaluate", str(run), "--max-examples", "4"]) == 0  # still the run


def test_q32_finetune_into_the_export_it_reads_is_refused(trained, capsys):
    export = trained["export"]
    message = refused(capsys, ["finetune", export, "tnews", "--data-root", DEMO_DATA,
                               "--output", export / "ft", "--steps", "1"], export)
    assert message.startswith(f"--output {export / 'ft'}: inside {export}, the backbone folder "
                              "being fine-tuned")


# --- Ctrl-C (Q33) -----------------------------------------------------------------------------

def test_q33_ctrl_c_in_vocab_build_writes_no_vocab(tmp_path):
    lines = (DEMO_DATA / "tnews" / "train.json").read_text(encoding="utf-8")
    text = write(tmp_path / "big.txt", lines * 60)  # ~ 8 MB: read for seconds
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get(
        "PYTHONPATH", "")])}
    process = subprocess.Popen(
        [sys.executable, "-m", "mtl_framework", "vocab", "build", "--text", str(text),
         "--output", str(tmp_path / "vocab.txt")], stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, env=env, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    fds = Path(f"/proc/{process.pid}/fd")

    def reading():  # the moment the text is open: the work is under way
        try:
            return any(os.readlink(fd) == str(text) for fd in fds.iterdir())
        except OSError:
            return False

    while not reading():
        assert process.poll() is None, "vocab build ended before it was interrupted"
    os.killpg(process.pid, signal.SIGINT)
    err = process.communicate(timeout=60)[1].decode()
    assert process.returncode == 130 and "Traceback" not in err, err
    assert [line for line in err.splitlines() if line.strip()] == \
        ["interrupted: mtl vocab stopped"]
    assert sorted(os.listdir(tmp_path)) == ["big.txt"]


# --- the Python API (Q35-Q38) ----------------------------------------------------------------

def test_q35_saving_load_an_empty_path_or_a_file(trained):
    from mtl_framework import saving

    with pytest.raises(UserError, match=r"^'' \(an empty path\): give a run directory"):
        saving.load("")
    vocab = trained["run"] / "vocab.txt"
    with pytest.raises(UserError) as error:
        saving.load(vocab)
    assert str(error.value) == f"{vocab}: a file, not a run directory or export folder: give " \
        "the folder that `mtl train` or `mtl export` wrote"


def test_q36_saving_load_a_step_the_run_lacks(trained):
    from mtl_framework import saving

    run = trained["run"]
    with pytest.raises(UserError) as error:
        saving.load(run, checkpoint=99)
    assert str(error.value) == f"{run}: no checkpoint of step 99; its steps: 1, 2 (and best, " \
        "with keep_best)"
    with pytest.raises(UserError, match="give best, latest or a step number"):
        saving.load(run, checkpoint=-1)


def test_q37_run_of_a_dict_is_checked_as_an_experiment(tmp_path):
    from mtl_framework import Run
    from mtl_framework.config.experiment import ExperimentError

    wrong = {**BASE, "steps": "2", "backbone": {**BASE["backbone"], "num_layers": "1"}}
    with pytest.raises(ExperimentError) as error:
        Run(wrong, output=str(tmp_path / "run"))
    assert str(error.value).splitlines() == [
        "Run({...}) steps: steps must be an integer, got '2'",
        "Run({...}) backbone.num_layers: backbone.num_layers must be an integer >= 1, got '1'"]
    with pytest.raises(ExperimentError, match="an experiment is a file path, an Experiment or "
                                              "a dict of its keys, not list"):
        Run([1, 2])
    assert not (tmp_path / "run").exists()


def test_q38_roformer_from_preset_of_a_bert_preset_says_which_it_holds(tmp_path):
    from mtl_framework import RoFormerV2Backbone
    from mtl_framework.architectures.bert.backbone import BertBackbone
    from mtl_framework.formats import keras as preset

    bert = BertBackbone(vocab_size=100, num_layers=1, hidden_size=16, num_heads=2,
                        intermediate_size=32)
    bert.build()
    preset.save(bert, tmp_path / "bert")
    with pytest.raises(ValueError, match=r"holds a bert backbone, not a RoFormerV2Backbone: "
                                         r"load it with mtl_framework.saving.load_backbone"):
        RoFormerV2Backbone.from_preset(tmp_path / "bert")
    with pytest.raises(FileNotFoundError, match="config.json not found: a preset folder is"):
        RoFormerV2Backbone.from_preset(tmp_path / "missing")


# --- environment variables (Q39, Q40) --------------------------------------------------------

def test_q39_an_mtl_cache_dir_that_cannot_be_made(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MTL_CACHE_DIR", "/proc/mtl-cache")  # not even root can make it
    path = experiment(tmp_path)  # no cache_dir: $MTL_CACHE_DIR decides
    message = refused(capsys, ["data", "prepare", path])
    assert message.startswith("/proc/mtl-cache/.vocab: cannot create it (")
    assert message.endswith("$MTL_CACHE_DIR=/proc/mtl-cache): set MTL_CACHE_DIR or cache_dir "
                            "to a folder you can write")


@pytest.mark.parametrize("value", [" float32", "FLOAT32", "mixed_bfloat16 "])
def test_q40_mtl_precision_is_taken_as_written(tmp_path, capsys, monkeypatch, value):
    monkeypatch.setenv("MTL_PRECISION", value)
    assert train_refused(capsys, tmp_path, experiment(tmp_path)) == (
        f"MTL_PRECISION={value!r}: must be one of float32, mixed_bfloat16, mixed_float16, "
        "auto; set one of those or unset MTL_PRECISION")


def test_q40_an_empty_mtl_precision_is_unset(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MTL_PRECISION", "")
    capsys.readouterr()
    assert cli.main(["train", str(experiment(tmp_path)), "--output", str(tmp_path / "run"),
                     "--print-config"]) == 0
    assert "precision: auto" in capsys.readouterr().out
    assert not (tmp_path / "run").exists()


def test_the_spec_helper_writes_what_the_cases_change(tmp_path):
    """The cases above differ from a spec that trains only where they say."""
    _, spec, _ = senti(tmp_path)
    assert yaml.safe_load(spec.read_text(encoding="utf-8"))["fields"] == {"text": 0, "label": 1}
    assert labels_of(tmp_path) == ["negative", "positive"]
