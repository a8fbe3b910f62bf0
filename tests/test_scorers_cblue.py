"""CBLUE CHIP-CDN: the generic macro F1 equals the CBLUE baseline's cdn_num_metric and
cdn_cls_metric (cblue/metrics/cblue_metrics.py) on prediction sets built from the real
excerpts in ../shared/real_formats/chip_cdn, and our cdn_num labels are the ones the
baseline's own data_process.py makes from the same files."""
import json

import pytest
from official_fixtures import assert_figures, load, shared_file

from data_adapters import read_task
from mtl_framework.config.registry import load_registry
from mtl_framework.scoring import metrics as M

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
    root = shared_file("real_formats", "chip_cdn").parent
    examples = list(read_task(load_registry().tasks["cdn_num"], split, root))
    assert [e.label for e in examples] == FIXTURE["datasets"][f"cdn_num_{split}"]["gold"]


# ----- CMeEE: the baseline's ee_metric is not a score of an entity set -------------------

EE = load("cmeee_baseline")


def baseline_tag_accuracy(records, predicted):
    """What ee_metric computes, by hand: characters whose BIO tag (written entity by entity,
    a later entity overwriting) equals gold's, over characters + [CLS] + [SEP] (gold -100
    there, so always wrong), the first 126 characters of each record."""
    def tags(text, entities):
        out = ["O"] * len(text)
        for e in entities:
            for i in range(e["start_idx"], e["end_idx"] + 1):
                out[i] = ("B-" if i == e["start_idx"] else "I-") + e["type"]
        return out[:126]
    right = total = 0
    for record, entities in zip(records, predicted):
        gold, pred = tags(record["text"], record["entities"]), tags(record["text"], entities)
        right += sum(g == p for g, p in zip(gold, pred))
        total += len(gold) + 2
    return right / total


@pytest.fixture(scope="module")
def cmeee_records():
    return [r for f in EE["gold_files"]
            for r in json.loads(shared_file("real_formats", f).read_text(encoding="utf-8"))]


def test_cmeee_fixture_names_ee_metric_and_has_twenty_sets():
    assert EE["source"]["path"] == "cblue/metrics/cblue_metrics.py"
    assert EE["source"]["function"] == "ee_metric" and len(EE["sets"]) >= 20


@pytest.mark.parametrize("name", sorted(EE["sets"]))
def test_ee_metric_is_tag_accuracy_with_cls_and_sep_wrong(cmeee_records, name):
    entry = EE["sets"][name]
    official = entry["official"]
    assert official["precision"] == official["recall"] == official["f1"]  # micro over all tags
    assert abs(baseline_tag_accuracy(cmeee_records, entry["entities"]) - official["f1"]) < 1e-12


def test_ee_metric_is_not_a_function_of_the_entity_set(cmeee_records):
    """Why CMeEE keeps the entity-level span_f1: the same entities score 1.0 with it, but
    0.944 (gold order) or 0.897 (symptoms first) with ee_metric; predicting nothing scores
    0.636 (the 'O' tags)."""
    def span_f1(name):
        pred = [{(e["type"], e["start_idx"], e["end_idx"]) for e in es}
                for es in EE["sets"][name]["entities"]]
        gold = [{(e["type"], e["start_idx"], e["end_idx"]) for e in r["entities"]} for r in cmeee_records]
        return M.compute_metric("span_f1", pred, gold)["f1"]
    sets = EE["sets"]
    assert span_f1("gold") == span_f1("sym_first_then_rest") == 1.0
    assert sets["gold"]["official"]["f1"] == pytest.approx(101 / 107)
    assert sets["sym_first_then_rest"]["official"]["f1"] == pytest.approx(96 / 107)
    assert span_f1("empty") == 0.0 and sets["empty"]["official"]["f1"] == pytest.approx(68 / 107)


# ----- CMeIE: the baseline's re_metric scores relation classes of the gold's entity pairs ----

RE = load("cmeie_baseline")


def test_cmeie_fixture_names_re_metric_and_has_twenty_sets():
    assert RE["source"]["function"] == "re_metric" and len(RE["sets"]) >= 20


def test_re_metric_ignores_triples_off_the_gold_pairs_and_scores_object_types():
    """Why CMeIE keeps the generic triple F1: re_metric gives 1.0 to gold plus extra triples
    on mentions no gold triple has (the RE stage only sees the gold's pairs), and less than
    1.0 to the gold triples with another object type for 同义词 (its classes are
    predicate|object_type); triple F1 says the opposite on both."""
    records = [json.loads(line) for line in
               shared_file("real_formats", RE["gold_file"]).read_text(encoding="utf-8").splitlines()
               if line.strip()]

    def triple_f1(name):
        def triples(spo_list):
            return {(s["subject"], s["predicate"], s["object"]["@value"]) for s in spo_list}
        return M.compute_metric("triple_f1", [triples(s) for s in RE["sets"][name]["spo_lists"]],
                                [triples(r["spo_list"]) for r in records])["f1"]

    official = {name: entry["official"]["f1"] for name, entry in RE["sets"].items()}
    assert official["gold"] == triple_f1("gold") == 1.0
    assert official["extra_triples_on_text_heads"] == 1.0
    assert triple_f1("extra_triples_on_text_heads") < 0.9
    assert official["synonym_object_type_wrong"] < 0.9 and triple_f1("synonym_object_type_wrong") == 1.0
