"""CBLUE CHIP-CDN: the generic macro F1 equals the CBLUE baseline's cdn_num_metric and
cdn_cls_metric (cblue/metrics/cblue_metrics.py) on prediction sets built from the real
excerpts in ../shared/real_formats/chip_cdn, and our cdn_num labels are the ones the
baseline's own data_process.py makes from the same files."""
import pytest
from official_fixtures import assert_figures, load

from mtl_framework import metrics as M
from mtl_framework.registry import load_registry

FIXTURE = load("chip_cdn")
CASES = [(d, s) for d, entry in FIXTURE["datasets"].items() for s in entry["sets"]]


def test_fixture_names_the_baseline_metric_file_and_has_twenty_sets_each():
    assert FIXTURE["source"] == {"repository": "CBLUEbenchmark/CBLUE",
                                 "path": "cblue/metrics/cblue_metrics.py",
                                 "commit": "50286d98d92a591e4cb8b97b41048f0543b95100"}
    assert {d: len(e["sets"]) >= 20 for d, e in FIXTURE["datasets"].items()} == \
        {d: True for d in FIXTURE["datasets"]}


def test_the_specs_score_both_stages_with_the_baselines_macro_f1():
    tasks = load_registry().tasks
    assert tasks["cdn_num"].metric == "macro_f1" and tasks["cdn_pair"].metric == "macro_f1"


@pytest.mark.parametrize("dataset,name", CASES)
def test_generic_macro_f1_equals_the_baseline_function(dataset, name):
    entry = FIXTURE["datasets"][dataset]
    predictions, gold = entry["sets"][name]["predictions"], entry["gold"]
    ours = {"macro_f1": M.compute_metric("macro_f1", predictions, gold)["macro_f1"]}
    assert assert_figures(ours, entry["sets"][name]["official"], f"{dataset}/{name}") <= 1e-12


@pytest.mark.parametrize("split", ["dev", "train"])
def test_cdn_num_gold_labels_are_the_baselines(split):
    """The labels data_process.py (_pre_process, _get_num_samples) made from the real
    excerpt are the labels our cdn_json adapter reads from it."""
    from data_adapters import read_task
    from official_fixtures import shared_file

    root = shared_file("real_formats", "chip_cdn").parent
    examples = list(read_task(load_registry().tasks["cdn_num"], split, root))
    assert [e.label for e in examples] == FIXTURE["datasets"][f"cdn_num_{split}"]["gold"]
