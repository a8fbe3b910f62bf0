"""Feature cache (content-hash keys, mmap loads, atomic writes) and the batch streams read from it."""
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import data_adapters
from mtl_framework import tokenizer as V
from mtl_framework.config.registry import load_paths
from mtl_framework.families import FAMILIES, choice, make_featurizer, mrc, text
from mtl_framework.families import features as F
from mtl_framework.mixing import mixture as M
from mtl_framework.prepare import cache as C
from mtl_framework.tokenizer import Tokenizer, build_vocab, count_units, write_vocab

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


def test_featurizer_settings_and_code_are_in_the_key(setup, monkeypatch):
    tmp_path, task, tok = setup
    featurizer = make_featurizer("classification", tok, 32, ["neg", "pos"], task="toy")
    digest, inputs = C.cache_key(task, "train", featurizer, tmp_path / "data")
    assert inputs["adapter"].startswith("jsonl:") and inputs["tokenizer"] == tok.fingerprint()
    assert inputs["storage"] == C.STORAGE_VERSION
    monkeypatch.setattr(C, "STORAGE_VERSION", C.STORAGE_VERSION + 1)
    assert C.cache_key(task, "train", featurizer, tmp_path / "data")[0] != digest
    monkeypatch.undo()
    mlm = make_featurizer("mlm", tok, 32, task="toy", whole_word=True)
    assert C.cache_key(task, "train", mlm, tmp_path / "data")[0] != digest


def edited(monkeypatch, *objects):
    """Pretend the source of `objects` was edited (what code_version reads)."""
    original = C.inspect.getsource
    monkeypatch.setattr(C.inspect, "getsource",
                        lambda obj: original(obj) + ("\n# edited" if obj in objects else ""))


def family_keys():
    C._VERSIONS.clear()  # computed once per process; here the "source" changes under it
    return {family: C.code_version(cls) for family, cls in ((n, f.featurizer) for n, f in FAMILIES.items())}


def changed(before, after):
    return sorted(f for f in before if before[f] != after[f])


def test_the_key_follows_the_family_code_not_the_whole_module(monkeypatch):
    before = family_keys()
    assert len(set(before.values())) == len(before)  # every family its own key
    edited(monkeypatch, mrc.MRCFeaturizer.encode_chunk)
    assert changed(before, family_keys()) == ["mrc_span"]
    monkeypatch.undo()
    edited(monkeypatch, text.TextFeaturizer.label_of)  # the base of three families
    assert changed(before, family_keys()) == sorted(
        name for name, f in FAMILIES.items() if issubclass(f.featurizer, text.TextFeaturizer))
    assert len(changed(before, family_keys())) == 3
    monkeypatch.undo()
    monkeypatch.setattr(choice.ChoiceFeaturizer, "family", "multiple_choice")  # same value: same key
    assert changed(before, family_keys()) == []
    monkeypatch.setattr(mrc.MRCFeaturizer, "defaults", {"stride": 64, "max_question_length": 64})
    assert changed(before, family_keys()) == ["mrc_span"]  # a class setting
    monkeypatch.undo()
    edited(monkeypatch, F.TokenLocator.locate)  # a helper: the families that call it
    assert changed(before, family_keys()) == ["coreference", "extraction_event",
                                              "extraction_ner", "extraction_relation", "mrc_span"]
    monkeypatch.undo()
    edited(monkeypatch, V.example_texts)  # imported inside MLMFeaturizer.encode_chunk
    assert changed(before, family_keys()) == ["mlm"]
    monkeypatch.undo()
    edited(monkeypatch, text.collate_text, mrc.mrc_answer)  # batch-time code: not in the cache
    assert changed(before, family_keys()) == []
    monkeypatch.undo()
    edited(monkeypatch, F.FeatureWriter.add)  # storage code shared by all
    assert changed(before, family_keys()) == sorted(before)
    monkeypatch.undo()
    monkeypatch.setattr(F, "__doc__", F.__doc__ + "edited")  # the module docstring: nothing
    monkeypatch.setattr(mrc, "NO_WINDOW", "another reason text")  # a constant mrc writes in reports
    assert changed(before, family_keys()) == ["mrc_span"]


def test_pickling_a_featurizer_does_not_change_its_key(setup):
    """pickle adds __slotnames__ to the class: a worker's pickle must not move the key."""
    import pickle

    tmp_path, task, tok = setup
    featurizer = make_featurizer("classification", Tokenizer(tok.vocab_path), 32, ["neg", "pos"],
                                 task="toy")
    C._VERSIONS.clear()
    before = C.cache_key(task, "train", featurizer, tmp_path / "data")[0]
    pickle.dumps(featurizer)
    C._VERSIONS.clear()
    assert C.cache_key(task, "train", featurizer, tmp_path / "data")[0] == before


# ---------------------------------------------------------------- corrupt folders


def damage_truncated_tokens(folder):
    path = folder / "token_ids.npy"
    path.write_bytes(path.read_bytes()[:-10])


def damage_label_garbage(folder):
    path = folder / "label.npy"
    data = bytearray(path.read_bytes())
    data[-8:] = b"\x05\x05\x05\x05\x05\x05\x05\x05"  # 84215045: same shape, nonsense
    path.write_bytes(bytes(data))


def damage_meta_deleted(folder):
    (folder / "meta.json").unlink()


def damage_array_deleted(folder):
    (folder / "segment_ids.npy").unlink()


def damage_splits_swapped(folder):
    splits = np.load(folder / "token_ids.splits.npy")
    np.save(folder / "token_ids.splits.npy", splits[::-1].copy())


def damage_meta_garbage(folder):
    (folder / "meta.json").write_text("{not json", encoding="utf-8")


@pytest.mark.parametrize("damage", [damage_truncated_tokens, damage_label_garbage,
                                    damage_meta_deleted, damage_array_deleted,
                                    damage_splits_swapped, damage_meta_garbage],
                         ids=lambda f: f.__name__[len("damage_"):])
def test_a_damaged_folder_is_rebuilt_with_a_warning_naming_it(setup, capsys, damage):
    tmp_path, task, tok = setup
    first = build(tmp_path, task, tok)
    expected = {name: np.array(first[name]) for name in first.arrays}
    folder = tmp_path / "cache" / "toy" / folders(tmp_path)[0]
    del first
    damage(folder)
    assert C.check_folder(folder) is not None
    capsys.readouterr()
    again = build(tmp_path, task, tok)
    err = capsys.readouterr().err
    assert err.startswith(f"mtl: warning: {folder}: ") and err.rstrip().endswith("rebuilding it")
    assert err.count("\n") == 1
    assert sorted(again.arrays) == sorted(expected)
    for name, values in expected.items():
        assert np.array_equal(again[name], values)
    assert folders(tmp_path) == [folder.name]  # replaced in place, nothing left aside
    assert C.check_folder(folder) is None
    build(tmp_path, task, tok)  # and the next run loads it quietly
    assert capsys.readouterr().err == ""


def test_labels_outside_the_range_name_the_values(setup):
    tmp_path, task, tok = setup
    build(tmp_path, task, tok)
    folder = tmp_path / "cache" / "toy" / folders(tmp_path)[0]
    damage_label_garbage(folder)
    assert C.check_folder(folder) == "label values 0..84215045 outside 0..1"
    damage_meta_deleted(folder)
    assert C.check_folder(folder) == "no meta.json (an interrupted or damaged cache folder)"


# ---------------------------------------------------------------- where, and shared


def test_cache_root_env_wins_then_the_experiment_then_a_home_default(tmp_path, monkeypatch):
    monkeypatch.delenv(C.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    assert C.cache_root() == tmp_path / "xdg" / "mtl_framework" / "features"
    assert C.cache_root("exp_cache") == Path("exp_cache")
    monkeypatch.setenv(C.CACHE_ENV, str(tmp_path / "env"))
    assert C.cache_root("exp_cache") == tmp_path / "env"
    monkeypatch.delenv(C.CACHE_ENV)
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert C.cache_root() == tmp_path / "home" / ".cache" / "mtl_framework" / "features"


def test_concurrent_builders_build_once(setup, monkeypatch):
    tmp_path, task, tok = setup
    built = []
    original = C.build_features
    monkeypatch.setattr(C, "build_features", lambda *a, **k: built.append(1) or original(*a, **k))
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: build(tmp_path, task, tok), range(4)))
    assert len(built) == 1  # one built, three waited for its lock and loaded
    assert len(folders(tmp_path)) == 1
    assert all(np.array_equal(r["label"], results[0]["label"]) for r in results)
    assert not [p for p in (tmp_path / "cache" / "toy").iterdir() if ".tmp-" in p.name]


def test_num_examples_counts_questions_and_documents_not_rows(setup):
    tmp_path, task, tok = setup
    assert build(tmp_path, task, tok).num_examples == 40
    texts = ["我爱北京天安门" * 20, "今天", "  "]  # the first is several rows, the last no text
    mlm = make_featurizer("mlm", tok, 16, task="toy").featurize(texts)
    assert len(mlm) > 3 and mlm.num_examples == 2
    from data_adapters.examples import Span, SpanQAExample

    context = "我爱北京天安门" * 10
    questions = [SpanQAExample("我爱", context, [Span(2, 4, "北京")]) for _ in range(3)]
    mrc = make_featurizer("mrc_span", tok, 16, task="toy").featurize(questions)
    assert len(mrc) > 3 and mrc.num_examples == 3


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
    a = take(M.TaskStream(features, 16, seed=3), 30)
    b = take(M.TaskStream(features, 16, seed=3), 30)
    c = take(M.TaskStream(features, 16, seed=4), 30)
    assert all(same(x, y) for x, y in zip(a, b))
    assert not all(same(x, y) for x, y in zip(a, c))


def take(stream, n):
    return [stream.next_batch() for _ in range(n)]


def test_every_row_once_per_epoch_and_buckets_cut_padding(features):
    stream = M.TaskStream(features, 16, seed=0, bucket_batches=4)
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
    stream = M.TaskStream(features, 16, seed=5)
    per_epoch = stream.batches_per_epoch()
    take(stream, per_epoch - 3)
    state = json.loads(json.dumps(stream.state()))  # saved with a checkpoint
    expected = take(stream, 10)  # crosses into epoch 1 (masks included: mlm)
    assert stream.state()["epoch"] == 1
    resumed = M.TaskStream(features, 16, seed=5)
    resumed.restore(state)
    assert all(same(x, y) for x, y in zip(expected, take(resumed, 10)))
    with pytest.raises(ValueError, match="seed=5, this one 6"):
        M.TaskStream(features, 16, seed=6).restore(state)


def test_stream_batches_follow_the_contract(features):
    batch = M.TaskStream(features, 8, seed=0, pad_to=64).next_batch()
    assert batch["token_ids"].shape == (8, 64) and batch["token_ids"].dtype == np.int32
    assert batch["mlm_labels"].shape == (8, 64) and batch["segment_ids"].dtype == np.int32
    rows = [b["token_ids"].shape[0] for b in M.iterate_batches(features, 50)]
    assert rows == [50, 50, 50, 50, len(features) - 200]
    with pytest.raises(ValueError, match="pad_to=8 is shorter"):
        M.TaskStream(features, 8, seed=0, pad_to=8).next_batch()
