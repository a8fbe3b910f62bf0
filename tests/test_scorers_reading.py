"""Nothing dropped from scoring (issue 31, point 3), and each RC scorer fed from the
task's own examples: what training cannot locate is still gold, every question of the
release is scored and predicted, and the predictions objects built from decoded answers
score as the same answers written in the publisher's format by hand."""
import json
from pathlib import Path

import pytest

from data_adapters import ReadReport, read_task
from mtl_framework.config.registry import load_registry
from mtl_framework.evaluation.predict import PredictModel
from mtl_framework.scoring.scorers import SCORERS, Scoring, publisher_entry, scoring_task

SHARED = Path(__file__).resolve().parents[2] / "shared"
REGISTRY = load_registry()


def examples_of(task_name, root, split="dev"):
    task = REGISTRY.tasks[task_name]
    if not (SHARED / root / next(iter([task.files[split]] if isinstance(task.files[split], str)
                                      else task.files[split]))).is_file():
        pytest.skip(f"../shared/{root} lacks {task_name}'s {split} files")
    report = ReadReport()
    return task, list(read_task(scoring_task(task, split), split, SHARED / root, report)), report


def first_gold(example):
    texts = [a.text for a in example.answers] + list(example.unlocated)
    return {"text": texts[0] if texts else ""}


def test_cmrc2018_dev_scores_every_question_with_all_its_answers():
    task, examples, report = examples_of("cmrc2018", "data")
    gold = json.loads((SHARED / "data/cmrc2018/dev.json").read_text(encoding="utf-8"))
    qas = {q["id"]: q for a in gold["data"] for p in a["paragraphs"] for q in p["qas"]}
    assert [e.id for e in examples] == list(qas) and len(examples) == 3219
    for example in examples:  # the 200 answers no answer_start supports are still gold
        assert sorted([a.text for a in example.answers] + list(example.unlocated)) == \
            sorted(a["text"] for a in qas[example.id]["answers"])
    assert sum(len(e.unlocated) for e in examples) == 200
    assert report.units["scored without a span"] == 3 and report.total_skipped == 0
    # predicting the first gold text everywhere scores 1 (the 3 unlocated questions too)
    entry = publisher_entry(task, "dev", SHARED / "data", examples, [first_gold(e) for e in examples])
    assert entry["result"]["em"] == 1.0 and entry["result"]["total"] == 3219


def test_mtl_predict_reads_every_cmrc2018_question_for_the_clue_file():
    task = REGISTRY.tasks["cmrc2018"]
    path = SHARED / "data/cmrc2018/dev.json"
    if not path.is_file():
        pytest.skip("../shared/data/cmrc2018 is absent")
    examples, _ = PredictModel.read(None, task, [str(path)])
    gold = json.loads(path.read_text(encoding="utf-8"))
    assert [e.id for e in examples] == [q["id"] for a in gold["data"] for p in a["paragraphs"]
                                        for q in p["qas"]]


def test_cjrc_counts_unknown_yes_and_no_questions_in_the_overall():
    task, examples, _ = examples_of("cjrc_span", "real_formats")
    gold = json.loads((SHARED / "real_formats/cail2019_rc/dev_ground_truth.json").read_text(encoding="utf-8"))
    ids = [q["id"] for c in gold["data"] for q in c["paragraphs"][0]["qas"]]
    assert [e.id for e in examples] == ids  # YES / NO questions are examples when scoring
    decoded = [first_gold(e) for e in examples]
    entry = publisher_entry(task, "dev", SHARED / "real_formats", examples, decoded)
    by_hand = [{"id": e.id, "answer": d["text"]} for e, d in zip(examples, decoded)]
    assert entry["result"] == SCORERS["cjrc"].score(gold, by_hand)
    assert entry["result"]["total"] == 102
    yes_no = [e for e in examples if set(e.unlocated) & {"YES", "NO"} and not e.answers]
    assert len(yes_no) == 16  # scored: "YES" predicted for them is right
    assert entry["result"]["em"] > SCORERS["cjrc"].score(
        gold, [{**p, "answer": ""} if p["answer"] in ("YES", "NO") else p for p in by_hand])["em"]


@pytest.mark.parametrize("task_name, split, figure", [
    ("cmrc2017", "dev", "accuracy"), ("cmrc2019", "dev", "qac"),
    ("sogouqa", "train", "final"), ("webqa", "train", "final")])
def test_gold_answers_decoded_score_one(task_name, split, figure):
    root = "real_formats"
    task, examples, _ = examples_of(task_name, root, split)
    if task.type == "cloze":
        decoded = [{"index": e.label, "text": e.choices[e.label]} for e in examples]
    else:
        decoded = [first_gold(e) for e in examples]
    entry = publisher_entry(task, split, SHARED / root, examples, decoded)
    assert entry["figure"] == figure and entry["score"] == 1.0
    # nothing predicted anywhere: 0 (SogouQA used to get 0.62 from per-passage scoring)
    empty = [{"index": -1, "text": ""} if task.type == "cloze" else {"text": ""} for _ in examples]
    assert publisher_entry(task, split, SHARED / root, examples, empty)["score"] == 0.0


@pytest.mark.parametrize("task_name, root, split", [
    ("cmrc2018", "data", "dev"), ("drcd", "data", "dev"), ("cjrc_span", "real_formats", "dev"),
    ("cmrc2017", "real_formats", "dev"), ("cmrc2019", "real_formats", "dev"),
    ("webqa", "real_formats", "train")])
def test_a_partial_evaluation_scores_only_its_examples(task_name, root, split):
    task, examples, _ = examples_of(task_name, root, split)
    part = examples[:5]
    if task.type == "cloze":
        decoded = [{"index": e.label, "text": ""} for e in part]
    else:
        decoded = [first_gold(e) for e in part]
    entry = publisher_entry(task, split, SHARED / root, part, decoded, ids=[e.id for e in part])
    assert entry["score"] > 0.5, entry  # the gold of the five, not of the whole split


def test_scoring_reads_examples_only_for_tasks_with_a_scorer():
    plain = REGISTRY.tasks["cmrc2018"]
    assert scoring_task(plain, "dev").options["unlocated_questions"] == "score"
    assert "unlocated_questions" not in scoring_task(plain, "train").options
    without = type(plain)(**{**plain.__dict__, "scorer": None})
    assert scoring_task(without, "dev") is without
    assert Scoring  # evaluation.Scoring is what evaluate_tasks builds for these tasks
