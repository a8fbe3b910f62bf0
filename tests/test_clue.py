"""CLUE 1.1 submission files: names, line formats and ids as CLUE's submission
instructions and Su's CLUE-bert4keras write them (docs/predict.md), checked on
hand-made predictions; label codes checked against the real label files."""
import json

import pytest

from data_adapters import ChoiceExample, NERExample, SpanQAExample, TextExample
from mtl_framework.config.registry import load_registry
from mtl_framework.evaluation import clue

BY_NAME = {f.name: f for f in clue.CLUE_FILES}


def test_the_eleven_file_names_and_their_source_tasks():
    assert sorted(BY_NAME) == sorted([
        "afqmc_predict.json", "tnews11_predict.json", "iflytek_predict.json",
        "cmnli_predict.json", "ocnli_50k_predict.json", "cluewsc11_predict.json",
        "csl_predict.json", "cmrc2018_predict.json", "c311_predict.json",
        "chid11_predict.json", "cluener_predict.json"])
    registry = load_registry()
    for clue_file in clue.CLUE_FILES:  # every source task is a built-in task
        assert all(task in registry.tasks for task in clue_file.tasks), clue_file.name
    assert [f.name for f in clue.clue_files_for(["cluener", "c3_m", "mine"])] == [
        "c311_predict.json", "cluener_predict.json"]


def test_classification_lines_keep_the_input_order_and_the_dataset_ids():
    rows = [(TextExample("a", "b", id=7), "contradiction"), (TextExample("c", "d", id=3), "neutral")]
    text = clue.file_text(BY_NAME["ocnli_50k_predict.json"], rows, None)
    assert text == '{"id": 7, "label": "contradiction"}\n{"id": 3, "label": "neutral"}\n'


def test_tnews_writes_codes_and_iflytek_label_positions():
    rows = [(TextExample("x", id=0), "news_game"), (TextExample("y", id=1), "news_story")]
    lines = clue.file_text(BY_NAME["tnews11_predict.json"], rows, None).splitlines()
    assert [json.loads(line) for line in lines] == [
        {"id": 0, "label": "116", "label_desc": "news_game"},
        {"id": 1, "label": "100", "label_desc": "news_story"}]
    labels = load_registry().tasks["iflytek"].labels
    rows = [(TextExample("x", id=5), "地图导航"), (TextExample("y", id=6), "其他")]
    lines = clue.file_text(BY_NAME["iflytek_predict.json"], rows, labels).splitlines()
    assert [json.loads(line)["label"] for line in lines] == ["1", "118"]


def test_tnews_codes_and_iflytek_positions_match_the_real_label_files(shared_data):
    with open(shared_data / "tnews" / "labels.json", encoding="utf-8") as f:
        codes = {row["label_desc"]: row["label"] for row in map(json.loads, f)}
    assert clue.TNEWS_CODES == codes
    assert set(load_registry().tasks["tnews"].labels) == set(codes)
    labels = load_registry().tasks["iflytek"].labels
    with open(shared_data / "iflytek" / "dev.json", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    assert all(labels.index(row["label_des"]) == int(row["label"]) for row in rows)


def test_cmrc2018_and_chid_are_one_json_object():
    rows = [(SpanQAExample("q", "罗亚尔港号", id="TEST_0_QUERY_0"), {"text": "罗亚尔", "start": 0})]
    text = clue.file_text(BY_NAME["cmrc2018_predict.json"], rows, None)
    assert json.loads(text) == {"TEST_0_QUERY_0": "罗亚尔"}
    rows = [(ChoiceExample("c", "", ["甲", "乙"], None, id="#idiom000001#"), {"index": 1, "text": "乙"})]
    assert json.loads(clue.file_text(BY_NAME["chid11_predict.json"], rows, None)) == {
        "#idiom000001#": 1}


def test_c3_lines_come_in_clue_id_order_with_the_index_as_a_string():
    rows = [(ChoiceExample("c", "q", ["a", "b"], None, id=5), {"index": 1, "text": "b"}),
            (ChoiceExample("c", "q", ["a", "b"], None, id=2), {"index": 0, "text": "a"})]
    lines = clue.file_text(BY_NAME["c311_predict.json"], rows, None).splitlines()
    assert [json.loads(line) for line in lines] == [{"id": 2, "label": "0"}, {"id": 5, "label": "1"}]


def test_cluener_groups_mentions_by_type_with_inclusive_ends():
    text = "彭小军认为台湾的彭小军"
    prediction = [{"type": "name", "start": 0, "end": 3, "text": "彭小军"},
                  {"type": "address", "start": 5, "end": 7, "text": "台湾"},
                  {"type": "name", "start": 8, "end": 11, "text": "彭小军"}]
    line = json.loads(clue.file_text(BY_NAME["cluener_predict.json"],
                                     [(NERExample(text, id=0), prediction)], None))
    assert line == {"id": 0, "text": text,
                    "label": {"name": {"彭小军": [[0, 2], [8, 10]]}, "address": {"台湾": [[5, 6]]}}}


@pytest.mark.parametrize("name, ids, message", [
    ("afqmc_predict.json", [0, None], "example 2 has no id"),
    ("c311_predict.json", ["47-37-0"], "not CLUE's"),
    ("chid11_predict.json", [11], "not a CLUE 1.1 ChID blank"),
])
def test_rows_without_the_leaderboards_ids_are_refused_not_numbered(name, ids, message):
    rows = [(TextExample("x", id=i), None) for i in ids]
    assert message in clue.id_problem(BY_NAME[name], rows)
    good = {"afqmc_predict.json": [0, 1], "c311_predict.json": [0], "chid11_predict.json":
            ["#idiom577961#"]}[name]
    assert clue.id_problem(BY_NAME[name], [(TextExample("x", id=i), None) for i in good]) is None
