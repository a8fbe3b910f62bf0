"""Issue 51's cases of contrastive specs, `mtl data stats` and resuming, replayed through the
CLI: each refusal is exit 2 and one `error:` line naming the key, with the run directory as
it was; what used to train silently wrong (a temperature of inf, CoSENT without scores, no
candidate but the positive, negatives equal to the positive) is refused or counted.

One tiny BERT run on a user's pairs task (2 updates, a checkpoint each) serves the resume
cases; they are refused by the plan, before TensorFlow builds anything.
"""
import json
import shutil
from pathlib import Path

import pytest
import yaml
from test_faults import DEMO_DATA, experiment, line_of, refused

from mtl_framework import cli
from mtl_framework.config import registry
from mtl_framework.families.contrastive import embedding_settings

BERT = dict(architecture="bert", num_layers=1, hidden_size=32, num_heads=2,
            intermediate_size=64, vocab_size=500, max_positions=64)
EMBEDDING = {"hard_negatives": 1, "temperature": 0.05, "query_prefix": "查询：",
             "pooling": "mean", "matryoshka_dims": [16], "normalize": True}
PAIRS = [{"query": f"问题{i}是什么", "pos": [f"答案{i}在这里"], "neg": [f"无关{i}的话"]}
         for i in range(12)]


def pairs_spec(folder, embedding=None, fields=None, task_format="pairs", name="my_pairs",
               max_length=24):
    """A spec folder with one contrastive task on data/my_pairs/train.jsonl."""
    spec = {"dataset": name, "format": task_format, "files": {"train": "my_pairs/train.jsonl"},
            **({"fields": fields} if fields else {}),
            "tasks": [{"name": f"{name}_task", "type": "contrastive", "max_length": max_length,
                       "metric": "retrieval",
                       **({"embedding": embedding} if embedding is not None else {})}]}
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def pairs_data(root, records=PAIRS):
    path = Path(root) / "my_pairs" / "train.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                    encoding="utf-8")
    return path


def pairs_experiment(folder, specs, **changes):
    return experiment(folder, "pairs.yaml", backbone=BERT, data_root=str(Path(folder) / "data"),
                      task_specs=[str(specs)], tasks=["my_pairs_task"],
                      cache_dir=str(Path(folder) / "cache"), **changes)


def spec_line(path, text):
    """1-based line of the first line of `path` holding `text` (read independently)."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return next(number for number, line in enumerate(lines, 1) if text in line)


# --- the spec: refused at validate, before anything is built ------------------------------------

@pytest.mark.parametrize("value, shown", [(".inf", "inf"), (".nan", "nan"), ("0", "0")])
def test_r5_05_a_temperature_that_is_not_finite_and_positive_is_refused(tmp_path, capsys,
                                                                          value, shown):
    specs = pairs_spec(tmp_path / "specs", {"temperature": 1.0})
    specs.write_text(specs.read_text(encoding="utf-8").replace("temperature: 1.0",
                                                               f"temperature: {value}"))
    pairs_data(tmp_path / "data")
    message = refused(capsys, ["train", pairs_experiment(tmp_path, specs.parent),
                               "--output", tmp_path / "run"])
    assert message == (f"{specs}:{spec_line(specs, 'temperature')}: task 'my_pairs_task': "
                       f"embedding.temperature must be a finite number > 0, got {shown}")
    assert not (tmp_path / "run").exists()


def test_r5_07_specs_and_experiments_read_numbers_by_one_rule(tmp_path, capsys):
    """`1e-2` (a string to YAML 1.1) is a number in a spec as in an experiment's `lr: 1e-3`."""
    specs = pairs_spec(tmp_path / "specs", {"temperature": "TEMPERATURE"})
    specs.write_text(specs.read_text(encoding="utf-8").replace("TEMPERATURE", "1e-2")
                     .replace("max_length: 24", "max_length: 24\n  rate: 5e-1"))
    assert yaml.safe_load(specs.read_text())["tasks"][0]["embedding"]["temperature"] == "1e-2"
    assert cli.main(["tasks", "validate", str(specs.parent)]) == 0
    task = registry.load_registry([specs.parent]).tasks["my_pairs_task"]
    assert task.embedding["temperature"] == 0.01 and task.rate == 0.5
    pairs_data(tmp_path / "data")
    path = pairs_experiment(tmp_path, specs.parent, optimizer={"name": "adamw", "lr": "LR"},
                            balancing={"weights": "dwa", "temperature": "BT"})
    path.write_text(path.read_text().replace("LR", "1e-3").replace("BT", "2e-1"))
    assert cli.main(["train", str(path), "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert (printed["optimizer"]["lr"], printed["balancing"]["temperature"]) == (0.001, 0.2)


@pytest.mark.parametrize("fields, task_format, message", [
    (None, "pairs", "embedding.loss cosent learns from each pair's score, and `fields:` maps no "
     "`score`: map it to the score's source key, or use loss: infonce"),
    (None, "squad", "embedding.loss cosent learns from each pair's score, and a question and its "
     "passage have none: use loss: infonce")])
def test_r5_12_cosent_without_scores_is_refused_at_validate(tmp_path, capsys, fields,
                                                             task_format, message):
    specs = pairs_spec(tmp_path / "specs", {"loss": "cosent"}, fields, task_format)
    pairs_data(tmp_path / "data")
    error = refused(capsys, ["train", pairs_experiment(tmp_path, specs.parent),
                             "--output", tmp_path / "run"])
    assert error == f"{specs}:{spec_line(specs, 'loss: cosent')}: task 'my_pairs_task': {message}"
    scored = pairs_spec(tmp_path / "scored", {"loss": "cosent"}, {"score": "label"})
    assert registry.validate_paths([scored]) == []  # a mapped score is what CoSENT learns from


@pytest.mark.parametrize("embedding, task_format", [
    ({"in_batch_negatives": False, "hard_negatives": 0}, "pairs"),
    ({"in_batch_negatives": False}, "squad")])  # hard_negatives 1, but squad gives none
def test_r5_15_a_query_needs_a_candidate_besides_its_positive(tmp_path, capsys, embedding,
                                                              task_format):
    specs = pairs_spec(tmp_path / "specs", embedding, task_format=task_format)
    pairs_data(tmp_path / "data")
    error = refused(capsys, ["train", pairs_experiment(tmp_path, specs.parent),
                             "--output", tmp_path / "run"])
    assert error.startswith(f"{specs}:{spec_line(specs, 'in_batch_negatives')}: task "
                            "'my_pairs_task': embedding.in_batch_negatives: false")
    assert "candidate besides its positive" in error and "keep in_batch_negatives" in error
    # InfoNCE with hard negatives only, on a pairs file that has them, is fine
    kept = pairs_spec(tmp_path / "kept", {"in_batch_negatives": False, "hard_negatives": 1})
    assert registry.validate_paths([kept]) == []


def test_r5_13_a_prefix_that_fills_max_length_is_refused_before_the_run(tmp_path, capsys):
    prefix = "请为这个问题找到最相关的段落并且回答它" * 2  # 38 characters, max_length 24
    specs = pairs_spec(tmp_path / "specs", {"query_prefix": prefix})
    pairs_data(tmp_path / "data")
    error = refused(capsys, ["train", pairs_experiment(tmp_path, specs.parent),
                             "--output", tmp_path / "run"])
    assert error == (f"{specs}:{spec_line(specs, '- name')}: task 'my_pairs_task': "
                     "embedding.query_prefix takes at least 38 tokens, and max_length 24 holds "
                     "22 besides [CLS] and [SEP]: every query would be cut to the prefix alone "
                     "(one vector for any text): shorten the prefix or raise max_length")
    assert not (tmp_path / "run").exists()
    # the experiment's max_length counts too (the task trains at the smaller of the two)
    fits = pairs_spec(tmp_path / "fits", {"passage_prefix": "段落：" * 4})
    assert "passage_prefix takes at least 12 tokens, and max_length 12" in refused(
        capsys, ["train", pairs_experiment(tmp_path, fits.parent, max_length=12),
                 "--output", tmp_path / "run"])


# --- the data: counted, and stats for every example type ----------------------------------------

def test_r5_09_and_r5_08_negatives_equal_to_the_positive_are_dropped_and_counted(tmp_path, capsys):
    specs = pairs_spec(tmp_path / "specs", {"hard_negatives": 2})
    data = pairs_data(tmp_path / "data", [
        {"query": "北京天气", "pos": ["北京晴"], "neg": ["上海雨", "北京晴", "广州热"]},
        {"query": "苹果价格", "pos": "五块", "neg": ["五块"]},
        {"query": "香蕉", "pos": ["黄色", "长的"], "neg": ["长的", "红色"]},
        {"query": "西瓜", "pos": "夏天"}])
    capsys.readouterr()
    assert cli.main(["data", "stats", "my_pairs_task", "cmrc2018_retrieval", "afqmc_sts",
                     "--specs", str(specs.parent), "--split", "train", "--data-root",
                     str(tmp_path / "data"), "--json"]) == 1  # the demo's tasks are not there
    rows = {row["task"]: row for row in json.loads(capsys.readouterr().out)}
    pairs = rows["my_pairs_task"]
    reason = "hard negative equal to a positive of its row (dropped)"
    assert pairs["filtered"] == {reason: 3}
    assert pairs["filtered_places"][reason] == [f"{data}:1", f"{data}:2", f"{data}:3"]
    # 5 pairs (the third row's two positives each a pair), 2 + 0 + 1 + 1 negatives kept
    assert (pairs["examples"], pairs["negatives"], pairs["skipped_total"]) == (5, 4, 0)
    capsys.readouterr()
    assert cli.main(["data", "stats", "cmrc2018_retrieval", "afqmc_sts", "--split", "train",
                     "--data-root", str(DEMO_DATA), "--json"]) == 0
    rows = {row["task"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["cmrc2018_retrieval"]["questions"] == rows["cmrc2018_retrieval"]["examples"] > 0
    assert "label_range" not in rows["cmrc2018_retrieval"]  # a question and its passage: no score
    scores = rows["afqmc_sts"]["label_range"]
    assert (scores["min"], scores["max"]) == (0.0, 1.0) and 0 < scores["mean"] < 1


# --- resuming: the checkpoint's record, not the editable experiment.yaml -----------------------

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("round5_specs")
    specs = pairs_spec(folder / "specs", EMBEDDING)
    pairs_data(folder / "data")
    path = pairs_experiment(folder, specs.parent, optimizer={"name": "adamw", "lr": 0.001},
                            precision="float32")
    run = folder / "run"
    assert cli.main(["train", str(path), "--output", str(run)]) == 0
    return {"folder": folder, "experiment": path, "run": run, "specs": specs}


def copy_run(trained, tmp_path):
    return Path(shutil.copytree(trained["run"], tmp_path / "run"))


def edit_yaml(path, change):
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    change(data)
    Path(path).write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False),
                          encoding="utf-8")


def test_the_checkpoint_records_the_settings_a_resume_must_match(trained):
    record = json.loads((trained["run"] / "checkpoints" / "step-00000002" / "trainer.json")
                        .read_text())["record"]
    assert record["tasks"]["my_pairs_task"]["embedding"] == {
        "loss": "infonce", "temperature": 0.05, "in_batch_negatives": True, "pooling": "mean",
        "normalize": True, "matryoshka_dims": [16], "cached_chunk": 0, "hard_negatives": 1,
        "positive_score": 1.0, "query_prefix": "查询：", "passage_prefix": ""}
    assert record["tasks"]["my_pairs_task"]["max_length"] == 24
    assert (record["experiment"]["optimizer"], record["experiment"]["precision"],
            record["experiment"]["max_length"]) == ({"name": "adamw", "lr": 0.001}, "float32", 32)
    assert "steps" not in record["experiment"]  # a resume may change it


@pytest.mark.parametrize("key, change, shown", [
    ("optimizer.lr", lambda e: e["optimizer"].update(lr=0.01), "0.01, the run's is 0.001"),  # R5-50
    ("max_length", lambda e: e.update(max_length=48), "48, the run's is 32"),  # R5-51
    ("precision", lambda e: e.update(precision="mixed_bfloat16"),
     "'mixed_bfloat16', the run's is 'float32'"),  # R5-51
    ("optimizer.warmup_steps", lambda e: e["optimizer"].update(warmup_steps=5),
     "5, the run's is absent")])  # the learning-rate schedule
def test_r5_50_51_an_edited_run_experiment_yaml_does_not_resume(trained, tmp_path, capsys,
                                                                key, change, shown):
    run = copy_run(trained, tmp_path)
    edit_yaml(run / "experiment.yaml", change)
    error = refused(capsys, ["train", run / "experiment.yaml", "--output", run, "--resume"], run)
    line = line_of(run / "experiment.yaml", key.split(".")[-1])
    assert error.startswith(f"{run / 'experiment.yaml'}:{line}: {key} is {shown} (recorded in "
                            f"{run / 'checkpoints' / 'step-00000002' / 'trainer.json'}, which the "
                            f"run trained with; {run / 'experiment.yaml'}:{line} was edited to ")
    assert error.endswith("): resume with the run's own settings, or --output a new directory")


@pytest.mark.parametrize("key, value", [
    ("temperature", 0.1), ("hard_negatives", 2), ("query_prefix", "问："), ("pooling", "cls"),
    ("matryoshka_dims", [8]), ("normalize", False), ("in_batch_negatives", False),
    ("passage_prefix", "段落：")])
def test_r5_52_changed_contrastive_settings_through_task_specs_do_not_resume(
        trained, tmp_path, capsys, key, value):
    run = copy_run(trained, tmp_path)
    specs = pairs_spec(tmp_path / "specs", {**EMBEDDING, key: value})
    error = refused(capsys, ["train", trained["experiment"], "--output", run, "--resume",
                             "--set", f"task_specs=[{specs.parent}]"], run)
    old = embedding_settings(EMBEDDING)[key]
    assert error == (f"{specs}:{spec_line(specs, '- name')}: task 'my_pairs_task': "
                     f"embedding.{key} is {value!r}, the run trained with {old!r} "
                     f"({run / 'checkpoints' / 'step-00000002' / 'trainer.json'}): resume with "
                     "the run's own task settings, or --output a new directory")


def test_a_changed_task_max_length_through_task_specs_does_not_resume(trained, tmp_path, capsys):
    run = copy_run(trained, tmp_path)
    specs = pairs_spec(tmp_path / "specs", EMBEDDING, max_length=20)
    error = refused(capsys, ["train", trained["experiment"], "--output", run, "--resume",
                             "--set", f"task_specs=[{specs.parent}]"], run)
    assert error == (f"{specs}:{spec_line(specs, '- name')}: task 'my_pairs_task': max_length is "
                     f"20, the run trained with 24 ({run / 'checkpoints' / 'step-00000002'}"
                     "/trainer.json): resume with the run's own task settings, or --output a new "
                     "directory")


def test_the_same_settings_resume_and_an_older_run_resumes_with_a_note(trained, tmp_path, capsys):
    """The record is what the run trained with: the run's experiment.yaml edited, its own
    experiment still resumes (and the file is written back as the run trains)."""
    run = copy_run(trained, tmp_path)
    edit_yaml(run / "experiment.yaml", lambda e: e["optimizer"].update(lr=0.5))
    capsys.readouterr()
    assert cli.main(["train", str(trained["experiment"]), "--output", str(run), "--resume",
                     "--set", "steps=3", "--set", f"task_specs=[{trained['specs'].parent}]"]) == 0
    out = capsys.readouterr()
    assert "records no settings" not in out.out + out.err
    assert (out.out + out.err).count(  # steps may change; the decay it stretches is said
        "note: steps is 3, 2 when the checkpoint was written: the learning rate decays linearly "
        "until `steps` (optimizer.final_lr_fraction 0.0), so from here on it follows the "
        "3-update schedule, not the 2-update one") == 1
    assert yaml.safe_load((run / "experiment.yaml").read_text())["optimizer"]["lr"] == 0.001
    latest = run / "checkpoints" / "step-00000003" / "trainer.json"
    state = json.loads(latest.read_text())
    assert state["record"]["tasks"]["my_pairs_task"]["embedding"]["query_prefix"] == "查询："
    del state["record"]  # as an older version wrote it
    latest.write_text(json.dumps(state))
    edit_yaml(run / "experiment.yaml", lambda e: e["optimizer"].update(lr=0.01))
    assert cli.main(["train", str(run / "experiment.yaml"), "--output", str(run), "--resume",
                     "--set", "steps=4"]) == 0
    out = capsys.readouterr()
    assert (out.out + out.err).count(f"note: {latest} records no settings (written by an older "
                                     "version): the resume was checked against experiment.yaml "
                                     "only") == 1
    assert json.loads((run / "checkpoints" / "step-00000004" / "trainer.json").read_text()
                      )["record"]["experiment"]["optimizer"]["lr"] == 0.01


# --- no candidate besides the positive, by the batch or by the data (R5-P39, P37, P38, P53) ------

def test_p53_a_contrastive_task_on_a_text_format_without_text_b_is_refused_at_validate(
        tmp_path, capsys):
    specs = pairs_spec(tmp_path / "specs", fields={"text": 0, "label": 1}, task_format="delimited")
    assert refused(capsys, ["tasks", "validate", specs]) == (
        f"{specs}:{spec_line(specs, 'fields:')}: task 'my_pairs_task': a contrastive task learns "
        "from pairs, and `fields:` maps no text_b (the positive, beside text: the query): map "
        "text_b to the second text's column or key, or use format: pairs")
    paired = pairs_spec(tmp_path / "paired", fields={"text": 0, "text_b": 1, "label": 2},
                        task_format="delimited")
    assert registry.validate_paths([paired]) == []


def test_p39_a_batch_of_one_without_hard_negatives_is_refused_naming_batch_size(tmp_path, capsys):
    from mtl_framework.plan import plan_run

    specs = pairs_spec(tmp_path / "specs", {"hard_negatives": 0})
    pairs_data(tmp_path / "data")
    path = pairs_experiment(tmp_path, specs.parent, batch_size=1)
    assert refused(capsys, ["train", path, "--output", tmp_path / "run"]) == (
        f"{path}:{line_of(path, 'batch_size')}: batch_size: 1 leaves task 'my_pairs_task' "
        "(in-batch negatives, hard_negatives: 0) no candidate besides a query's positive: its "
        "batch-mates' positives are its negatives (the loss is 0, nothing is learned): give "
        "batch_size >= 2, or embedding.hard_negatives >= 1 with a `pairs` file's negatives")
    assert not (tmp_path / "run").exists()
    drawn = pairs_spec(tmp_path / "drawn", {"hard_negatives": 1})  # PAIRS hold a negative each
    assert plan_run(str(pairs_experiment(tmp_path, drawn.parent, batch_size=1))).tasks


@pytest.mark.parametrize("records, embedding, why", [
    # P37: classification-style rows, each query's positive the same text
    ([{"query": f"问题{i}", "pos": ["花呗"]} for i in range(40)], None,
     "every row has the same positive text (a batch-mate with it is no negative); no row has "
     "a hard negative"),
    # P38: one row repeated
    ([{"query": "花呗怎么还", "pos": ["花呗还款"]}] * 40, None,
     "every row has the same positive text (a batch-mate with it is no negative); no row has "
     "a hard negative"),
    ([{"query": f"问题{i}", "pos": ["花呗"], "neg": [f"无关{i}"]} for i in range(40)],
     {"hard_negatives": 0}, "every row has the same positive text (a batch-mate with it is no "
     "negative); hard_negatives: 0 draws none of the 40 rows' negatives"),
    # each row's own negative is a candidate, in-batch negatives or not: it trains
    (PAIRS, {"in_batch_negatives": False, "hard_negatives": 1}, None)])
def test_p37_p38_rows_with_one_positive_and_no_negative_are_refused_before_the_run(
        tmp_path, capsys, records, embedding, why):
    specs = pairs_spec(tmp_path / "specs", embedding)
    pairs_data(tmp_path / "data", records)
    path = pairs_experiment(tmp_path, specs.parent)
    if why is None:
        assert cli.main(["train", str(path), "--output", str(tmp_path / "run")]) == 0
        return
    assert refused(capsys, ["train", path, "--output", tmp_path / "run"], late=True) == (
        f"{specs}:{spec_line(specs, '- name')}: task 'my_pairs_task': its {len(records)} train "
        f"rows leave a query no candidate besides its positive ({why}): the loss is 0, nothing "
        "is learned: give rows with different positives, or hard negatives (`neg`) with "
        "embedding.hard_negatives >= 1")
    assert not (tmp_path / "run").exists()
