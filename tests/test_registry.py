"""The task registry: one test per kind of spec error, merging, labels, select.

The format checks run against a small fake format table (the real adapters
are tested with the built-in specs in test_registry_catalog.py), so these
tests pin the messages whatever formats data_adapters registers.
"""
import json
import types
from pathlib import Path

import pytest

from mtl_framework.config import registry
from mtl_framework.families import FAMILIES

SPECS = Path(__file__).parent / "fixtures" / "specs"
BROKEN = SPECS / "broken"


class FakeDelimited:
    option_keys = {"delimiter": (str, "\t"), "header": (bool, False)}
    field_keys = ("text", "text_b", "label", "id")
    required_fields = ("text",)
    task_types = ("classification", "matching", "regression")


class FakeSquad:
    option_keys = {}
    field_keys = ()
    required_fields = ()
    task_types = ("mrc_span",)


FORMATS = {"delimited": FakeDelimited, "squad": FakeSquad}


@pytest.fixture(autouse=True)
def fake_formats(monkeypatch):
    fake = types.SimpleNamespace(available_formats=lambda: sorted(FORMATS), get_adapter=FORMATS.__getitem__)
    monkeypatch.setattr(registry, "_adapters", lambda: fake)


def errors_of(path, data_root=None):
    return [str(e) for e in registry.validate_paths([path], data_root=data_root)]


def test_yaml_syntax_error_gives_its_line():
    path = BROKEN / "syntax_error.yaml"
    assert errors_of(path) == [
        f"{path}:11: YAML syntax error: did not find expected ',' or ']' "
        "while parsing a flow sequence (on line 10)"]


def test_unknown_keys_at_top_level_and_in_a_task_suggest_the_right_one():
    path = BROKEN / "unknown_key.yaml"
    errors = errors_of(path)
    assert len(errors) == 3, errors
    assert errors[0] == (f"{path}:2: the top level: unknown key 'descripton' (did you mean "
                         "'description'?); allowed: dataset, description, source, license, "
                         "citation, verified, format, files, options, fields, tasks")
    # The misspelt labels count as absent: the type still needs them.
    assert errors[1] == (f"{path}:9: task 'unknown_key_task': type classification needs "
                         "`labels: [...]` or `label_file: ...` (class, entity, predicate or "
                         "event type names)")
    assert errors[2].startswith(f"{path}:11: task 'unknown_key_task': unknown key 'lables' "
                                "(did you mean 'labels'?); allowed: name, type,")


# Each broken spec's errors, all of them in file order: (line, what it says).
BROKEN_ERRORS = {
    "missing_key.yaml": [  # a required key: named, with where it is missing
        (1, "the top level: missing required key 'format'"),
        (7, "task 'missing_key_task': missing required key 'metric'")],
    "mistyped.yaml": [  # a mistyped value: with the fix
        (10, "task 'quoted_length': labels must be a list of strings; 0 is not (quote it: YAML "
             "read it as a number)"),
        (11, "task 'quoted_length': max_length must be a whole number > 0, got '128' (write it "
             "without quotes)"),
        (16, "task 'negative_numbers': max_length must be a whole number > 0, got -1"),
        (18, "task 'negative_numbers': rate must be a number >= 0, got -0.5"),
        (19, "task 'negative_numbers': loss_weight must be a number > 0, got 0")],
    "unknown_names.yaml": [  # an unknown format, type or metric: the right one suggested
        (2, "unknown format 'delimted' (did you mean 'delimited'?); formats: delimited, squad "
            "(or register your own with data_adapters.register_adapter)"),
        (7, "task 'unknown_names_task': unknown type 'clasification' (did you mean "
            "'classification'?); types: "
            + ", ".join(name for name, f in FAMILIES.items() if f.in_specs)),
        (10, "task 'unknown_names_task': unknown metric 'accuray' (did you mean 'accuracy'?); "
             "metrics: accuracy, macro_f1, micro_f1, em_f1, span_f1, triple_f1, event_f1, "
             "spearman, pearson, mrr, cosine_spearman, pair_classification, retrieval, reranking")],
    "unknown_option_field.yaml": [  # options and fields: checked against the format
        (6, "unknown option 'delimeter' for format 'delimited' (did you mean 'delimiter'?); "
            "allowed: delimiter, header"),
        (9, "unknown field 'txt_b' for format 'delimited' (did you mean 'text_b'?); allowed: "
            "text, text_b, label, id"),
        (17, "task 'unknown_option_field_task': option 'header' of format 'delimited' must be "
             "true or false, got 'yes'")],
    "labels_vs_type.yaml": [  # labels must fit the type
        (10, "task 'scores': type regression takes no labels; remove `labels`"),
        (13, "task 'classes': type classification needs `labels: [...]` or `label_file: ...` "
             "(class, entity, predicate or event type names)"),
        (20, "task 'pairs': multi_label applies to classification only, not matching; remove it")],
}


@pytest.mark.parametrize("name", list(BROKEN_ERRORS))
def test_broken_specs_report_every_error_with_its_line(name):
    path = BROKEN / name
    assert errors_of(path) == [f"{path}:{line}: {message}" for line, message in BROKEN_ERRORS[name]]


# Specs written here: (the spec, its error).
WRITTEN = {
    "qa.yaml": (  # the format cannot feed the type
        "dataset: qa\nformat: squad\nfiles: {train: qa.json}\ntasks:\n  - name: qa\n"
        "    type: classification\n    labels: [a, b]\n    max_length: 64\n    metric: accuracy\n",
        "6: task 'qa': format 'squad' reads examples for mrc_span tasks, not classification; "
        "change the type or the format"),
    "nofields.yaml": (  # the format's required fields
        "dataset: nofields\nformat: delimited\nfiles: {train: x.tsv}\ntasks:\n"
        "  - name: nofields\n    type: regression\n    max_length: 64\n    metric: spearman\n",
        "5: task 'nofields': format 'delimited' needs `fields:` for text (the source key or "
        "column of each)"),
}


@pytest.mark.parametrize("name", list(WRITTEN))
def test_written_spec_errors(name, tmp_path):
    spec = tmp_path / name
    text, error = WRITTEN[name]
    spec.write_text(text, encoding="utf-8")
    assert errors_of(spec) == [f"{spec}:{error}"]


def test_label_file_is_checked_under_the_data_root(tmp_path):
    path = BROKEN / "label_file_missing.yaml"
    # Without a data root it may ship with the data: checked when a root is given.
    assert errors_of(path) == []
    expected = (f"{path}:10: task 'label_file_missing_task': "
                "label file 'demo/no_such_labels.txt' not found in "
                f"{BROKEN / 'labels' / 'demo/no_such_labels.txt'} or "
                f"{tmp_path / 'demo/no_such_labels.txt'}; fix the path or add the file")
    assert errors_of(path, data_root=tmp_path) == [expected]
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "no_such_labels.txt").write_text("a\nb\n", encoding="utf-8")
    assert errors_of(path, data_root=tmp_path) == []


def test_duplicate_dataset_ids_and_task_names_report_both_places():
    first, second = SPECS / "duplicates" / "first.yaml", SPECS / "duplicates" / "second.yaml"
    assert errors_of(SPECS / "duplicates") == [
        f"{first}:1: duplicate dataset id 'demo' (also at {second}:1); rename one",
        f"{first}:8: duplicate task name 'demo_task' (also at {second}:13); rename one",
        f"{second}:1: duplicate dataset id 'demo' (also at {first}:1); rename one",
        f"{second}:13: duplicate task name 'demo_task' (also at {first}:8); rename one",
    ]


def test_duplicate_yaml_keys_and_non_mapping_files(tmp_path):
    twice = tmp_path / "twice.yaml"
    twice.write_text("dataset: a\ndataset: b\n", encoding="utf-8")
    errors = errors_of(twice)
    assert f"{twice}:2: key 'dataset' given twice (also on line 1); keep one" in errors
    listing = tmp_path / "list.yaml"
    listing.write_text("- dataset: a\n", encoding="utf-8")
    assert errors_of(listing) == [f"{listing}:1: a spec file is a mapping with `dataset:`, "
                                  "`format:`, `files:` and `tasks:`, not a list"]
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing\n", encoding="utf-8")
    assert errors_of(empty) == [f"{empty}:1: empty spec file; expected `dataset:`, `format:`, "
                                "`files:` and `tasks:`"]


def test_every_error_of_a_file_is_reported_not_just_the_first():
    errors = registry.validate_paths([BROKEN])
    files = {e.path for e in errors}
    assert len(files) == 7  # every broken file except label_file_missing (no data root)
    assert errors == sorted(errors, key=lambda e: (e.path, e.line, e.message))


def test_valid_specs_merge_task_overrides_key_by_key():
    reg = registry.load_paths([SPECS / "valid"])
    assert list(reg.datasets) == ["demo_pairs", "demo_qa"]
    assert list(reg.tasks) == ["demo_match", "demo_topic", "demo_span"]
    match, topic = reg.tasks["demo_match"], reg.tasks["demo_topic"]
    assert match.files == {"train": "demo/train.tsv", "dev": "demo/dev.tsv"}
    assert match.options == {"delimiter": "\t", "header": True}
    assert match.fields == {"text": "s1", "text_b": "s2", "label": "label"}
    assert (match.rate, match.loss_weight, match.family) == (0.5, 1.0, "matching")
    # Overrides replace single keys; `null` unsets one; the rest is inherited.
    assert topic.files == {"train": "demo/topic_train.tsv", "dev": "demo/dev.tsv"}
    assert topic.options == {"delimiter": "\t", "header": False}
    assert topic.fields == {"text": "s1", "label": 3}
    assert (topic.rate, topic.loss_weight, topic.labels) == (None, 2.0, None)
    assert topic.resolve_labels() == ["sports", "finance", "tech"]
    assert topic.description == ("two tasks over one TSV layout, "
                                 "the second overriding files, options and fields")
    assert topic.spec_path == str(SPECS / "valid" / "demo_pairs.yaml") and topic.line == 22
    assert reg.tasks["demo_span"].resolve_labels() is None
    assert reg.datasets["demo_pairs"].tasks == ("demo_match", "demo_topic")


def test_select_takes_task_names_and_dataset_ids():
    reg = registry.load_paths([SPECS / "valid"])
    assert [t.name for t in reg.select(["demo_pairs", "demo_span", "demo_match"])] == \
        ["demo_match", "demo_topic", "demo_span"]
    with pytest.raises(registry.UnknownTaskError) as error:
        reg.select(["demo_spam", "nothing_like_it"])
    assert str(error.value) == ("unknown task or dataset 'demo_spam' (did you mean 'demo_span'?); "
                                "unknown task or dataset 'nothing_like_it'; searched "
                                f"{SPECS / 'valid'} (`mtl tasks list [--specs DIR]` shows them all)")
    builtin = registry.Registry({}, {}, spec_paths=[registry.BUILTIN_SPECS, SPECS / "valid"])
    with pytest.raises(registry.UnknownTaskError, match=f"; searched the built-in specs and "
                                                          f"{SPECS / 'valid'} "):
        builtin.select(["nothing_like_it"])
    with pytest.raises(registry.UnknownTaskError, match="searched the built-in specs only: for a "
                                                          "task of your own, pass its spec folder "
                                                          r"\(--specs DIR"):
        registry.Registry({}, {}, spec_paths=[registry.BUILTIN_SPECS]).select(["nothing_like_it"])


def test_load_registry_raises_with_every_error(monkeypatch):
    monkeypatch.setattr(registry, "BUILTIN_SPECS", SPECS / "valid")
    assert len(registry.load_registry()) == 3
    assert len(registry.load_registry([SPECS / "valid"])) == 3  # the same directory is read once
    with pytest.raises(registry.SpecValidationError) as error:
        registry.load_registry([SPECS / "duplicates"])
    assert len(error.value.errors) == 4
    assert str(error.value.errors[0]).endswith(
        f"duplicate dataset id 'demo' (also at {SPECS / 'duplicates' / 'second.yaml'}:1); rename one")


def test_missing_paths_are_errors(tmp_path):
    assert errors_of(tmp_path / "nope") == [f"{tmp_path / 'nope'}:0: no such spec file or directory"]
    assert errors_of(tmp_path) == [f"{tmp_path}:0: no *.yaml spec files in this directory"]


@pytest.mark.parametrize("content", [
    '["a", "b", "c"]',
    '{"label": "a", "label_desc": "x"}\n{"label": "b"}\n{"label": "c"}\n',
    "a\nb\n\nc\n",
])
def test_label_files_in_each_layout(tmp_path, content):
    path = tmp_path / "labels.txt"
    path.write_text(content, encoding="utf-8")
    assert registry.read_label_file(path) == ["a", "b", "c"]


def test_bad_label_files_are_reported(tmp_path):
    (tmp_path / "labels").mkdir()
    (tmp_path / "labels" / "dup.txt").write_text("a\nb\na\n", encoding="utf-8")
    spec = tmp_path / "spec.yaml"
    spec.write_text("dataset: x\nformat: delimited\nfields: {text: 0}\nfiles: {train: x.tsv}\n"
                    "tasks:\n  - name: x\n    type: classification\n    label_file: dup.txt\n"
                    "    max_length: 64\n    metric: accuracy\n", encoding="utf-8")
    label_file = tmp_path / "labels" / "dup.txt"
    assert errors_of(spec) == [f"{spec}:8: task 'x': bad label file: {label_file} lists 'a' twice "
                               "(entries 1 and 3); each label once"]
    label_file.write_text(json.dumps(["a", 2]), encoding="utf-8")
    assert errors_of(spec) == [f"{spec}:8: task 'x': bad label file: {label_file}: label 2 is not "
                               "a non-empty string; write labels as strings (\"1\", not 1)"]


def test_a_task_reading_another_format_keeps_only_the_dataset_files(tmp_path):
    spec = tmp_path / "mixed.yaml"
    spec.write_text("dataset: mixed\nformat: delimited\nfiles: {train: a.tsv, dev: b.tsv}\n"
                    "options: {header: true}\nfields: {text: s, label: y}\ntasks:\n"
                    "  - name: mixed_cls\n    type: classification\n    labels: [a, b]\n"
                    "    max_length: 64\n    metric: accuracy\n"
                    "  - name: mixed_qa\n    type: mrc_span\n    format: squad\n"
                    "    files: {train: qa.json}\n    max_length: 64\n    metric: em_f1\n",
                    encoding="utf-8")
    qa = registry.load_paths([spec]).tasks["mixed_qa"]
    # squad takes no options or fields: the dataset's delimited ones are not inherited.
    assert ((qa.format, qa.files, qa.options, qa.fields)
            == ("squad", {"train": "qa.json", "dev": "b.tsv"}, {}, {}))


def test_an_unknown_scorer_is_one_line_naming_the_known_ones(tmp_path):
    from mtl_framework.scoring.scorers import SCORERS

    path = tmp_path / "bad_scorer.yaml"
    path.write_text("dataset: bad_scorer\nformat: squad\nfiles:\n  dev: x/dev.json\ntasks:\n"
                    "  - name: bad_scorer\n    type: mrc_span\n    max_length: 64\n"
                    "    metric: em_f1\n    scorer: cmrc2108\n", encoding="utf-8")
    assert errors_of(path) == [
        f"{path}:10: task 'bad_scorer': unknown scorer 'cmrc2108' (did you mean 'cmrc2018'?); "
        f"scorers: {', '.join(SCORERS)}"]
    path.write_text(path.read_text(encoding="utf-8").replace("cmrc2108", "cmrc2018"), encoding="utf-8")
    assert errors_of(path) == []
    assert registry.load_paths([path]).tasks["bad_scorer"].scorer == "cmrc2018"
