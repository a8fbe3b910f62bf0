"""A run and an export know what they were trained on (issue 44, point 1): every head
records its label names in order, the vocab is recorded by content, and every reader
checks them. Each case is replayed through the CLI on one tiny run of a user's spec
(labels neg, pos, mid) and its `--with-heads` export.

    N64  predict after the spec's labels were reordered: mapped by name, said in one line
    N65  the same from a --with-heads export with --specs
    N66  train --resume with the labels reordered: refused, naming task and position
    N72  vocab.txt replaced by another of the same size: refused by evaluate and --resume
and an older run without the records: it predicts, with one line per thing it cannot check.
"""
import hashlib
import json
import shutil

import pytest
import yaml

from mtl_framework.cli import main as mtl

from conftest import TINY_BACKBONE

LABELS = ["neg", "pos", "mid"]
SHIFTED = ["pos", "mid", "neg"]  # every label at another position
ROWS = [("这部电影太难看了", "neg"), ("服务很好我很满意", "pos"), ("还可以吧一般般", "mid"),
        ("质量很差不推荐", "neg"), ("非常喜欢下次再来", "pos"), ("不好不坏马马虎虎", "mid"),
        ("价格太贵了失望", "neg"), ("物流很快包装精美", "pos"), ("说不上好也说不上坏", "mid"),
        ("完全不值这个价", "neg"), ("推荐大家购买", "pos"), ("普普通通没什么特别", "mid")]
TASK = "tiny_sent"


def write_spec(folder, labels):
    """The user's spec of TASK (delimited text<TAB>label) with `labels` in that order."""
    folder.mkdir(parents=True, exist_ok=True)
    spec = {"dataset": TASK, "format": "delimited",
            "files": {"train": f"{TASK}/train.tsv", "dev": f"{TASK}/train.tsv"},
            "options": {"delimiter": "\t"}, "fields": {"text": 0, "label": 1},
            "tasks": [{"name": TASK, "type": "classification", "labels": labels,
                       "max_length": 32, "metric": "accuracy"}]}
    (folder / f"{TASK}.yaml").write_text(yaml.safe_dump(spec, allow_unicode=True),
                                         encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    base = tmp_path_factory.mktemp("records")
    data = base / "data" / TASK
    data.mkdir(parents=True)
    (data / "train.tsv").write_text("".join(f"{t}\t{label}\n" for t, label in ROWS),
                                    encoding="utf-8")
    specs = write_spec(base / "specs", LABELS)
    experiment = {"name": "records", "data_root": str(base / "data"), "task_specs": [str(specs)],
                  "cache_dir": str(base / "cache"),
                  "backbone": {**TINY_BACKBONE, "num_layers": 1, "vocab_size": 300},
                  "tasks": [TASK], "batch_size": 4, "max_length": 32, "tasks_per_update": 1,
                  "steps": 2, "checkpoint_every": 0, "eval_every": 0, "seed": 0,
                  "optimizer": {"name": "adamw", "lr": 0.003}}
    path = base / "records.yaml"
    path.write_text(json.dumps(experiment), encoding="utf-8")
    run = base / "run"
    assert mtl(["train", str(path), "--output", str(run)]) == 0
    export = base / "export"
    assert mtl(["export", str(run), "--format", "keras", "--with-heads", "--output",
                str(export)]) == 0
    return {"base": base, "run": run, "export": export, "specs": specs, "experiment": path,
            "input": data / "train.tsv"}


def predict(source, output, capsys, *extra):
    """(exit code, JSON lines written, stdout + stderr) of `mtl predict SOURCE`."""
    capsys.readouterr()
    code = mtl(["predict", str(source), "--task", TASK, "--input", str(output.parent / "in.tsv"),
                "--output", str(output), "--force", *map(str, extra)])
    said = capsys.readouterr()
    lines = [json.loads(line)["prediction"] for line in output.read_text().splitlines()] \
        if code == 0 else None
    return code, lines, said.out + said.err


def newest_trainer(run):
    return sorted((run / "checkpoints").glob("step-*"))[-1] / "trainer.json"


def test_a_run_and_its_export_record_labels_in_order_and_the_vocab_by_content(trained):
    trainer = json.loads(newest_trainer(trained["run"]).read_text())
    vocab = (trained["run"] / "vocab.txt").read_bytes()
    record = {"sha256": hashlib.sha256(vocab).hexdigest(), "tokens": len(vocab.splitlines())}
    assert trainer["heads"][TASK]["labels"] == LABELS
    assert trainer["vocab"] == record
    assert "labels" not in trainer["heads"][TASK]["config"]  # head_config is compared on rebuild
    heads = json.loads((trained["export"] / "heads.json").read_text())
    assert heads[TASK]["labels"] == LABELS
    assert json.loads((trained["export"] / "config.json").read_text())["run"]["vocab"] == record
    assert json.loads((trained["export"] / "provenance.json").read_text())["vocab"] == record


@pytest.fixture
def workdir(trained, tmp_path):
    shutil.copy(trained["input"], tmp_path / "in.tsv")
    return tmp_path


def test_n64_predict_maps_reordered_labels_by_name_and_refuses_other_names(trained, workdir,
                                                                          capsys):
    spec = trained["specs"] / f"{TASK}.yaml"
    original = spec.read_text(encoding="utf-8")
    code, before, said = predict(trained["run"], workdir / "a.jsonl", capsys)
    assert code == 0 and "mapped" not in said and "cannot check" not in said
    try:
        write_spec(trained["specs"], SHIFTED)
        code, after, said = predict(trained["run"], workdir / "b.jsonl", capsys)
        assert code == 0
        assert after == before  # the names the head meant, not the spec's new positions
        assert [line for line in said.splitlines() if "mapped by name" in line] == [
            f"labels of {TASK} mapped by name (the spec lists them in another order than "
            f"{newest_trainer(trained['run'])} records)"]
        write_spec(trained["specs"], ["neg", "pos", "other"])
        code, _, said = predict(trained["run"], workdir / "c.jsonl", capsys)
        assert code == 2 and not (workdir / "c.jsonl").exists()
        assert said.strip().count("\n") == 0, said
        assert "label 2 is 'other' in the spec, 'mid' in the trained head" in said
        write_spec(trained["specs"], LABELS + ["extra"])
        code, _, said = predict(trained["run"], workdir / "c.jsonl", capsys)
        assert code == 2 and "the spec lists 4 labels, the trained head 3" in said
    finally:
        spec.write_text(original, encoding="utf-8")


def test_n65_an_export_with_heads_and_specs_maps_by_name_too(trained, workdir, capsys):
    _, from_run, _ = predict(trained["run"], workdir / "run.jsonl", capsys)
    shifted = write_spec(workdir / "shifted_specs", SHIFTED)
    code, from_export, said = predict(trained["export"], workdir / "export.jsonl", capsys,
                                      "--specs", shifted, "--data-root", trained["base"] / "data")
    assert code == 0 and from_export == from_run
    assert f"labels of {TASK} mapped by name" in said and "heads.json" in said
    wrong = write_spec(workdir / "wrong_specs", ["neg", "bad", "mid"])
    code, _, said = predict(trained["export"], workdir / "wrong.jsonl", capsys,
                            "--specs", wrong, "--data-root", trained["base"] / "data")
    assert code == 2 and "label 1 is 'bad' in the spec, 'pos' in the trained head" in said


def test_finetune_from_the_export_continues_its_heads_in_their_recorded_order(trained, workdir):
    from mtl_framework.plan import plan_run

    experiment = json.loads(trained["experiment"].read_text())
    experiment.update(backbone={"init": str(trained["export"])},
                      task_specs=[str(write_spec(workdir / "shifted", SHIFTED))])
    path = workdir / "continue.yaml"
    path.write_text(json.dumps(experiment), encoding="utf-8")
    plan = plan_run(str(path), output=str(workdir / "continued"), resume=False)
    assert plan.tasks[0].labels == LABELS  # the head's own order, which its weights mean
    assert [note for note in plan.notes if "mapped by name" in note]
    experiment["task_specs"] = [str(write_spec(workdir / "other", ["neg", "pos", "new"]))]
    path.write_text(json.dumps(experiment), encoding="utf-8")
    with pytest.raises(Exception, match="label 2 is 'new' in the spec, 'mid' in the trained head"):
        plan_run(str(path), output=str(workdir / "continued"), resume=False)


def test_run_load_evaluates_with_the_recorded_order(trained, capsys):
    from mtl_framework.loop.run import Run

    spec = trained["specs"] / f"{TASK}.yaml"
    original = spec.read_text(encoding="utf-8")
    try:
        write_spec(trained["specs"], SHIFTED)
        said = []
        run = Run.load(str(trained["run"]), log=said.append)
        assert run.tasks[0].labels == LABELS
        assert [line for line in said if "mapped by name" in line]
        write_spec(trained["specs"], ["neg", "pos"])
        with pytest.raises(Exception, match="the spec lists 2 labels, the trained head 3"):
            Run.load(str(trained["run"]), log=None)
    finally:
        spec.write_text(original, encoding="utf-8")


def run_copy(trained, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained["run"], run)
    return run


def files_of(run):
    return {p.relative_to(run): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def test_n66_resume_with_the_labels_reordered_is_refused_and_changes_nothing(trained, tmp_path,
                                                                            capsys):
    run = run_copy(trained, tmp_path)
    before = files_of(run)
    shifted = write_spec(tmp_path / "shifted", SHIFTED)
    capsys.readouterr()
    assert mtl(["train", str(trained["experiment"]), "--output", str(run), "--resume",
                "--set", f"task_specs=[{shifted}]", "--set", "steps=4"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"task {TASK!r}: label 0 is 'pos' in the spec, 'neg' in the trained head" in err
    assert "labels may not" in err
    assert files_of(run) == before


def same_size_vocab(path):
    """The vocab with two ordinary tokens swapped: same size, other ids."""
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[-1], lines[-2] = lines[-2], lines[-1]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_n72_a_same_size_vocab_in_place_of_the_runs_is_refused(trained, tmp_path, capsys):
    run = run_copy(trained, tmp_path)
    same_size_vocab(run / "vocab.txt")
    before = files_of(run)
    capsys.readouterr()
    assert mtl(["evaluate", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "the vocab was replaced" in err, err
    assert "same size" in err
    assert mtl(["train", str(trained["experiment"]), "--output", str(run), "--resume",
                "--set", "steps=4"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "same size" in err and "vocab.txt" in err, err
    assert mtl(["export", str(run), "--format", "keras", "--output", str(tmp_path / "out")]) == 2
    assert "the vocab was replaced" in capsys.readouterr().err
    assert files_of(run) == before and not (tmp_path / "out").exists()
    export = tmp_path / "export"
    shutil.copytree(trained["export"], export)
    same_size_vocab(export / "vocab.txt")
    shutil.copy(trained["input"], tmp_path / "in.tsv")
    code, _, said = predict(export, tmp_path / "out.jsonl", capsys, "--specs", trained["specs"],
                            "--data-root", trained["base"] / "data")
    assert code == 2 and "not the vocab" in said and "config.json" in said


def test_an_older_run_without_the_records_loads_with_one_line_each(trained, tmp_path, capsys):
    run = run_copy(trained, tmp_path)
    shutil.copy(trained["input"], tmp_path / "in.tsv")
    _, expected, _ = predict(trained["run"], tmp_path / "new.jsonl", capsys)
    for trainer_path in (run / "checkpoints").glob("*/trainer.json"):
        trainer = json.loads(trainer_path.read_text())
        del trainer["vocab"]
        for head in trainer["heads"].values():
            head.pop("labels", None)
        trainer_path.write_text(json.dumps(trainer))
    code, lines, said = predict(run, tmp_path / "old.jsonl", capsys)
    assert code == 0 and lines == expected
    assert len([line for line in said.splitlines()
                if "recorded no vocab hash: cannot check the vocab by content" in line]) == 1
    assert len([line for line in said.splitlines()
                if "recorded no label names: cannot check the task specs' labels" in line]) == 1
    assert mtl(["train", str(trained["experiment"]), "--output", str(run), "--resume",
                "--set", "steps=3"]) == 0
    said = capsys.readouterr()
    assert "cannot check the vocab by content" in said.out + said.err
    assert json.loads(newest_trainer(run).read_text())["heads"][TASK]["labels"] == LABELS
