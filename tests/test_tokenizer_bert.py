"""A BERT vocab.txt as Google's Chinese BERT, HFL's RoBERTa-wwm-ext / MacBERT and
albert_zh ship it ([PAD], [unused*], [UNK], [CLS], [SEP], [MASK], characters, `##`
pieces): our Tokenizer's ids equal transformers' BertTokenizerFast on the same vocab,
lower-cased and cased, on real sentences and pairs from ../shared/data (run in
.venv-torch)."""
import json
import re
from collections import Counter

import pytest
from interop.roformer_torch import BERT_WORKER, run_torch, torch_unavailable_reason

from mtl_framework.tokenizer import Tokenizer, count_units


def jsonl(path, limit):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for _, line in zip(range(limit), f)]


@pytest.fixture(scope="module")
def real_texts(shared_data):
    """~3,000 real sentences and pairs (news titles, app descriptions, reading passages
    with Latin words and digits, question pairs)."""
    singles = [r["sentence"] for r in jsonl(shared_data / "tnews/train.json", 1000)]
    singles += [r["sentence"] for r in jsonl(shared_data / "iflytek/dev.json", 400)]
    with open(shared_data / "cmrc2018/dev.json", encoding="utf-8") as f:
        cmrc = json.load(f)["data"]
    singles += [p["context"] for d in cmrc for p in d["paragraphs"]][:300]
    with open(shared_data / "afqmc/train.txt", encoding="utf-8") as f:
        pairs = [line.rstrip("\n").split("\t")[:2] for _, line in zip(range(800), f)]
    pairs += [[r["sentence1"], r["sentence2"]] for r in jsonl(shared_data / "ocnli/dev.json", 500)]
    return singles + pairs


@pytest.fixture(scope="module")
def bert_vocab(real_texts, tmp_path_factory):
    """BERT's layout: [PAD], [unused1-99], [UNK], [CLS], [SEP], [MASK], <S>, <T>, then
    characters, `##` + each character (as the Chinese BERT vocab has them), Latin words
    in both cases and `##` word pieces, so cased and lower-cased runs differ."""
    texts = [t for item in real_texts for t in ([item] if isinstance(item, str) else item)]
    chars = [c for c, n in count_units(texts).most_common() if n >= 2 and len(c) == 1][:5000]
    words = Counter(w for t in texts for w in re.findall(r"[A-Za-z]{2,}", t))
    latin = [w for w, _ in words.most_common(400)]
    tokens = (["[PAD]"] + [f"[unused{i}]" for i in range(1, 100)]
              + ["[UNK]", "[CLS]", "[SEP]", "[MASK]", "<S>", "<T>"]
              + chars + ["##" + c for c in chars[:2000]]
              + latin + [w.lower() for w in latin] + ["##" + w.lower() for w in latin[:100]])
    path = tmp_path_factory.mktemp("bert_vocab") / "vocab.txt"
    path.write_text("\n".join(dict.fromkeys(tokens)) + "\n", encoding="utf-8")
    return path


def test_ids_equal_bert_tokenizer_fast(real_texts, bert_vocab, tmp_path):
    reason = torch_unavailable_reason()
    if reason:
        pytest.skip(reason)
    texts_path, out_path = tmp_path / "texts.json", tmp_path / "ids.json"
    texts_path.write_text(json.dumps(real_texts, ensure_ascii=False), encoding="utf-8")
    run_torch("tokenize", bert_vocab, texts_path, out_path, worker=BERT_WORKER)
    transformers_ids = json.loads(out_path.read_text(encoding="utf-8"))
    for case, theirs in transformers_ids.items():
        tokenizer = Tokenizer(str(bert_vocab), lowercase=case == "lower")
        ours = [tokenizer.encode(item)[0] if isinstance(item, str) else
                tokenizer.encode(*item)[0] for item in real_texts]
        differ = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
        assert len(theirs) == len(real_texts) >= 3000
        assert not differ, (f"{case}: {len(differ)} of {len(real_texts)} differ, first: "
                            f"{real_texts[differ[0]]}")
        pieces = sum(tokenizer.id_to_token(i).startswith("##") for ids in ours for i in ids)
        unknown = sum(ids.count(tokenizer.unk_id) for ids in ours)
        assert pieces > 0 and unknown > 0  # both WordPiece paths are exercised
    assert transformers_ids["lower"] != transformers_ids["cased"]  # the case option matters
