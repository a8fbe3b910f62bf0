"""Issue 51's vocab cases (R5-01, R5-02, R5-16, R5-53, point 2) and issue 50's folders saved
by transformers 5 (a tokenizer.json and no vocab.txt), replayed through the CLI.

Text reaches a vocab from every example type: each type names its text fields
(data_adapters/examples.py TEXTS). A folder's vocab is formats.vocab_path's: its vocab.txt,
else the WordPiece vocab inside its tokenizer.json once its normalizer and pre-tokenizer
are checked to split text as ours does; a run keeps the vocab.txt it stands for.

The tokenizer.json fixtures (tests/fixtures/transformers5/tokenizer) were written by
transformers 5.25.0 / tokenizers 0.23.3 (make_tokenizer.py beside them); one test writes
them again with .venv-current's transformers, where that environment exists.
"""
import dataclasses
import hashlib
import json
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from test_faults import DEMO_DATA, REPO, experiment, refused

from data_adapters import read_task
from data_adapters.examples import (
    EXAMPLE_TYPES,
    NOT_TEXT,
    ChoiceExample,
    CorefExample,
    Entity,
    EventExample,
    PairExample,
    SpanQAExample,
    TextExample,
)
from mtl_framework import cli
from mtl_framework.config.registry import load_registry
from mtl_framework.tokenizer import Tokenizer, count_units, example_texts, load_vocab

from conftest import ONE_LAYER, write_spec

TRANSFORMERS5 = REPO / "tests" / "fixtures" / "transformers5"
TOKENIZER = TRANSFORMERS5 / "tokenizer"
CURRENT_PYTHON = REPO / ".venv-current" / "bin" / "python"
CJK = re.compile(r"[\u4e00-\u9fff]")
PAIRS_TASK = {"name": "my_retrieval", "type": "contrastive", "max_length": 32,
              "metric": "retrieval", "embedding": {"hard_negatives": 1}}
PAIRS_SOURCE = {"format": "pairs", "files": {"train": "my_pairs/train.jsonl"}}


# --- every example type says its texts ------------------------------------------------------

def test_every_field_of_every_example_type_is_text_or_declared_not_text():
    for kind in EXAMPLE_TYPES:
        fields = {f.name for f in dataclasses.fields(kind)}
        assert set(kind.TEXTS) <= fields, kind
        assert fields - NOT_TEXT == set(kind.TEXTS), kind


def test_example_texts_gives_each_types_texts_in_order():
    span = Entity(0, 1, "x")
    cases = [(TextExample("甲", "乙", "label"), ["甲", "乙"]),
             (TextExample("甲"), ["甲"]),
             (SpanQAExample("问", "文"), ["问", "文"]),
             (ChoiceExample("文", "问", ["一", "二"], 0), ["问", "文", "一", "二"]),
             (EventExample("事"), ["事"]),
             (CorefExample("指代", span, span, "true"), ["指代"]),
             (PairExample("查询", "正例", ("负一", "负二"), 0.5), ["查询", "正例", "负一", "负二"]),
             ("一行", ["一行"])]
    for example, texts in cases:
        assert list(example_texts(example)) == texts


# --- a task of each family: its characters reach the vocab (issue 51 point 2) ----------------

def pairs_data(root):
    """A FlagEmbedding pairs file from the demo's AFQMC pairs (query, positive) with a TNEWS
    title as the hard negative: characters only the negatives hold are in it."""
    titles = [json.loads(line)["sentence"] for line in
              (DEMO_DATA / "tnews" / "train.json").read_text(encoding="utf-8").splitlines()[:200]]
    rows = [line.split("\t")[:2] for line in
            (DEMO_DATA / "afqmc" / "train.txt").read_text(encoding="utf-8").splitlines()[:200]]
    path = Path(root) / "data" / "my_pairs" / "train.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"query": query, "pos": positive, "neg": [title]},
                                       ensure_ascii=False) + "\n"
                            for (query, positive), title in zip(rows, titles)), encoding="utf-8")
    specs = Path(root) / "specs"
    write_spec(specs, "my_pairs", [PAIRS_TASK], PAIRS_SOURCE, "a user's own pairs file")
    return specs, path.parent.parent


def only_in_negatives(data_root):
    """CJK characters of the pairs file's negatives that no query or positive holds."""
    rows = [json.loads(line) for line in
            (data_root / "my_pairs" / "train.jsonl").read_text(encoding="utf-8").splitlines()]
    elsewhere = set(CJK.findall("".join(r["query"] + r["pos"] for r in rows)))
    return set(CJK.findall("".join(n for r in rows for n in r["neg"]))) - elsewhere


def field_texts(example):
    """Every string of an example's own fields but its gold and id, found by looking at the
    values (not at TEXTS): the oracle of what a vocab must count."""
    for name, value in vars(example).items():
        if name in ("label", "id"):
            continue
        if isinstance(value, str):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (item for item in value if isinstance(item, str))


def twice(texts):
    counts = Counter(CJK.findall("".join(texts)))
    return {ch for ch, n in counts.items() if n >= 2}


# task -> how many characters its train text repeats at least (the events fixture: 3 texts)
FAMILY_TASKS = {"tnews": 20, "afqmc": 20, "cmrc2018": 20, "c3": 20, "cluener": 20,
                "duie_spo": 20, "cluewsc2020": 20, "afqmc_sts": 20, "cmrc2018_retrieval": 20,
                "duee_trigger": 3, "my_retrieval": 20}


@pytest.fixture(scope="module")
def family_data(tmp_path_factory):
    """The demo data (every family but events and pairs), the events fixture and a pairs
    file, in one data root."""
    root = tmp_path_factory.mktemp("families")
    data = root / "data"
    shutil.copytree(DEMO_DATA, data)
    (data / "duee1").mkdir()
    shutil.copy(REPO / "tests" / "fixtures" / "adapters" / "event" / "duee.json",
                data / "duee1" / "duee_train.json")
    specs, _ = pairs_data(root)
    return {"root": root, "data": data, "specs": specs}


@pytest.mark.parametrize("task_name, at_least", FAMILY_TASKS.items())
def test_a_vocab_built_from_a_task_of_each_family_holds_its_repeated_characters(
        task_name, at_least, family_data, capsys):
    output = family_data["root"] / f"{task_name}.txt"
    assert cli.main(["vocab", "build", "--tasks", task_name, "--specs", str(family_data["specs"]),
                     "--data-root", str(family_data["data"]), "--output", str(output)]) == 0
    tasks = load_registry([family_data["specs"]]).select([task_name])  # c3: a dataset's tasks
    examples = [e for task in tasks for e in read_task(task, "train", family_data["data"])]
    expected = twice(t for e in examples for t in field_texts(e))
    assert len(expected) >= at_least, (task_name, len(expected))  # text, not a few labels
    assert expected - set(load_vocab(output)) == set()


# --- R5-02, R5-16: mtl vocab build with a pairs task ------------------------------------------

def test_r5_02_vocab_build_from_a_pairs_task_counts_queries_positives_negatives(tmp_path, capsys):
    specs, data_root = pairs_data(tmp_path)
    output = tmp_path / "vocab.txt"
    assert cli.main(["vocab", "build", "--tasks", "my_retrieval", "--specs", str(specs),
                     "--data-root", str(data_root), "--output", str(output)]) == 0
    tokens = set(load_vocab(output))
    negatives_only = only_in_negatives(data_root)
    assert len(negatives_only) >= 20 and negatives_only <= tokens


def test_r5_16_a_mixed_vocab_covers_the_pairs_and_its_line_counts_every_tasks_text(tmp_path,
                                                                                    capsys):
    specs, data_root = pairs_data(tmp_path)
    shutil.copytree(DEMO_DATA / "tnews", data_root / "tnews")
    output = tmp_path / "vocab.txt"
    capsys.readouterr()
    assert cli.main(["vocab", "build", "--tasks", "tnews", "my_retrieval", "--specs", str(specs),
                     "--data-root", str(data_root), "--output", str(output)]) == 0
    said = capsys.readouterr().out
    registry = load_registry([specs])
    texts = [t for name in ("tnews", "my_retrieval")
             for e in read_task(registry.tasks[name], "train", data_root) for t in field_texts(e)]
    counts = count_units(texts)
    kept = load_vocab(output)
    total = sum(counts.values())  # the pairs' units too: the line once counted tnews alone
    assert set(counts) <= set(kept)
    assert f"(100.00% of {total} occurrences covered)" in said
    pairs_text = (data_root / "my_pairs" / "train.jsonl").read_text(encoding="utf-8")
    tnews_chars = set(CJK.findall("".join(
        e.text for e in read_task(registry.tasks["tnews"], "train", data_root))))
    pairs_only = twice([pairs_text]) - tnews_chars
    assert len(pairs_only) >= 5 and pairs_only <= set(kept)  # 蚂蚁, 押, ...: only the pairs use them


# --- R5-01: a pairs-only run trains on its text; R5-53: CRLF vocab is the same vocab ---------

@pytest.fixture(scope="module")
def pairs_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pairs_run")
    specs, data_root = pairs_data(folder)
    path = experiment(folder, "pairs.yaml", data_root=str(data_root), task_specs=[str(specs)],
                      backbone=dict(ONE_LAYER, architecture="bert", max_positions=64),
                      tasks=["my_retrieval"], cache_dir=str(folder / "cache"))
    run = folder / "run"
    assert cli.main(["train", str(path), "--output", str(run)]) == 0
    texts = folder / "texts.txt"
    texts.write_text("蚂蚁借呗怎么还款\n花呗可以提额吗\n", encoding="utf-8")
    return {"run": run, "experiment": path, "data_root": data_root, "texts": texts,
            "folder": folder}


def test_r5_01_a_pairs_only_run_builds_its_vocab_from_the_pairs(pairs_run):
    tokens = load_vocab(pairs_run["run"] / "vocab.txt")
    rows = [json.loads(line) for line in (pairs_run["data_root"] / "my_pairs" /
                                          "train.jsonl").read_text(encoding="utf-8").splitlines()]
    assert twice(r["query"] + r["pos"] + "".join(r["neg"]) for r in rows) <= set(tokens)
    assert only_in_negatives(pairs_run["data_root"]) <= set(tokens)
    tokenizer = Tokenizer(pairs_run["run"] / "vocab.txt")
    ids = tokenizer.encode(rows[0]["query"])[0]
    assert tokenizer.unk_id not in ids and len(ids) > 4


def test_no_character_to_count_is_refused_before_the_run(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\u200b\u200b\n\u200d\n", encoding="utf-8")  # format characters: dropped
    path = experiment(tmp_path, "x.yaml", tasks=[{"name": "mlm", "corpus": str(corpus)}],
                      backbone=ONE_LAYER, cache_dir=str(tmp_path / "cache"))
    message = refused(capsys, ["train", path, "--output", tmp_path / "run"], late=True)
    assert "no character in the train text to build a vocab from" in message
    assert message.endswith("give backbone.vocab, or tasks whose files hold text")
    assert not (tmp_path / "run").exists()


def encoded(capsys, model, texts, output, *options):
    assert cli.main(["encode", str(model), "--input", str(texts), "--output", str(output),
                     *map(str, options)]) == 0, capsys.readouterr().err
    return np.load(output)


def test_r5_53_a_vocab_saved_with_crlf_line_ends_is_the_same_vocab(pairs_run, tmp_path, capsys):
    before = encoded(capsys, pairs_run["run"], pairs_run["texts"], tmp_path / "lf.npy")
    run = tmp_path / "run"
    shutil.copytree(pairs_run["run"], run)
    vocab = run / "vocab.txt"
    vocab.write_bytes(vocab.read_bytes().replace(b"\n", b"\r\n"))
    after = encoded(capsys, run, pairs_run["texts"], tmp_path / "crlf.npy")
    np.testing.assert_array_equal(before, after)
    assert cli.main(["train", str(pairs_run["experiment"]), "--output", str(run), "--resume",
                     "--set", "steps=3"]) == 0
    assert (run / "checkpoints").exists() and b"\r\n" in vocab.read_bytes()
    lines = vocab.read_bytes().split(b"\r\n")
    lines[10], lines[11] = lines[11], lines[10]  # two ids swapped: same size, another vocab
    vocab.write_bytes(b"\r\n".join(lines))
    message = refused(capsys, ["encode", run, "--input", pairs_run["texts"], "--output",
                               tmp_path / "x.npy"])
    assert "not the vocab" in message and "same size" in message  # a real change still is


# --- issue 50: a folder transformers 5 saved (tokenizer.json, no vocab.txt) -----------------

def transformers_folder(tmp_path, tokenizer=TOKENIZER, name="bert"):
    """The tiny transformers 5 BERT (or ALBERT) fixture with `tokenizer`'s tokenizer files."""
    folder = tmp_path / f"{name}-{tokenizer.name}"
    shutil.copytree(TRANSFORMERS5 / name, folder)
    for file in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer / file, folder / file)
    return folder


def fixture_tokens():
    return json.loads((TOKENIZER / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]


def test_a_tokenizer_json_gives_the_ids_transformers_gives(tmp_path):
    written = json.loads((TOKENIZER / "tokenized.json").read_text(encoding="utf-8"))
    assert written["transformers"].startswith("5.")
    tokenizer = Tokenizer(TOKENIZER / "tokenizer.json")
    assert tokenizer.vocab_size == 60
    for text, ids in written["ids"].items():
        assert tokenizer.encode(text)[0] == ids, text
    vocab_txt = tmp_path / "vocab.txt"  # the same tokens one a line: the same tokenizer
    vocab_txt.write_text("".join(t + "\n" for t in fixture_tokens()), encoding="utf-8")
    assert tokenizer.fingerprint() == Tokenizer(vocab_txt).fingerprint()


def test_transformers_of_venv_current_writes_a_tokenizer_json_read_alike(tmp_path):
    if not CURRENT_PYTHON.exists():
        pytest.skip(".venv-current (transformers 5) not built")
    folder = tmp_path / "fresh"
    subprocess.run([str(CURRENT_PYTHON), str(TRANSFORMERS5 / "make_tokenizer.py"), str(folder)],
                   check=True, capture_output=True, timeout=300)
    written = json.loads((folder / "tokenized.json").read_text(encoding="utf-8"))
    assert written["transformers"].startswith("5.")
    tokenizer = Tokenizer(folder / "tokenizer.json")
    assert load_vocab(folder / "tokenizer.json") == fixture_tokens()
    for text, ids in written["ids"].items():
        assert tokenizer.encode(text)[0] == ids, text


@pytest.mark.parametrize("name", ["bert", "albert"])
def test_encode_reads_a_folder_with_tokenizer_json_alone_as_with_its_vocab_txt(
        name, tmp_path, capsys):
    folder = transformers_folder(tmp_path, name=name)
    texts = tmp_path / "texts.txt"
    texts.write_text("我们是中国人\n你好 hellos\n", encoding="utf-8")
    from_json = encoded(capsys, folder, texts, tmp_path / "json.npy", "--max-length", 16)
    twin = tmp_path / "twin"
    shutil.copytree(TRANSFORMERS5 / name, twin)
    (twin / "vocab.txt").write_text("".join(t + "\n" for t in fixture_tokens()), encoding="utf-8")
    from_txt = encoded(capsys, twin, texts, tmp_path / "txt.npy", "--max-length", 16)
    np.testing.assert_array_equal(from_json, from_txt)
    assert from_json.shape == (2, 32) and np.abs(from_json).max() > 0


def test_a_tokenizer_json_that_splits_otherwise_is_refused_naming_the_field(tmp_path, capsys):
    for variant, field in (("cased", "normalizer.lowercase is false"),
                           ("no_chinese_chars", "normalizer.handle_chinese_chars is false")):
        folder = transformers_folder(tmp_path, TOKENIZER / variant)
        message = refused(capsys, ["encode", folder, "--text", "你好", "--output",
                                   tmp_path / "x.npy"])
        assert message.startswith(f"{folder / 'tokenizer.json'}: {field};"), message
        assert message.endswith("set it so in a copy of the folder)")
        assert not (tmp_path / "x.npy").exists()


def edited_tokenizer(tmp_path, edit):
    folder = transformers_folder(tmp_path)
    data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    edit(data)
    (folder / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return folder


@pytest.mark.parametrize("edit, said", [
    (lambda d: d["model"].update(type="Unigram"), "model.type is 'Unigram', not 'WordPiece'"),
    (lambda d: d.update(pre_tokenizer={"type": "Whitespace"}),
     "pre_tokenizer.type is 'Whitespace'; ours splits words as 'BertPreTokenizer'"),
    (lambda d: d.update(normalizer=None), "normalizer.type is None, not 'BertNormalizer'"),
    (lambda d: d["normalizer"].update(strip_accents=False), "normalizer.strip_accents is false"),
    (lambda d: d["added_tokens"].append({"id": 60, "content": "[NEW]"}),
     "added_tokens holds '[NEW]' as id 60, but model.vocab (60 tokens) has None there"),
    (lambda d: d["model"]["vocab"].pop("的"), "model.vocab has no token with id 5"),
])
def test_a_tokenizer_json_we_cannot_read_as_ours_is_one_line(edit, said, tmp_path, capsys):
    folder = edited_tokenizer(tmp_path, edit)
    message = refused(capsys, ["encode", folder, "--text", "你好", "--output", tmp_path / "x.npy"])
    assert message.startswith(f"{folder / 'tokenizer.json'}: {said}"), message


def test_vocab_txt_and_tokenizer_json_must_agree(tmp_path, capsys):
    folder = transformers_folder(tmp_path)
    tokens = list(fixture_tokens())
    tokens[5], tokens[6] = tokens[6], tokens[5]
    (folder / "vocab.txt").write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    message = refused(capsys, ["encode", folder, "--text", "你好", "--output", tmp_path / "x.npy"])
    assert message == (f"{folder / 'vocab.txt'}: disagrees with {folder / 'tokenizer.json'} (60 "
                       "and 60 tokens; id 5 is '一' in vocab.txt, '的' in tokenizer.json): keep "
                       "the one the weights were trained with, delete the other")
    tokens[5], tokens[6] = tokens[6], tokens[5]
    (folder / "vocab.txt").write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    encoded(capsys, folder, folder / "vocab.txt", tmp_path / "ok.npy", "--max-length", 16)


def test_keras_hubs_tokenizer_json_is_not_read_as_a_vocab(tmp_path):
    from mtl_framework import formats

    folder = tmp_path / "keras_hub"
    folder.mkdir()
    (folder / "vocab.txt").write_text("".join(t + "\n" for t in fixture_tokens()), "utf-8")
    (folder / "tokenizer.json").write_text(json.dumps(
        {"module": "keras_hub.src.models.roformer_v2.roformer_v2_tokenizer",
         "class_name": "RoformerV2Tokenizer", "config": {}}), "utf-8")
    assert formats.vocab_path(str(folder)) == str(folder / "vocab.txt")


def test_a_run_from_a_tokenizer_json_folder_keeps_and_records_its_vocab_txt(tmp_path, capsys):
    folder = transformers_folder(tmp_path)
    path = experiment(tmp_path, "init.yaml", backbone={"init": str(folder)}, max_length=16,
                      cache_dir=str(tmp_path / "cache"))
    run = tmp_path / "run"
    capsys.readouterr()
    assert cli.main(["train", str(path), "--output", str(run)]) == 0
    said = capsys.readouterr().out
    assert f"vocab: the 60 tokens of {folder / 'tokenizer.json'} (model.vocab, in id order) " \
           f"written as {run / 'vocab.txt'}" in said
    text = (run / "vocab.txt").read_text(encoding="utf-8")
    assert text == "".join(t + "\n" for t in fixture_tokens())
    trainer = json.loads(sorted((run / "checkpoints").glob("*/trainer.json"))[-1].read_text())
    assert trainer["vocab"] == {"sha256": hashlib.sha256(text.encode()).hexdigest(),
                                "tokens": 60}
    assert cli.main(["train", str(path), "--output", str(run), "--resume", "--set",
                     "steps=3"]) == 0  # the folder's tokenizer.json is the run's vocab.txt


def test_a_run_from_a_cased_tokenizer_json_is_refused_before_anything_is_written(tmp_path,
                                                                                  capsys):
    folder = transformers_folder(tmp_path, TOKENIZER / "cased")
    path = experiment(tmp_path, "init.yaml", backbone={"init": str(folder)}, max_length=16,
                      cache_dir=str(tmp_path / "cache"))
    message = refused(capsys, ["train", path, "--output", tmp_path / "run"])
    assert message.startswith(f"{folder / 'tokenizer.json'}: normalizer.lowercase is false;")
    assert not (tmp_path / "run").exists()
