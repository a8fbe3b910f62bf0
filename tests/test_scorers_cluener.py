"""CLUENER2020's score.py figures on prediction sets from the real dev set."""
import pytest
from official_fixtures import assert_figures, demo_dev_features, evaluate_oracle, load, shared_file

from mtl_framework.scoring.scorers import cluener
from mtl_framework.scoring.scorers.cluener import read_records

FIXTURE = load("cluener")


@pytest.fixture(scope="module")
def gold():
    records = read_records(shared_file("data", FIXTURE["gold_file"]))[:FIXTURE["gold_records"]]
    return [{"text": r["text"], "label": r["label"]} for r in records]


def test_fixture_names_the_script_and_has_enough_scored_sets():
    assert FIXTURE["source"] == cluener.SOURCE
    assert sum(s["official"] is not None for s in FIXTURE["sets"].values()) >= 20


@pytest.mark.parametrize("name", sorted(FIXTURE["sets"]))
def test_equals_score_py(gold, name):
    entry = FIXTURE["sets"][name]
    predictions = [{"text": g["text"], "label": label} for g, label in zip(gold, entry["labels"])]
    ours = cluener.score(gold, predictions)
    if entry["official"] is not None:
        assert_figures(ours, entry["official"], name)
        return
    # score.py divided by zero: the types it could score agree, the others have no hit (0.0)
    assert_figures(ours, entry["official_per_type"], name)
    failed = [t for t, v in entry["official_per_type"].items() if v is None]
    assert failed and all(ours[t] == 0.0 for t in failed)
    assert ours["macro_f1"] == pytest.approx(sum(ours[f"f1_{t}"] for t in cluener.TYPES) / 10)


def test_prediction_line_matches_the_release_layout(gold):
    line = gold[0]
    entities = [{"type": t, "start": s, "end": e + 1} for t, mentions in line["label"].items()
                for spans in mentions.values() for s, e in spans]
    assert cluener.prediction_line(line["text"], entities) == line


def test_evaluate_reports_score_py_figure_for_the_gold_spans(tmp_path):
    """An oracle's spans through `scorer: cluener`: the entry's score is score.py's macro F1
    of the written lines, the generic span F1 beside it."""
    from mtl_framework.families import heads as H
    from mtl_framework.families.heads import build_head

    task, _, features = demo_dev_features(cluener, "cluener", tmp_path, max_length=128)
    entry = evaluate_oracle(task, features, build_head("extraction_ner", 10, 32),
                            lambda batch: H._label_scores(batch["entity_labels"],
                                                          batch["token_ids"].shape[1]),
                            batch_size=16)
    assert entry["scorer"] == "cluener" and entry["scorer_figure"] == "macro_f1"
    assert entry["score"] == entry["scorer_result"]["macro_f1"]
    assert entry["metric_score"] == entry["result"]["f1"]
    # spans lost in featurizing are misses in both; score.py's figure is per type
    assert 0.9 < entry["score"] <= 1.0
