import json
import re
from collections import Counter

import pytest
from interop.legacy_bert4keras import bert4keras_available, run_bert4keras
from token_spans import char_span_to_token_span

from mtl_framework.tokenizer import Tokenizer, build_vocab, count_units, truncate_sequences, write_vocab

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def jsonl(path, limit):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for _, line in zip(range(limit), f)]


def json_stream(path, limit):
    """Objects written back to back (cluener pretty-prints them over several lines)."""
    text, decoder, position, objects = path.read_text(encoding="utf-8"), json.JSONDecoder(), 0, []
    while len(objects) < limit:
        while position < len(text) and text[position].isspace():
            position += 1
        if position >= len(text):
            break
        obj, position = decoder.raw_decode(text, position)
        objects.append(obj)
    return objects


def tsv(path, limit):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n").split("\t") for _, line in zip(range(limit), f)]


@pytest.fixture(scope="module")
def real_items(shared_data):
    """10,000+ real sentences and pairs, with and without truncation."""
    singles = [r["sentence"] for r in jsonl(shared_data / "tnews/train.json", 3000)]
    singles += [r["text"] for r in json_stream(shared_data / "cluener/train.json", 2000)]
    singles += [r["sentence"] for r in jsonl(shared_data / "iflytek/dev.json", 600)]
    with open(shared_data / "cmrc2018/dev.json", encoding="utf-8") as f:
        cmrc = json.load(f)["data"]
    singles += [p["context"] for d in cmrc for p in d["paragraphs"]][:600]
    pairs = [(r[0], r[1]) for r in tsv(shared_data / "afqmc/train.txt", 2500) if len(r) == 3]
    pairs += [(r["sentence1"], r["sentence2"]) for r in jsonl(shared_data / "ocnli/dev.json", 1500)]
    lengths = [None, 16, 64, 128, 512]
    items = [{"text": t, "max_length": lengths[i % 5]} for i, t in enumerate(singles)]
    items += [{"text": a, "text_b": b, "max_length": lengths[i % 5]} for i, (a, b) in enumerate(pairs)]
    return items


@pytest.fixture(scope="module")
def real_vocab(real_items, tmp_path_factory):
    """Char-level vocab from the texts plus whole Latin words, so WordPiece's
    longest-match and [UNK] paths are both exercised."""
    texts = [t for item in real_items for t in (item["text"], item.get("text_b")) if t]
    counts = count_units(texts)
    tokens = build_vocab(counts, max_size=6000, min_count=2)
    words = Counter(w.lower() for t in texts for w in re.findall(r"[A-Za-z]{2,}", t))
    tokens += [w for w, _ in words.most_common(300) if w not in tokens]
    tokens += ["##" + w for w, _ in words.most_common(100)]
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    write_vocab(tokens, path)
    return path


def test_vocab_layout(real_vocab):
    lines = real_vocab.read_text(encoding="utf-8").splitlines()
    assert lines[:5] == SPECIALS
    assert len(lines) == len(set(lines))


def test_ids_equal_bert4keras_on_real_text(real_items, real_vocab, tmp_path):
    if not bert4keras_available():
        pytest.skip("bert4keras/tf-keras not installed (make interop)")
    assert len(real_items) >= 10000
    tokenizer = Tokenizer(str(real_vocab))
    ours = [list(tokenizer.encode(i["text"], i.get("text_b"), i["max_length"])) for i in real_items]
    items_path, out_path = tmp_path / "items.json", tmp_path / "out.json"
    items_path.write_text(json.dumps(real_items, ensure_ascii=False), encoding="utf-8")
    run_bert4keras("tokenize", real_vocab, items_path, out_path)
    theirs = json.loads(out_path.read_text(encoding="utf-8"))
    differ = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    assert not differ, f"{len(differ)} of {len(real_items)} differ, first: {real_items[differ[0]]}"
    unk_share = sum(ids.count(tokenizer.unk_id) for ids, _ in ours) / sum(len(ids) for ids, _ in ours)
    assert 0 < unk_share < 0.05  # the [UNK] path is exercised, yet rare


def write_small_vocab(path, extra):
    path.write_text("\n".join(SPECIALS + extra) + "\n", encoding="utf-8")
    return Tokenizer(str(path))


def test_chinese_split_per_char_and_wordpiece(tmp_path):
    tok = write_small_vocab(tmp_path / "v.txt", ["我", "爱", "北", "京", "play", "##ing", "，", "##1", "##9"])
    assert tok.tokenize("我爱北京，Playing19") == ["我", "爱", "北", "京", "，", "play", "##ing",
                                                 "##1", "##9"]
    assert tok.tokenize("café") == ["[UNK]"]  # accent stripped to "cafe", unknown word -> one [UNK]


def test_offsets_map_tokens_back_to_original_characters(tmp_path):
    tok = write_small_vocab(tmp_path / "v.txt", ["北", "京", "play", "##ing", "是"])
    text = "  北京\tPlaying 是"
    enc = tok.encode_with_offsets(text)
    pieces = [text[s:e] for s, e in enc.offsets[1:-1]]
    assert pieces == ["北", "京", "Play", "ing", "是"]
    assert char_span_to_token_span(enc.offsets, enc.segment_ids, 2, 4) == (1, 2)
    assert char_span_to_token_span(enc.offsets, enc.segment_ids, 5, 12) == (3, 4)
    # a span over a space and the next word keeps both ends
    assert char_span_to_token_span(enc.offsets, enc.segment_ids, 4, 12, text=text) == (3, 4)


def test_truncation_follows_bert4keras_rule(tmp_path):
    tok = write_small_vocab(tmp_path / "v.txt", list("一二三四五六七八九十"))
    ids, segments = tok.encode("一二三四五六", "七八九", max_length=8)
    # 6 + 3 + 3 specials = 12 > 8: pop from the longer (first) side until 3 + 3 + 3 = 9 > 8,
    # then the tie goes to the first sequence: 2 + 3.
    assert tok.decode(ids) == "一二七八九"
    assert segments == [0, 0, 0, 0, 1, 1, 1, 1]
    enc = tok.encode_with_offsets("一二三四五六", "七八九", max_length=8)
    assert char_span_to_token_span(enc.offsets, enc.segment_ids, 3, 5) is None  # truncated away
    assert char_span_to_token_span(enc.offsets, enc.segment_ids, 1, 3, segment=1) == (5, 6)
    assert truncate_sequences(4, -2, [1, 2, 3], [4, 5, 6]) == [[1, 3], [4, 6]]


def test_vocab_errors_name_the_file_and_fix(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("[UNK]\n[PAD]\n[CLS]\n[SEP]\n[MASK]\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.txt: \[PAD\] must be id 0"):
        Tokenizer(str(path))
    path.write_text("[PAD]\n[UNK]\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"missing special tokens \['\[CLS\]'"):
        Tokenizer(str(path))
