"""The spec YAMLs of the datasets in ../shared/data, read for real: exact counts,
and every span round-trips (text[start:end] is the annotated mention).

Skipped on a fresh clone without ../shared/data. Each split is read once per
session (about 10 s in all, most of it MSRA's 2.4M lines).
"""
import json
from collections import Counter

import pytest

from data_adapters import (
    ChoiceExample,
    CorefExample,
    EventExample,
    NERExample,
    ReadReport,
    RelationExample,
    SpanQAExample,
    TextExample,
    qa,
    read_task,
)
from data_adapters.qa import UNLOCATED_QUESTION
from mtl_framework.config.registry import load_registry

from conftest import json_objects

# The catalog datasets with real files in ../shared/data (one spec file each).
DATASETS = ["afqmc", "tnews", "iflytek", "ocnli", "cmnli", "csl", "cluewsc2020", "cmrc2018",
            "drcd", "chid", "c3", "cluener", "eprstmt", "bustm", "csldcp", "lcqmc", "bq",
            "pawsx_zh", "stsb_zh", "chnsenticorp", "nlpcc14_sc", "waimai_10k", "msra_ner",
            "peoples_daily", "weibo_ner", "resume_ner", "duie2"]

_registry = load_registry()
_read = {}


def read(data_root, task_name, split):
    """(examples, report as dict) of one split, read once per session."""
    if (task_name, split) not in _read:
        report = ReadReport()
        examples = list(read_task(_registry.tasks[task_name], split, data_root, report))
        _read[task_name, split] = examples, report.as_dict()
    return _read[task_name, split]


ALL_SPLITS = [(task.name, split) for task in _registry.select(DATASETS) for split in task.files]


def test_every_shared_dataset_has_a_spec():
    assert set(DATASETS) <= set(_registry.datasets)


# (task, split) -> counts that must come out exactly (see the brief and the files).
EXPECTED = {
    ("afqmc", "train"): {"examples": 34334, "skipped_total": 0},
    ("afqmc", "dev"): {"examples": 4316, "skipped_total": 0},
    ("tnews", "train"): {"examples": 53360, "skipped_total": 0},
    ("tnews", "dev"): {"examples": 10000, "skipped_total": 0},
    ("ocnli", "train"): {"examples": 50437, "skipped": {"label '-' is in skip_labels": 49}},
    ("ocnli", "dev"): {"examples": 2950, "skipped": {"label '-' is in skip_labels": 50}},
    ("cmnli", "dev"): {"examples": 12241, "skipped_total": 0},
    ("cluewsc", "train"): {"examples": 1244, "skipped_total": 0, "spans_lost_total": 0},
    ("cluewsc", "dev"): {"examples": 304, "skipped_total": 0, "spans_lost_total": 0},
    ("csl", "dev"): {"examples": 3000, "skipped_total": 0},
    # 21 train answers have an answer_start that does not point at their text, and
    # they are those questions' only answers: 10,142 questions, 10,121 examples (the 21
    # are left out of training, counted apart from skipped rows: scoring reads them).
    ("cmrc2018", "train"): {"questions": 10142, "examples": 10121, "spans": 10142,
                            "skipped_total": 0, "filtered": {UNLOCATED_QUESTION: 21},
                            "spans_lost_total": 21},
    # dev has 3 answers per question; 200 of the 9,657 are misplaced (193 with
    # answer_start -1), and 3 questions lose all three.
    ("cmrc2018", "dev"): {"questions": 3219, "examples": 3216, "spans": 9657,
                          "skipped_total": 0, "filtered": {UNLOCATED_QUESTION: 3},
                          "spans_lost_total": 200},
    ("c3_d", "train"): {"questions": 5856, "examples": 5856},
    ("c3_m", "train"): {"questions": 6013, "examples": 6013},
    ("c3_d", "dev"): {"questions": 1825, "examples": 1825},
    ("c3_m", "dev"): {"questions": 1991, "examples": 1991},
    ("cluener", "train"): {"texts": 10748, "entities": 23971, "spans_lost_total": 0},
    ("cluener", "dev"): {"texts": 1343, "entities": 3072, "spans_lost_total": 0},
    ("duie_spo", "train"): {"texts": 5000, "triples": 8945, "spans_lost_total": 0},
    ("weibo_nam", "train"): {"texts": 1350},
    ("weibo_nom", "train"): {"texts": 1350},
    ("peoples_daily", "dev"): {"texts": 2318, "entities": 3819, "spans_lost_total": 0},
    ("stsb_zh", "train"): {"examples": 5231, "skipped_total": 0},
    ("chnsenticorp", "train"): {"examples": 9600, "skipped_total": 0},
}


@pytest.mark.parametrize("task_name, split", sorted(EXPECTED))
def test_real_counts(shared_data, task_name, split):
    _, report = read(shared_data, task_name, split)
    for key, expected in EXPECTED[task_name, split].items():
        got = report.get(key)
        if key in ("skipped", "spans_lost"):
            got = {reason: detail["count"] for reason, detail in got.items()}
        assert got == expected, (task_name, split, key)


def test_c3_counts_both_halves_through_the_dataset_files(shared_data):
    """The dataset-level files (d + m) give C3's published question counts."""
    task = _registry.tasks["c3_d"]
    whole = type("C3", (), {"name": "c3", "format": "c3", "options": {}, "fields": {},
                            "type": "multiple_choice", "labels": None,
                            "files": _registry.datasets["c3"].files})
    for split, questions in (("train", 11869), ("dev", 3816)):
        report = ReadReport()
        assert sum(1 for _ in read_task(whole, split, shared_data, report)) == questions
        assert report.units["questions"] == questions
    assert task.files["train"] == "c3/c3-d-train.json"


def test_weibo_splits_named_and_nominal_mentions(shared_data):
    (nam, nam_report), (nom, nom_report) = (read(shared_data, t, "train") for t in ("weibo_nam", "weibo_nom"))
    tags = Counter()
    with open(shared_data / "weibo_ner/weiboNER_2nd_conll.train", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                tags[line.split("\t")[1].strip()] += 1
    begins_nam = sum(n for t, n in tags.items() if t.startswith("B-") and t.endswith(".NAM"))
    begins_nom = sum(n for t, n in tags.items() if t.startswith("B-") and t.endswith(".NOM"))
    assert nam_report["entities"] == begins_nam and nom_report["entities"] == begins_nom
    # Characters come without Weibo's word-position digits.
    assert nam[0].text == nom[0].text and not any(c.isdigit() for c in nam[0].text[:2])


@pytest.mark.parametrize("task_name, split", ALL_SPLITS)
def test_every_span_round_trips(shared_data, task_name, split):
    examples, report = read(shared_data, task_name, split)
    # CLUE's cmrc2018 test: every answer a FAKE_ANSWER placeholder (read by `mtl predict`)
    placeholders_only = set(report["skipped"]) == {qa.PLACEHOLDERS_SKIPPED}
    assert examples or placeholders_only, "a listed split gave no examples"
    for example in examples:
        for text, start, end, mention in spans_of(example):
            assert 0 <= start < end <= len(text), (task_name, example)
            if mention is not None:
                assert text[start:end] == mention, (task_name, example)


def spans_of(example):
    """(text, start, end, mention or None) for every span of an example."""
    if isinstance(example, SpanQAExample):
        return [(example.context, a.start, a.end, a.text) for a in example.answers]
    if isinstance(example, NERExample):
        return [(example.text, e.start, e.end, None) for e in example.entities]
    if isinstance(example, RelationExample):
        return [(example.text, e.start, e.end, None)
                for t in example.triples for e in (t.subject, t.object)]
    if isinstance(example, EventExample):
        return [(example.text, e.start, e.end, None) for event in example.events
                for e in ([event.trigger] if event.trigger else []) + event.arguments]
    if isinstance(example, CorefExample):
        return [(example.text, e.start, e.end, None) for e in (example.span1, example.span2)]
    assert isinstance(example, (TextExample, ChoiceExample))
    return []


@pytest.mark.parametrize("split", ["train", "dev"])
def test_cluener_mentions_match_the_annotation(shared_data, split):
    examples, _ = read(shared_data, "cluener", split)
    records = json_objects(shared_data / f"cluener/{split}.json")
    assert len(examples) == len(records)
    for example, record in zip(examples, records):
        annotated = Counter((mention, type_) for type_, mentions in record["label"].items()
                            for mention, places in mentions.items() for _ in places)
        assert Counter((example.text[e.start:e.end], e.type) for e in example.entities) == annotated


@pytest.mark.parametrize("split", ["train", "dev"])
def test_duie_mentions_match_the_annotation(shared_data, split):
    examples, _ = read(shared_data, "duie_spo", split)
    records = json_objects(shared_data / _registry.tasks["duie_spo"].files[split])
    for example, record in zip(examples, records):
        annotated = [(s["subject"], s["predicate"], s["object"]["@value"]) for s in record["spo_list"]]
        text = example.text
        assert [(text[t.subject.start:t.subject.end], t.predicate, text[t.object.start:t.object.end])
                for t in example.triples] == annotated
        for triple in example.triples:  # first occurrence, as bert4keras's GPLinker search
            assert triple.subject.start == text.find(text[triple.subject.start:triple.subject.end])


def test_cluewsc_spans_match_the_annotation(shared_data):
    for split in ("train", "dev"):
        examples, _ = read(shared_data, "cluewsc", split)
        records = json_objects(shared_data / f"cluewsc2020/{split}.json")
        for example, record in zip(examples, records):
            target = record["target"]
            assert example.text[example.span1.start:example.span1.end] == target["span1_text"]
            assert example.text[example.span2.start:example.span2.end] == target["span2_text"]
            assert example.label == record["label"]


def test_peoples_daily_entities_match_a_plain_bio_reading(shared_data):
    examples, _ = read(shared_data, "peoples_daily", "dev")
    sentences, chars, spans, open_span = [], [], [], None
    with open(shared_data / "peoples_daily_ner/example.dev", encoding="utf-8") as f:
        for line in list(f) + ["\n"]:
            if not line.strip():
                if chars:
                    sentences.append(("".join(chars), spans))
                chars, spans, open_span = [], [], None
                continue
            char, tag = line.rstrip("\n").split(" ")
            if tag.startswith("B-"):
                open_span = [len(chars), len(chars) + 1, tag[2:]]
                spans.append(open_span)
            elif tag.startswith("I-") and open_span and open_span[2] == tag[2:]:
                open_span[1] = len(chars) + 1
            else:
                open_span = None
            chars.append(char)
    assert [(e.text, [(x.start, x.end, x.type) for x in e.entities]) for e in examples] == \
        [(text, [tuple(s) for s in spans]) for text, spans in sentences]


def test_cmrc2018_answers_match_the_file(shared_data):
    examples, _ = read(shared_data, "cmrc2018", "dev")
    data = json.loads((shared_data / "cmrc2018/dev.json").read_text(encoding="utf-8"))
    given = {qa["id"]: qa["answers"] for article in data["data"] for p in article["paragraphs"]
             for qa in p["qas"]}
    for example in examples:
        kept = [(a.start, a.text) for a in example.answers]
        assert kept == [(a["answer_start"], a["text"]) for a in given[example.id]
                        if example.context[a["answer_start"]:a["answer_start"] + len(a["text"])] == a["text"]
                        and a["answer_start"] >= 0]
