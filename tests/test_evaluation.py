"""Evaluation: oracle predictions score 1 where the features hold the gold, and
what featurizing lost (truncated spans, answers in no window) costs exactly
what an independent count says."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mtl_framework.config.registry import load_registry
from mtl_framework.evaluation import dev as evaluation
from mtl_framework.families import family
from mtl_framework.families import heads as H
from mtl_framework.families.heads import build_head
from mtl_framework.prepare.cache import cached_features
from mtl_framework.rundir import RunDir
from mtl_framework.tokenizer import Tokenizer, build_vocab, count_units, example_texts, write_vocab

from conftest import ONE_LAYER, write_tiny_experiment

ROOT = Path(__file__).resolve().parents[1]
DEMO_DATA = ROOT / "experiments" / "demo" / "data"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from data_adapters import read_task

    registry = load_registry()
    tasks = {t.name: t for t in registry.select(["tnews", "cmrc2018", "cluener"])}
    texts = [text for task in tasks.values() for split in ("train", "dev")
             for example in read_task(task, split, str(DEMO_DATA)) for text in example_texts(example)]
    folder = tmp_path_factory.mktemp("evaluation")
    write_vocab(build_vocab(count_units(texts), max_size=4000), folder / "vocab.txt")
    return tasks, Tokenizer(str(folder / "vocab.txt")), folder / "cache"


class Oracle:
    """Stands in for MultiTaskModel: heads, and outputs that put the gold on top."""

    def __init__(self, heads, family):
        self.heads, self.family = heads, family

    def predictor(self, task, batch):
        if self.family == "classification":
            return np.eye(15)[batch["label"]] * 10.0
        if self.family == "extraction_ner":
            return H._label_scores(batch["entity_labels"], batch["token_ids"].shape[1])
        if self.family == "mrc_span":
            context = batch["context_mask"] > 0
            allowed = context[:, :, None] & context[:, None, :]  # as SpanHead masks
            logits = np.where(allowed, -10.0, H.NEG_INF)
            logits[:, 0, 0] = -10.0
            logits[np.arange(len(logits)), batch["start"], batch["end"]] = 10.0
            return logits


def test_classification_oracle_scores_one_and_unlabelled_rows_are_left_out(setup):
    tasks, tokenizer, cache = setup
    task = tasks["tnews"]
    features = cached_features(task, "dev", tokenizer, str(DEMO_DATA), cache)
    oracle = Oracle({"tnews": build_head("classification", 15, 32)}, "classification")
    entry = evaluation.evaluate_features(oracle, task, features, oracle.predictor, batch_size=16)
    labels = np.asarray(features["label"])
    assert entry["examples"] == int((labels >= 0).sum()) == len(features)
    assert entry["score"] == 1.0 and entry["result"] == {"accuracy": 1.0}
    # Majority baseline on the same references, computed here directly.
    counts = np.bincount(labels)
    assert entry["baseline"] == pytest.approx(counts.max() / len(labels))


def test_ner_truncation_lost_spans_count_as_missed_gold(setup):
    tasks, tokenizer, cache = setup
    task = tasks["cluener"]
    features = cached_features(task, "dev", tokenizer, str(DEMO_DATA), cache, max_length=24)
    report = features.report
    lost = sum(report.spans_lost.values())
    assert lost > 0 and report.spans > 0
    oracle = Oracle({"cluener": build_head("extraction_ner", 10, 32)}, "extraction_ner")
    entry = evaluation.evaluate_features(oracle, task, features, oracle.predictor, batch_size=16)
    precision, recall = 1.0, report.spans / (report.spans + lost)
    assert entry["gold_lost_in_features"] == lost
    assert entry["result"]["precision"] == 1.0
    assert entry["result"]["recall"] == pytest.approx(recall)
    assert entry["score"] == pytest.approx(2 * precision * recall / (precision + recall))


def test_mrc_best_window_maps_back_to_the_gold_text(setup):
    tasks, tokenizer, cache = setup
    task = tasks["cmrc2018"]
    features = cached_features(task, "dev", tokenizer, str(DEMO_DATA), cache, max_length=96)
    oracle = Oracle({"cmrc2018": build_head("mrc_span", None, 32)}, "mrc_span")
    entry = evaluation.evaluate_features(oracle, task, features, oracle.predictor, batch_size=16)
    example_index = np.asarray(features["example_index"])
    questions = len(np.unique(example_index))
    answered = len(np.unique(example_index[np.asarray(features["start"]) > 0]))
    assert entry["examples"] == questions and entry["windows"] == len(features) > questions
    # Every question with its answer inside a window gets it exactly; the rest
    # (answer in no window) get a wrong span from a -10 window.
    assert entry["result"]["em"] == pytest.approx(answered / questions)
    assert answered < questions  # at 96 tokens some answers fall in no single window


def test_max_examples_takes_whole_questions(setup):
    tasks, tokenizer, cache = setup
    features = cached_features(tasks["cmrc2018"], "dev", tokenizer, str(DEMO_DATA), cache,
                               max_length=96)
    rows = evaluation.evaluation_rows(family(features.family), features, 5)
    assert set(np.asarray(features["example_index"])[rows]) == {0, 1, 2, 3, 4}
    assert len(rows) == int((np.asarray(features["example_index"]) < 5).sum())


def test_record_and_read_evaluations(tmp_path):
    results = {"a": {"metric": "accuracy", "score": 0.5}, "b": {"metric": "span_f1", "score": 0.25},
               "c": {"metric": "accuracy", "score": None, "note": "no 'dev' split"}}
    line = evaluation.record(tmp_path, 7, "dev", results)
    assert line["aggregate"] == 0.375
    assert RunDir(tmp_path).read_evaluations() == [json.loads(json.dumps(line))]
    text = evaluation.format_results(line)
    assert "aggregate (mean score over 2 tasks): 0.3750" in text and "c: no 'dev' split" in text
    (tmp_path / "evaluations.jsonl").open("a").write("{broken\n")
    with pytest.raises(ValueError, match=r"evaluations.jsonl:2: not a JSON line"):
        RunDir(tmp_path).read_evaluations()


def test_evaluate_command_names_a_missing_run(tmp_path):
    result = subprocess.run([sys.executable, "-m", "mtl_framework.cli", "evaluate", str(tmp_path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "no experiment.yaml" in result.stderr and str(tmp_path) in result.stderr


def test_eval_every_and_mtl_evaluate_agree_on_the_same_checkpoint(tmp_path, capsys):
    """Scores logged during training at the last step equal those of
    `mtl evaluate` on the reloaded checkpoint (same examples)."""
    from mtl_framework.cli import main

    experiment = write_tiny_experiment(
        tmp_path / "tiny.yaml", tasks=["tnews", "cmrc2018", "cluener"], max_length=64, steps=2,
        checkpoint_every=1, eval_every=1, eval_batches=2, backbone=ONE_LAYER)
    run_dir = tmp_path / "run"
    assert main(["train", str(experiment), "--output", str(run_dir)]) == 0
    lines = RunDir(run_dir).read_evaluations()
    assert [line["step"] for line in lines] == [1, 2]
    assert set(lines[-1]["tasks"]) == {"tnews", "cmrc2018", "cluener"}
    assert all(e["examples"] == 8 for e in lines[-1]["tasks"].values())
    capsys.readouterr()
    assert main(["evaluate", str(run_dir), "--max-examples", "8", "--batch-size", "8", "--json"]) == 0
    reloaded = json.loads(capsys.readouterr().out)
    assert reloaded["step"] == 2
    for name, entry in lines[-1]["tasks"].items():
        assert reloaded["tasks"][name]["result"] == pytest.approx(entry["result"], abs=1e-9), name
    assert len(RunDir(run_dir).read_evaluations()) == 3


def test_mrr_ranks_the_candidates_of_each_question(tmp_path):
    """nlpcc_dbqa-style pairs: candidates grouped by their question, ranked by the head's
    score for the right label; a question without a right candidate or an unlabelled row
    is left out."""
    from types import SimpleNamespace

    from data_adapters.examples import TextExample
    from mtl_framework.families import make_featurizer

    rows = [("北京在哪", "在中国", "0", 3.0), ("北京在哪", "在华北", "1", 2.0),
            ("北京在哪", "很大", "0", 4.0), ("上海呢", "在华东", "1", 0.9),
            ("上海呢", "很多人", "0", 0.7), ("上海呢", "不知道", None, 9.0),
            ("谁写的", "不知道", "0", 1.0), ("谁写的", "很难说", "0", 2.0)]
    write_vocab(build_vocab(count_units([r[0] + r[1] for r in rows])), tmp_path / "vocab.txt")
    tokenizer = Tokenizer(str(tmp_path / "vocab.txt"))
    features = make_featurizer("matching", tokenizer, 32, ["0", "1"]).featurize(
        [TextExample(q, a, label) for q, a, label, _ in rows])
    score = {features.ragged("token_ids", i).tobytes(): r[3] for i, r in enumerate(rows)}

    def predictor(task, batch):
        ids = [row[row > 0].astype(features["token_ids"].dtype).tobytes() for row in batch["token_ids"]]
        return np.array([[0.0, score[i]] for i in ids])

    model = SimpleNamespace(heads={"dbqa": build_head("matching", 2, 32)})
    task = SimpleNamespace(name="dbqa", metric="mrr")
    entry = evaluation.evaluate_features(model, task, features, predictor, batch_size=3,
                                         train_features=features)
    # 北京在哪: the right one ranks 3rd (4.0, 3.0 above 2.0); 上海呢: 1st (0.9 > 0.7)
    assert entry["score"] == pytest.approx((1 / 3 + 1) / 2)
    assert entry["examples"] == 2 and entry["questions_without_answer"] == 1
    # Baseline: positions ranked by how often they were right in train (0 and 1 once each,
    # the earlier first): 北京在哪's right one (position 1) ranks 2nd, 上海呢's (0) 1st.
    assert entry["baseline"] == pytest.approx((1 / 2 + 1) / 2)


def test_publisher_scorer_is_the_score_and_the_generic_metric_stays_beside_it(setup):
    """cmrc2018 (scorer: cmrc2018): the entry's score is the official script's AVERAGE
    over the release's questions, computed here again from the predicted texts."""
    from data_adapters import read_task
    from mtl_framework.families import mrc
    from mtl_framework.scoring.scorers import cmrc2018

    tasks, tokenizer, cache = setup
    task = tasks["cmrc2018"]
    assert task.scorer == "cmrc2018"
    features = cached_features(task, "dev", tokenizer, str(DEMO_DATA), cache, max_length=96)
    oracle = Oracle({"cmrc2018": build_head("mrc_span", None, 32)}, "mrc_span")
    scoring = evaluation.Scoring(task, "dev", str(DEMO_DATA))
    entry = evaluation.evaluate_features(oracle, task, features, oracle.predictor, batch_size=16,
                                         scoring=scoring)
    assert entry["scorer"] == "cmrc2018" and entry["scorer_figure"] == "average"
    assert entry["score"] == entry["scorer_result"]["average"]
    assert entry["metric_score"] == pytest.approx((entry["result"]["em"] + entry["result"]["f1"]) / 2)
    # The same predicted texts, scored again against the release file read here.
    rows = np.arange(len(features))
    _, _, windows = evaluation.predict(oracle.predictor, task.name, oracle.heads[task.name],
                                       family(features.family), features, rows, 16)
    predictions, _ = mrc.answers(features, windows)
    examples = list(read_task(task, "dev", str(DEMO_DATA)))
    gold = json.loads((DEMO_DATA / "cmrc2018" / "dev.json").read_text(encoding="utf-8"))
    expected = cmrc2018.score(gold, {e.id: p for e, p in zip(examples, predictions)})
    assert entry["score"] == pytest.approx(expected["average"])
    assert expected["total"] == len(examples)  # every demo dev question is an example
    # The baseline is the scorer on empty answers: 0.
    assert entry["baseline"] == 0.0 and entry["metric_baseline"] == 0.0
    line = {"step": 1, "split": "dev", "tasks": {"cmrc2018": entry}, "aggregate": entry["score"]}
    text = evaluation.format_results(line)
    assert "cmrc2018 average" in text and f"em_f1 {entry['metric_score']:.4f}" in text


def test_a_partial_evaluation_scores_only_the_questions_it_ran(setup):
    tasks, tokenizer, cache = setup
    task = tasks["cmrc2018"]
    features = cached_features(task, "dev", tokenizer, str(DEMO_DATA), cache, max_length=96)
    oracle = Oracle({"cmrc2018": build_head("mrc_span", None, 32)}, "mrc_span")
    entry = evaluation.evaluate_features(oracle, task, features, oracle.predictor, batch_size=16,
                                         max_examples=3,
                                         scoring=evaluation.Scoring(task, "dev", str(DEMO_DATA)))
    assert entry["examples"] == 3 and entry["scorer_result"]["total"] == 3
    assert entry["scorer_result"]["skip"] == 0


def test_run_evaluate_takes_task_names(tmp_path):
    """Run.evaluate(split, tasks) with names (it used to want TaskSpecs: AttributeError)."""
    from mtl_framework.errors import UserError
    from mtl_framework.loop.run import Run

    experiment = write_tiny_experiment(tmp_path / "tiny.yaml", tasks=["tnews", "cmrc2018"],
                                       max_length=64, steps=1, backbone=ONE_LAYER)
    run = Run(str(experiment), str(tmp_path / "run"))
    results = run.evaluate("dev", ["cmrc2018"], max_examples=4)
    assert list(results) == ["cmrc2018"] and results["cmrc2018"]["examples"] == 4
    assert results["cmrc2018"]["scorer"] == "cmrc2018"
    with pytest.raises(UserError, match=r"no task\(s\) \['nope'\]"):
        run.evaluate("dev", ["nope"])


def test_keep_best_the_model_card_and_old_lines_read_the_publishers_score():
    from mtl_framework.loop.callbacks import BestTracker
    from mtl_framework.saving.model_card import eval_results

    new = {"metric": "em_f1", "score": 0.61, "metric_score": 0.70, "scorer": "cmrc2018",
           "scorer_figure": "average", "scorer_result": {"average": 0.61}, "baseline": 0.0}
    old = {"metric": "accuracy", "score": 0.5, "baseline": 0.1}
    line = {"step": 3, "split": "dev", "tasks": {"cmrc2018": new, "tnews": old}, "aggregate": 0.555}
    tracker = BestTracker(metric="cmrc2018")
    assert tracker.update(3, line) and tracker.best == 0.61  # the publisher's figure
    cards = {r.dataset_name: r for r in eval_results(line, {}, {})}
    assert (cards["cmrc2018"].metric_type, cards["cmrc2018"].metric_value) == ("cmrc2018 average", 0.61)
    assert (cards["tnews"].metric_type, cards["tnews"].metric_value) == ("accuracy", 0.5)
    text = evaluation.format_results(line)  # a line written before scorers still prints
    assert "tnews" in text and "accuracy" in text and "0.5000" in text
