"""The format registry, option/field checking, ReadReport and read_task's errors."""
from pathlib import Path
from types import SimpleNamespace

import pytest

import data_adapters
from data_adapters import (
    Adapter,
    ReadReport,
    TextExample,
    available_formats,
    get_adapter,
    read_files,
    read_task,
    register_adapter,
)

FIXTURES = Path(__file__).parent / "fixtures" / "adapters"

DOCUMENTED_FORMATS = [  # docs/task_specs.md
    "jsonl", "json_array", "delimited", "entity_pair_tsv", "doc_folder", "squad",
    "multi_passage_qa", "c3", "chid", "cmrc2019", "choice_jsonl", "tagged_chars",
    "tagged_json", "span_json", "spo_json", "event_json", "wsc", "pairs",
]


def task(**overrides):
    """A duck-typed task spec: what read_task needs and nothing more."""
    base = dict(name="toy", format="delimited", files={"train": "text/pairs.tsv"},
                options={"delimiter": "\t"}, fields={"text": 0, "text_b": 1, "label": 2},
                type="matching", labels=["0", "1"])
    base.update(overrides)
    return SimpleNamespace(**base)


def test_every_documented_format_is_registered():
    assert set(DOCUMENTED_FORMATS) <= set(available_formats())
    for name in available_formats():
        adapter = get_adapter(name)
        assert issubclass(adapter, Adapter) and adapter.task_types
        for key, declared in adapter.option_keys.items():
            assert isinstance(declared, tuple) and len(declared) == 2, (name, key)
        assert set(adapter.required_fields) <= set(adapter.field_keys)


def test_unknown_format_is_a_key_error_with_a_suggestion():
    with pytest.raises(KeyError) as error:
        get_adapter("jsonlines")
    assert "did you mean 'jsonl'" in str(error.value)
    with pytest.raises(KeyError, match="available: c3, cdn_json, chid"):
        get_adapter("no_such_thing_at_all")


def test_user_adapter_registered_from_python(tmp_path):
    @register_adapter("test_upper_lines")
    class UpperLines(Adapter):
        option_keys = {"prefix": (str, "")}
        task_types = ("classification",)

        def read(self, paths, options, fields, task_type, labels, report):
            for path in paths:
                for number, line in enumerate(open(path, encoding="utf-8"), 1):
                    text, _, label = line.rstrip("\n").partition("|")
                    if label not in labels:
                        report.skip(f"label {label!r} is not in the task's labels", path, number)
                        continue
                    yield TextExample(options["prefix"] + text.upper(), label=label)

    try:
        (tmp_path / "data.txt").write_text("abc|x\ndef|y\nghi|z\n", encoding="utf-8")
        assert "test_upper_lines" in available_formats()
        assert get_adapter("test_upper_lines") is UpperLines
        report = ReadReport()
        spec = task(format="test_upper_lines", files={"train": "data.txt"}, options={"prefix": ">"},
                    fields={}, type="classification", labels=["x", "y"])
        examples = list(read_task(spec, "train", tmp_path, report))
        assert [e.text for e in examples] == [">ABC", ">DEF"]
        assert report.examples == 2 and report.skipped == {"label 'z' is not in the task's labels": 1}
        assert report.as_dict()["skipped"]["label 'z' is not in the task's labels"]["first"] == [
            f"{tmp_path / 'data.txt'}:3"]
        # A second class may not take the name silently.
        with pytest.raises(ValueError, match="already registered"):
            register_adapter("test_upper_lines")(type("Other", (Adapter,), {}))
    finally:
        data_adapters.base._ADAPTERS.pop("test_upper_lines", None)


def test_register_adapter_wants_an_adapter_class():
    with pytest.raises(TypeError, match="subclass of data_adapters.Adapter"):
        register_adapter("not_a_class")(lambda: None)


@pytest.mark.parametrize("options, fields, message", [
    ({"delimeter": "\t"}, {"text": 0, "label": 2}, "unknown option 'delimeter'.*did you mean 'delimiter'"),
    ({"header": "yes"}, {"text": 0, "label": 2},
     "option 'header' of format 'delimited' must be true or false"),
    ({}, {"txt": 0, "label": 2}, "unknown field 'txt'.*did you mean 'text'"),
    ({}, {"text": 0}, "needs `fields:` for label"),
])
def test_bad_options_and_fields_name_the_key_and_the_fix(options, fields, message):
    with pytest.raises(ValueError, match=message):
        read_files("delimited", [FIXTURES / "text/pairs.tsv"], options, fields, "matching", ["0", "1"])


def test_format_refuses_a_family_it_cannot_read():
    with pytest.raises(ValueError, match="reads examples for extraction_ner tasks, not classification"):
        read_files("tagged_chars", [FIXTURES / "ner/bio.tsv"], task_type="classification")


def test_missing_file_names_spec_split_path_and_data_root(tmp_path):
    spec = task(spec_path="task_specs/toy.yaml", line=3, files={"dev": "toy/dev.tsv"})
    with pytest.raises(FileNotFoundError) as error:
        read_task(spec, "dev", tmp_path)  # raised at the call, before iterating
    message = str(error.value)
    assert "task_specs/toy.yaml:3" in message and "dev file of task 'toy'" in message
    assert str((tmp_path / "toy" / "dev.tsv").resolve()) in message
    assert "--data-root" in message


def test_missing_split_is_named():
    with pytest.raises(KeyError, match="has no 'test' split; its files list train"):
        read_task(task(), "test", FIXTURES)


def test_read_task_uses_a_registry_like_task_and_its_label_file():
    resolved = []

    def resolve_labels(data_root):
        resolved.append(data_root)
        return ["0", "1"]

    spec = task(labels=None, resolve_labels=resolve_labels)
    examples = list(read_task(spec, "train", FIXTURES))
    assert resolved == [FIXTURES] and len(examples) == 3


def test_report_counts_and_keeps_first_places():
    report = ReadReport(keep=2)
    for line in range(1, 5):
        report.skip("bad JSON (x)", "f.json", line)
    report.lose_span("mention not found", "f.json", "id 7")
    report.filter("entity type 'x' is not in the task's labels", 3)
    result = report.as_dict()
    assert result["skipped"] == {"bad JSON (x)": {"count": 4, "first": ["f.json:1", "f.json:2"]}}
    assert result["spans_lost"]["mention not found"] == {"count": 1, "first": ["f.json (id 7)"]}
    assert result["skipped_total"] == 4 and result["spans_lost_total"] == 1 and result["spans"] == 1
    assert result["filtered"] == {"entity type 'x' is not in the task's labels": 3}
    assert "4 skipped (bad JSON (x): 4)" in report.summary()
