"""Features per family on small hand-made examples (docs/batches.md layout)."""
import io
import itertools
import random

import numpy as np
import pytest
from token_spans import char_span_to_token_span

from data_adapters import examples as ex  # the rarer example types
from data_adapters.examples import (
    Entity,
    NERExample,
    Span,
    TextExample,
)
from mtl_framework.families import make_featurizer
from mtl_framework.families.features import TokenLocator, segment_tokens, truncate_longest_first
from mtl_framework.families.mrc import mrc_answer, mrc_gold
from mtl_framework.tokenizer import Tokenizer, build_vocab, count_units, truncate_sequences, write_vocab

CHARS = ("我爱北京天安门上太阳升伟大领袖毛主席指引我们向前进今天气很好明后会下雨吗是的不他她它在家里"
         "学校老师同生看书写字读报纸中国人民银行上海深圳广州南东西山水火木金土日月星什么没")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    texts = [CHARS, "hello world abc 2024 test data"]
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    write_vocab(build_vocab(count_units(texts)), path)
    return Tokenizer(str(path))


def text_of(tok, ids):
    return [tok.id_to_token(int(i)) for i in ids]


# ---------------------------------------------------------------- text families


def test_classification_segments_labels_and_truncation(tokenizer):
    labels = ["neg", "pos"]
    examples = [TextExample("我爱北京", "天安门", "pos"), TextExample("今天天气很好", None, "neg"),
                TextExample("我们向前进", None, "other"), TextExample("他在家里", None, None),
                TextExample("中国人民银行上海深圳广州南东西", None, "pos")]
    featurizer = make_featurizer("classification", tokenizer, 10, labels, task="t")
    features = featurizer.featurize(examples)
    report = features.report
    assert report.examples == 5 and len(features) == 4
    assert report.dropped == {"label 'other' not in the task's labels": 1}
    assert report.truncated == {"text over max_length": 1} and report.unlabelled == 1
    batch = features.batch([0, 1, 2, 3])
    assert batch["token_ids"].dtype == np.int32 and batch["segment_ids"].dtype == np.int32
    assert text_of(tokenizer, batch["token_ids"][0][:7]) == ["[CLS]", "我", "爱", "北", "京", "[SEP]", "天"]
    assert batch["segment_ids"][0].tolist()[:10] == [0] * 6 + [1] * 4
    assert batch["label"].tolist() == [1, 0, -1, 1]
    # bert4keras truncation: max_length tokens, [SEP] kept last; same ids as encode()
    ids, segments = tokenizer.encode("中国人民银行上海深圳广州南东西", max_length=10)
    assert features.ragged("token_ids", 3).tolist() == ids and len(ids) == 10
    assert batch["token_ids"].shape == (4, 10)


def test_multi_label_and_regression(tokenizer):
    multi = make_featurizer("classification", tokenizer, 16, ["a", "b", "c"], multi_label=True)
    features = multi.featurize([TextExample("我爱", None, ["a", "c"]), TextExample("北京", None, "b")])
    batch = features.batch([0, 1])
    assert batch["label"].dtype == np.float32 and batch["label"].tolist() == [[1, 0, 1], [0, 1, 0]]
    regression = make_featurizer("regression", tokenizer, 16)
    features = regression.featurize([TextExample("我爱", "北京", 4.5), TextExample("我", "你", None)])
    label = features.batch([0, 1])["label"]
    assert label.dtype == np.float32 and label[0] == 4.5 and np.isnan(label[1])


def test_unknown_setting_and_missing_labels_are_named(tokenizer):
    with pytest.raises(ValueError, match="unknown feature setting.*stride"):
        make_featurizer("classification", tokenizer, 16, ["a"], task="tnews", stride=3)
    with pytest.raises(ValueError, match="tnews: classification needs the task's labels"):
        make_featurizer("classification", tokenizer, 16, None, task="tnews")
    with pytest.raises(TypeError, match="take TextExample, got NERExample"):
        make_featurizer("matching", tokenizer, 16, ["0"]).featurize([NERExample("我", [])])


# ---------------------------------------------------------------- mrc


LOST_WINDOW = "answer in no single window (longer than a window, or cut by stride >= window)"


def mrc_examples():
    context = ("今天天气很好明天会下雨吗我爱北京天安门天安门上太阳升伟大领袖毛主席指引我们向前进"
               "中国人民银行在上海深圳广州")
    answers = ["天安门上太阳升", "中国人民银行", "今天天气"]
    examples = [ex.SpanQAExample("是什么", context, [Span(context.index(a), context.index(a) + len(a), a)],
                              id=f"q{i}") for i, a in enumerate(answers)]
    examples.append(ex.SpanQAExample("有没有", context, [], id="none"))
    return examples


@pytest.mark.parametrize("stride", [3, 7])  # window overlap >= answer length
def test_mrc_windows_hold_the_answer_and_map_back(tokenizer, stride):
    examples = mrc_examples()
    features = make_featurizer("mrc_span", tokenizer, 20, stride=stride).featurize(examples)
    room = 20 - 3 - 3  # question of 3 tokens
    context_tokens = len(examples[0].context)  # one token per character here
    per_example = len(range(0, context_tokens - room, min(stride, room))) + 1
    assert len(features) == per_example * 4 and features.report.rows == len(features)
    batch = features.batch(np.arange(len(features)))
    assert batch["window_id"].tolist() == list(range(len(features)))
    found = {}
    for w in range(len(features)):
        example = int(features["example_index"][w])
        start, end = int(batch["start"][w]), int(batch["end"][w])
        n = int((batch["token_ids"][w] > 0).sum())
        # context_mask: segment 1 minus the closing [SEP]
        padding = batch["token_ids"].shape[1] - n
        assert batch["context_mask"][w].tolist() == [0] * 5 + [1] * (n - 6) + [0] * (padding + 1)
        if start:
            assert batch["context_mask"][w][start] and batch["context_mask"][w][end] and start <= end
            answer = mrc_answer(features, w, start, end)
            assert answer["text"] == examples[example].answers[0].text
            assert (answer["start"], answer["end"]) == (examples[example].answers[0].start,
                                                        examples[example].answers[0].end)
            assert answer["id"] == f"q{example}"
            found[example] = True
        else:
            assert end == 0 and mrc_answer(features, w, 0, 0)["text"] == ""
    assert sorted(found) == [0, 1, 2]  # every answer is in some window; "none" in none
    assert mrc_gold(features, 1) == ["中国人民银行"] and mrc_gold(features, 3) == []
    # windows start `stride` context tokens apart, the context right after the question
    step = min(stride, room)
    assert features["window_start"][:per_example].tolist() == [i * step for i in range(per_example)]
    assert set(features["context_position"]) == {5}
    assert features["context_index"].tolist() == [0, 0, 0, 0]  # one context, stored once


def test_mrc_counts_answers_longer_than_a_window_and_long_questions(tokenizer):
    context = "我爱北京天安门天安门上太阳升伟大领袖毛主席"
    example = ex.SpanQAExample("是什么", context, [Span(0, len(context), context)])
    long_question = ex.SpanQAExample("我爱北京天安门天安门上太阳升", "毛主席", [Span(0, 3, "毛主席")])
    featurizer = make_featurizer("mrc_span", tokenizer, 16, stride=4, max_question_length=6)
    report = featurizer.featurize([example, long_question]).report
    assert report.spans_lost == {LOST_WINDOW: 1}
    assert report.truncated == {"question over max_question_length": 1} and report.spans == 1


def test_mrc_default_stride_is_half_a_window(tokenizer):
    example = mrc_examples()[0]
    features = make_featurizer("mrc_span", tokenizer, 20).featurize([example])
    starts = features["window_start"].tolist()
    assert set(np.diff(starts)) == {7}  # 14 context tokens a window: step 7
    assert starts[-1] + 14 >= len(example.context) > starts[-2] + 14
    assert features.report.spans == 1 and not features.report.spans_lost


def test_mrc_stride_beyond_the_window_skips_no_token(tokenizer):
    context = mrc_examples()[0].context
    crossing = Span(11, 17, context[11:17])  # windows hold 14 context tokens: 0-13, 14-27, ...
    example = ex.SpanQAExample("是什么", context, [crossing])
    features = make_featurizer("mrc_span", tokenizer, 20, stride=40).featurize([example])
    covered = []  # the context characters each window holds
    for w in range(len(features)):
        n = len(features.ragged("token_ids", w)) - 6
        first = int(features["window_start"][w])
        covered += [int(s) for s, _ in features.ragged("context_offsets", 0)[first:first + n]]
    assert covered == list(range(len(context)))  # back to back, no gap, no overlap
    assert features.report.spans_lost == {LOST_WINDOW: 1} and not np.asarray(features["start"]).any()


# ---------------------------------------------------------------- choices


def test_multiple_choice_layout_mask_and_truncation(tokenizer):
    examples = [ex.ChoiceExample("我爱北京天安门", "是什么", ["北京", "上海", "广州"], 0, id="a"),
                ex.ChoiceExample("今天天气很好", "", ["下雨", "很好"], 1, id="b"),
                ex.ChoiceExample("我们" * 20, "是什么", ["中国人民银行", "天"], 1, id="c")]
    features = make_featurizer("multiple_choice", tokenizer, 16).featurize(examples)
    assert len(features) == 3
    assert features.report.truncated == {"context+question+choice over max_length": 1}
    batch = features.batch([0, 1, 2])
    assert batch["token_ids"].shape == (3, 3, 16) and batch["segment_ids"].shape == (3, 3, 16)
    assert batch["choice_mask"].tolist() == [[1, 1, 1], [1, 1, 0], [1, 1, 0]]
    assert batch["label"].tolist() == [0, 1, 1]
    row = batch["token_ids"][0, 1]
    assert text_of(tokenizer, row[:15]) == ["[CLS]", *"我爱北京天安门", "[SEP]", *"是什么", "[SEP]",
                                              "上", "海", "[SEP]"][:15]
    assert batch["segment_ids"][0, 1].tolist()[:16] == [0] * 13 + [1] * 3
    # an empty question adds no extra [SEP]
    assert text_of(tokenizer, batch["token_ids"][1, 0][:11]) == [
        "[CLS]", *"今天天气很好", "[SEP]", "下", "雨", "[SEP]"]
    assert (batch["token_ids"][2] > 0).sum(-1).max() == 16  # truncated to max_length


def test_truncate_longest_first_is_bert4keras_truncation():
    rng = random.Random(0)
    for _ in range(2000):
        parts = [list(range(100 * k, 100 * k + rng.randrange(0, 60)))
                 for k in range(rng.randrange(1, 4))]
        max_length = rng.randrange(len(parts) * 2, 150)
        expected = [list(p) for p in parts]
        truncate_sequences(max_length, -2, *expected)
        got = [list(p) for p in parts]
        truncate_longest_first(max_length, *got)
        assert got == expected


# ---------------------------------------------------------------- spans


def chars_of(features, row, start, end):
    offsets = features.ragged("offsets", row)
    return int(offsets[start][0]), int(offsets[end][1])


def test_ner_spans_round_trip_and_truncation_is_counted(tokenizer):
    text = "毛主席在北京天安门上看书hello world"
    entities = [Entity(0, 3, "PER"), Entity(4, 6, "LOC"), Entity(4, 9, "LOC"), Entity(12, 17, "MISC"),
                Entity(1, 2, "UNKNOWN")]
    examples = [NERExample(text, entities), NERExample("我爱北京天安门上海深圳", [Entity(9, 11, "LOC")])]
    featurizer = make_featurizer("extraction_ner", tokenizer, 12, ["PER", "LOC", "MISC"])
    features = featurizer.featurize(examples)
    report = features.report
    assert len(features) == 2  # the example that lost its only span is kept
    assert report.spans_lost == {"entity type not in the task's labels": 1,
                                 "entity truncated (past max_length)": 2}
    assert report.truncated == {"text over max_length": 2} and report.spans == 3
    for type_, start, end in features.ragged("entities", 0).tolist():
        s, e = chars_of(features, 0, start, end)
        assert any((s, e, labels) == (x.start, x.end, x.type) for x in entities
                   for labels in [["PER", "LOC", "MISC"][type_]])
    batch = features.batch([0, 1])
    labels = batch["entity_labels"]
    assert labels.shape == (2, 3, 2, 2) and labels.dtype == np.int32
    assert labels[0, 1].tolist() == [[5, 6], [5, 9]] and labels[0, 0].tolist() == [[1, 3], [0, 0]]
    assert not labels[1].any()


def test_ner_latin_words_and_long_texts_round_trip(tokenizer):
    text = "hello world 我爱北京 abc test"
    entities = [Entity(0, 5, "A"), Entity(6, 11, "A"), Entity(12, 16, "B"), Entity(17, 20, "A")]
    featurizer = make_featurizer("extraction_ner", tokenizer, 64, ["A", "B"])
    features = featurizer.featurize([NERExample(text, entities)])
    got = sorted((["A", "B"][t], *chars_of(features, 0, s, e))
                 for t, s, e in features.ragged("entities", 0).tolist())
    assert got == sorted((x.type, x.start, x.end) for x in entities)
    assert features.report.spans_widened == 0


def test_token_locator_agrees_with_tokenizer(tokenizer):
    rng = random.Random(0)
    texts = ["毛主席 在北京hello world天安门", "我爱北京天安门上太阳升", "abc 2024 test 中国人民"]
    for text, max_length in itertools.product(texts, [None, 6, 12]):
        encoding = tokenizer.encode_with_offsets(text, max_length=max_length)
        offsets, positions = segment_tokens(encoding)
        locator = TokenLocator(offsets, positions, text, truncated=max_length is not None)
        for _ in range(200):
            start = rng.randrange(len(text))
            end = rng.randrange(start + 1, len(text) + 1)
            expected = char_span_to_token_span(encoding.offsets, encoding.segment_ids,
                                               start, end, 0, text)
            span, _ = locator.locate(start, end)
            assert span == expected, (text, start, end)


def test_relation_gplinker_labels(tokenizer):
    text = "毛主席在北京天安门看书"
    mao, beijing, tam = Entity(0, 3, "人"), Entity(4, 6, "地"), Entity(6, 9, "地")
    triples = [ex.Triple(mao, "在", beijing), ex.Triple(mao, "在", tam), ex.Triple(beijing, "有", tam),
               ex.Triple(mao, "无", tam)]
    features = make_featurizer("extraction_relation", tokenizer, 32, ["在", "有"]).featurize(
        [ex.RelationExample(text, triples)])
    assert features.report.spans_lost == {"predicate not in the task's labels": 1}
    batch = features.batch([0])
    entity = batch["entity_labels"][0]
    assert sorted(map(tuple, entity[0][entity[0].any(-1)].tolist())) == [(1, 3), (5, 6)]  # subjects
    assert sorted(map(tuple, entity[1][entity[1].any(-1)].tolist())) == [(5, 6), (7, 9)]  # objects
    assert batch["head_labels"].shape == (1, 2, 2, 2)
    assert batch["head_labels"][0, 0].tolist() == [[1, 5], [1, 7]]  # (subject start, object start)
    assert batch["tail_labels"][0, 0].tolist() == [[3, 6], [3, 9]]  # (subject end, object end)
    assert batch["head_labels"][0, 1].tolist() == [[5, 7], [0, 0]]
    for p, sh, st, oh, ot in features.ragged("triples", 0).tolist():
        assert chars_of(features, 0, sh, st) in [(0, 3), (4, 6)]


def test_event_gplinker_labels(tokenizer):
    text = "毛主席在北京看书他在上海写字"
    roles = ["读:trigger", "读:人", "读:地", "写:trigger", "写:地"]
    events = [ex.Event("读", Entity(6, 8, "trigger"), [Entity(0, 3, "人"), Entity(4, 6, "地")]),
              ex.Event("写", Entity(12, 14, "trigger"), [Entity(10, 12, "地"), Entity(8, 9, "人")])]
    featurizer = make_featurizer("extraction_event", tokenizer, 32, roles)
    features = featurizer.featurize([ex.EventExample(text, events)])
    assert features.report.spans_lost == {"event role not in the task's labels": 1}
    assert features.report.spans == 5
    batch = features.batch([0])
    argument = batch["argument_labels"][0]
    assert argument.shape == (5, 1, 2)
    assert argument[:, 0].tolist() == [[7, 8], [1, 3], [5, 6], [13, 14], [11, 12]]
    heads = {tuple(x) for x in batch["head_labels"][0, 0].tolist()} - {(0, 0)}
    tails = {tuple(x) for x in batch["tail_labels"][0, 0].tolist()} - {(0, 0)}
    assert heads == {(1, 7), (5, 7), (1, 5), (11, 13)}  # pairs within each event, (min, max)
    assert tails == {(3, 8), (6, 8), (3, 6), (12, 14)}
    # a bare event type as a label marks that type's triggers
    featurizer = make_featurizer("extraction_event", tokenizer, 32, ["写"])
    features = featurizer.featurize([ex.EventExample(text, events[1:])])
    assert features.ragged("arguments", 0).tolist() == [[0, 0, 13, 14]]


def test_coreference_spans_and_dropped_when_truncated(tokenizer):
    text = "毛主席在北京他看书"
    examples = [ex.CorefExample(text, Entity(0, 3, "span1"), Entity(6, 7, "span2"), "true"),
                ex.CorefExample("我爱北京天安门上太阳升他", Entity(0, 1, "span1"), Entity(12, 13, "span2"),
                             "false")]
    features = make_featurizer("coreference", tokenizer, 11, ["false", "true"]).featurize(examples)
    assert len(features) == 1
    assert features.report.dropped == {"span truncated (past max_length)": 1}
    batch = features.batch([0])
    assert batch["span1"].tolist() == [[1, 3]] and batch["span2"].tolist() == [[7, 7]]
    assert batch["label"].tolist() == [1]


# ---------------------------------------------------------------- mlm


def mlm_texts():
    rng = random.Random(1)
    return ["".join(rng.choice(CHARS) for _ in range(rng.randrange(20, 120))) for _ in range(300)]


def test_mlm_rows_cover_long_texts(tokenizer):
    features = make_featurizer("mlm", tokenizer, 32).featurize(["我" * 70, "北京"])
    assert [len(features.ragged("token_ids", i)) for i in range(len(features))] == [32, 32, 12, 4]
    assert features.report.rows == 4 and not features.report.truncated


@pytest.mark.parametrize("whole_word", [False, True])
def test_mlm_masking_rates_and_determinism(tokenizer, whole_word):
    features = make_featurizer("mlm", tokenizer, 64, whole_word=whole_word).featurize(mlm_texts())
    rows = np.arange(len(features))
    batch = features.batch(rows, rng=np.random.default_rng(7))
    again = features.batch(rows, rng=np.random.default_rng(7))
    other = features.batch(rows, rng=np.random.default_rng(8))
    assert all(np.array_equal(batch[k], again[k]) for k in batch)
    assert not np.array_equal(batch["mlm_labels"], other["mlm_labels"])
    original = features.batch(rows, rng=np.random.default_rng(0))["mlm_labels"]  # shape only
    plain = np.zeros_like(original)
    for b in rows:
        ids = features.ragged("token_ids", b)
        plain[b, :len(ids)] = ids
    masked = batch["mlm_labels"] > 0
    content = (plain > 0).sum() - 2 * len(rows)
    rate = masked.sum() / content
    assert 0.13 <= rate <= 0.155 if whole_word else abs(rate - 0.15) < 0.005
    assert np.array_equal(batch["mlm_labels"][masked], plain[masked])
    assert not masked[:, 0].any()  # never [CLS]
    replaced = batch["token_ids"][masked]
    mask_share = (replaced == tokenizer.mask_id).mean()
    kept_share = (replaced == plain[masked]).mean()
    assert abs(mask_share - 0.8) < 0.04 and abs(kept_share - 0.1 - 0.1 / tokenizer.vocab_size) < 0.04
    assert np.array_equal(batch["token_ids"][~masked], plain[~masked])
    if whole_word:  # a word is masked whole or not at all
        for b in rows[:50]:
            starts = features.ragged("word_starts", b)
            n = len(starts)
            words = np.cumsum(starts[1:n - 1])
            for word in np.unique(words):
                picked = masked[b, 1:n - 1][words == word]
                assert picked.all() or not picked.any()


def test_mlm_needs_an_rng(tokenizer):
    features = make_featurizer("mlm", tokenizer, 16).featurize(["我爱北京"])
    with pytest.raises(ValueError, match="pass rng"):
        features.batch([0])


# ---------------------------------------------------------------- real data


def test_real_cmrc2018_and_cluener_round_trip(shared_data, tmp_path):
    from data_adapters import read_task
    from mtl_framework.config.registry import load_registry
    from mtl_framework.tokenizer import example_texts

    registry = load_registry()
    cmrc, cluener = registry.tasks["cmrc2018"], registry.tasks["cluener"]
    qa = list(itertools.islice(read_task(cmrc, "dev", shared_data), 300))
    ner = list(itertools.islice(read_task(cluener, "dev", shared_data), 300))
    texts = [t for e in qa + ner for t in example_texts(e)]
    write_vocab(build_vocab(count_units(texts)), tmp_path / "vocab.txt")
    tok = Tokenizer(str(tmp_path / "vocab.txt"))

    features = make_featurizer("mrc_span", tok, 256).featurize(qa)
    answered = set()
    for w in np.flatnonzero(np.asarray(features["start"])):
        start, end = int(features["start"][w]), int(features["end"][w])
        answer = mrc_answer(features, w, start, end)
        assert answer["text"] in mrc_gold(features, answer["example_index"])
        answered.add(answer["example_index"])
    lost = features.report.spans_lost
    assert len(answered) >= len(qa) - sum(lost.values())
    assert len(features) > len(qa)  # long contexts give several windows

    features = make_featurizer("extraction_ner", tok, 128, cluener.labels).featurize(ner)
    for row, example in enumerate(ner):
        got = {(cluener.labels[t], *chars_of(features, row, s, e))
               for t, s, e in features.ragged("entities", row).tolist()}
        assert got == {(x.type, x.start, x.end) for x in example.entities}


def test_disk_arrays_are_npy_files_equal_to_the_memory_arrays(tmp_path):
    """Disk mode appends to .npy files and writes each header last; numpy reads them
    as the arrays memory mode concatenates (dtypes, trailing shapes, empty arrays)."""
    from mtl_framework.families.features import NPY_HEADER_BYTES, FeatureWriter, npy_header

    rng = np.random.default_rng(0)
    chunks = [{"ids": rng.integers(0, 9000, 7).astype(np.uint16),
               "spans": rng.integers(-5, 5, (3, 5)).astype(np.int32),
               "score": rng.normal(size=(4, 2)).astype(np.float32),
               "none": np.zeros((0, 4), np.int64)} for _ in range(3)]
    disk, memory = FeatureWriter(tmp_path), FeatureWriter()
    for chunk in chunks:
        for name, array in chunk.items():
            disk.add(name, array)
            memory.add(name, array)
    on_disk, in_memory = disk.finish(), memory.finish()
    for name in chunks[0]:
        loaded = np.load(tmp_path / f"{name}.npy")  # a plain read, not the writer's memory map
        expected = np.concatenate([chunk[name] for chunk in chunks])
        for array in (loaded, np.asarray(on_disk[name]), in_memory[name]):
            assert array.dtype == expected.dtype and array.shape == expected.shape, name
            assert array.tobytes() == expected.tobytes(), name
        assert (tmp_path / f"{name}.npy").stat().st_size == NPY_HEADER_BYTES + expected.nbytes
    # The reserved header holds any row count a cache can reach.
    for dtype, shape in ((np.int64, (10 ** 15,)), (np.float32, (10 ** 15, 2, 3))):
        header = npy_header(dtype, shape)
        assert len(header) == NPY_HEADER_BYTES
        stream = io.BytesIO(header)
        assert np.lib.format.read_magic(stream) == (1, 0)
        assert np.lib.format.read_array_header_1_0(stream) == (shape, False, np.dtype(dtype))
