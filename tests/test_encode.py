"""`mtl encode`, `Run.encode`, `mtl mine-negatives` and the embedding suite (`mtl benchmark
--suite suites/embeddings.yaml`) on a tiny run with contrastive tasks: vectors against the
backbone's output pooled by hand, settings from the heads' record, negatives against a
brute-force ranking, suite scores against the scorers called directly."""
import json

import numpy as np
import pytest

from mtl_framework.cli import main as mtl
from mtl_framework.embedding.encode import Encoder
from mtl_framework.embedding.mine_negatives import mine_negatives
from mtl_framework.errors import UserError
from mtl_framework.formats.sentence_transformers import folder_settings
from mtl_framework.sentence_encoder.settings import EmbeddingSettings

from conftest import DEMO_DATA, REPO, train_tiny, write_tiny_experiment

TEXTS = ["今天天气很好", "明天会下雨吗", "花呗怎么还款", "看书"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """tnews + afqmc_sts (cls) + cmrc2018_retrieval, float32, 3 updates."""
    folder = tmp_path_factory.mktemp("embed")
    experiment = write_tiny_experiment(folder / "experiment.json", precision="float32",
                                       tasks=["tnews", "afqmc_sts", "cmrc2018_retrieval"],
                                       tasks_per_update=3)
    return train_tiny(experiment)


def pooled_by_hand(encoder, texts, pooling):
    """The backbone's float32 output of each text alone (no padding), pooled in NumPy."""
    out = []
    for text in texts:
        ids = np.array([encoder.tokenizer.encode(text, max_length=encoder.max_length)[0]], np.int32)
        hidden = np.asarray(encoder.model.backbone({"token_ids": ids, "segment_ids": np.zeros_like(ids)}),
                            np.float64)[0]
        vector = hidden[0] if pooling == "cls" else hidden.mean(0)
        out.append(vector / np.linalg.norm(vector))
    return np.array(out)


def test_vectors_are_the_backbone_pooled_as_trained(run):
    encoder = Encoder(run, log=None)
    assert encoder.settings.pooling == "cls" and encoder.normalize
    vectors = encoder.encode(TEXTS, batch_size=3)  # batches of mixed lengths: padding
    assert vectors.dtype == np.float32 and vectors.shape == (4, 64)
    np.testing.assert_allclose(vectors, pooled_by_hand(encoder, TEXTS, "cls"), atol=1e-5)
    mean = Encoder(run, pooling="mean", log=None)
    np.testing.assert_allclose(mean.encode(TEXTS), pooled_by_hand(mean, TEXTS, "mean"), atol=1e-5)
    assert encoder.encode([]).shape == (0, 64)


def test_a_mixed_bfloat16_run_encodes_with_bfloat16_weights_close_to_float32(run):
    """Encoding holds a mixed policy's weights in bfloat16 too (nothing is trained); the
    vectors stay within bfloat16's rounding of the float32 ones."""
    float32 = Encoder(run, log=None)
    bf16 = Encoder(run, precision="mixed_bfloat16", log=None)
    texts = TEXTS * 3
    reference, vectors = float32.encode(texts, batch_size=5), bf16.encode(texts, batch_size=5)
    assert bf16.precision == "bfloat16" and float32.precision == "float32"
    assert {str(v.dtype) for v in bf16.model.backbone.weights} == {"bfloat16"}
    assert vectors.dtype == np.float32
    cosines = np.sum(reference * vectors, axis=1)  # both unit vectors (trained normalised)
    assert cosines.min() >= 0.999 and np.abs(reference - vectors).max() > 0  # really bfloat16


def test_run_encode_equals_the_encoder_of_its_checkpoint(run):
    from mtl_framework import Run

    with Run.load(str(run), log=lambda message: None) as loaded:
        np.testing.assert_array_equal(loaded.encode(TEXTS), Encoder(run, log=None).encode(TEXTS))


def test_settings_come_from_the_heads_and_disagreement_needs_a_task():
    meta = {"a": {"family": "contrastive", "config": {"pooling": "mean", "normalize": False,
                                                      "query_prefix": "问：", "passage_prefix": ""}},
            "b": {"family": "contrastive", "config": {"pooling": "cls", "normalize": True}},
            "t": {"family": "classification", "config": {}}}
    with pytest.raises(UserError, match="pool or normalise differently: give --task"):
        EmbeddingSettings.from_heads(meta, "RUN")
    assert EmbeddingSettings.from_heads(meta, "RUN", task="a").to_json() == {
        "pooling": "mean", "normalize": False, "prompts": {"a": {"query": "问：", "passage": ""}},
        "matryoshka_dims": []}
    assert EmbeddingSettings.from_heads({"t": meta["t"]}, "RUN") is None
    with pytest.raises(UserError, match="--task t: not a contrastive task"):
        EmbeddingSettings.from_heads(meta, "RUN", task="t")


def test_a_sentence_transformers_folder_declares_its_settings(tmp_path):
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    (tmp_path / "modules.json").write_text(json.dumps([
        {"type": "sentence_transformers.models.Transformer"},
        {"type": "sentence_transformers.models.Pooling"},
        {"type": "sentence_transformers.models.Normalize"}]))
    (tmp_path / "config_sentence_transformers.json").write_text(json.dumps({"prompts": {"query": "问："}}))
    assert folder_settings(tmp_path) == {"pooling": "cls", "normalize": True,
                                         "prompts": {"": {"query": "问：", "passage": ""}}}
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_max_tokens": True}))
    with pytest.raises(UserError, match="pooling_mode_max_tokens; .*give --pooling cls or mean"):
        folder_settings(tmp_path)
    assert folder_settings(tmp_path / "nothing") is None


def test_mtl_encode_writes_npy_and_jsonl_equal_to_the_encoder(run, tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n\n", encoding="utf-8")
    assert mtl(["encode", str(run), "--input", str(texts), "--output", str(tmp_path / "v.npy")]) == 0
    expected = Encoder(run, log=None).encode(TEXTS)
    np.testing.assert_array_equal(np.load(tmp_path / "v.npy"), expected)
    capsys.readouterr()
    assert mtl(["encode", str(run), "--text", TEXTS[0], "--text", TEXTS[1]]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["text"] for line in lines] == TEXTS[:2]
    np.testing.assert_allclose([line["embedding"] for line in lines], expected[:2], atol=1e-6)


@pytest.mark.parametrize("args, message", [
    ([], "give --text TEXT .* or --input FILE, one of them"),
    (["--input", "nowhere.txt", "--output", "v.npy"], "--input nowhere.txt: no such file"),
    (["--text", "好", "--output", "v.txt"], "--output v.txt: give a .npy or .jsonl file"),
    (["--text", "好", "--side", "query", "--task", "tnews"], "--task tnews: not a contrastive task"),
])
def test_mtl_encode_refuses_in_one_line(run, tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    assert mtl(["encode", str(run), *args]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and pytest.importorskip("re").search(message, error[0]), error
    assert not (tmp_path / "v.npy").exists() and not (tmp_path / "v.txt").exists()


class TableEncoder:
    """A stand-in encoder: each text's vector from a table (the mining logic alone)."""

    def __init__(self, table):
        self.table = table

    def encode(self, texts, side=None, task=None, batch_size=32, progress=None):
        return np.array([self.table[t] for t in texts], np.float64)


def test_mined_negatives_are_drawn_from_the_ranks_without_own_positives():
    rng = np.random.default_rng(0)
    passages = [f"p{i}" for i in range(30)]
    table = {p: rng.normal(size=8) for p in passages}
    table.update({"q0": table["p0"] + 0.01, "q1": table["p1"] + 0.01})
    pairs = [("q0", "p0"), ("q0", "p2"), ("q1", "p1")] + [(f"x{i}", f"p{i}") for i in range(3, 30)]
    table.update({f"x{i}": rng.normal(size=8) for i in range(3, 30)})
    records = mine_negatives(TableEncoder(table), pairs, ranks=(2, 10), count=4, seed=5)
    assert [r["query"] for r in records[:2]] == ["q0", "q1"] and records[0]["pos"] == ["p0", "p2"]
    unit = {k: v / np.linalg.norm(v) for k, v in table.items()}
    for record in records:
        ranked = sorted(passages, key=lambda p: -unit[record["query"]] @ unit[p])
        allowed = [p for p in ranked if p not in record["pos"]][2:10]
        assert len(record["neg"]) == 4 and set(record["neg"]) <= set(allowed)
    assert mine_negatives(TableEncoder(table), pairs, ranks=(2, 10), count=4, seed=5) == records
    with pytest.raises(ValueError, match="FIRST < LAST"):
        mine_negatives(TableEncoder(table), pairs, ranks=(5, 5))


def test_mtl_mine_negatives_writes_pairs_the_pairs_format_reads(run, tmp_path):
    output = tmp_path / "negatives.jsonl"
    assert mtl(["mine-negatives", str(run), "--task", "cmrc2018_retrieval", "--data-root",
                str(DEMO_DATA), "--output", str(output), "--ranks", "1-20", "--negatives", "3"]) == 0
    records = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert len(records) > 100 and all(len(r["neg"]) == 3 for r in records)
    assert all(not set(r["neg"]) & set(r["pos"]) for r in records)
    from data_adapters import read_files

    examples = list(read_files("pairs", [str(output)], task_type="contrastive"))
    assert len(examples) == sum(len(r["pos"]) for r in records)
    assert examples[0].negatives == tuple(records[0]["neg"])


def test_the_suite_scores_as_the_scorers_do(run, tmp_path):
    import shutil

    from mtl_framework.config.registry import load_registry
    from mtl_framework.embedding.suite import TaskScorer, embedding_benchmark
    from mtl_framework.scoring import embedding as scores

    suite = tmp_path / "suite.yaml"
    suite.write_text("kind: embeddings\nmax_examples: 60\nbootstrap: 50\n"
                     "tasks: [afqmc_sts, cmrc2018_retrieval]\n", encoding="utf-8")
    twin = shutil.copytree(run, tmp_path / "twin")  # the same weights in another folder
    results = embedding_benchmark([str(run), str(twin)], str(suite), str(DEMO_DATA),
                                  str(tmp_path / "out"), log=lambda m: None)
    encoder = Encoder(run, log=None)
    task = load_registry().tasks["afqmc_sts"]
    scorer = TaskScorer(task, {**results["settings"]}, str(DEMO_DATA), encoder.tokenizer)
    keep = np.isfinite(scorer.scores)
    expected = scores.sts_scores(encoder.encode(np.array(scorer.queries)[keep].tolist()),
                                 encoder.encode(np.array(scorer.passages)[keep].tolist()),
                                 scorer.scores[keep])["cosine_spearman"]
    row = next(r for r in results["rows"] if r["task"] == "afqmc_sts" and r["model"] == str(run))
    assert row["score"] == pytest.approx(expected, abs=1e-9) and row["examples"] == 60
    assert row["interval"][0] <= row["score"] <= row["interval"][1]
    assert row["trained_on_dataset"] is True  # the run trained afqmc_sts on afqmc's train split
    # the same model twice: every paired difference is exactly zero
    difference = results["differences"][0]
    assert difference["mean"] == 0 and difference["interval"] == [0.0, 0.0]
    assert (tmp_path / "out" / "results.md").read_text(encoding="utf-8").count("†") >= 2


def test_the_shipped_suite_names_scorable_tasks():
    from mtl_framework.config.registry import load_registry
    from mtl_framework.embedding.suite import read_suite

    settings, entries = read_suite(str(REPO / "suites" / "embeddings.yaml"), load_registry())
    assert {e["kind"] for e in entries} == {"sts", "pair_classification", "classification",
                                            "retrieval"}
    assert settings["samples_per_label"] == 32


def test_the_mtl_program_encodes_with_one_tensorflow_thread_an_op_and_a_batch_a_core():
    """`mtl encode` (the program, a process of its own) sets TF_NUM_INTRAOP_THREADS=1 before
    TensorFlow starts and runs one batch per core; a value set by the user is kept; once
    TensorFlow has started nothing is changed (in-process `mtl encode` leaves a caller's
    threads alone)."""
    import os
    import subprocess
    import sys

    probe = ("import os; from mtl_framework.embedding.encode import use_encoding_threads; "
             "set_ = use_encoding_threads(); from mtl_framework.step.tensorflow import encoding_lanes; "
             "import tensorflow as tf; tf.constant(1); "
             "print(set_, os.environ['TF_NUM_INTRAOP_THREADS'], encoding_lanes(), os.cpu_count(), "
             "use_encoding_threads())")
    for given, threads in ((None, "1"), ("2", "2")):
        env = {k: v for k, v in os.environ.items() if k != "TF_NUM_INTRAOP_THREADS"}
        if given:
            env["TF_NUM_INTRAOP_THREADS"] = given
        out = subprocess.run([sys.executable, "-c", probe], env=env, cwd=REPO, capture_output=True,
                             text=True, timeout=300).stdout.split()
        cores = int(out[3])
        assert out[:3] == ["True", threads, str(cores if threads == "1" else min(2, cores))]
        assert out[4] == "False"  # TensorFlow started: too late to change
