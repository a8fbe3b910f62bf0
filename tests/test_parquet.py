"""`format: parquet` and task_specs/hub_clue.

The real CLUE files in ../shared/data are written as parquet in the Hugging
Face hub `clue` dataset's schema (as its loader clue.py builds it: ClassLabel
indexes, `idx` = line number, rows labelled "-" dropped, c3's halves
concatenated with document-numbered ids, cmrc2018's answer texts stripped,
ChID's answers per blank). The hub specs must then read the same examples as
the built-in specs read from the native files.
"""
import dataclasses
import json
import re
import sys
from pathlib import Path

import pytest

from data_adapters import ReadReport, read_files, read_task
from mtl_framework.config.registry import BUILTIN_SPECS, load_paths, load_registry
from mtl_framework.errors import UserError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

HUB_SPECS = BUILTIN_SPECS / "hub_clue"
NLI = ["neutral", "entailment", "contradiction"]  # the hub's ClassLabel order for cmnli/ocnli
TNEWS_CODES = ["100", "101", "102", "103", "104", "106", "107", "108", "109", "110",
               "112", "113", "114", "115", "116"]
INT, STR = pa.int64(), pa.string()  # ClassLabel columns are int64 in the hub's parquet
STRS = pa.list_(pa.string())


# ----- the native files written in the hub's schema (independent of the adapters) ----------

def json_lines(path):
    with open(path, encoding="utf-8") as f:
        return [(n, json.loads(line)) for n, line in enumerate(f)]


def tsv_lines(path):
    with open(path, encoding="utf-8") as f:
        return [(n, line.rstrip("\n").split("\t")) for n, line in enumerate(f)]


def class_index(names, label):
    return names.index(label) if label is not None else -1


def pair_rows(parsed, names, key=lambda r: (r[0], r[1], r[2] if len(r) > 2 else None)):
    rows = []
    for n, record in parsed:
        s1, s2, label = key(record)
        if label == "-":
            continue  # clue.py drops them (so idx has gaps)
        rows.append({"sentence1": s1, "sentence2": s2, "label": class_index(names, label), "idx": n})
    return rows


PAIR = pa.schema([("sentence1", STR), ("sentence2", STR), ("label", INT), ("idx", pa.int32())])
SINGLE = pa.schema([("sentence", STR), ("label", INT), ("idx", pa.int32())])
WSC = pa.schema([("idx", pa.int32()), ("text", STR), ("label", INT),
                 ("target", pa.struct([("span1_text", STR), ("span2_text", STR),
                                       ("span1_index", pa.int32()), ("span2_index", pa.int32())]))])
CSL = pa.schema([("idx", pa.int32()), ("corpus_id", pa.int32()), ("abst", STR), ("label", INT),
                 ("keyword", STRS)])
CMRC = pa.schema([("id", STR), ("context", STR), ("question", STR),
                  ("answers", pa.struct([("text", STRS), ("answer_start", pa.list_(pa.int32()))]))])
C3 = pa.schema([("id", pa.int32()), ("context", STRS), ("question", STR), ("choice", STRS),
                ("answer", STR)])
CHID = pa.schema([("idx", pa.int32()), ("candidates", STRS), ("content", STRS),
                  ("answers", pa.struct([("text", STRS), ("candidate_id", pa.list_(pa.int32()))]))])


def afqmc(data):
    return {split: (pair_rows(tsv_lines(data / f"afqmc/{name}.txt"), ["0", "1"]), PAIR)
            for split, name in (("train", "train"), ("validation", "dev"), ("test", "test"))}


def cmnli(data):
    return {split: (pair_rows(tsv_lines(data / f"cmnli/{name}.txt"), NLI), PAIR)
            for split, name in (("validation", "dev"), ("test", "test"))}


def ocnli(data):
    key = lambda r: (r["sentence1"], r["sentence2"], r.get("label"))  # noqa: E731
    return {split: (pair_rows(json_lines(data / f"ocnli/{name}.json"), NLI, key), PAIR)
            for split, name in (("train", "train.50k"), ("validation", "dev"), ("test", "test"))}


def tnews(data):
    return {split: ([{"sentence": r["sentence"], "label": TNEWS_CODES.index(r["label"]), "idx": n}
                     for n, r in json_lines(data / f"tnews/{split_file}.json")], SINGLE)
            for split, split_file in (("train", "train"), ("validation", "dev"))}


def iflytek(data):
    files = {"train": "fewclue/iflytek/train_few_all.json", "validation": "iflytek/dev.json"}
    return {split: ([{"sentence": r["sentence"], "label": int(r["label"]), "idx": n}  # hub name "i" is code i
                     for n, r in json_lines(data / path)], SINGLE) for split, path in files.items()}


def cluewsc2020(data):
    return {split: ([{"idx": n, "text": r["text"], "label": ["true", "false"].index(r["label"]),
                      "target": r["target"]} for n, r in json_lines(data / f"cluewsc2020/{name}.json")], WSC)
            for split, name in (("train", "train"), ("validation", "dev"))}


def csl(data):
    files = {"train": "fewclue/csl/train_few_all.json", "validation": "csl/dev.json"}
    return {split: ([{"idx": n, "corpus_id": r["id"], "abst": r["abst"], "label": int(r["label"]),
                      "keyword": r["keyword"]} for n, r in json_lines(data / path)], CSL)
            for split, path in files.items()}


def cmrc2018(data):
    splits = {}
    for split, name in (("train", "train"), ("validation", "dev")):
        rows = []
        for article in json.loads((data / f"cmrc2018/{name}.json").read_text(encoding="utf-8"))["data"]:
            for paragraph in article["paragraphs"]:
                for qa in paragraph["qas"]:  # clue.py strips texts and keeps answer_start
                    rows.append({"id": qa["id"], "context": paragraph["context"].strip(),
                                 "question": qa["question"].strip(),
                                 "answers": {"text": [a["text"].strip() for a in qa["answers"]],
                                             "answer_start": [a["answer_start"] for a in qa["answers"]]}})
        splits[split] = (rows, CMRC)
    return splits


def c3(data):
    splits = {}
    for split, name in (("train", "train"), ("validation", "dev")):
        documents = [doc for half in "dm"
                     for doc in json.loads((data / f"c3/c3-{half}-{name}.json").read_text(encoding="utf-8"))]
        rows = [{"id": index, "context": doc[0], "question": q["question"], "choice": q["choice"],
                 "answer": q["answer"]} for index, doc in enumerate(documents) for q in doc[1]]
        splits[split] = (rows, C3)
    return splits


def chid(data):
    """FewCLUE's one-blank records in CLUE's layout: a numbered blank, answers per blank."""
    splits, blank = {}, 0
    for split, name in (("train", "train_few_all"), ("validation", "dev_few_all"), ("test", "test_public")):
        rows = []
        for n, r in json_lines(data / f"fewclue/chid/{name}.json"):
            marker, blank = f"#idiom{blank:06d}#", blank + 1
            answer = r.get("answer")
            rows.append({"idx": n, "candidates": r["candidates"],
                         "content": [r["content"].replace("#idiom#", marker)],
                         "answers": {"text": [] if answer is None else [r["candidates"][answer]],
                                     "candidate_id": [] if answer is None else [answer]}})
        splits[split] = (rows, CHID)
    return splits


CONVERT = {convert.__name__: convert for convert in
           (afqmc, cmnli, ocnli, tnews, iflytek, cluewsc2020, csl, cmrc2018, c3, chid)}


@pytest.fixture(scope="module")
def hub(shared_data, tmp_path_factory):
    """hub(config) -> a data root holding clue/<config>/<split>-00000-of-00001.parquet,
    each config converted once, when a test first needs it."""
    root = tmp_path_factory.mktemp("hub")

    def convert(config):
        folder = root / "clue" / config
        if not folder.exists():
            folder.mkdir(parents=True)
            for split, (rows, schema) in CONVERT[config](shared_data).items():
                pq.write_table(pa.Table.from_pylist(rows, schema=schema),
                               folder / f"{split}-00000-of-00001.parquet")
        return root
    return convert


@pytest.fixture(scope="module")
def hub_registry():
    return load_paths([HUB_SPECS])


def read(task, split, root):
    report = ReadReport()
    return list(read_task(task, split, root, report)), report


# ----- the same examples -----------------------------------------------------------------

def pair_key(e):
    return e.text, e.text_b, e.label


CASES = [  # config, native task, hub task, splits, what must be equal
    ("afqmc", "afqmc", "hub_clue_afqmc", ["dev", "test"], pair_key),
    ("cmnli", "cmnli", "hub_clue_cmnli", ["dev", "test"], pair_key),
    ("ocnli", "ocnli", "hub_clue_ocnli", ["dev", "test"], pair_key),
    ("tnews", "tnews", "hub_clue_tnews", ["dev"], lambda e: (e.text, e.label)),  # no keywords on the hub
    ("iflytek", "iflytek", "hub_clue_iflytek", ["train", "dev"], pair_key),
    ("csl", "csl", "hub_clue_csl", ["train", "dev"], lambda e: (e.text, e.text_b, e.label, e.id)),
    ("cluewsc2020", "cluewsc", "hub_clue_cluewsc", ["train", "dev"],
     lambda e: (e.text, e.span1, e.span2, e.label)),
    ("chid", "chid", "hub_clue_chid", ["train", "dev", "test"],
     lambda e: (e.context, e.question, e.choices, e.label)),
]
# The three large train splits (34k-53k rows, ~10 s together): `make test-slow`.
SLOW_CASES = [pytest.param(*case, marks=pytest.mark.slow) for case in [
    ("afqmc", "afqmc", "hub_clue_afqmc", ["train"], pair_key),
    ("ocnli", "ocnli", "hub_clue_ocnli", ["train"], pair_key),
    ("tnews", "tnews", "hub_clue_tnews", ["train"], lambda e: (e.text, e.label)),
]]


@pytest.mark.parametrize("config,native,hub_task,splits,key", CASES + SLOW_CASES,
                         ids=[c[0] for c in CASES] + [f"{c.values[0]}-train" for c in SLOW_CASES])
def test_hub_specs_read_the_native_examples(config, native, hub_task, splits, key, shared_data, hub,
                                            hub_registry):
    for split in splits:
        expected, _ = read(load_registry().tasks[native], split, shared_data)
        got, report = read(hub_registry.tasks[hub_task], split, hub(config))
        assert len(got) == len(expected) > 0, (native, split)
        assert [key(e) for e in got] == [key(e) for e in expected], (native, split)
        assert report.total_skipped == 0 and report.total_lost == 0
        if native == "tnews":
            assert all(e.text_b is None for e in got)


def test_labels_come_out_as_names_not_indexes(shared_data, hub, hub_registry):
    got, _ = read(hub_registry.tasks["hub_clue_tnews"], "dev", hub("tnews"))
    first = json.loads((shared_data / "tnews/dev.json").read_text(encoding="utf-8").split("\n")[0])
    assert got[0].label == first["label_desc"] == "news_entertainment"  # code 102, index 2
    # index 5 is code 106 (there is no 105)
    house = next(e for e in got if e.label == "news_house")
    assert house.text in {json.loads(line)["sentence"] for line in
                          (shared_data / "tnews/dev.json").read_text(encoding="utf-8").splitlines()
                          if json.loads(line)["label"] == "106"}
    wsc, _ = read(hub_registry.tasks["hub_clue_cluewsc"], "dev", hub("cluewsc2020"))
    raw = [json.loads(line)
           for line in (shared_data / "cluewsc2020/dev.json").read_text(encoding="utf-8").splitlines()]
    assert [e.label for e in wsc] == [r["label"] for r in raw]  # hub label 0 is "true"
    assert [e.id for e in wsc] == list(range(len(raw)))  # idx: the line number, not the record's idx
    assert [e.id for e in wsc] != [r["idx"] for r in raw]


def test_unlabelled_test_splits(hub, hub_registry):
    got, report = read(hub_registry.tasks["hub_clue_afqmc"], "test", hub("afqmc"))
    assert len(got) == 3861 and all(e.label is None for e in got)
    assert report.units["unlabelled"] == 3861


def test_c3_halves_in_one_task_with_numbered_ids(shared_data, hub, hub_registry):
    registry = load_registry()
    for split in ("train", "dev"):
        expected = [e for name in ("c3_d", "c3_m") for e in read(registry.tasks[name], split, shared_data)[0]]
        got, report = read(hub_registry.tasks["hub_clue_c3"], split, hub("c3"))
        assert [(e.context, e.question, e.choices, e.label) for e in got] == \
               [(e.context, e.question, e.choices, e.label) for e in expected]
        # native ids are `{C3 id}-{question}`, hub ids `{document number}-{question}`
        assert [e.id.rsplit("-", 1)[1] for e in got] == [e.id.rsplit("-", 1)[1] for e in expected]
        assert len(set(e.id for e in got)) == len(got)
    assert got[0].id == "0-0" and len(got) == 1825 + 1991


def stripped(span):
    lead = len(span.text) - len(span.text.lstrip())
    return span.start + lead, span.text.strip()


def leading_space_answers(path):
    """CMRC answers starting with whitespace at a correct offset: the ones the hub shifts."""
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    return [a for article in data for p in article["paragraphs"] for qa in p["qas"] for a in qa["answers"]
            if a["text"][:1].isspace() and p["context"][a["answer_start"]:].startswith(a["text"])]


def test_cmrc2018_answers_stripped_by_the_hub(shared_data, hub, hub_registry):
    task = hub_registry.tasks["hub_clue_cmrc2018"]
    for split, shifted in (("train", 18), ("dev", 10)):
        expected, native_report = read(load_registry().tasks["cmrc2018"], split, shared_data)
        got, report = read(task, split, hub("cmrc2018"))
        assert ([(e.id, e.question, e.context) for e in got]
                == [(e.id, e.question, e.context) for e in expected])
        assert [[stripped(a) for a in e.answers] for e in got] == \
               [[stripped(a) for a in e.answers] for e in expected]
        assert report.spans_lost == native_report.spans_lost  # CMRC's own bad offsets, no more
        moved = report.units["answer starts moved past stripped whitespace"]
        assert moved == len(leading_space_answers(shared_data / f"cmrc2018/{split}.json")) == shifted
    # Without the option those answers are lost spans: the hub's trap.
    _, plain_report = read(dataclasses.replace(task, options={}), "dev", hub("cmrc2018"))
    assert plain_report.total_lost == native_report.total_lost + moved


# ----- the format on small files -------------------------------------------------------------

def write(path, rows, schema=None):
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


def test_class_labels_and_unlabelled(tmp_path):
    path = write(tmp_path / "x.parquet", [{"s": "a", "label": 1}, {"s": "b", "label": -1},
                                          {"s": "c", "label": 7}, {"s": "d", "label": 0}])
    report = ReadReport()
    got = list(read_files("parquet", path, {"class_labels": ["neg", "pos"]}, {"text": "s", "label": "label"},
                          "classification", ["neg", "pos"], report))
    assert [(e.text, e.label) for e in got] == [("a", "pos"), ("b", None), ("d", "neg")]
    assert dict(report.skipped) == {"class label 7 is outside class_labels (0-1)": 1}
    assert report.places[("skipped", "class label 7 is outside class_labels (0-1)")] == [f"{path} (row 2)"]
    by_task = list(read_files("parquet", path, {"class_labels": "labels"}, {"text": "s", "label": "label"},
                              "classification", ["neg", "pos"], ReadReport()))
    assert [e.label for e in by_task] == ["pos", None, "neg"]


def test_dotted_keys_into_structs_and_lists(tmp_path):
    path = write(tmp_path / "x.parquet", [{"q": {"a": "上", "b": ["x", "y"]}, "y": {"v": "1"}}])
    got = list(read_files("parquet", path, {"join": "|"}, {"text": "q.a", "text_b": "q.b", "label": "y.v"},
                          "matching", ["0", "1"]))
    assert [(e.text, e.text_b, e.label) for e in got] == [("上", "x|y", "1")]


def test_user_errors_name_the_file_and_the_fix(tmp_path, monkeypatch):
    path = write(tmp_path / "x.parquet", [{"s": "a", "label": 1}])
    with pytest.raises(ValueError,
                       match=r"x.parquet: fields.text: no column 'sentence'; the file has s, label"):
        list(read_files("parquet", path, None, {"text": "sentence", "label": "label"}, "classification",
                        ["1"]))
    with pytest.raises(ValueError, match=r"needs `fields:` for answers, answer_starts in a mrc_span task"):
        list(read_files("parquet", path, None, {"context": "s", "question": "s"}, "mrc_span"))
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(ValueError, match=r"bad.parquet: not a readable parquet file"):
        list(read_files("parquet", tmp_path / "bad.parquet", None, {"text": "s", "label": "l"},
                        "classification"))
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ValueError, match=r"needs pyarrow.*pip install mtl_framework\[parquet\]") as error:
        list(read_files("parquet", path, None, {"text": "s", "label": "label"}, "classification", ["1"]))
    assert isinstance(error.value, UserError)  # `mtl train` prints it as one line, exit 2


def test_missing_pyarrow_is_one_line_from_the_cli(tmp_path, monkeypatch, capsys):
    from mtl_framework import cli

    (tmp_path / "clue/afqmc").mkdir(parents=True)
    write(tmp_path / "clue/afqmc/validation-00000-of-00001.parquet",
          [{"sentence1": "a", "sentence2": "b", "label": 1, "idx": 0}])
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    code = cli.main(["data", "stats", "hub_clue_afqmc", "--specs", str(HUB_SPECS), "--split", "dev",
                     "--data-root", str(tmp_path), "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert code == 1 and "pip install mtl_framework[parquet]" in rows[0]["error"]
    assert "\n" not in rows[0]["error"]


def test_cloze_blanks_and_answers(tmp_path):
    rows = [{"content": ["甲#idiom000001#乙#idiom000002#", "丙#idiom000003#"], "candidates": ["A", "B", "C"],
             "answers": {"candidate_id": [2, 0, 1]}},
            {"content": ["#idiom000004#"], "candidates": ["A", "B"], "answers": {"candidate_id": [0, 1]}},
            {"content": ["丁#idiom000005#"], "candidates": ["A", "B"], "answers": {"candidate_id": []}}]
    report = ReadReport()
    got = list(read_files("parquet", write(tmp_path / "c.parquet", rows), None,
                          {"context": "content", "choices": "candidates", "label": "answers.candidate_id"},
                          "cloze", None, report))
    assert [(e.context, e.label, e.id) for e in got] == [
        ("甲#idiom#乙#", 2, "#idiom000001#"), ("甲#乙#idiom#", 0, "#idiom000002#"),
        ("丙#idiom#", 1, "#idiom000003#"), ("丁#idiom#", None, "#idiom000005#")]
    assert dict(report.skipped) == {"2 answers for 1 blanks": 1}


def test_answer_start_moved_only_past_stripped_whitespace(tmp_path):
    rows = [{"c": "天气 很好。", "q": "?", "a": {"t": ["很好"], "s": [2]}},   # was " 很好" at 2
            {"c": "天气很好。", "q": "?", "a": {"t": ["很好"], "s": [0]}}]    # a wrong offset: lost
    report = ReadReport()
    fields = {"context": "c", "question": "q", "answers": "a.t", "answer_starts": "a.s"}
    got = list(read_files("parquet", write(tmp_path / "m.parquet", rows), {"answer_text_stripped": True},
                          fields, "mrc_span", None, report))
    assert [(a.start, a.end, a.text) for e in got for a in e.answers] == [(3, 5, "很好")]
    assert report.units["answer starts moved past stripped whitespace"] == 1
    assert dict(report.spans_lost) == {"answer_start does not point at the answer text": 1}


def test_hub_specs_stay_out_of_the_builtin_list():
    builtin = load_registry()
    # the catalog's 92 and 16 sentence-embedding tasks (issue 43)
    assert len(builtin.tasks) == 108 and not any(name.startswith("hub_clue") for name in builtin.tasks)
    both = load_registry([HUB_SPECS])
    assert len(both.tasks) == 118
    assert {t.format for t in load_paths([HUB_SPECS]).tasks.values()} == {"parquet"}
    assert sorted(p.stem for p in Path(HUB_SPECS).glob("*.yaml")) == sorted(
        ["afqmc", "tnews", "iflytek", "cmnli", "ocnli", "cluewsc2020", "csl", "cmrc2018", "c3", "chid"])
    assert re.fullmatch(r"clue/\w+/(train|validation|test)-00000-of-00001\.parquet",
                        load_paths([HUB_SPECS]).tasks["hub_clue_c3"].files["dev"])


def test_c3_test_rows_unlabelled_and_ids_numbered_per_document(tmp_path, hub_registry):
    rows = [{"id": 5, "context": ["男：甲", "女：乙"], "question": "问", "choice": ["甲", "乙"],
             "answer": ""},
            {"id": 5, "context": ["男：甲", "女：乙"], "question": "再问", "choice": ["甲", "乙"],
             "answer": "乙"},
            {"id": 6, "context": ["丙"], "question": "问", "choice": ["丙", "丁"], "answer": "戊"}]
    task = hub_registry.tasks["hub_clue_c3"]
    report = ReadReport()
    got = list(read_files("parquet", write(tmp_path / "c3.parquet", rows, C3), task.options, task.fields,
                          "multiple_choice", None, report))
    assert [(e.context, e.label, e.id) for e in got] == [("男：甲\n女：乙", None, "5-0"),
                                                          ("男：甲\n女：乙", 1, "5-1")]
    assert dict(report.skipped) == {"label is not one of the choices": 1}


def test_spec_sets_by_name_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert len(load_registry(["hub_clue"]).tasks) == len(load_registry(["task_specs/hub_clue"]).tasks) == 118
    (tmp_path / "hub_clue").mkdir()  # a folder of that name here wins
    with pytest.raises(Exception, match="no \\*.yaml spec files"):
        load_registry(["hub_clue"])
