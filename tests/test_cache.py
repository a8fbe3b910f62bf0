"""Feature cache (content-hash keys, mmap loads, atomic writes) and TaskStream."""
import json

import numpy as np
import pytest

import data_adapters
from mtl_framework import cache as C
from mtl_framework.features import make_featurizer
from mtl_framework.registry import load_paths
from mtl_framework.tokenizer import Tokenizer
from mtl_framework.vocab import build_vocab, count_units, write_vocab

CHARS = "我爱北京天安门上太阳升伟大领袖毛主席指引我们向前进今天气很好明后会下雨吗是的不他她它在家里"


class CountingTokenizer(Tokenizer):
    """Counts every call that tokenizes."""

    calls = 0

    def encode_batch(self, *args, **kwargs):
        CountingTokenizer.calls += 1
        return super().encode_batch(*args, **kwargs)

    def encode_with_offsets(self, *args, **kwargs):
        CountingTokenizer.calls += 1
        return super().encode_with_offsets(*args, **kwargs)


def write_task(root, rows=40, max_length=32, labels=("neg", "pos")):
    """A jsonl classification task: spec file + data under root."""
    (root / "data" / "toy").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    with open(root / "data" / "toy" / "train.json", "w", encoding="utf-8") as f:
        for i in range(rows):
            text = "".join(rng.choice(list(CHARS), rng.integers(3, 40)))
            f.write(json.dumps({"sentence": text, "label": labels[i % 2]}, ensure_ascii=False) + "\n")
    spec = root / "specs" / "toy.yaml"
    spec.parent.mkdir(exist_ok=True)
    spec.write_text(f"""dataset: toy
format: jsonl
files:
  train: toy/train.json
fields:
  text: sentence
  label: label
tasks:
  - name: toy
    type: classification
    labels: [{", ".join(labels)}]
    max_length: {max_length}
    metric: accuracy
""", encoding="utf-8")
    return load_paths([spec]).tasks["toy"]


@pytest.fixture
def setup(tmp_path):
    vocab = tmp_path / "vocab.txt"
    write_vocab(build_vocab(count_units([CHARS])), vocab)
    return tmp_path, write_task(tmp_path), CountingTokenizer(str(vocab))


def build(tmp_path, task, tokenizer, **kwargs):
    return C.cached_features(task, "train", tokenizer, tmp_path / "data",
                             cache_dir=tmp_path / "cache", **kwargs)


def folders(tmp_path):
    return sorted(p.name for p in (tmp_path / "cache" / "toy").iterdir())


def test_second_load_tokenizes_nothing_and_is_memory_mapped(setup, monkeypatch):
    tmp_path, task, tok = setup
    CountingTokenizer.calls = 0
    first = build(tmp_path, task, tok)
    assert CountingTokenizer.calls > 0 and len(first) == 40
    CountingTokenizer.calls = 0
    monkeypatch.setattr(data_adapters, "read_task",
                        lambda *a, **k: pytest.fail("data read on a cache hit"))
    second = build(tmp_path, task, tok)
    assert CountingTokenizer.calls == 0
    assert all(isinstance(a, np.memmap) for a in second.arrays.values())
    assert set(first.arrays) == set(second.arrays)
    for name in first.arrays:
        assert np.array_equal(first[name], second[name])
    assert second.meta["read"]["examples"] == 40 and second.report.rows == 40
    assert len(folders(tmp_path)) == 1  # and no temporary folder left behind


def test_content_changes_miss_the_cache(setup):
    tmp_path, task, tok = setup
    build(tmp_path, task, tok)
    build(tmp_path, task, tok, max_length=16)  # another max_length
    assert len(folders(tmp_path)) == 2
    build(tmp_path, write_task(tmp_path / "x", labels=("pos", "neg")), tok)  # spec content
    assert len(folders(tmp_path)) == 3
    with open(tmp_path / "data" / "toy" / "train.json", "a", encoding="utf-8") as f:
        f.write(json.dumps({"sentence": "我爱北京", "label": "pos"}, ensure_ascii=False) + "\n")
    assert len(build(tmp_path, task, tok)) == 41  # the data changed
    assert len(folders(tmp_path)) == 4
    vocab = tmp_path / "vocab2.txt"
    write_vocab(build_vocab(count_units([CHARS + "中国"])), vocab)
    build(tmp_path, task, CountingTokenizer(str(vocab)))  # the tokenizer changed
    assert len(folders(tmp_path)) == 5
    CountingTokenizer.calls = 0
    build(tmp_path, task, tok)  # nothing changed: a hit
    assert CountingTokenizer.calls == 0 and len(folders(tmp_path)) == 5


def test_featurizer_settings_and_version_are_in_the_key(setup, monkeypatch):
    tmp_path, task, tok = setup
    featurizer = make_featurizer("classification", tok, 32, ["neg", "pos"], task="toy")
    digest, inputs = C.cache_key(task, "train", featurizer, tmp_path / "data")
    assert inputs["adapter"].startswith("jsonl:") and inputs["tokenizer"] == tok.fingerprint()
    monkeypatch.setattr(C.F, "source_version", lambda: "changed")
    assert C.cache_key(task, "train", featurizer, tmp_path / "data")[0] != digest
    monkeypatch.undo()
    mlm = make_featurizer("mlm", tok, 32, task="toy", whole_word=True)
    assert C.cache_key(task, "train", mlm, tmp_path / "data")[0] != digest


def test_failed_build_leaves_nothing(setup, monkeypatch):
    tmp_path, task, tok = setup

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")
        yield

    monkeypatch.setattr(data_adapters, "read_task", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        build(tmp_path, task, tok)
    assert folders(tmp_path) == []


def test_cache_dir_from_the_environment(setup, monkeypatch):
    tmp_path, task, tok = setup
    monkeypatch.setenv(C.CACHE_ENV, str(tmp_path / "env_cache"))
    C.cached_features(task, "train", tok, tmp_path / "data")
    assert len(list((tmp_path / "env_cache" / "toy").iterdir())) == 1


def test_missing_data_file_names_the_spec(setup):
    tmp_path, task, tok = setup
    with pytest.raises(FileNotFoundError, match=r"toy\.yaml:\d+: train file of task 'toy' not found"):
        C.cached_features(task, "train", tok, tmp_path / "nowhere", cache_dir=tmp_path / "cache")


# ---------------------------------------------------------------- streams


@pytest.fixture
def features(setup):
    tmp_path, _, tok = setup
    rng = np.random.default_rng(1)
    texts = ["".join(rng.choice(list(CHARS), rng.integers(2, 60))) for _ in range(203)]
    return make_featurizer("mlm", tok, 64, task="toy").featurize(texts, tmp_path)


def same(a, b):
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_stream_is_deterministic_from_the_seed(features):
    a = take(C.TaskStream(features, 16, seed=3), 30)
    b = take(C.TaskStream(features, 16, seed=3), 30)
    c = take(C.TaskStream(features, 16, seed=4), 30)
    assert all(same(x, y) for x, y in zip(a, b))
    assert not all(same(x, y) for x, y in zip(a, c))


def take(stream, n):
    return [stream.next_batch() for _ in range(n)]


def test_every_row_once_per_epoch_and_buckets_cut_padding(features):
    stream = C.TaskStream(features, 16, seed=0, bucket_batches=4)
    plan = stream.plan(0)
    assert sorted(np.concatenate(plan).tolist()) == list(range(len(features)))
    assert [len(b) for b in plan].count(16) == len(features) // 16
    lengths = features.lengths()

    def padding(batches):
        return sum(int(lengths[b].max()) * len(b) - int(lengths[b].sum()) for b in batches)

    shuffled = np.random.default_rng(0).permutation(len(features))
    plain = [shuffled[i:i + 16] for i in range(0, len(features), 16)]
    assert padding(plan) < 0.5 * padding(plain)
    assert not np.array_equal(np.concatenate(stream.plan(1)), np.concatenate(plan))  # reshuffled


def test_stream_resumes_exactly_across_epochs(features):
    stream = C.TaskStream(features, 16, seed=5)
    per_epoch = stream.batches_per_epoch()
    take(stream, per_epoch - 3)
    state = json.loads(json.dumps(stream.state()))  # saved with a checkpoint
    expected = take(stream, 10)  # crosses into epoch 1 (masks included: mlm)
    assert stream.state()["epoch"] == 1
    resumed = C.TaskStream(features, 16, seed=5)
    resumed.restore(state)
    assert all(same(x, y) for x, y in zip(expected, take(resumed, 10)))
    with pytest.raises(ValueError, match="seed=5, this one 6"):
        C.TaskStream(features, 16, seed=6).restore(state)


def test_stream_batches_follow_the_contract(features):
    batch = C.TaskStream(features, 8, seed=0, pad_to=64).next_batch()
    assert batch["token_ids"].shape == (8, 64) and batch["token_ids"].dtype == np.int32
    assert batch["mlm_labels"].shape == (8, 64) and batch["segment_ids"].dtype == np.int32
    rows = [b["token_ids"].shape[0] for b in C.iterate_batches(features, 50)]
    assert rows == [50, 50, 50, 50, len(features) - 200]
    with pytest.raises(ValueError, match="pad_to=8 is shorter"):
        C.TaskStream(features, 8, seed=0, pad_to=8).next_batch()
