"""CLUE classification, C3 and CBLUE's classification tasks: the generic metrics equal
the publishers' baseline functions (CLUE's simple_accuracy; CBLUE's qic/qqr/qtr accuracy
and ctc/sts macro F1) on 20 prediction sets per dataset built from real dev labels."""
import pytest
from official_fixtures import assert_figures, load

from mtl_framework.scoring import metrics as M

FIXTURE = load("classification")
CASES = [(d, s) for d, entry in FIXTURE["datasets"].items() for s in entry["sets"]]


def test_every_dataset_has_twenty_sets():
    assert {d: len(e["sets"]) >= 20 for d, e in FIXTURE["datasets"].items()} == \
        {d: True for d in FIXTURE["datasets"]}


@pytest.mark.parametrize("dataset,name", CASES)
def test_generic_metric_equals_the_baseline_function(dataset, name):
    entry = FIXTURE["datasets"][dataset]
    predictions, gold = entry["sets"][name]["predictions"], entry["gold"]
    if entry["kind"] == "cblue_macro":
        ours = {"macro_f1": M.compute_metric("macro_f1", predictions, gold)["macro_f1"]}
    else:
        ours = M.compute_metric("accuracy", predictions, gold)
    official = {k: v for k, v in entry["sets"][name]["official"].items() if k in ours}
    assert official and assert_figures(ours, official, f"{dataset}/{name}") <= 1e-12
