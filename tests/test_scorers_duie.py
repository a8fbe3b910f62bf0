"""DuIE 2.0's re_official_evaluation.py figures on 29 prediction sets from the real dev set."""
import json

import pytest
from official_fixtures import (
    assert_figures,
    assert_names_the_script,
    demo_dev_features,
    evaluate_oracle,
    load,
    shared_file,
)

from mtl_framework.scoring.scorers import duie

FIXTURE = load("duie")


@pytest.fixture(scope="module")
def gold():
    path = shared_file("data", FIXTURE["gold_file"])
    with open(path, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    return [lines[i] for i in FIXTURE["gold_rows"]]


def test_fixture_names_the_script():
    assert_names_the_script(FIXTURE, duie)


@pytest.mark.parametrize("name", sorted(FIXTURE["sets"]))
def test_equals_the_official_script(gold, name):
    entry = FIXTURE["sets"][name]
    predictions = entry["predictions"]
    if predictions and isinstance(predictions[0], list):  # spo_lists, one per gold line
        predictions = [{"text": g["text"], "spo_list": spo} for g, spo in zip(gold, predictions)]
    assert_figures(duie.score(gold, predictions), entry["official"], name)


def test_objects_without_their_slots_are_misses(gold):
    """What a task without "<predicate>_<slot>" labels predicts, even when every
    @value is right: the complex objects count against it (gold is not reduced)."""
    value_only = [{"text": g["text"], "spo_list": [{**s, "object": {"@value": s["object"]["@value"]}}
                                                   for s in g["spo_list"]]} for g in gold]
    complex_ = sum(len(s["object"]) > 1 for g in gold for s in g["spo_list"])
    total = sum(len({json.dumps(s["object"]) + s["subject"] + s["predicate"] for s in g["spo_list"]})
                for g in gold)
    figures = duie.score(gold, value_only)
    assert complex_ > 0 and figures["recall"] < 1.0
    assert figures["recall"] == pytest.approx((total - complex_) / total, abs=0.01)


def test_slot_triples_join_into_complex_objects(gold):
    """Our decoded triples, slots as "<predicate>_<slot>" triples of the same subject,
    give back the release's complex objects."""
    line = next(g for g in gold if any(len(s["object"]) > 1 for s in g["spo_list"]))
    span = lambda text: {"text": text, "start": 0, "end": len(text)}
    triples = []
    for s in line["spo_list"]:
        for slot, value in s["object"].items():
            predicate = s["predicate"] if slot == "@value" else f"{s['predicate']}_{slot}"
            triples.append({"subject": span(s["subject"]), "predicate": predicate,
                            "object": span(value)})
    assert duie.score([line], [duie.prediction_line(line["text"], triples)])["f1"] == 1.0


def test_evaluate_reports_the_official_figure(tmp_path):
    """An oracle's triples (the @value spans the features hold) through `scorer: duie`:
    the official figure, against the whole gold, complex objects included."""
    from mtl_framework.families import heads as H
    from mtl_framework.families.heads import build_head

    task, gold, features = demo_dev_features(duie, "duie_spo", tmp_path, max_length=256)

    def predict(batch):
        length = batch["token_ids"].shape[1]
        return {k: H._label_scores(batch[f"{k}_labels"], length) for k in ("entity", "head", "tail")}

    entry = evaluate_oracle(task, features, build_head("extraction_relation", len(task.labels), 32),
                            predict, batch_size=8)
    assert entry["scorer"] == "duie" and entry["score"] == entry["scorer_result"]["f1"]
    # the value-only objects miss every complex gold object: recall at most the share of
    # gold triples without slots
    simple = sum(len(s["object"]) == 1 for g in gold for s in g["spo_list"])
    total = sum(len(g["spo_list"]) for g in gold)
    assert simple < total
    assert entry["scorer_result"]["recall"] <= simple / total + 1e-9
