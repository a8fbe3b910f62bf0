"""Issue 44's data, scorer and mixture cases (the fourth round of hostile use), replayed
through the CLI in this process (cli.main, as tests/test_faults.py): each ends in exit 2
and one `error:` line, or comes out right, with what it says checked word for word.

Runs are tiny (tnews or cmrc2018 from the demo data, a regression task of our own over
afqmc pairs; 1-4 updates of a 1-layer model).
"""
import json
import math
import shutil

import pytest
import yaml
from test_faults import DEMO_DATA, experiment, line_of, refused, write

from data_adapters import available_formats
from mtl_framework import cli
from mtl_framework.cli import strict_json
from mtl_framework.families import FAMILIES
from mtl_framework.mixing import mixture
from mtl_framework.prepare import stats as data_stats
from mtl_framework.rundir import RunDir
from mtl_framework.rundir import run_dir as layout
from mtl_framework.scoring.scorers import SCORERS, cmrc2018

SCORES_SPEC = """dataset: scores
format: delimited
files: {train: scores/train.tsv, dev: scores/dev.tsv}
fields: {text: 0, text_b: 1, label: 2}
tasks:
  - name: scores
    type: regression
    max_length: 32
    metric: spearman
"""
BAD_LABELS = {4: "nan", 8: "inf", 12: "1e999"}  # line -> a label no loss can be computed on


def not_json(constant):
    raise AssertionError(f"{constant} is not JSON")


def strict_loads(text):
    """json.loads that fails on NaN / Infinity, as every parser but Python's does."""
    return json.loads(text, parse_constant=not_json)


def metrics(run):
    return [strict_loads(line) for line in (run / layout.METRICS).read_text().splitlines()]


@pytest.fixture(scope="module")
def scores(tmp_path_factory):
    """A regression task over 40 afqmc pairs whose train labels hold nan, inf and 1e999."""
    folder = tmp_path_factory.mktemp("scores")
    lines = (DEMO_DATA / "afqmc" / "train.txt").read_text(encoding="utf-8").splitlines()[:40]
    rows = [f"{a}\t{b}\t{BAD_LABELS.get(number, (number * 7) % 50 / 10)}"
            for number, (a, b) in enumerate((line.split("\t")[:2] for line in lines), 1)]
    write(folder / "data" / "scores" / "train.tsv", "\n".join(rows) + "\n")
    write(folder / "data" / "scores" / "dev.tsv",
          "\n".join(r for n, r in enumerate(rows, 1) if n not in BAD_LABELS) + "\n")
    write(folder / "specs" / "scores.yaml", SCORES_SPEC)
    good = [(n * 7) % 50 / 10 for n in range(1, 41) if n not in BAD_LABELS]
    return {"folder": folder, "train": folder / "data" / "scores" / "train.tsv", "good": good}


def stats_argv(scores, *more):
    folder = scores["folder"]
    return ["data", "stats", "scores", "--specs", str(folder / "specs"), "--data-root",
            str(folder / "data"), "--split", "train", *more]


SKIPPED = {label: f"label {label!r} is not a finite number (regression)"
           for label in BAD_LABELS.values()}


# --- N21: non-finite regression labels are rows skipped at read --------------------------------

def test_non_finite_regression_labels_are_skipped_at_read_and_the_run_ends_with_its_checkpoint(
        scores, capsys):
    folder = scores["folder"]
    path = experiment(folder, "train.yaml", data_root=str(folder / "data"),
                      task_specs=[str(folder / "specs")], tasks=["scores"], steps=3,
                      checkpoint_every=0, cache_dir=str(folder / "cache"))
    run = folder / "run"
    capsys.readouterr()
    assert cli.main(["train", str(path), "--output", str(run)]) == 0
    err = capsys.readouterr().err
    assert "non-finite" not in err and "no checkpoint" not in err, err
    assert RunDir(run).checkpoint_names() == ["step-00000003"]  # the final checkpoint is there
    records = metrics(run)  # strict JSON: no NaN or Infinity anywhere
    assert [r["skipped"] for r in records] == [{"scores": 0}] * 3  # no micro-batch skipped
    assert all(math.isfinite(r["tasks"]["scores"]["loss"]) for r in records)


# --- N01 / N74: data stats counts them, and its JSON is JSON ----------------------------------

def test_data_stats_counts_non_finite_labels_with_their_lines(scores, capsys):
    capsys.readouterr()
    assert cli.main(stats_argv(scores)) == 0
    lines = capsys.readouterr().out.splitlines()
    low, high = min(scores["good"]), max(scores["good"])
    mean = round(sum(scores["good"]) / len(scores["good"]), 4)
    assert lines[1].split() == ["scores", "train", "37", "3", "0", "0", "labels",
                                f"{low:g}..{high:g}", "(mean", f"{mean:g})"]
    assert sorted(line.strip() for line in lines[2:5]) == sorted(
        f"skipped 1: {SKIPPED[label]} (first: {scores['train']}:{number})"
        for number, label in BAD_LABELS.items())


def test_data_stats_json_is_strict_json_with_the_skipped_rows(scores, capsys):
    capsys.readouterr()
    assert cli.main(stats_argv(scores, "--json")) == 0
    [row] = strict_loads(capsys.readouterr().out)
    assert row["examples"] == 37 and row["skipped_total"] == 3
    assert row["skipped"] == {SKIPPED[label]: {"count": 1, "first": [f"{scores['train']}:{number}"]}
                              for number, label in BAD_LABELS.items()}
    good = scores["good"]
    assert row["label_range"] == {"min": min(good), "max": max(good),
                                  "mean": round(sum(good) / len(good), 4)}


def test_any_json_output_writes_a_non_finite_number_as_null_with_the_reason(scores, capsys,
                                                                            monkeypatch):
    """The writer itself: whatever a --json row holds, the output parses as strict JSON."""
    rows = [{"task": "scores", "label_range": {"min": float("-inf"), "max": float("inf"),
                                               "mean": float("nan")}, "lengths": [1.5, math.nan]}]
    monkeypatch.setattr(data_stats, "collect", lambda *args: rows)
    capsys.readouterr()
    assert cli.main(stats_argv(scores, "--json")) == 0
    assert strict_loads(capsys.readouterr().out) == [{
        "task": "scores", "label_range": {"min": None, "min_not_finite": "-inf", "max": None,
                                          "max_not_finite": "inf", "mean": None,
                                          "mean_not_finite": "nan"}, "lengths": [1.5, None]}]
    assert strict_json.dumps([math.inf, {"loss": -math.inf}]) == \
        '[null, {"loss": null, "loss_not_finite": "-inf"}]'


# --- point 4: a run that ends in non-finite micro-batches is no exit 0 -------------------------

def test_a_run_ending_in_non_finite_micro_batches_is_refused_keeping_its_last_good_checkpoint(
        tmp_path, capsys):
    path = experiment(tmp_path, optimizer={"name": "adamw", "lr": 1e30}, steps=4,
                      checkpoint_every=1, keep_checkpoints=5, cache_dir=str(tmp_path / "cache"))
    run = tmp_path / "run"
    capsys.readouterr()
    assert cli.main(["train", str(path), "--output", str(run)]) == 2
    out, err = capsys.readouterr()
    lines = [text for text in err.splitlines() if text.strip()]
    errors = [text for text in lines if text.startswith("error: ")]
    assert "Traceback" not in err and errors == [lines[-1]], err
    records = [json.loads(x) for x in (run / layout.METRICS).read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    first_bad = next(r["step"] for r in records if r["skipped"]["tnews"])
    assert 1 < first_bad <= 4
    in_a_row = records[-1]["skipped"]["tnews"]  # every micro-batch from first_bad on
    assert in_a_row == 2 * (4 - first_bad + 1)
    kept = RunDir(run).checkpoint_names()
    assert kept == [f"step-{step:08d}" for step in range(1, first_bad)]
    assert errors[0] == (
        f"error: {run}: training stopped at update 4: task 'tnews': its last {in_a_row} "
        "micro-batch(es) had a non-finite loss or gradient when training ended; check its "
        "data/labels or lower the learning rate (first skipped in update "
        f"{first_bad}; the newest checkpoint before it is {run / 'checkpoints' / kept[-1]}, no "
        "checkpoint of the non-finite state was written)")
    said = "warning: no checkpoint at step 4: the last micro-batches of tnews were non-finite (skipped)"
    assert out.splitlines().count(said) == 1  # once, not again at the end of the run


# --- N16: a small sampling temperature ---------------------------------------------------------

def test_a_small_temperature_trains_with_rates_computed_in_log_space(tmp_path, capsys):
    path = experiment(tmp_path, tasks=["tnews", "afqmc"], steps=1, checkpoint_every=0,
                      sampling={"method": "temperature", "temperature": 0.01},
                      cache_dir=str(tmp_path / "cache"))
    capsys.readouterr()
    assert cli.main(["train", str(path), "--output", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    sizes = {line.split()[0]: int(line.split()[1].replace(",", "")) for line in out.splitlines()
             if line.split()[:1] in (["tnews"], ["afqmc"]) and line.rstrip().endswith("%")}
    assert sizes["tnews"] > sizes["afqmc"] > 0
    [record] = metrics(tmp_path / "run")
    ratio = (sizes["afqmc"] / sizes["tnews"]) ** 100  # n ** (1/T), normalised
    assert record["rates"]["afqmc"] == pytest.approx(ratio / (1 + ratio), rel=1e-12)
    assert record["rates"]["tnews"] == pytest.approx(1 / (1 + ratio), rel=1e-12)


def test_temperature_rates_are_bit_for_bit_the_plain_form_where_it_fits():
    sizes = {"a": 53_360, "b": 2_000, "c": 7}
    for temperature in (0.5, 1.0, 2.0, 3.7, 0.1):  # ln(53360) / 0.1 = 109: fits a float
        plain = {t: n ** (1 / temperature) for t, n in sizes.items()}
        total = sum(plain.values())
        assert mixture.task_rates(sizes, "temperature", temperature) == \
            {t: w / total for t, w in plain.items()}
    # where the plain form would overflow, the log form is the same mixture
    assert mixture.task_rates({"a": 4, "b": 2}, "temperature", 0.005) == \
        {"a": 1.0, "b": 2.0 ** -200 / (1 + 2.0 ** -200)}
    assert mixture.task_rates({"a": 4, "b": 4, "c": 2}, "temperature", 1e-320) == \
        {"a": 0.5, "b": 0.5, "c": 0.0}  # T near 0: the largest tasks share it all


# --- N11: the same task twice, by its name and its dataset id ----------------------------------

def test_a_task_listed_by_its_name_and_its_dataset_is_refused(tmp_path, capsys):
    path = experiment(tmp_path, tasks=[{"name": "cluewsc", "rate": 0.4},
                                       {"name": "cluewsc2020", "rate": 0.05}, "tnews"])
    run = tmp_path / "run"
    message = refused(capsys, ["train", path, "--output", run])
    assert message == (f"{path}:{line_of(path, 'name: cluewsc2020')}: task 'cluewsc' listed "
                       "twice: tasks[0] 'cluewsc' and tasks[1] 'cluewsc2020' (dataset "
                       "'cluewsc2020') both select it; keep one entry (a dataset id selects all "
                       "its tasks)")
    assert not run.exists()


# --- S01: a scorer that does not fit the task --------------------------------------------------

SCORER_SPECS = """dataset: mine
format: jsonl
files: {train: tnews/train.json}
fields: {text: sentence, label: label_desc}
tasks:
  - name: mine_ner_scorer
    type: classification
    labels: [news_story, news_culture]
    max_length: 32
    metric: accuracy
    scorer: cluener
  - name: mine_rc_scorer
    type: classification
    labels: [news_story, news_culture]
    max_length: 32
    metric: accuracy
    scorer: cmrc2018
"""
SQUAD_SPEC = """dataset: mine_rc
format: squad
files: {train: cmrc2018/train.json}
tasks:
  - name: mine_rc
    type: mrc_span
    max_length: 64
    metric: em_f1
    scorer: webqa
"""


def test_tasks_validate_refuses_a_scorer_that_does_not_fit_the_family_or_format(tmp_path, capsys):
    specs = write(tmp_path / "mine.yaml", SCORER_SPECS)
    squad = write(tmp_path / "mine_rc.yaml", SQUAD_SPEC)
    capsys.readouterr()
    assert cli.main(["tasks", "validate", str(specs), str(squad)]) == 2
    out = capsys.readouterr()
    fix = "drop `scorer:` (the task's `metric:` scores it)"
    assert out.err.splitlines() == [
        f"error: {specs}:11: task 'mine_ner_scorer': scorer 'cluener' scores extraction_ner "
        f"tasks, not classification: {fix}, or name one for classification: cail2018",
        f"error: {specs}:17: task 'mine_rc_scorer': scorer 'cmrc2018' scores mrc_span tasks, "
        f"not classification: {fix}, or name one for classification: cail2018",
        f"error: {squad}:9: task 'mine_rc': scorer 'webqa' reads its gold from multi_passage_qa "
        f"files (its publisher's), not format 'squad': {fix}"]
    assert cli.main(["tasks", "validate"]) == 0  # every built-in scorer fits its task


def test_every_scorer_names_families_and_formats_that_exist():
    for name, module in SCORERS.items():
        assert module.TASK_TYPES and set(module.TASK_TYPES) <= set(FAMILIES), name
        assert module.FORMATS and set(module.FORMATS) <= set(available_formats()), name


# --- S02 / S06: cmrc2018 ids -------------------------------------------------------------------

@pytest.fixture(scope="module")
def reading(tmp_path_factory):
    """A 1-update cmrc2018 run on the demo data, and its dev questions."""
    folder = tmp_path_factory.mktemp("reading")
    path = experiment(folder, "rc.yaml", tasks=["cmrc2018"], tasks_per_update=1, max_length=64,
                      steps=1, checkpoint_every=0, cache_dir=str(folder / "cache"))
    run = folder / "run"
    assert cli.main(["train", str(path), "--output", str(run)]) == 0
    dev = json.loads((DEMO_DATA / "cmrc2018" / "dev.json").read_text(encoding="utf-8"))
    return {"run": run, "dev": dev}


def release_with(tmp_path, dev):
    """A data root holding the demo's cmrc2018 train and this dev set."""
    root = tmp_path / "data"
    (root / "cmrc2018").mkdir(parents=True)
    shutil.copy(DEMO_DATA / "cmrc2018" / "train.json", root / "cmrc2018" / "train.json")
    (root / "cmrc2018" / "dev.json").write_text(json.dumps(dev, ensure_ascii=False), encoding="utf-8")
    return root


def questions_of(dev):
    return [qa for article in dev["data"] for paragraph in article["paragraphs"]
            for qa in paragraph["qas"]]


def evaluate(capsys, run, data_root=None):
    argv = ["evaluate", str(run), "--json"] + (["--data-root", str(data_root)] if data_root else [])
    capsys.readouterr()
    assert cli.main(argv) == 0
    out = capsys.readouterr()
    return strict_loads(out.out)["tasks"]["cmrc2018"], out.err


def test_integer_question_ids_are_scored_as_strings(reading, tmp_path, capsys):
    dev = json.loads(json.dumps(reading["dev"]))
    for number, qa in enumerate(questions_of(dev)):
        qa["id"] = 1000 + number  # one id per question, as numbers
    entry, _ = evaluate(capsys, reading["run"], release_with(tmp_path, dev))
    original, _ = evaluate(capsys, reading["run"])  # the same questions, the release's ids
    assert entry["scorer_result"] == original["scorer_result"]
    assert entry["scorer_result"]["total"] == len(questions_of(dev)) and entry["scorer_result"]["skip"] == 0
    # the scorer alone: a JSON prediction file's keys are strings
    gold = {"data": [{"paragraphs": [{"qas": [{"id": 7, "answers": [{"text": "北京"}]}]}]}]}
    assert cmrc2018.score(gold, {"7": "北京"})["average"] == 1.0


def test_repeated_question_ids_are_named_in_one_warning(reading, tmp_path, capsys):
    dev = json.loads(json.dumps(reading["dev"]))
    qas = questions_of(dev)
    repeats = {0: [1], 4: [5, 6], 8: [9], 10: [11], 12: [13]}  # 5 ids repeated
    for first, others in repeats.items():
        for other in others:
            qas[other]["id"] = qas[first]["id"]
    root = release_with(tmp_path, dev)
    entry, err = evaluate(capsys, reading["run"], root)
    named = ", ".join(f"{qas[first]['id']!r} x{len(others) + 1}"
                      for first, others in list(repeats.items())[:3])
    warnings = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert warnings == [
        f"warning: {root / 'cmrc2018' / 'dev.json'}: 5 question id(s) repeated ({named} and 2 "
        "more): a prediction file holds one answer per id, so each repeat is scored against one "
        "question's prediction; give every question its own id"]
    assert entry["scorer_result"]["total"] == len(qas)  # the publisher counts every question
    _, again = evaluate(capsys, reading["run"], root)
    assert "warning: " not in again  # said once a process, not at every evaluation


# --- N80: a --set path is relative to the working folder, list items too ----------------------

def test_set_paths_are_relative_to_the_working_folder_list_items_too(tmp_path, capsys, monkeypatch):
    path = experiment(tmp_path / "exp", task_specs=["specs"],
                      tasks=["tnews", {"name": "mlm", "corpus": "c.txt"}])
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)

    def printed(*sets):
        capsys.readouterr()
        assert cli.main(["train", str(path), "--print-config", *sets]) == 0
        shown = yaml.safe_load(capsys.readouterr().out)
        return shown["task_specs"], shown["tasks"][1]["corpus"]

    assert printed() == ([str(tmp_path / "exp" / "specs")], str(tmp_path / "exp" / "c.txt"))
    assert printed("--set", "task_specs.0=specs", "--set", "tasks.1.corpus=more.txt") == (
        [str(work / "specs")], str(work / "more.txt"))
    assert printed("--set", "task_specs=[specs]")[0] == [str(work / "specs")]


# --- N20: --print-config and $MTL_PRECISION ------------------------------------------------------

def test_print_config_shows_and_checks_mtl_precision_as_train_does(tmp_path, capsys, monkeypatch):
    path = experiment(tmp_path)
    monkeypatch.setenv("MTL_PRECISION", "mixed_bfloat16")
    capsys.readouterr()
    assert cli.main(["train", str(path), "--print-config"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "#   precision: mixed_bfloat16" in out
    assert out[-1] == "# a new run computes in mixed_bfloat16 (as $MTL_PRECISION says)"
    monkeypatch.setenv("MTL_PRECISION", "bogus")
    said = refused(capsys, ["train", path, "--print-config"])
    assert said == ("MTL_PRECISION='bogus': must be one of float32, mixed_bfloat16, "
                    "mixed_float16, auto; set one of those or unset MTL_PRECISION")
    assert refused(capsys, ["train", path, "--output", tmp_path / "run"]) == said
    assert not (tmp_path / "run").exists()
