"""Every format family on small hand-written records in its official layout
(tests/fixtures/adapters/), including what gets skipped, lost or filtered."""
import json
from pathlib import Path

import pytest

from data_adapters import (
    Entity,
    NERExample,
    ReadReport,
    Span,
    TextExample,
    read_files,
)
from data_adapters import examples as ex  # the rarer example types
from data_adapters.qa import UNLOCATED_QUESTION, YES_NO_QUESTION

FIXTURES = Path(__file__).parent / "fixtures" / "adapters"


def read(format_name, files, options=None, fields=None, task_type=None, labels=None):
    report = ReadReport()
    paths = [FIXTURES / f for f in ([files] if isinstance(files, str) else files)]
    examples = list(read_files(format_name, paths, options, fields, task_type, labels, report))
    return examples, report


def where(name, line):
    return f"{FIXTURES / name}:{line}"


def mentions(example):
    return [(example.text[e.start:e.end], e.type) for e in example.entities]


# ----- text records -------------------------------------------------------------

def test_jsonl_labels_skips_and_unlabelled_rows():
    fields = {"text": "sentence1", "text_b": "sentence2", "label": "label"}
    examples, report = read("jsonl", "text/clue.jsonl", {"skip_labels": ["-"]}, fields,
                            "matching", ["0", "1"])
    assert examples == [
        TextExample("双十一花呗提额在哪", "里可以提花呗额度", "0"),
        TextExample("花呗消费超过额度有什么影响吗", "花呗额度成负数有啥影响吗", "1"),
        TextExample("没有标签的测试行", "test rows have no label", None),
    ]
    assert report.skipped == {
        "label '-' is in skip_labels": 1,
        "bad JSON (Expecting ',' delimiter)": 1,
        "label '2' is not in the task's labels": 1,
        "missing field 'sentence1' (fields.text)": 1,
        "not a JSON object (a list); one object per record expected (a file holding one array "
        "is format json_array)": 1,
    }
    first = report.as_dict()["skipped"]
    assert first["bad JSON (Expecting ',' delimiter)"]["first"] == [where("text/clue.jsonl", 4)]
    assert first["label '2' is not in the task's labels"]["first"] == [where("text/clue.jsonl", 5)]
    assert report.units["unlabelled"] == 1


def test_jsonl_reads_pretty_printed_and_back_to_back_objects_with_dotted_keys():
    examples, report = read("jsonl", "text/pretty.json", {"label_map": {"1": "yes", "0": "no"}},
                            {"text": "text", "label": "meta.label"}, "classification", ["yes", "no"])
    assert [(e.text[:4], e.label) for e in examples] == [
        ("浙商银行", "yes"), ("生生不息", "no"), ("写在同一", "yes"), ("第四个", "no")]
    assert report.total_skipped == 0


def test_jsonl_joins_list_values_and_keeps_ids():
    fields = {"text": "abst", "text_b": "keyword", "label": "label", "id": "id"}
    (example,), _ = read("jsonl", "text/csl.jsonl", {"join": "，"}, fields, "matching", ["0", "1"])
    assert example.text_b == "水声学，FFT，波束形成" and example.id == 1


def test_json_array_and_a_broken_array():
    fields = {"text": "text1", "text_b": "text2", "label": "label", "id": "id"}
    examples, report = read("json_array", "text/cblue.json", None, fields, "matching", ["0", "1"])
    assert [(e.id, e.label) for e in examples] == [("1", "1"), ("2", "0")]
    examples, report = read("json_array", "text/cblue_bad.json", None, fields, "matching", ["0", "1"])
    assert len(examples) == 1
    assert report.as_dict()["skipped"] == {
        "bad JSON (Expecting ',' delimiter); the rest of the file cannot be read":
            {"count": 1, "first": [where("text/cblue_bad.json", 3)]}}


def test_delimited_tsv_checks_columns_and_takes_quotes_literally():
    examples, report = read("delimited", "text/pairs.tsv", None, {"text": 0, "text_b": 1, "label": 2},
                            "matching", ["0", "1"])
    assert [e.text for e in examples] == ["蚂蚁借呗等额还款可以换成先息后本吗", "双十一花呗提额在哪",
                                          '"引号"开头的']
    assert report.as_dict()["skipped"] == {
        "row has 4 columns, the first row has 3 (a text holding the delimiter?)":
            {"count": 1, "first": [where("text/pairs.tsv", 4)]},
        "row has 1 columns, the first row has 3 (a text holding the delimiter?)":
            {"count": 1, "first": [where("text/pairs.tsv", 5)]}}


def test_delimited_csv_with_header_bom_quotes_and_newlines():
    examples, report = read("delimited", "text/reviews.csv", {"delimiter": ",", "header": True},
                            {"text": "review", "label": "label"}, "classification", ["0", "1"])
    assert examples[0].text == '距离川沙公路较近,但是公交指示不对,如果是"蔡陆线"的话,会非常麻烦.'
    assert examples[1].text == "一条评论\n跨了两行"
    assert [e.label for e in examples] == ["1", "0", "1"]
    assert report.as_dict()["skipped"] == {
        "empty text": {"count": 1, "first": [where("text/reviews.csv", 6)]}}


def test_delimited_header_name_typo_is_an_error():
    with pytest.raises(ValueError, match="fields.text is 'reveiw' but the header has label, review"):
        read("delimited", "text/reviews.csv", {"delimiter": ",", "header": True},
             {"text": "reveiw", "label": "label"}, "classification", ["0", "1"])


def test_delimited_multichar_delimiter_and_joined_columns():
    fields = {"text": [3, 4], "label": 2, "id": 0}
    examples, _ = read("delimited", "text/toutiao.txt", {"delimiter": "_!_", "join": "；"}, fields,
                       "classification", ["news_culture"])
    assert examples[0].text == "京城最值得你来场文化之旅的博物馆；保利集团,马未都,博物馆"
    assert examples[1].text == "发酵床的垫料种类有哪些？；" and examples[1].id == "6552368441838272771"


def test_delimited_regression_labels_are_numbers():
    examples, report = read("delimited", "text/sts.tsv", None, {"text": 0, "text_b": 1, "label": 2},
                            "regression")
    assert [e.label for e in examples] == [5.0, 3.8]
    assert report.skipped == {"label 'none' is not a number (regression)": 1}


def test_delimited_gbk_and_a_badly_encoded_line():
    fields = {"text": 0, "label": 1}
    examples, _ = read("delimited", "text/gbk.tsv", {"encoding": "gbk"}, fields, "classification",
                       ["正面", "负面"])
    assert [e.text for e in examples] == ["这是GBK编码的句子", "第二句"]
    examples, report = read("delimited", "text/mixed_encoding.tsv", None, fields, "classification",
                            ["正面", "负面"])
    assert [e.text for e in examples] == ["好句子", "又一句"]
    (reason, detail), = report.as_dict()["skipped"].items()
    assert reason.startswith("line is not valid utf-8 text") and "options.encoding" in reason
    assert detail["first"] == [where("text/mixed_encoding.tsv", 2)]


def test_doc_folder_labels_from_folders():
    examples, report = read("doc_folder", "thucnews", None, None, "classification", ["体育", "财经"])
    assert [(e.label, e.id) for e in examples] == [
        ("体育", "体育/0.txt"), ("体育", "体育/1.txt"), ("财经", "财经/3.txt")]
    assert examples[0].text == "马晓旭意外受伤让国奥警惕 无奈大雨格外青睐殷家军"
    skipped = report.as_dict()["skipped"]
    assert skipped["file name does not end with .txt (options.extension)"]["count"] == 1
    assert any(r.startswith("not valid utf-8 text") for r in skipped)
    examples, _ = read("doc_folder", "thucnews", {"encoding": "gbk"}, None, "classification", ["财经"])
    assert [e.text for e in examples] == ["基金公司的GBK文件"]  # 体育: not a label; 3.txt: not GBK


# ----- reading comprehension ------------------------------------------------------

def test_squad_keeps_only_answers_that_round_trip():
    examples, report = read("squad", "qa/squad_v1.json")
    assert [e.id for e in examples] == ["TRAIN_1_QUERY_0", "TRAIN_1_QUERY_1"]
    assert examples[0].answers == [Span(30, 35, "1963年"), Span(30, 35, "1963年")]
    assert examples[1].answers == [Span(20, 22, "越南")]
    assert report.units["questions"] == 4
    # the FAKE_ANSWER placeholder is no lost span: its question is skipped for what it is
    assert report.spans_lost == {"answer_start does not point at the answer text": 2}
    assert report.skipped == {"placeholder answers (FAKE_ANSWER, a test file): no gold to learn "
                              "or score": 1}
    # the question whose answers all miss: left out of training, counted apart from skips
    assert report.filtered == {UNLOCATED_QUESTION: 1}
    for example in examples:
        for answer in example.answers:
            assert example.context[answer.start:answer.end] == answer.text


def test_squad_unlocated_questions_are_read_for_scoring():
    """Point 3 of issue 31: what training cannot locate is still gold when scoring."""
    examples, report = read("squad", "qa/squad_v1.json", {"unlocated_questions": "score"})
    assert [e.id for e in examples] == ["TRAIN_1_QUERY_0", "TRAIN_1_QUERY_1", "TRAIN_1_QUERY_2"]
    given = json.loads((FIXTURES / "qa/squad_v1.json").read_text(encoding="utf-8"))
    qas = {q["id"]: q for a in given["data"] for p in a["paragraphs"] for q in p["qas"]}
    for example in examples:
        texts = [a["text"] for a in qas[example.id]["answers"]]
        assert sorted([a.text for a in example.answers] + list(example.unlocated)) == sorted(texts)
    assert examples[2].answers == [] and examples[2].unlocated
    assert report.units["scored without a span"] == 1 and report.filtered == {}


def test_squad_placeholder_answers_read_without_gold_for_prediction():
    examples, report = read("squad", "qa/squad_v1.json", {"placeholder_answers": "no_gold",
                                                          "unlocated_questions": "score"})
    assert [e.id for e in examples] == ["TRAIN_1_QUERY_0", "TRAIN_1_QUERY_1", "TRAIN_1_QUERY_2",
                                        "TRAIN_1_QUERY_3"]
    assert examples[3].answers == [] and examples[3].question == "测试集的问题"
    assert report.filtered == {"placeholder answers (FAKE_ANSWER, test file): read without gold": 1}
    # mtl predict reads the wrong-offset question too (predict_options): every row predicted
    assert report.skipped == {} and report.units["scored without a span"] == 1


def test_squad_v2_impossible_questions_have_no_answers():
    examples, report = read("squad", "qa/squad_v2.json")
    assert [len(e.answers) for e in examples] == [1, 0]
    assert report.units["unanswerable"] == 1 and report.total_lost == 0


def test_squad_cjrc_yes_no_as_spans_and_as_classes():
    examples, report = read("squad", "qa/cjrc.json", task_type="mrc_span")
    assert [e.id for e in examples] == ["c1", "c4"]
    assert report.filtered[YES_NO_QUESTION] == 2 and report.skipped == {}
    assert report.total_lost == 0
    examples, report = read("squad", "qa/cjrc.json", {"unlocated_questions": "score"},
                            task_type="mrc_span")
    assert [(e.id, e.unlocated) for e in examples] == [
        ("c1", ()), ("c2", ("YES",)), ("c3", ("NO",)), ("c4", ())]
    examples, report = read("squad", "qa/cjrc.json", task_type="classification",
                            labels=["span", "YES", "NO", "unknown"])
    assert [(e.text, e.label) for e in examples] == [
        ("被告人是谁？", "span"), ("被告人是否盗窃？", "YES"), ("被告人是否抢劫？", "NO"),
        ("被告人几岁？", "unknown")]
    assert examples[0].text_b.startswith("经审理查明")


def test_multi_passage_qa_one_example_per_passage():
    examples, report = read("multi_passage_qa", "qa/webqa.json")
    first, second = examples
    assert first.answers == [Span(21, 24, "杨志刚"), Span(27, 30, "杨志刚")]
    assert second.answers == [] and first.id == "Q_TRN_010878-0"
    assert report.units["questions"] == 2
    assert report.spans_lost == {"answer not found in its passage": 1}
    assert report.skipped == {"passage whose answer is not in it": 1, "question missing or empty": 1}


# ----- multiple choice and cloze --------------------------------------------------

def test_c3_questions():
    examples, report = read("c3", "choice/c3.json")
    assert examples[0] == ex.ChoiceExample(
        "男：你今天晚上有时间吗?我们一起去看电影吧?\n"
        "女：你喜欢恐怖片和爱情片，但是我喜欢喜剧片，科幻片一般。所以……",
        "女的最喜欢哪种电影?", ["恐怖片", "爱情片", "喜剧片", "科幻片"], 2, "25-35-0")
    assert [e.label for e in examples] == [2, 0, None]
    assert report.units["questions"] == 4
    assert report.as_dict()["skipped"] == {
        "answer is not one of the choices": {"count": 1, "first": [where("choice/c3.json", 2)]}}


def test_chid_clue_release_with_answer_file():
    examples, report = read("chid", "choice/train.json", {"answers": "{name}_answer.json"})
    assert [(e.id, e.label) for e in examples] == [
        ("#idiom000000#", 0), ("#idiom000001#", 2), ("#idiom000002#", 4)]
    assert examples[0].context == "他射箭#idiom#，从不失手。做事不能#。"
    assert examples[1].context == "他射箭#，从不失手。做事不能#idiom#。"
    assert len(examples[0].choices) == 10 and examples[0].question == ""
    assert report.units["questions"] == 4
    assert report.skipped == {"blank has no valid index in the answer file": 1}


def test_chid_clue_release_without_answers_is_unlabelled():
    examples, report = read("chid", "choice/train.json")
    assert len(examples) == 4 and {e.label for e in examples} == {None}
    assert report.units["unlabelled"] == 4


def test_chid_missing_answer_file_is_named():
    with pytest.raises(FileNotFoundError, match="train_answers.json"):
        read("chid", "choice/train.json", {"answers": "{name}_answers.json"})


def test_chid_fewclue_release():
    examples, report = read("chid", "choice/chid_fewclue.json")
    (example,) = examples
    assert example.label == 1 and example.id == 24 and example.context.count("#idiom#") == 1
    assert report.skipped == {"content has 0 #idiom# blanks, expected 1": 1,
                              "answer is not an index into candidates": 1}


def test_cmrc2019_one_example_per_blank():
    examples, report = read("cmrc2019", "choice/cmrc2019.json")
    assert [(e.id, e.label) for e in examples] == [("TRAIN_0-1", 1), ("TRAIN_0-2", 2), ("TEST_0-1", None)]
    assert examples[0].context == ("森林里住着一只小狐狸。[BLANK]有一天，它遇到了一只老虎。"
                                   "#最后它们成了好朋友。")
    assert report.units["questions"] == 3


def test_choice_jsonl_with_text_labels():
    fields = {"context": "passage", "question": "query", "choices": "alternatives", "label": "answer"}
    examples, report = read("choice_jsonl", "choice/reco.jsonl", {"label_is_text": True}, fields,
                            "multiple_choice")
    assert examples == [ex.ChoiceExample("女孩喜欢吃苹果。", "女孩喜欢吃苹果吗",
                                      ["喜欢", "不喜欢", "无法确定"], 0)]
    assert report.skipped == {"label is not one of the choices": 1}


# ----- NER ------------------------------------------------------------------------

def test_tagged_chars_bio():
    examples, report = read("tagged_chars", "ner/bio.tsv", {"separator": "\t"}, None,
                            "extraction_ner", ["PER", "LOC", "ORG"])
    assert [mentions(e) for e in examples] == [
        [("厦门", "LOC"), ("金门", "LOC")], [("周恩来", "PER")], []]
    assert examples[2].text == "新华社报道"
    assert report.as_dict()["spans_lost"] == {
        "I- tag without a B- before it": {"count": 1, "first": [where("ner/bio.tsv", 22)]}}
    assert report.as_dict()["skipped"] == {
        "line is not `char\ttag`": {"count": 1, "first": [where("ner/bio.tsv", 29)]}}


def test_tagged_chars_iob1_reads_a_leading_i_as_a_start():
    examples, report = read("tagged_chars", "ner/bio.tsv", {"separator": "\t", "scheme": "IOB1"},
                            None, "extraction_ner", ["PER", "LOC", "ORG"])
    assert mentions(examples[2]) == [("新华社", "ORG")] and report.total_lost == 0


def test_tagged_chars_bmes_with_a_space_character():
    examples, report = read("tagged_chars", "ner/bmes.txt", {"separator": " ", "scheme": "BMES"},
                            None, "extraction_ner", ["NT", "NS", "NR"])
    (example,) = examples
    assert example.text == "中共中央致中国致公党 北京"
    assert mentions(example) == [("中共中央", "NT"), ("中国致", "NT"), ("党", "NS"), ("北京", "NR")]


def test_tagged_chars_underscore_types_sanwen():
    (example,), _ = read("tagged_chars", "ner/sanwen.txt",
                         {"separator": " ", "type_separator": "_"}, None, "extraction_ner",
                         ["Time", "Person"])
    assert mentions(example) == [("春天", "Time"), ("小明", "Person")]


def test_tagged_chars_wrong_scheme_skips_the_sentence_and_says_why():
    examples, report = read("tagged_chars", "ner/bmes.txt", {"separator": " ", "scheme": "BIO"},
                            None, "extraction_ner", ["NT", "NS", "NR"])
    assert examples == []
    (reason,) = report.skipped
    assert reason.startswith("tag 'M-NT' is not a BIO tag") and "options.scheme" in reason


def test_tagged_chars_weibo_suffixes_and_position_digits():
    options = {"separator": "\t", "strip_position_digits": True}
    labels = ["PER", "ORG", "LOC", "GPE"]
    (nam,), report = read("tagged_chars", "ner/weibo.conll", {**options, "keep_suffix": "NAM"},
                          None, "extraction_ner", labels)
    assert nam.text == "科技雯子小姑娘p北京1"
    assert mentions(nam) == [("雯子", "PER"), ("北京", "GPE")]
    assert report.filtered == {"entity type without the .NAM suffix (options.keep_suffix)": 1}
    (nom,), _ = read("tagged_chars", "ner/weibo.conll", {**options, "keep_suffix": "NOM"}, None,
                     "extraction_ner", labels)
    assert mentions(nom) == [("小姑娘", "PER")]
    (both,), _ = read("tagged_chars", "ner/weibo.conll", {**options, "strip_suffix": True}, None,
                      "extraction_ner", labels)
    assert mentions(both) == [("雯子", "PER"), ("小姑娘", "PER"), ("北京", "GPE")]
    (raw,), report = read("tagged_chars", "ner/weibo.conll", {"separator": "\t"}, None,
                          "extraction_ner", labels)
    hint = ("(a typed suffix: options.keep_suffix: {1} keeps these as '{0}', strip_suffix: "
            "true keeps every {0}.* as '{0}')")
    assert raw.text.startswith("科0技1") and report.filtered == {
        f"entity type '{t}.{s}' is not in the task's labels {hint.format(t, s)}": 1
        for t, s in (("PER", "NAM"), ("PER", "NOM"), ("GPE", "NAM"))}


def test_tagged_json_bios():
    examples, report = read("tagged_json", "ner/resume.json", {"scheme": "BIOS"}, None,
                            "extraction_ner", ["NAME", "CONT", "RACE"])
    assert [mentions(e) for e in examples] == [
        [("高勇", "NAME"), ("中国国籍", "CONT")], [("汉族", "RACE"), ("李", "NAME")], []]
    assert report.skipped == {"text has 4 characters but `label` has 2 tags": 1}
    assert report.units["unlabelled"] == 1


def test_span_json_cluener_style():
    labels = ["name", "company", "game", "organization"]
    examples, report = read("span_json", "ner/cluener.json", None, None, "extraction_ner", labels)
    assert [mentions(e) for e in examples] == [
        [("叶老桂", "name"), ("浙商银行", "company")], [("CSOL", "game")], [],
        [("那不勒斯", "organization"), ("锡耶纳", "organization"), ("热那亚", "organization")]]
    assert examples[2].id == 0
    assert report.as_dict()["spans_lost"] == {
        "offsets do not match the mention": {"count": 1, "first": [where("ner/cluener.json", 22)]}}
    assert report.filtered == {"entity type 'weapon' is not in the task's labels": 1}
    assert report.units["unlabelled"] == 1


def test_span_json_list_style_inclusive_and_exclusive_ends():
    examples, report = read("span_json", "ner/cmeee.json", {"style": "list"}, None, "extraction_ner",
                            ["dis", "dru", "pro", "equ"])
    assert [mentions(e) for e in examples] == [
        [("室上性心动过速", "dis"), ("抗心律失常药物", "dru")], [("房室结消融", "pro")]]
    assert report.spans_lost == {"offsets do not match the mention": 1,
                                 "offsets outside the text (or end before start)": 1}
    fields = {"text": "originalText", "start": "start_pos", "end": "end_pos", "type": "label_type"}
    (example,), _ = read("span_json", "ner/yidu.jsonl", {"style": "list", "end_inclusive": False},
                         fields, "extraction_ner", ["解剖部位", "疾病和诊断"])
    assert mentions(example) == [("右乳", "解剖部位"), ("右乳肿物", "疾病和诊断")]


def test_inline_ner_boson():
    examples, report = read("inline_ner", "ner/boson.txt", None, None, "extraction_ner",
                            ["person_name", "org_name", "time"])
    assert examples[0].text == "浙商银行是中国的一家银行，2019年成立。"
    assert mentions(examples[0]) == [("浙商银行", "person_name"), ("中国", "org_name"), ("2019年", "time")]
    assert examples[2].text == "坏掉的{{time:今天"
    assert report.spans_lost == {"unclosed or malformed {{type:mention}} mark": 1}


def test_mention_table_ner_cote():
    options = {"header": True, "mention_type": "target"}
    fields = {"text": "text_a", "mention": "label"}
    examples, report = read("mention_table", "ner/cote.tsv", options, fields, "extraction_ner", ["target"])
    assert [mentions(e) for e in examples] == [[("手机", "target")], [("电池", "target")]]
    assert report.spans_lost == {"mention not found in the text": 1}
    assert report.skipped == {"no mention of this text could be placed": 1}
    fields = {"text": "text_a", "mention": "label"}
    examples, report = read("mention_table", "ner/cote_test.tsv", options, fields, "extraction_ner",
                            ["target"])
    assert examples == [NERExample("测试集没有标签", [])] and report.units["unlabelled"] == 1


def test_mention_table_events_ccks19():
    options = {"delimiter": ",", "mention_type": "subject"}
    fields = {"id": 0, "text": 1, "event_type": 2, "mention": 3}
    examples, report = read("mention_table", "ner/ccks19.csv", options, fields, "extraction_event",
                            ["涉嫌欺诈:subject", "业绩下滑:subject"])
    assert examples[0] == ex.EventExample("公司涉嫌欺诈,被立案调查",
                                       [ex.Event("涉嫌欺诈", None, [Entity(0, 2, "subject")])])
    assert len(examples) == 2 and report.filtered == {"其他 mentions (not in the task's labels)": 1}
    assert report.skipped == {"no mention of this text could be placed": 1}


# ----- relations, events, coreference ---------------------------------------------

DUIE_PREDICATES = ["作者", "饰演", "上映时间", "导演"]


def test_spo_json_triples_at_first_occurrence():
    examples, report = read("spo_json", "relation/duie.json", None, None, "extraction_relation",
                            DUIE_PREDICATES)
    first, second, test_row = examples
    assert first.triples == [ex.Triple(Entity(1, 5, "图书作品"), "作者", Entity(7, 11, "人物"))]
    assert [(second.text[t.subject.start:t.subject.end], t.predicate,
             second.text[t.object.start:t.object.end])
            for t in second.triples] == [("周星驰", "饰演", "尹天仇"), ("喜剧之王", "上映时间", "1999年")]
    assert report.spans_lost == {"object not found in the text": 1}
    assert report.filtered == {"object slot 'inWork' (list '<predicate>_inWork' in labels to keep it)": 1}
    assert test_row.triples == [] and report.units["unlabelled"] == 1


def test_spo_json_complex_slot_kept_when_listed():
    examples, _ = read("spo_json", "relation/duie.json", None, None, "extraction_relation",
                       DUIE_PREDICATES + ["饰演_inWork"])
    slot = [t for t in examples[1].triples if t.predicate == "饰演_inWork"]
    assert slot == [ex.Triple(Entity(0, 3, "娱乐人物"), "饰演_inWork", Entity(5, 9, "影视作品"))]


def test_spo_json_as_entities_and_string_objects():
    examples, report = read("spo_json", "relation/duie.json", None, None, "extraction_ner",
                            ["图书作品", "人物", "娱乐人物", "影视作品", "Date"])
    assert mentions(examples[1]) == [("周星驰", "娱乐人物"), ("尹天仇", "人物"), ("喜剧之王", "影视作品"),
                                     ("1999年", "Date")]
    assert report.spans_lost == {"object not found in the text": 1}
    (example,), _ = read("spo_json", "relation/ske.json", None, None, "extraction_relation", ["主演"])
    assert example.triples == [ex.Triple(Entity(21, 25, "影视作品"), "主演", Entity(26, 29, "人物"))]


def test_entity_pair_tsv_groups_rows_by_text():
    labels = ["合并", "竞争"]
    examples, report = read("entity_pair_tsv", "relation/finre.txt", None, None,
                            "extraction_relation", labels)
    assert examples == [ex.RelationExample("东方航空AH股临时停牌传将与上航合并",
                                        [ex.Triple(Entity(0, 4, "head"), "合并", Entity(14, 16, "tail"))])]
    assert report.skipped == {"relation 'unknown' is not in the task's labels": 1,
                              "relation '不存在的关系' is not in the task's labels": 1,
                              "row has 2 columns, needs 4 (head, tail, relation, text)": 1,
                              "no pair of this text could be placed": 1}
    assert report.spans_lost == {"tail not found in the text": 1}
    examples, report = read("entity_pair_tsv", "relation/finre.txt", {"no_relation": "unknown"},
                            None, "extraction_relation", labels)
    assert len(examples[0].triples) == 1
    assert "relation 'unknown' is not in the task's labels" not in report.skipped


def test_ipre_relation_ids_index_the_labels():
    labels = ["NA", "妻", "同事"]
    examples, report = read("ipre", "relation/ipre/sent_train.txt", {"no_relation": "NA"}, None,
                            "extraction_relation", labels)
    assert [(e.text, [t.predicate for t in e.triples]) for e in examples] == [
        ("张三的妻子是李四。", ["妻"]), ("王五和赵六是同事。", ["同事"])]
    assert report.spans_lost == {"tail not found in the text": 1}


def test_event_json_duee_offsets_and_role_labels():
    examples, report = read("event_json", "event/duee.json", None, None, "extraction_event",
                            ["组织关系-裁员", "司法行为-拘捕"])
    first, second, test_row = examples
    assert first.events == [ex.Event("组织关系-裁员", Entity(15, 17, "trigger"),
                                  [Entity(17, 22, "裁员人数"), Entity(10, 13, "时间")])]
    assert second.events == [ex.Event("司法行为-拘捕", None, [Entity(0, 3, "时间")])]
    assert report.as_dict()["spans_lost"] == {
        "trigger start index does not point at the trigger":
            {"count": 1, "first": [where("event/duee.json", 2)]}}
    assert test_row.events == [] and report.units["unlabelled"] == 1
    # Role labels keep just the listed parts: a trigger task and an argument task.
    examples, report = read("event_json", "event/duee.json", None, None, "extraction_event",
                            ["组织关系-裁员:trigger"])
    assert examples[0].events == [ex.Event("组织关系-裁员", Entity(15, 17, "trigger"), [])]
    assert examples[1].events == []
    examples, _ = read("event_json", "event/duee.json", None, None, "extraction_event",
                       ["组织关系-裁员:时间"])
    assert examples[0].events == [ex.Event("组织关系-裁员", None, [Entity(10, 13, "时间")])]


def test_event_json_duee_fin_first_occurrence_and_enum_class():
    examples, report = read("event_json", "event/duee_fin.json", None, None, "extraction_event",
                            ["公司上市", "质押:质押方"])
    assert examples[0].events == [ex.Event("公司上市", None,
                                           [Entity(0, 3, "上市公司"), Entity(15, 19, "环节")])]
    assert examples[1].events == [ex.Event("质押", None, [Entity(0, 3, "质押方")])]
    assert report.spans_lost == {"argument not found in the text": 1}
    examples, report = read("event_json", "event/duee_fin.json", None, None, "classification",
                            ["筹备上市", "正式上市"])
    assert [(e.text[:3], e.label) for e in examples] == [("某公司", "正式上市")]
    assert report.skipped == {"no event argument is one of the labels": 1}


def test_wsc_spans_round_trip():
    examples, report = read("wsc", "event/wsc.json", None, None, "coreference", ["false", "true"])
    text = "裂开的伤口涂满尘土，里面有碎石子和木头刺，我小心翼翼把它们剔除出去。"
    assert examples == [ex.CorefExample(text, Entity(3, 5, "span1"), Entity(27, 29, "span2"),
                                        "false", 258)]
    assert report.spans_lost == {"span2_index does not point at span2_text": 1}
    assert report.skipped == {"a span does not match the text at its index": 1,
                              "label 'maybe' is not in the task's labels": 1}


def test_jsonl_objects_written_with_indent_0(tmp_path):
    """json.dumps(indent=0) starts nested objects at column 0 too; a broken
    record between good ones is skipped with its line and reading goes on."""
    import json
    good = {"text": "周星驰是中国人", "spo_list": [{"subject": "周星驰", "predicate": "国籍",
                                            "object": {"@value": "中国"}}]}
    body = json.dumps(good, ensure_ascii=False, indent=0)
    broken = '{\n"text": "坏的",\n"spo_list": [\n{\n"subject": "坏" "predicate"\n}\n]\n}'
    (tmp_path / "d.json").write_text(f"{body}\n{broken}\n{body}\n", encoding="utf-8")
    report = ReadReport()
    examples = list(read_files("spo_json", [tmp_path / "d.json"], task_type="extraction_relation",
                               labels=["国籍"], report=report))
    assert len(examples) == 2 and examples[0].triples[0].predicate == "国籍"
    assert report.as_dict()["skipped"] == {"bad JSON (Expecting ',' delimiter)": {
        "count": 1, "first": [f"{tmp_path / 'd.json'}:{body.count(chr(10)) + 2}"]}}


@pytest.mark.parametrize("scheme, tags, spans, lost", [
    ("BIOES", ["B-X", "I-X", "E-X", "S-Y", "O", "E-X"], [(0, 3, "X"), (3, 4, "Y")],
     [("E- tag without a B- before it", 5)]),
    ("BIOES", ["B-X", "I-X", "O", "I-Y", "I-Y"], [(0, 2, "X")], [("I- tag without a B- before it", 3)]),
    ("BIO", ["B-X", "B-X", "I-Y"], [(0, 1, "X"), (1, 2, "X")], [("I- tag without a B- before it", 2)]),
    ("IOB1", ["I-X", "I-X", "B-X", "O", "I-Y"], [(0, 2, "X"), (2, 3, "X"), (4, 5, "Y")], []),
    ("BMES", ["B-X", "M-X", "E-X", "B-Y", "E-Y", "S-X"], [(0, 3, "X"), (3, 5, "Y"), (5, 6, "X")], []),
])
def test_tag_decoding(scheme, tags, spans, lost):
    from data_adapters.ner_tags import decode_tags
    assert decode_tags(tags, scheme, "-") == (spans, lost)
    assert decode_tags(["Q-X"], scheme, "-") == (None, "Q-X")
