"""CLUENER2020's score.py figures on prediction sets from the real dev set."""
import pytest
from official_fixtures import assert_figures, load, read_records, shared_file

from mtl_framework.scorers import cluener

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
