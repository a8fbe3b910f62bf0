"""A row without a label in a labelled family: skipped with file:line in train and
dev (never trained as a class), kept and counted as unlabelled in a test split."""
import json

import numpy as np
import pytest

import data_adapters
from data_adapters import Adapter, TextExample, read_task, register_adapter
from data_adapters.report import NO_LABEL, ReadReport
from mtl_framework.config.registry import load_paths
from mtl_framework.prepare import cache as C
from mtl_framework.tokenizer import Tokenizer, build_vocab, count_units, write_vocab

TEXT = "我爱北京天安门今天气很好"


def task_of(tmp_path, format_, type_, rows, fields="", options="", labels="labels: [a, b]",
            name="toy", suffix="json"):
    """A spec + the same file as train, dev and test."""
    data = tmp_path / "data" / f"{name}.{suffix}"
    data.parent.mkdir(parents=True, exist_ok=True)
    data.write_text("".join(r + "\n" for r in rows), encoding="utf-8")
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(f"""dataset: {name}
format: {format_}
files: {{train: {data.name}, dev: {data.name}, test: {data.name}}}
{fields}
{options}
tasks:
  - name: {name}
    type: {type_}
    {labels}
    max_length: 32
    metric: accuracy
""", encoding="utf-8")
    return load_paths([spec]).tasks[name], data


def read(task, split, tmp_path):
    report = ReadReport()
    examples = list(read_task(task, split, tmp_path / "data", report))
    return examples, report


CASES = {
    "jsonl classification": dict(
        format_="jsonl", type_="classification", fields="fields: {text: s, label: y}",
        rows=[json.dumps({"s": TEXT, "y": "a"}), json.dumps({"s": TEXT}),
              json.dumps({"s": TEXT, "y": None}), json.dumps({"s": TEXT, "y": "b"})]),
    "jsonl regression": dict(
        format_="jsonl", type_="regression", fields="fields: {text: s, label: y}", labels="",
        rows=[json.dumps({"s": TEXT, "y": 1.5}), json.dumps({"s": TEXT}),
              json.dumps({"s": TEXT}), json.dumps({"s": TEXT, "y": 2})]),
    "c3 multiple_choice": dict(  # one JSON array, an item per line
        format_="c3", type_="multiple_choice", labels="", lines=(3, 4),
        rows=["["] + [json.dumps([[TEXT], [{"question": "?", "choice": ["我", "你"],
                                            **({"answer": "我"} if i in (0, 3) else {})}], str(i)])
                      + ("," if i < 3 else "") for i in range(4)] + ["]"]),
    "chid cloze": dict(
        format_="chid", type_="cloze", labels="",
        rows=[json.dumps({"id": i, "candidates": ["一心一意", "三心二意"], "content": "他#idiom#地学习",
                          **({"answer": 0} if i in (0, 3) else {})}) for i in range(4)]),
    "choice_jsonl multiple_choice": dict(
        format_="choice_jsonl", type_="multiple_choice", labels="",
        rows=[json.dumps({"context": TEXT, "question": "?", "choices": ["我", "你"],
                          **({"label": 1} if i in (0, 3) else {})}) for i in range(4)]),
    "wsc coreference": dict(
        format_="wsc", type_="coreference", labels="labels: ['true', 'false']",
        rows=[json.dumps({"text": TEXT, "target": {"span1_index": 0, "span1_text": "我",
                                                   "span2_index": 2, "span2_text": "北京"},
                          **({"label": "true"} if i in (0, 3) else {})}) for i in range(4)]),
}


@pytest.mark.parametrize("case", CASES)
def test_unlabelled_rows_are_skipped_with_their_line_in_train_and_dev(tmp_path, case):
    case = dict(CASES[case])
    lines = case.pop("lines", (2, 3))
    task, data = task_of(tmp_path, **case)
    for split in ("train", "dev"):
        examples, report = read(task, split, tmp_path)
        assert len(examples) == 2 and all(e.label is not None for e in examples)
        assert report.skipped == {NO_LABEL: 2}
        places = report.as_dict()["skipped"][NO_LABEL]["first"]
        assert places == [f"{data}:{line}" for line in lines]
        assert "unlabelled" not in report.as_dict()
    examples, report = read(task, "test", tmp_path)  # test files come without labels
    assert len(examples) == 4 and [e.label is None for e in examples] == [False, True, True, False]
    assert report.skipped == {} and report.as_dict()["unlabelled"] == 2


def test_a_delimited_file_without_its_label_column(tmp_path):
    """A header without the label column (how test files come): every row unlabelled."""
    task, data = task_of(tmp_path, "delimited", "matching", ["s1\ts2", f"{TEXT}\t{TEXT}"] * 1
                         + [f"{TEXT}\t{TEXT}"], fields="fields: {text: s1, text_b: s2, label: y}",
                         options="options: {header: true}", suffix="tsv")
    examples, report = read(task, "train", tmp_path)
    assert examples == [] and report.as_dict()["skipped"][NO_LABEL]["first"] == [
        f"{data}:2", f"{data}:3"]
    examples, report = read(task, "test", tmp_path)
    assert len(examples) == 2 and report.as_dict()["unlabelled"] == 2


def test_unlabelled_places_in_cloze_passages_name_the_blank(tmp_path):
    rows = [json.dumps({"data": [{"context_id": "c1", "context": "他[BLANK1]地学习[BLANK2]",
                                  "choices": ["一心一意", "好"]}]})]
    task, data = task_of(tmp_path, "cmrc2019", "cloze", rows, labels="")
    examples, report = read(task, "train", tmp_path)
    assert examples == [] and report.as_dict()["skipped"][NO_LABEL] == {
        "count": 2, "first": [f"{data} (context_id c1 [BLANK1])", f"{data} (context_id c1 [BLANK2])"]}


def test_a_registered_adapter_that_yields_unlabelled_rows_is_caught(tmp_path):
    @register_adapter("unlabelled_lines_test", replace=True)
    class Lines(Adapter):
        task_types = ("classification",)

        def read(self, paths, options, fields, task_type, labels, report):
            for path in paths:
                with open(path, encoding="utf-8") as f:
                    for i, line in enumerate(f):
                        text, _, label = line.rstrip("\n").partition("\t")
                        yield TextExample(text, None, label or None, id=i)

    task, data = task_of(tmp_path, "unlabelled_lines_test", "classification",
                         [f"{TEXT}\ta", TEXT, f"{TEXT}\tb"], suffix="txt")
    examples, report = read(task, "train", tmp_path)
    assert [e.label for e in examples] == ["a", "b"]
    assert report.as_dict()["skipped"][NO_LABEL] == {"count": 1, "first": [f"{data} (id 1)"]}


def test_train_features_hold_no_unlabelled_row(tmp_path, monkeypatch):
    monkeypatch.delenv(C.CACHE_ENV, raising=False)
    task, data = task_of(tmp_path, **CASES["jsonl classification"])
    write_vocab(build_vocab(count_units([TEXT])), tmp_path / "vocab.txt")
    tokenizer = Tokenizer(str(tmp_path / "vocab.txt"))
    train = C.cached_features(task, "train", tokenizer, tmp_path / "data", tmp_path / "cache")
    assert np.asarray(train["label"]).tolist() == [0, 1]  # no -1 (it was trained as the last class)
    assert train.meta["read"]["skipped"][NO_LABEL]["first"] == [f"{data}:2", f"{data}:3"]
    assert train.report.unlabelled == 0 and train.num_examples == 2
    test = C.cached_features(task, "test", tokenizer, tmp_path / "data", tmp_path / "cache")
    assert np.asarray(test["label"]).tolist() == [0, -1, -1, 1] and test.report.unlabelled == 2


def test_data_stats_reports_the_places(tmp_path):
    from mtl_framework.prepare.stats import collect

    task, data = task_of(tmp_path, **CASES["wsc coreference"])
    rows = {row["split"]: row for row in collect([task], tmp_path / "data")}
    assert rows["train"]["skipped"][NO_LABEL]["first"] == [f"{data}:2", f"{data}:3"]
    assert rows["test"]["unlabelled"] == 2 and rows["test"]["skipped_total"] == 0


def test_unlabelled_splits_are_named_once():
    assert data_adapters.UNLABELLED_SPLITS == ("test",)
