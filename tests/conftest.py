import json
import os
import re
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# Experiments that name no precision train in float32 here, as on a CPU without native
# bfloat16: `auto`, the default, would give other numbers on other CPUs, and the suite's
# must hold on all (test_precision_auto.py tests `auto` and the default on fake CPUs).
os.environ.setdefault("MTL_PRECISION", "float32")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("MTL_SHARED_DATA", REPO.parent / "shared" / "data"))
DEMO_DATA = REPO / "experiments" / "demo" / "data"
TINY_BACKBONE = {"num_layers": 2, "hidden_size": 64, "num_heads": 4, "intermediate_size": 128,
                 "dropout": 0.0, "vocab_size": 1500}

ONE_LAYER = {"num_layers": 1, "hidden_size": 32, "num_heads": 2, "intermediate_size": 64,
             "dropout": 0.0}  # the vocab's size: the run's tokenizer


@pytest.fixture(scope="session")
def shared_data():
    """Real dataset files in ../shared/data; tests using them skip on a fresh clone."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA} (set MTL_SHARED_DATA)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def real_sentences(shared_data):
    """64 real TNEWS titles and AFQMC pairs (mixed lengths) for backbone checks."""
    import json

    with open(shared_data / "tnews" / "dev.json", encoding="utf-8") as f:
        titles = [json.loads(line)["sentence"] for _, line in zip(range(48), f)]
    with open(shared_data / "afqmc" / "dev.txt", encoding="utf-8") as f:
        pairs = [line.rstrip("\n").split("\t")[:2] for _, line in zip(range(16), f)]
    return titles, pairs


@pytest.fixture(scope="session")
def real_vocab(real_sentences, tmp_path_factory):
    """A vocab.txt built from the real sentences."""
    from mtl_framework.tokenizer import build_vocab, count_units, write_vocab

    titles, pairs = real_sentences
    texts = titles + [t for pair in pairs for t in pair]
    vocab_path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    write_vocab(build_vocab(count_units(texts), max_size=3000), vocab_path)
    return vocab_path


@pytest.fixture(scope="session")
def real_batch(real_sentences, real_vocab):
    """(token_ids, segment_ids, vocab_size): the sentences tokenized with `real_vocab`,
    padded to the longest (bert4keras-style [CLS] a [SEP] b [SEP])."""
    from mtl_framework.tokenizer import Tokenizer

    titles, pairs = real_sentences
    tokenizer = Tokenizer(str(real_vocab))
    encoded = [tokenizer.encode(t, max_length=64) for t in titles]
    encoded += [tokenizer.encode(a, b, max_length=64) for a, b in pairs]
    return (*padded_batch(encoded), tokenizer.vocab_size)


SPACE = re.compile(r"\s*")


def json_objects(path):
    """Every JSON value of a file holding them back to back: one a line, or pretty-printed
    over several (the shared CLUENER copy). The tests' own reader, apart from the adapters'."""
    text, decoder, values = Path(path).read_text(encoding="utf-8"), json.JSONDecoder(), []
    at = SPACE.match(text).end()
    while at < len(text):
        value, end = decoder.raw_decode(text, at)
        values.append(value)
        at = SPACE.match(text, end).end()
    return values


def padded_batch(encoded):
    """(token_ids, segment_ids) [rows, longest] int32 of `Tokenizer.encode` pairs, zero-padded."""
    import numpy as np

    length = max(len(ids) for ids, _ in encoded)
    token_ids = np.zeros((len(encoded), length), dtype="int32")
    segment_ids = np.zeros_like(token_ids)
    for row, (ids, segments) in enumerate(encoded):
        token_ids[row, : len(ids)] = ids
        segment_ids[row, : len(ids)] = segments
    return token_ids, segment_ids


def classification_batch(seed, labels):
    """4 rows of 9 random token ids ([CLS] first, one row padded) with random labels
    below `labels`: a classification head's micro-batch for MultiTaskModel.run_update."""
    import numpy as np

    rng = np.random.default_rng(seed)
    ids = rng.integers(5, 50, size=(4, 9)).astype("int32")
    ids[:, 0] = 2
    ids[1, 6:] = 0
    return {"token_ids": ids, "segment_ids": np.zeros_like(ids),
            "label": rng.integers(0, labels, size=4).astype("int32")}


def write_tiny_experiment(path, **overrides):
    """A tiny experiment on the demo data at `path` (tnews + afqmc, TINY_BACKBONE, 3 steps,
    nothing checkpointed or evaluated on the way, a cache beside it), written as JSON (JSON
    is YAML). A key in `overrides` replaces the default whole (`backbone=` a whole backbone)."""
    experiment = {
        "name": "tiny", "data_root": str(DEMO_DATA), "cache_dir": str(path.parent / "cache"),
        "backbone": dict(TINY_BACKBONE), "tasks": ["tnews", "afqmc"], "batch_size": 4,
        "max_length": 48, "tasks_per_update": 2, "steps": 3, "checkpoint_every": 0,
        "eval_every": 0, "seed": 0, "optimizer": {"name": "adamw", "lr": 0.003}, **overrides,
    }
    path.write_text(json.dumps(experiment))
    return path


def afqmc_pairs():
    """Where and how AFQMC's pairs are read (format, train and dev files, options, fields),
    as the catalog's spec task_specs/afqmc.yaml says: for a test's own tasks on them."""
    import yaml

    spec = yaml.safe_load((REPO / "task_specs" / "afqmc.yaml").read_text(encoding="utf-8"))
    files = {split: spec["files"][split] for split in ("train", "dev")}
    return {"format": spec["format"], "files": files, "options": spec["options"],
            "fields": spec["fields"]}


def write_spec(folder, dataset, tasks, source, description="tests"):
    """folder/DATASET.yaml: a task spec of `tasks` (each a dict, as a spec's task entry) on
    `source` (format, files, options, fields: afqmc_pairs() or a test's own); the path."""
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    spec = {"dataset": dataset, "description": description, "source": "tests",
            "license": "research use", **source, "tasks": tasks}
    path = folder / f"{dataset}.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def train_tiny(experiment):
    """`mtl train EXPERIMENT --output run` beside it (it must succeed); the run folder."""
    from mtl_framework.cli import main as mtl

    run_dir = experiment.parent / "run"
    assert mtl(["train", str(experiment), "--output", str(run_dir)]) == 0
    return run_dir


def export_all(run_dir, formats):
    """{format: folder}: `mtl export RUN --format F` into RUN/export/F (each must succeed)."""
    from mtl_framework.cli import main as mtl

    out = {fmt: run_dir / "export" / fmt for fmt in formats}
    for fmt, folder in out.items():
        assert mtl(["export", str(run_dir), "--format", fmt, "--output", str(folder)]) == 0
    return out
