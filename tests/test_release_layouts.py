"""What issue 23 added for real releases, on small files written here: optional
files and mirror names in `files:`, `verified:`, and the formats and options that
read publishers' layouts (cmrc2017_cloze, mention_jsonl, cdn_json, xnli_tsv,
BosonNLP marks, bracketed CAIL2018 charges, ReCO's alternatives, IPRE's parts).
No ../shared needed."""
import json

import pytest

from data_adapters import MissingDataFile, ReadReport, read_files, read_task
from data_adapters.ner_spans import InlineNerAdapter
from mtl_framework import cli
from mtl_framework.config.registry import load_paths, validate_paths
from mtl_framework.plan import missing_files
from mtl_framework.prepare.cache import data_files

SPEC = """dataset: pairs
verified: documentation
format: delimited
files:
  train:
    - pairs/a.tsv
    - path: pairs/b.tsv
      optional: true
  dev:
    path: pairs/dev.tsv
    aliases: [pairs/valid.tsv]
  test: pairs/test.tsv
fields: {text: 0, text_b: 1, label: 2}
tasks:
  - name: pairs
    type: matching
    labels: ["0", "1"]
    max_length: 32
    metric: accuracy
"""


@pytest.fixture
def pairs(tmp_path):
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "pairs.yaml").write_text(SPEC, encoding="utf-8")
    data = tmp_path / "data" / "pairs"
    data.mkdir(parents=True)
    (data / "a.tsv").write_text("一\t二\t1\n三\t四\t0\n", encoding="utf-8")
    (data / "valid.tsv").write_text("五\t六\t1\n", encoding="utf-8")
    return load_paths([tmp_path / "specs"]).tasks["pairs"], tmp_path / "data"


def read(task, split, root):
    report = ReadReport()
    return list(read_task(task, split, root, report)), report


def test_an_absent_optional_file_is_reported_and_the_others_read(pairs):
    task, root = pairs
    assert task.files["train"] == ["pairs/a.tsv", "pairs/b.tsv"]
    assert task.optional_files == ("pairs/b.tsv",)
    examples, report = read(task, "train", root)
    assert [e.text for e in examples] == ["一", "三"]
    assert report.absent == [str(root / "pairs/b.tsv")]
    assert "optional file(s) absent, not read: " + str(root / "pairs/b.tsv") in report.summary()
    (root / "pairs/b.tsv").write_text("七\t八\t0\n", encoding="utf-8")
    examples, report = read(task, "train", root)
    assert [e.text for e in examples] == ["一", "三", "七"] and report.absent == []


def test_a_missing_file_names_itself_and_its_split_and_the_other_splits_read(pairs, capsys):
    task, root = pairs
    with pytest.raises(MissingDataFile) as error:
        read(task, "test", root)
    message = str(error.value)
    assert "\n" not in message and "test file of task 'pairs' not found" in message
    assert str(root / "pairs/test.tsv") in message
    code = cli.main(["data", "stats", "pairs", "--specs", str(root.parent / "specs"),
                     "--data-root", str(root)])
    out = capsys.readouterr().out
    assert code == 1
    assert "absent: " + str(root / "pairs/b.tsv") in out
    assert [line.split()[:3] for line in out.splitlines()[1:] if line.startswith("pairs")] == [
        ["pairs", "train", "2"], ["pairs", "dev", "1"], ["pairs", "test", "-"]]


def test_aliases_are_tried_after_the_publishers_name(pairs):
    task, root = pairs
    examples, _ = read(task, "dev", root)
    assert [e.text for e in examples] == ["五"]
    (root / "pairs/dev.tsv").write_text("九\t十\t0\n", encoding="utf-8")  # the publisher's name wins
    examples, _ = read(task, "dev", root)
    assert [e.text for e in examples] == ["九"]


def test_cache_key_and_plan_know_optional_files(pairs):
    task, root = pairs
    before = data_files(task, "train", root)
    assert before[-1] == ("pairs/b.tsv", None, None)
    assert missing_files([task], str(root), "train") == []
    problems = missing_files([task], str(root), "test", "pass --data-root DIR")
    assert len(problems) == 1 and "test file of task 'pairs' not found" in problems[0]
    (root / "pairs/b.tsv").write_text("七\t八\t0\n", encoding="utf-8")
    assert data_files(task, "train", root)[-1][0] == "pairs/b.tsv" != before[-1]


def test_a_folder_named_like_its_file_is_read_through(pairs):
    task, root = pairs
    (root / "pairs/test.tsv").mkdir()  # DuEE-Fin's zips unpack files this way
    (root / "pairs/test.tsv/test.tsv").write_text("甲\t乙\t1\n", encoding="utf-8")
    examples, _ = read(task, "test", root)
    assert [e.text for e in examples] == ["甲"]


@pytest.mark.parametrize("entry,message", [
    ("{path: a.tsv, optional: yes-please}", "split 'train' must be a path"),
    ("{path: a.tsv, also: b.tsv}", "split 'train' must be a path"),
    ("{path: a.tsv, aliases: b.tsv}", "split 'train' must be a path"),
])
def test_bad_file_entries_are_spec_errors(tmp_path, entry, message):
    spec = tmp_path / "bad.yaml"
    spec.write_text(SPEC.replace("  train:\n    - pairs/a.tsv\n    - path: pairs/b.tsv\n"
                                 "      optional: true\n", f"  train: {entry}\n"), encoding="utf-8")
    errors = [str(e) for e in validate_paths([spec])]
    # the split's entry, then the task left with no files
    assert errors[0].startswith(f"{spec}:4: the top level: files {message}")
    assert len(errors) == 2 and "no files left to read" in errors[1]


def test_verified_takes_three_values(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text(SPEC.replace("verified: documentation", "verified: yes"), encoding="utf-8")
    (error,) = validate_paths([spec])
    assert error.line == 2 and "verified must be one of data, real_formats, documentation" in error.message


# ----- publishers' layouts ---------------------------------------------------------

def write(tmp_path, name, text):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def parse(line):
    report = ReadReport()
    text, marks = InlineNerAdapter.parse(line, "f.txt", 7, report)
    return text, [(text[a:b], t) for a, b, t in marks], report


def test_boson_nested_padded_and_broken_marks():
    text, marks, report = parse("{{product_name:{{product_name:腾讯汽车}}}}讯 "
                                "{{person_name: 施宇翔\u00a0}}。")
    assert text == "腾讯汽车讯 施宇翔。"
    assert marks == [("腾讯汽车", "product_name"), ("施宇翔", "person_name")]
    assert sum(report.repaired.values()) == 3  # one nesting, two padded edges
    text, marks, report = parse("{{org_name:{{location_name:北京}}大学}}好")
    assert marks == [("北京", "location_name"), ("北京大学", "org_name")] and text == "北京大学好"
    text, marks, report = parse("{{org_name:{{location_name:上海}}}}")
    assert marks == [("上海", "location_name"), ("上海", "org_name")] and not report.repaired
    text, marks, report = parse("{{time:今天}}坏掉的}}和{{time:明天")
    assert text == "今天坏掉的}}和{{time:明天" and marks == [("今天", "time")]
    assert report.spans_lost == {"a }} that closes no mark (kept as text)": 1,
                                 "unclosed or malformed {{type:mention}} mark": 1}


def test_cail2018_brackets_are_removed_as_the_judger_does(tmp_path):
    path = write(tmp_path, "cail.json", "\n".join(json.dumps(r, ensure_ascii=False) for r in [
        {"fact": "甲", "meta": {"accusation": ["[生产、销售]假药", "盗窃"]}},
        {"fact": "乙", "meta": {"accusation": ["盗窃"]}},
        {"fact": "丙", "meta": {"accusation": ["[无此罪]"]}}]))
    report = ReadReport()
    examples = list(read_files("jsonl", [path], {"strip_label_chars": "[]"},
                               {"text": "fact", "label": "meta.accusation"}, "classification",
                               ["生产、销售假药", "盗窃"], report))
    assert [(e.text, e.label) for e in examples] == [("甲", ["生产、销售假药", "盗窃"]), ("乙", ["盗窃"])]
    assert sum(report.repaired.values()) == 2
    assert report.skipped == {"label '无此罪' is not in the task's labels": 1}


def test_reco_first_alternative_is_the_answer_in_a_fixed_shuffled_place(tmp_path):
    records = [{"query_id": i, "query": f"问{i}", "passage": "文", "alternatives": "对|不对|无法确定"}
               for i in range(40)]
    path = write(tmp_path, "reco.json", json.dumps(records, ensure_ascii=False))
    options = {"choices_separator": "|", "answer_is_first": True}
    fields = {"context": "passage", "question": "query", "choices": "alternatives", "id": "query_id"}
    first = list(read_files("choice_jsonl", [path], options, fields, "multiple_choice"))
    again = list(read_files("choice_jsonl", [path], options, fields, "multiple_choice"))
    assert first == again
    assert all(sorted(e.choices) == sorted(["对", "不对", "无法确定"]) and e.choices[e.label] == "对"
               for e in first)
    assert len({e.label for e in first}) == 3  # the place of the answer varies


def test_xnli_tsv_reads_both_releases(tmp_path):
    header = "language\tgold_label\tsentence1\tsentence2\tpairID"
    dev = write(tmp_path, "xnli.dev.tsv", "\n".join([
        header, "en\tneutral\tA man\tA person\t1", "zh\tcontradiction\t他来了。\t他没来。\t1",
        "zh\tentailment\t下雨了。\t天气潮湿。\t2"]) + "\n")
    train = write(tmp_path, "multinli.train.zh.tsv",
                  "premise\thypo\tlabel\n我 买 了 iPhone 7 。\t我 什么 都 没 买 。\tcontradictory\n")
    report = ReadReport()
    labels = ["contradiction", "entailment", "neutral"]
    examples = list(read_files("xnli_tsv", [dev, train], None, None, "matching", labels, report))
    assert [(e.text, e.text_b, e.label) for e in examples] == [
        ("他来了。", "他没来。", "contradiction"), ("下雨了。", "天气潮湿。", "entailment"),
        ("我买了iPhone 7。", "我什么都没买。", "contradiction")]
    assert report.filtered == {"rows of other languages than 'zh'": 1}


def test_cmrc2017_parts_and_answers(tmp_path):
    part0 = write(tmp_path, "train.doc_query.part.0",
                  "1 ||| 小 猴 爱 吃 桃子 。\n2 ||| 桃子 很 甜 。\n<qid_0> ||| XXXXX 很 甜 。\n")
    part1 = write(tmp_path, "train.doc_query.part.1",
                  "1 ||| 大象 有 鼻子 。\n<qid_1> ||| 大象 有 XXXXX 。\n"
                  "1 ||| 没有 答案 。\n<qid_2> ||| XXXXX\n")
    answers = write(tmp_path, "train.answer", "<qid_0> ||| 桃子\n<qid_1> ||| 鼻子\n")
    report = ReadReport()
    examples = list(read_files("cmrc2017_cloze", [part0, part1, answers], None, None, "mrc_span",
                               None, report))
    assert [(e.id, e.question, e.context, [(a.start, a.text) for a in e.answers]) for e in examples] == [
        ("<qid_0>", "XXXXX很甜。", "小猴爱吃桃子。桃子很甜。", [(4, "桃子"), (7, "桃子")]),
        ("<qid_1>", "大象有XXXXX。", "大象有鼻子。", [(3, "鼻子")])]
    assert report.skipped == {"query without a line in the split's .answer file": 1}
    assert report.places[("skipped", "query without a line in the split's .answer file")] == [f"{part1}:4"]


def test_cdn_json_counts_terms_as_the_cblue_baseline(tmp_path):
    path = write(tmp_path, "cdn.json", json.dumps([
        {"text": "a", "normalized_result": "x"}, {"text": "b", "normalized_result": "x##y"},
        {"text": "c", "normalized_result": "x##y##z##w"}, {"text": "d", "normalized_result": ""}]))
    report = ReadReport(labels_required=True)
    examples = list(read_files("cdn_json", [path], None, None, "classification", ["0", "1", "2"], report))
    assert [(e.text, e.label) for e in examples] == [("a", "0"), ("b", "1"), ("c", "2")]
    assert report.skipped == {"'normalized_result' holds no term": 1}


def test_mention_jsonl_reads_cote(tmp_path):
    path = write(tmp_path, "train.txt", "\n".join(json.dumps(r, ensure_ascii=False) for r in [
        {"s": "还是星巴克好", "ot": "星巴克"}, {"s": "还是星巴克好", "ot": "好"},
        {"s": "没有这个词", "ot": "咖啡"}]) + "\n")
    report = ReadReport()
    examples = list(read_files("mention_jsonl", [path], {"mention_type": "target"},
                               {"text": "s", "mention": "ot"}, "extraction_ner", ["target"], report))
    assert [[(e.text[x.start:x.end], x.type) for x in e.entities] for e in examples] == [
        [("星巴克", "target"), ("好", "target")]]
    assert report.spans_lost == {"mention not found in the text": 1}
    assert report.skipped == {"no mention of this text could be placed": 1}


def test_ipre_two_sentence_parts_with_one_relation_file(tmp_path):
    part1 = write(tmp_path, "train/sent_train_1.txt", "S1\t张三\t李四\t张三 是 李四 的 父亲\n")
    part2 = write(tmp_path, "train/sent_train_2.txt", "S2\t王五\t赵六\t王五 认识 赵六\n")
    relations = write(tmp_path, "train/sent_relation_train.txt", "S1\t1\nS2\t0\n")
    report = ReadReport()
    examples = list(read_files("ipre", [part1, part2, relations], {"no_relation": "NA"}, None,
                               "extraction_relation", ["NA", "父母"], report))
    assert [(e.text, [t.predicate for t in e.triples]) for e in examples] == [
        ("张三是李四的父亲", ["父母"]), ("王五认识赵六", [])]


def test_training_logs_say_which_optional_files_were_absent(pairs, tmp_path):
    from mtl_framework.prepare.cache import cached_features
    from mtl_framework.tokenizer import Tokenizer, build_vocab, count_units, write_vocab

    task, root = pairs
    vocab = tmp_path / "vocab.txt"
    write_vocab(build_vocab(count_units(["一二三四五六七八"])), vocab)
    messages = []
    for _ in range(2):  # built, then from the cache: both say it
        cached_features(task, "train", Tokenizer(str(vocab)), root, tmp_path / "cache", log=messages.append)
    absent = str(root / "pairs/b.tsv")
    assert f"optional file(s) absent, not read: {absent}" in messages[0]
    assert "features from cache" in messages[1] and "optional file(s) absent: pairs/b.tsv" in messages[1]
