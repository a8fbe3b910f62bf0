"""The built-in specs against the excerpts of real release files in ../shared/real_formats.

Every excerpt file there is read by a spec (or listed below with why not), and
each task split's example count equals a count taken from the raw file itself
(json/csv/line counting here, never through an adapter). No row may be skipped
except where the release itself leaves it unusable: those are listed by
file:line (or question id) in UNUSABLE. Also: each spec's `verified:` key
against the folders present in ../shared/data and ../shared/real_formats.

Skipped when ../shared/real_formats is absent (a fresh clone).
"""
import csv
import dataclasses
import json
import os
import re
from collections import Counter
from pathlib import Path

import pytest

from data_adapters import MissingDataFile, ReadReport, qa, read_task
from mtl_framework.config.registry import load_registry

from conftest import SHARED_DATA

REAL = Path(os.environ.get("MTL_REAL_FORMATS", SHARED_DATA.parent / "real_formats"))
pytestmark = pytest.mark.skipif(not REAL.is_dir(), reason=f"{REAL} not found (real release excerpts)")

REGISTRY = load_registry()


# ----- raw counts: straight from the files ------------------------------------

def path(relative):
    return REAL / relative


def lines(relative):
    """Non-blank lines (BOM and CRLF as released)."""
    with open(path(relative), encoding="utf-8-sig", newline="") as f:
        return [line for line in f.read().split("\n") if line.strip()]


def json_lines(relative):
    return [json.loads(line) for line in lines(relative)]


def json_array(relative):
    with open(path(relative), encoding="utf-8") as f:
        return json.load(f)


def csv_rows(relative, header=True):
    with open(path(relative), encoding="utf-8-sig", newline="") as f:
        rows = [row for row in csv.reader(f) if row]
    return rows[1:] if header else rows


def distinct(values):
    return len(dict.fromkeys(values))


def sentences(relative):
    """Blank-line separated sentences of a char-per-line tag file."""
    text = path(relative).read_text(encoding="utf-8").replace("\r\n", "\n")
    return [block for block in text.split("\n\n") if block.strip()]


def squad_questions(relative):
    return [q for a in json_array(relative)["data"] for p in a["paragraphs"] for q in p["qas"]]


def cjrc_yes_no_only(question):
    """A question whose answers (empty texts aside) are all YES/NO: no span to learn."""
    texts = [a["text"] for a in question["answers"] if a["text"]]
    return bool(texts) and all(t in ("YES", "NO") for t in texts)


def cmrc2019_blanks(relative):
    return sum(len(item["answers"]) for item in json_array(relative)["data"])


def multi_passage(relative):
    """(passages of records that have a question, their count of records without one)."""
    records = json_array(relative)
    return (sum(len(r["passages"]) for r in records if r.get("question")),
            sum(1 for r in records if not r.get("question")))


# (task, split) -> (files read, raw example count). The files are the spec's own;
# a file saved under another name than the spec's is read by pointing the task at
# it (REPOINTED), as docs/task_specs.md tells a user to.
RAW = {
    ("atec", "train"): lambda: len(lines("atec/atec_nlp_sim_train.csv")),
    ("boson", "train"): lambda: len(lines("boson_ner/origindata.txt")),
    ("cjrc_span", "dev"): lambda: sum(not cjrc_yes_no_only(q) for q in
                                      squad_questions("cail2019_rc/dev_ground_truth.json")),
    ("cjrc_cls", "dev"): lambda: len(squad_questions("cail2019_rc/dev_ground_truth.json")),
    ("cail2019_scm", "test"): lambda: len(lines("cail2019_scm/input.txt")),
    ("ccks19_subject", "train"): lambda: distinct(
        r[1] for r in csv_rows("ccks19_event/event_type_entity_extract_train.csv", header=False)),
    ("chinese_sts", "train"): lambda: len(lines("chinese_sts/simtrain_to05sts.txt")),
    ("cdn_num", "train"): lambda: len(json_array("chip_cdn/CHIP-CDN_train.json")),
    ("cdn_num", "dev"): lambda: len(json_array("chip_cdn/CHIP-CDN_dev.json")),
    ("chip_ctc", "train"): lambda: len(json_array("chip_ctc/CHIP-CTC_train.json")),
    ("chip_ctc", "dev"): lambda: len(json_array("chip_ctc/CHIP-CTC_dev.json")),
    ("chip_sts", "train"): lambda: len(json_array("chip_sts/CHIP-STS_train.json")),
    ("chip_sts", "dev"): lambda: len(json_array("chip_sts/CHIP-STS_dev.json")),
    ("clue_emotion", "dev"): lambda: len(lines("clue_emotion/valid.txt")),
    ("clue_emotion", "test"): lambda: len(lines("clue_emotion/test.txt")),
    ("cmeee_flat", "train"): lambda: len(json_array("cmeee/CMeEE_train.json")),
    ("cmeee_flat", "dev"): lambda: len(json_array("cmeee/CMeEE_dev.json")),
    ("cmeee_sym", "train"): lambda: len(json_array("cmeee/CMeEE_train.json")),
    ("cmeee_sym", "dev"): lambda: len(json_array("cmeee/CMeEE_dev.json")),
    ("cmeie_ent", "train"): lambda: len(lines("cmeie/CMeIE_train.json")),
    ("cmeie_ent", "dev"): lambda: len(lines("cmeie/CMeIE_dev.json")),
    ("cmeie_spo", "train"): lambda: len(lines("cmeie/CMeIE_train.json")),
    ("cmeie_spo", "dev"): lambda: len(lines("cmeie/CMeIE_dev.json")),
    ("cmrc2017", "dev"): lambda: sum(line.startswith("<qid_") for line in
                                     lines("cmrc2017/validation/cloze.valid.doc_query")),
    ("cmrc2019", "dev"): lambda: (cmrc2019_blanks("cmrc2019/cmrc2019_trial.json")
                                  + cmrc2019_blanks("cmrc2019/cmrc2019_dev.json")),
    ("cote_bd", "train"): lambda: distinct(r["s"] for r in json_lines("cote/baidu/train.txt")),
    ("cote_dp", "test"): lambda: distinct(r["s"] for r in json_lines("cote/dianping/test.txt")),
    ("cote_mfw", "test"): lambda: distinct(r["s"] for r in json_lines("cote/mafengwo/test.txt")),
    ("duee_trigger", "dev"): lambda: len(lines("duee1/dev.json")),
    ("duee_arg", "dev"): lambda: len(lines("duee1/dev.json")),
    ("finre", "train"): lambda: distinct(line.split("\t")[3] for line in lines("finre/train.txt")),
    ("finre", "dev"): lambda: distinct(line.split("\t")[3] for line in lines("finre/valid.txt")),
    ("finre", "test"): lambda: distinct(line.split("\t")[3] for line in lines("finre/test.txt")),
    ("kuake_qic", "train"): lambda: len(json_array("kuake_qic/KUAKE-QIC_train.json")),
    ("kuake_qic", "dev"): lambda: len(json_array("kuake_qic/KUAKE-QIC_dev.json")),
    ("kuake_qqr", "train"): lambda: len(json_array("kuake_qqr/KUAKE-QQR_train.json")),
    ("kuake_qqr", "dev"): lambda: len(json_array("kuake_qqr/KUAKE-QQR_dev.json")),
    ("kuake_qtr", "train"): lambda: len(json_array("kuake_qtr/KUAKE-QTR_train.json")),
    ("kuake_qtr", "dev"): lambda: len(json_array("kuake_qtr/KUAKE-QTR_dev.json")),
    ("nlpcc2017", "test"): lambda: len(lines("nlpcc2017_news/test.full/test.char")),
    ("shopping_cat", "train"): lambda: len(csv_rows("online_shopping/online_shopping_10_cats.csv")),
    ("shopping_sent", "train"): lambda: len(csv_rows("online_shopping/online_shopping_10_cats.csv")),
    ("qbqtc", "dev"): lambda: len(lines("qbqtc/dev.json")),
    ("sanwen_ner", "dev"): lambda: len(sentences("sanwen/ner/validation.txt")),
    ("sanwen_ner", "test"): lambda: len(sentences("sanwen/ner/test.txt")),
    ("sanwen_re", "train"): lambda: distinct(line.rstrip("\r").split("\t")[3]
                                             for line in lines("sanwen/re/train.txt")),
    ("sanwen_re", "dev"): lambda: distinct(line.rstrip("\r").split("\t")[3]
                                           for line in lines("sanwen/re/valid.txt")),
    ("sanwen_re", "test"): lambda: distinct(line.rstrip("\r").split("\t")[3]
                                            for line in lines("sanwen/re/test.txt")),
    ("smp_usual", "dev"): lambda: len(json_array("smp2020_ewect/usual_eval_labeled.txt")),
    ("smp_virus", "train"): lambda: len(json_array("smp2020_ewect/virus_train.txt")),
    ("smp_virus", "dev"): lambda: len(json_array("smp2020_ewect/virus_eval_labeled.txt")),
    ("sogouqa", "train"): lambda: multi_passage("sogouqa/SogouQA.json")[0],
    ("sohu_A", "train"): lambda: len(lines("sohu2021/samples.txt")),
    ("webqa", "train"): lambda: multi_passage("webqa/WebQA.json")[0],
    ("weibo_senti", "train"): lambda: len(csv_rows("weibo_senti_100k/weibo_senti_100k.csv")),
    ("yidu_s4k", "train"): lambda: len(lines("yidu_s4k/subtask1_training_part1.txt")),
    ("yidu_s4k", "test"): lambda: len(lines("yidu_s4k/subtask1_testing_part2.txt")),
}

# Excerpts saved under another name than the spec's file (SOURCES.tsv says why).
REPOINTED = {
    ("cail2019_scm", "test"): "cail2019_scm/input.txt",  # the competition's unlabelled sample input
    ("sohu_A", "train"): "sohu2021/samples.txt",  # the host baseline's sample of A pairs
}

# Rows the release itself leaves unusable: (task, split) -> {reason: [places]}.
UNUSABLE = {
    # A record with 8 passages but no question (and no id): nothing to ask.
    ("sogouqa", "train"): {"question missing or empty": [f"{REAL / 'sogouqa/SogouQA.json'}:968"]},
    ("webqa", "train"): {"question missing or empty": [f"{REAL / 'webqa/WebQA.json'}:948"]},
}

# Skipped on purpose by the task's meaning, not by a flaw of the file: the span
# task leaves YES/NO questions to cjrc_cls (counted raw by cjrc_yes_no_only).
BY_DESIGN = {("cjrc_span", "dev"): "YES/NO answer, not a span"}

# Excerpts that are label lists or schemas, checked in test_label_and_schema_files.
LABEL_FILES = {"cail2018/accu.txt", "cail2018/law.txt", "cmeie/53_schemas.json",
               "duee1/event_schema.json", "finre/relation2id.txt", "sanwen/re/relation2id.txt",
               "ipre/relation2id.txt"}
# Excerpts no split reads, and why (each checked in its own test below).
NOT_READ = {
    "qbqtc/test.json": "the unlabelled private test; the spec's test is test_public.json",
    "ipre/dev/sent_relation_dev.txt": "its sentence file sent_dev.txt is not in any readable copy",
}


def task(name, split):
    spec = REGISTRY.tasks[name]
    if (name, split) in REPOINTED:
        spec = dataclasses.replace(spec, files={split: REPOINTED[name, split]})
    return spec


_read = {}


def read(name, split):
    if (name, split) not in _read:
        report = ReadReport()
        examples = list(read_task(task(name, split), split, REAL, report))
        _read[name, split] = examples, report
    return _read[name, split]


def files_read(name, split):
    spec = task(name, split)
    listed = spec.files[split] if isinstance(spec.files[split], list) else [spec.files[split]]
    found = []
    for relative in listed:
        names = [relative, *spec.file_aliases.get(relative, ())]
        found += [n for n in names if (REAL / n).is_file()]
    return found


@pytest.mark.parametrize("name,split", sorted(RAW), ids=lambda v: str(v))
def test_each_split_reads_every_usable_row(name, split):
    examples, report = read(name, split)
    assert len(examples) == RAW[name, split]()
    skipped = {reason: n for reason, n in report.skipped.items() if reason != BY_DESIGN.get((name, split))}
    expected = UNUSABLE.get((name, split), {})
    assert skipped == {reason: len(places) for reason, places in expected.items()}
    for reason, places in expected.items():
        assert report.places[("skipped", reason)] == places
    assert report.total_lost == 0


def test_every_excerpt_is_read_or_said_why_not():
    excerpts = {str(p.relative_to(REAL)) for p in REAL.rglob("*")
                if p.is_file() and p.name not in ("README.md", "SOURCES.tsv")}
    read_by_splits = {f for key in RAW for f in files_read(*key)}
    assert excerpts == read_by_splits | LABEL_FILES | set(NOT_READ)


def test_label_and_schema_files():
    # cail2018: the spec's label files are the publisher's (resolved under the data root).
    assert REGISTRY.tasks["cail_charge"].resolve_labels(REAL) == lines("cail2018/accu.txt")
    assert REGISTRY.tasks["cail_article"].resolve_labels(REAL) == lines("cail2018/law.txt")
    assert len(lines("cail2018/accu.txt")) == 202 and len(lines("cail2018/law.txt")) == 183
    schemas = json_lines("cmeie/53_schemas.json")
    assert sorted({s["predicate"] for s in schemas}) == sorted(REGISTRY.tasks["cmeie_spo"].resolve_labels())
    events = json_lines("duee1/event_schema.json")
    assert [e["event_type"] for e in events] == [label.split(":")[0] for label in
                                                 REGISTRY.tasks["duee_trigger"].resolve_labels()]
    roles = [f"{e['event_type']}:{r['role']}" for e in events for r in e["role_list"]]
    assert roles == REGISTRY.tasks["duee_arg"].resolve_labels()
    for folder, name in (("finre", "finre"), ("sanwen/re", "sanwen_re"), ("ipre", "ipre")):
        relations = [line.split()[0] for line in lines(f"{folder}/relation2id.txt")]
        labels = REGISTRY.tasks[name].resolve_labels()
        assert set(labels) <= set(relations) and len(relations) - len(labels) <= 1, name


def test_files_not_read_and_why():
    private = json_lines("qbqtc/test.json")
    assert private and all("label" not in record for record in private)
    assert REGISTRY.tasks["qbqtc"].files["test"] == "qbqtc/test_public.json"
    ids = [line.split("\t")[0] for line in lines("ipre/dev/sent_relation_dev.txt")]
    assert len(ids) == 300 and all(i.startswith("DEV_SENT_ID_") for i in ids)
    with pytest.raises(MissingDataFile, match=r"dev file of task 'ipre' not found: .*sent_dev\.txt"):
        list(read_task(REGISTRY.tasks["ipre"], "dev", REAL))


# ----- what the releases mean, checked against the raw files -----------------

def test_cdn_num_is_the_cblue_baseline_count():
    examples, _ = read("cdn_num", "train")
    raw = json_array("chip_cdn/CHIP-CDN_train.json")
    # cblue/data/data_process.py _get_num_samples: min(number of terms, 3) - 1
    assert [e.label for e in examples] == [str(min(len(r["normalized_result"].split("##")), 3) - 1)
                                           for r in raw]
    assert [e.text for e in examples] == [r["text"] for r in raw]


def test_cmrc2017_answers_are_the_answer_word_wherever_the_document_has_it():
    examples, _ = read("cmrc2017", "dev")
    answers = dict(line.split(" ||| ") for line in lines("cmrc2017/validation/cloze.valid.answer"))
    assert [e.id for e in examples] == list(answers)
    for example in examples:
        assert example.answers and all(example.context[a.start:a.end] == answers[example.id]
                                       for a in example.answers)
        # the segmentation spaces are gone: none is left between two Chinese characters
        assert not re.search(r"[\u4e00-\u9fff] +[\u4e00-\u9fff]", example.context + example.question)
    # Every occurrence, as whole words of the segmented document: counted raw.
    documents, words = [], []
    for line in lines("cmrc2017/validation/cloze.valid.doc_query"):
        key, text = line.split(" ||| ", 1)
        if key.startswith("<qid_"):
            documents.append((key, words))
            words = []
        else:
            words += text.split()
    assert [len(e.answers) for e in examples] == [words.count(answers[key]) for key, words in documents]


def test_cote_targets_are_placed_at_their_first_occurrence():
    examples, _ = read("cote_bd", "train")
    raw = json_lines("cote/baidu/train.txt")
    assert [(e.text, [(x.start, x.end) for x in e.entities]) for e in examples] == [
        (r["s"], [(r["s"].find(r["ot"]), r["s"].find(r["ot"]) + len(r["ot"]))]) for r in raw]


def test_boson_marks_round_trip_and_escapes_become_line_breaks():
    examples, report = read("boson", "train")
    raw = lines("boson_ner/origindata.txt")
    escapes = sum(line.count("\\n") for line in raw)
    assert report.repaired["literal \\n escapes read as line breaks"] == escapes == 70
    marks = sum(line.count("{{") for line in raw)
    assert sum(len(e.entities) for e in examples) == marks
    for example in examples:
        assert "{{" not in example.text and "}}" not in example.text
        for entity in example.entities:
            mention = example.text[entity.start:entity.end]
            assert mention == mention.strip() and mention


def test_ccks19_texts_without_a_target_event_are_negatives():
    examples, report = read("ccks19_subject", "train")
    rows = csv_rows("ccks19_event/event_type_entity_extract_train.csv", header=False)
    only_other = {r[1] for r in rows} - {r[1] for r in rows if r[2] != "其他"}
    negatives = [e for e in examples if not e.events]
    assert {e.text for e in negatives} == only_other and only_other
    assert report.filtered["其他 rows: the text kept with no event (a negative)"] == sum(
        r[2] == "其他" for r in rows)


def test_cjrc_kinds_as_its_scorer_reads_the_answers():
    examples, report = read("cjrc_cls", "dev")
    questions = squad_questions("cail2019_rc/dev_ground_truth.json")
    assert [e.label for e in examples] == [qa.cjrc_kind(q["answers"]) for q in questions]
    # is_impossible "true" on a question whose answers are real: read by the answers.
    contradicted = [q for q in questions if q["is_impossible"] == "true"
                    and any(a["text"] for a in q["answers"])]
    assert contradicted and report.repaired == {
        'is_impossible "true" with answers: read as the scorer does (by the answers)': len(contradicted)}
    labels = Counter(e.label for e in examples)
    assert labels["YES"] == sum(qa.cjrc_kind(q["answers"]) == "YES" for q in questions) > 0
    # the span task leaves exactly the YES/NO-only questions to this one
    _, span_report = read("cjrc_span", "dev")
    assert span_report.skipped == {BY_DESIGN["cjrc_span", "dev"]: sum(map(cjrc_yes_no_only, questions))}


def test_sophonplus_byte_order_mark_in_the_first_field_is_removed():
    for name, relative in (("weibo_senti", "weibo_senti_100k/weibo_senti_100k.csv"),
                           ("shopping_cat", "online_shopping/online_shopping_10_cats.csv")):
        examples, report = read(name, "train")
        raw = csv_rows(relative)
        assert any(cell.startswith("\ufeff") for cell in raw[0])
        assert examples[0].text == raw[0][-1].lstrip("\ufeff")
        assert report.repaired == {"U+FEFF (byte order mark) at the start of a field, removed": 1}


def test_optional_files_absent_are_reported_and_the_rest_read():
    examples, report = read("atec", "train")
    assert report.absent == [str(REAL / "atec/atec_nlp_sim_train_add.csv")]
    assert len(examples) == RAW["atec", "train"]()


def test_aliases_read_the_mirror_names():
    assert files_read("boson", "train") == ["boson_ner/origindata.txt"]
    assert files_read("yidu_s4k", "test") == ["yidu_s4k/subtask1_testing_part2.txt"]
    assert files_read("duee_trigger", "dev") == ["duee1/dev.json"]


# ----- `verified:` against the folders present -------------------------------

def folders(dataset):
    """First path component of each file the dataset's specs name."""
    tops = set()
    for name in dataset.tasks:
        for listed in REGISTRY.tasks[name].files.values():
            for relative in listed if isinstance(listed, list) else [listed]:
                tops.add(Path(relative).parts[0])
    return tops


def test_verified_says_where_the_real_files_are():
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} not found: `data` cannot be checked")
    where = {"data": SHARED_DATA, "real_formats": REAL}
    for dataset in REGISTRY.datasets.values():
        assert dataset.verified in ("data", "real_formats", "documentation"), dataset.id
        present = {kind for kind, root in where.items() if any((root / f).is_dir() for f in folders(dataset))}
        if dataset.verified == "documentation":
            assert not present, f"{dataset.id}: says documentation, but files are in {present}"
        else:
            assert dataset.verified in present, f"{dataset.id}: says {dataset.verified}, found {present}"
    counts = Counter(d.verified for d in REGISTRY.datasets.values())
    assert counts == {"data": 27, "real_formats": 34, "documentation": 16}
