"""Issue 51's cases of the embeddings suite (R5-41/42/43/44/45/47/79) and of training's dev
evaluation (R5-86), and issue 50's C-MTEB points (prompts as mteb applies them, whole
splits, clustering, per-task records, resuming), replayed through `mtl benchmark`.

The suite's models here are HashEncoders: each text's vector a fixed draw seeded by the text
as encoded (prefix included), so a figure can be recomputed by hand from the scorers, and
what was prefixed is visible. It stands in for Encoder (monkeypatched where the suite
imports it); the suite's own Encoder is exercised on a real run in tests/test_encode.py.
"""
import hashlib
import json

import numpy as np
import pytest
from test_faults import refused, snapshot

from mtl_framework import cli
from mtl_framework.scoring import embedding as scores

from conftest import DEMO_DATA, REPO, afqmc_pairs, write_spec

VOCAB = REPO / "tests" / "fixtures" / "run_format1" / "vocab.txt"
PROMPTS = {"query": "问：", "passage": "文："}


class HashEncoder:
    """Encoder's interface: vectors drawn from the text's SHA-256 (prefix + text), the
    prefixes PROMPTS; every call recorded as (side, texts)."""

    calls = []

    def __init__(self, source, log=print, **settings):
        from mtl_framework.tokenizer import Tokenizer

        self.source, self.pooling, self.normalize = str(source), "cls", False
        self.tokenizer = Tokenizer(str(VOCAB))

    @staticmethod
    def vector(text):
        seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
        return np.random.default_rng(seed).normal(size=16).astype(np.float32)

    def encode(self, texts, side=None, batch_size=32, progress=None, task=None):
        texts = list(texts)
        HashEncoder.calls.append((side, texts))
        if progress is not None:
            progress(len(texts))
        prefix = PROMPTS[side] if side else ""
        return np.array([self.vector(prefix + t) for t in texts], np.float32).reshape(len(texts), 16)


@pytest.fixture
def hashed(monkeypatch, tmp_path):
    """Two model folders scored by HashEncoder (they differ only in name: the same vectors)."""
    import mtl_framework.embedding.encode as encode

    monkeypatch.setattr(encode, "Encoder", HashEncoder)
    HashEncoder.calls = []
    models = []
    for name in ("model_a", "model_b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "weights.bin").write_bytes(name.encode())
        models.append(str(tmp_path / name))
    return models


def write_suite(path, body):
    path.write_text("kind: embeddings\nbootstrap: 50\n" + body, encoding="utf-8")
    return str(path)


def argv(models, suite, output, data_root=DEMO_DATA, specs=None):
    return (["benchmark", *models, "--suite", suite, "--data-root", str(data_root), "--output",
             str(output)] + (["--specs", str(specs)] if specs else []))


def bench(*args, **kwargs):
    return cli.main(argv(*args, **kwargs))


def strict_json(path):
    def refuse(constant):
        raise AssertionError(f"{path} holds {constant}, not strict JSON")
    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


def user_task(tmp_path, name, rows, metric, train_rows=None):
    """A spec folder with a delimited contrastive task `name` whose dev split is `rows`
    (text, text_b, score) and train split `train_rows` (default: the same)."""
    data = tmp_path / "data" / name
    data.mkdir(parents=True)
    for split, written in (("train", train_rows or rows), ("dev", rows)):
        (data / f"{split}.tsv").write_text("".join(f"{a}\t{b}\t{s}\n" for a, b, s in written),
                                           encoding="utf-8")
    loss = "infonce" if metric in ("retrieval", "reranking") else "cosent"  # scored pairs kept
    task = {"name": name, "type": "contrastive", "max_length": 32, "metric": metric,
            "embedding": {"loss": loss}}
    files = {split: f"{name}/{split}.tsv" for split in ("train", "dev")}
    specs = tmp_path / "specs"  # AFQMC's columns, the user's files
    write_spec(specs, name, [task], {**afqmc_pairs(), "files": files}, "a user's pairs")
    return specs, tmp_path / "data"


# --- R5-41, R5-42, R5-43: refused in one line, nothing written ----------------------------------------

def test_r5_41_a_task_listed_twice_or_a_model_given_twice_is_refused(hashed, tmp_path, capsys):
    twice = write_suite(tmp_path / "twice.yaml", "tasks:\n  - afqmc_sts\n  - tnews\n  - afqmc_sts\n")
    assert refused(capsys, argv(hashed, twice, tmp_path / "out")) == (
        f"{twice}:6: task 'afqmc_sts' is listed twice (first on line 4): list it once")
    once = write_suite(tmp_path / "once.yaml", "tasks: [afqmc_sts]\n")
    assert refused(capsys, argv([hashed[0], hashed[0] + "/"], once, tmp_path / "out")) == (
        f"{hashed[0]}/: the same model is given twice (as {hashed[0]} too): give each model once")
    assert not (tmp_path / "out").exists()


def test_r5_42_a_bootstrap_past_ten_thousand_resamples_is_refused(hashed, tmp_path, capsys):
    suite = tmp_path / "huge.yaml"
    suite.write_text("kind: embeddings\nbootstrap: 100000000\ntasks: [afqmc_sts]\n", encoding="utf-8")
    assert refused(capsys, argv(hashed, str(suite), tmp_path / "out")) == (
        f"{suite}:2: bootstrap 100,000,000 resamples is more than 10,000 (1,000 already put a "
        "95% interval's ends within ~0.1 point): give at most 10,000")
    assert not (tmp_path / "out").exists()


def test_r5_43_a_split_the_task_lacks_is_one_line(hashed, tmp_path, capsys):
    suite = write_suite(tmp_path / "split.yaml", "tasks:\n  - {task: tnews, split: test}\n")
    assert refused(capsys, argv(hashed, suite, tmp_path / "out")) == (
        f"{suite}:4: task 'tnews' has no 'test' split; its splits: train, dev: give `split:` "
        "one of them")
    assert not (tmp_path / "out").exists()


# --- R5-44, R5-45, R5-79: no score with a note; positives grouped --------------------------------------

def test_r5_44_constant_gold_scores_give_no_score_a_note_and_strict_json(hashed, tmp_path):
    specs, data = user_task(tmp_path, "flat_sts", [(f"句子{i}", f"另一{i}", 3) for i in range(12)],
                            "cosine_spearman")
    user_task(tmp_path, "graded_sts", [(f"句子{i}", f"另一{i}", i % 5) for i in range(12)],
              "cosine_spearman")
    suite = write_suite(tmp_path / "s.yaml", "tasks: [flat_sts, graded_sts]\n")
    assert bench(hashed, suite, tmp_path / "out", data, specs) == 0
    results = strict_json(tmp_path / "out" / "results.json")
    flat = [r for r in results["rows"] if r["task"] == "flat_sts"]
    assert [r["score"] for r in flat] == [None, None] and [r["interval"] for r in flat] == [None, None]
    assert flat[0]["note"] == "its gold scores are all equal (or missing): Spearman is undefined"
    graded = next(r for r in results["rows"] if r["task"] == "graded_sts")
    assert results["summary"][hashed[0]] == {"mean": graded["score"], "tasks": 1,
                                             "interval": graded["interval"]}
    assert results["notes"] == ["flat_sts: left out of the mean (its gold scores are all equal "
                                "(or missing): Spearman is undefined)"]
    assert "flat_sts | sts | dev | 12 | – | –" in (tmp_path / "out" / "results.md").read_text("utf-8")


def test_r5_45_a_retrieval_corpus_of_one_passage_has_no_score(hashed, tmp_path):
    specs, data = user_task(tmp_path, "one_passage", [(f"问题{i}", "唯一的段落", 1) for i in range(6)],
                            "retrieval")
    suite = write_suite(tmp_path / "s.yaml", "tasks: [one_passage]\n")
    assert bench(hashed[:1], suite, tmp_path / "out", data, specs) == 0
    (row,) = strict_json(tmp_path / "out" / "results.json")["rows"]
    assert row["score"] is None and row["note"] == ("its corpus holds one passage: every query finds "
                                                    "it first (nDCG 1.0 for any encoder)")


def test_r5_79_a_querys_positives_are_judged_together(hashed, tmp_path):
    """Query 0 has two positives: mteb's qrels judge both for the one query; scoring each
    positive as its own query counted the other one as a miss."""
    rows = [("问题零", "段落甲", 1), ("问题零", "段落乙", 1)] + [(f"问题{i}", f"段落{i}", 1)
                                                               for i in range(1, 9)]
    specs, data = user_task(tmp_path, "two_positives", rows, "retrieval")
    suite = write_suite(tmp_path / "s.yaml", "tasks: [two_positives]\n")
    assert bench(hashed[:1], suite, tmp_path / "out", data, specs) == 0
    (row,) = strict_json(tmp_path / "out" / "results.json")["rows"]
    queries = np.array([HashEncoder.vector(PROMPTS["query"] + q) for q in dict.fromkeys(r[0] for r in rows)])
    corpus = np.array([HashEncoder.vector(PROMPTS["passage"] + r[1]) for r in rows])
    grouped = [{0: 1, 1: 1}] + [{i + 1: 1} for i in range(1, 9)]
    expected = scores.retrieval_scores(queries, corpus, grouped, k_values=(1, 10, 100))["ndcg_at_10"]
    apart = scores.retrieval_scores(queries[[0] + list(range(9))], corpus,
                                    [{0: 1}, {1: 1}] + grouped[1:], k_values=(1, 10, 100))["ndcg_at_10"]
    print(f"grouped {expected:.4f}, each positive its own query {apart:.4f}")
    assert row["examples"] == 9 and row["score"] == pytest.approx(expected, abs=1e-12)
    assert abs(expected - apart) > 1e-3


# --- issue 50: prompts, whole splits, clustering ------------------------------------------------------

def test_sts_and_pairs_are_encoded_without_a_prefix_retrieval_with_query_and_passage(hashed, tmp_path):
    """As mteb applies a model's query/document prompts: none on STS (AFQMC) texts; queries
    `query`, passages `document` in retrieval. The STS score is the Spearman of the unprefixed
    texts' cosines."""
    suite = write_suite(tmp_path / "s.yaml", "max_examples: 40\ntasks: [afqmc_sts, cmrc2018_retrieval]\n")
    assert bench(hashed[:1], suite, tmp_path / "out") == 0
    sides = [side for side, _ in HashEncoder.calls]
    assert sides == [None, None, "query", "passage"]
    first, second = HashEncoder.calls[0][1], HashEncoder.calls[1][1]
    results = strict_json(tmp_path / "out" / "results.json")
    afqmc = next(r for r in results["rows"] if r["task"] == "afqmc_sts")
    from mtl_framework.config.registry import load_registry
    from mtl_framework.embedding.suite import task_texts

    gold = task_texts(load_registry().tasks["afqmc_sts"], "dev", DEMO_DATA, HashEncoder("").tokenizer, 40)[2]
    expected = scores.sts_scores(np.array([HashEncoder.vector(t) for t in first]),
                                 np.array([HashEncoder.vector(t) for t in second]), gold)
    assert afqmc["score"] == pytest.approx(expected["cosine_spearman"], abs=1e-12)


def test_max_examples_all_scores_the_whole_split(hashed, tmp_path):
    from mtl_framework.config.registry import load_registry
    from mtl_framework.embedding.suite import task_texts

    suite = write_suite(tmp_path / "s.yaml", "max_examples: 30\ntasks:\n"
                        "  - {task: afqmc_sts, max_examples: all}\n  - cmrc2018_retrieval\n")
    assert bench(hashed[:1], suite, tmp_path / "out") == 0
    afqmc, cmrc = strict_json(tmp_path / "out" / "results.json")["rows"]
    tokenizer = HashEncoder("").tokenizer
    whole = len(task_texts(load_registry().tasks["afqmc_sts"], "dev", DEMO_DATA, tokenizer)[0])
    assert whole == 100 and afqmc["examples"] == whole
    assert cmrc["examples"] == 30  # the suite's max_examples: 30 pairs, 30 distinct questions


def test_clustering_is_mtebs_k_means_v_measure_of_a_classification_tasks_texts(hashed, tmp_path):
    from sklearn.cluster import MiniBatchKMeans
    from sklearn.metrics.cluster import v_measure_score

    from mtl_framework.config.registry import load_registry
    from mtl_framework.embedding.suite import labelled_texts

    suite = write_suite(tmp_path / "s.yaml",
                        "tasks:\n  - {task: tnews, kind: clustering, max_examples: 300}\n")
    assert bench(hashed[:1], suite, tmp_path / "out") == 0
    (row,) = strict_json(tmp_path / "out" / "results.json")["rows"]
    texts, labels = labelled_texts(load_registry().tasks["tnews"], "dev", DEMO_DATA, 300)
    vectors = np.array([HashEncoder.vector(t) for t in texts])  # no prefix: mteb gives none
    kmeans = MiniBatchKMeans(n_clusters=len(set(labels)), batch_size=500, n_init="auto",
                             random_state=42).fit(vectors)
    assert row["task"] == "tnews_clustering" and row["kind"] == "clustering"
    assert row["score"] == pytest.approx(v_measure_score(labels, kmeans.labels_), abs=1e-12)
    assert row["interval"][0] <= row["score"] <= row["interval"][1]


# --- R5-47 and resuming: per-task records -----------------------------------------------------------

def test_r5_47_other_settings_into_the_same_output_are_refused_and_nothing_changes(hashed, tmp_path, capsys):
    suite = write_suite(tmp_path / "s.yaml", "max_examples: 30\ntasks: [afqmc_sts]\n")
    assert bench(hashed, suite, tmp_path / "out") == 0
    before = snapshot(tmp_path / "out")
    other = write_suite(tmp_path / "other.yaml", "max_examples: 40\ntasks: [afqmc_sts]\n")
    record = tmp_path / "out" / "tasks" / "afqmc_sts.json"
    assert refused(capsys, argv(hashed, other, tmp_path / "out"), tmp_path / "out") == (
        f"{record}: afqmc_sts was scored there with other settings (examples, max_examples): "
        "give a new --output, or delete that file to score it again")
    assert snapshot(tmp_path / "out") == before


def test_an_interrupted_suite_resumes_from_its_finished_tasks(hashed, tmp_path, monkeypatch):
    """Killed while scoring the second task: the first task's record is on disk (strict JSON,
    atomically written); run again, only what is missing is encoded, and the results equal an
    uninterrupted run's."""
    suite = write_suite(tmp_path / "s.yaml", "max_examples: 30\ntasks: [afqmc_sts, cmrc2018_retrieval]\n")
    real_encode = HashEncoder.encode

    def interrupted(self, texts, side=None, **kwargs):
        if side == "query":
            raise KeyboardInterrupt
        return real_encode(self, texts, side, **kwargs)

    monkeypatch.setattr(HashEncoder, "encode", interrupted)
    assert bench(hashed[:1], suite, tmp_path / "out") != 0
    assert sorted(p.name for p in (tmp_path / "out" / "tasks").iterdir()) == ["afqmc_sts.json"]
    assert not (tmp_path / "out" / "results.json").exists()
    monkeypatch.setattr(HashEncoder, "encode", real_encode)
    HashEncoder.calls = []
    assert bench(hashed[:1], suite, tmp_path / "out") == 0
    assert [side for side, _ in HashEncoder.calls] == ["query", "passage"]  # afqmc not again
    resumed = strict_json(tmp_path / "out" / "results.json")
    assert bench(hashed[:1], suite, tmp_path / "fresh") == 0
    fresh = strict_json(tmp_path / "fresh" / "results.json")
    assert resumed["rows"] == fresh["rows"] and resumed["summary"] == fresh["summary"]


# --- R5-86: training's dev evaluation --------------------------------------------------------------

def test_r5_86_a_dev_split_with_constant_gold_has_no_score_that_step_and_strict_json(tmp_path):
    """A run evaluating an STS task whose dev gold scores are all equal, and a retrieval task
    whose dev queries all share one passage (R5-45), beside one with graded scores: the first
    two have no score (a note), the aggregate is the third's, and evaluations.jsonl holds no
    NaN."""
    from conftest import ONE_LAYER

    specs, data = user_task(tmp_path, "flat_sts", [(f"句子{i}", f"另一句{i}", 3) for i in range(12)],
                            "cosine_spearman")
    user_task(tmp_path, "graded_sts", [(f"问句{i}", f"答句{i}", i % 5) for i in range(12)],
              "cosine_spearman")
    user_task(tmp_path, "one_passage", [(f"问题{i}", "唯一的段落", 1) for i in range(6)], "retrieval",
              train_rows=[(f"问题{i}", f"段落{i}", 1) for i in range(6)])  # R5-45 on the dev split
    experiment = tmp_path / "experiment.yaml"
    experiment.write_text(json.dumps({
        "data_root": str(data), "cache_dir": str(tmp_path / "cache"), "task_specs": [str(specs)],
        "backbone": ONE_LAYER, "tasks": ["flat_sts", "graded_sts", "one_passage"], "batch_size": 4,
        "max_length": 16, "tasks_per_update": 3, "steps": 2, "checkpoint_every": 2,
        "eval_every": 2, "seed": 0, "precision": "float32",
        "optimizer": {"name": "adamw", "lr": 0.003}}), encoding="utf-8")
    assert cli.main(["train", str(experiment), "--output", str(tmp_path / "run")]) == 0
    (line,) = [json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c} in evaluations.jsonl"))
               for text in (tmp_path / "run" / "evaluations.jsonl").read_text("utf-8").splitlines()]
    flat, graded, single = (line["tasks"][name] for name in ("flat_sts", "graded_sts", "one_passage"))
    for entry in (flat, single):
        assert entry["score"] is None and entry["note"].startswith("the score is undefined on this split")
    assert single["result"]["documents"] == 1.0 and single["result"]["ndcg_at_10"] is None
    assert graded["score"] is not None and line["aggregate"] == graded["score"]


def test_results_of_an_earlier_release_or_another_suite_are_never_replaced(hashed, tmp_path, capsys):
    """An OUTPUT whose results.json the suite did not write in this layout (no per-task
    records to resume from) is refused; --mteb-data is for an embeddings suite only."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "results.json").write_text('{"rows": []}\n', encoding="utf-8")
    suite = write_suite(tmp_path / "s.yaml", "tasks: [afqmc_sts]\n")
    assert refused(capsys, argv(hashed, suite, tmp_path / "out"), tmp_path / "out") == (
        f"{tmp_path / 'out' / 'results.json'}: results of another suite or of an earlier release, "
        "which this run would replace: give a new --output")
    finetune = str(REPO / "suites" / "clue_small.yaml")
    assert refused(capsys, argv(hashed, finetune, tmp_path / "ft") + ["--mteb-data", tmp_path / "d"]) == (
        f"--mteb-data: for an embeddings suite (`kind: embeddings`); {finetune} fine-tunes: leave "
        "the flag out")
    assert not (tmp_path / "ft").exists() and not (tmp_path / "d").exists()


def test_r5_79_dev_evaluation_judges_a_querys_positives_together(tmp_path):
    """`mtl train`'s dev evaluation of a retrieval task whose first query has two positives:
    9 queries over 10 passages (each pair its own query gave 10 queries). The metric on
    hand-made vectors: a query whose two positives rank first and second scores nDCG 1.0;
    judged apart (no query_id: features of before it) its second positive was a miss."""
    from mtl_framework.scoring.metrics import retrieval

    from conftest import ONE_LAYER

    rows = [("问题零", "段落甲", 1), ("问题零", "段落乙", 1)] + [(f"问题{i}", f"段落{i}", 1)
                                                               for i in range(1, 9)]
    specs, data = user_task(tmp_path, "two_positives", rows, "retrieval")
    experiment = tmp_path / "experiment.yaml"
    experiment.write_text(json.dumps({
        "data_root": str(data), "cache_dir": str(tmp_path / "cache"), "task_specs": [str(specs)],
        "backbone": ONE_LAYER, "tasks": ["two_positives"], "batch_size": 4, "max_length": 16,
        "steps": 2, "checkpoint_every": 2, "eval_every": 2, "seed": 0, "precision": "float32",
        "optimizer": {"name": "adamw", "lr": 0.003}}), encoding="utf-8")
    assert cli.main(["train", str(experiment), "--output", str(tmp_path / "run")]) == 0
    (line,) = [json.loads(text) for text in
               (tmp_path / "run" / "evaluations.jsonl").read_text("utf-8").splitlines()]
    result = line["tasks"]["two_positives"]["result"]
    assert (result["queries"], result["documents"]) == (9.0, 10.0)
    unit = np.eye(4, dtype=np.float32)
    predictions = [{"query": unit[0], "positive": unit[0]},
                   {"query": unit[0], "positive": 0.5 * unit[0] + unit[1]},
                   {"query": unit[2], "positive": unit[2]}]
    references = [{"score": 1.0, "positive_id": 5, "query_id": 3},
                  {"score": 1.0, "positive_id": 6, "query_id": 3},
                  {"score": 1.0, "positive_id": 7, "query_id": 4}]
    grouped = retrieval(predictions, references)
    apart = retrieval(predictions, [{k: v for k, v in r.items() if k != "query_id"} for r in references])
    assert (grouped["queries"], grouped["ndcg_at_10"]) == (2.0, 1.0)
    # apart: the second positive ranks 2nd for a query judging it alone, the first is not judged
    assert apart["queries"] == 3.0 and apart["ndcg_at_10"] == pytest.approx((2 + 1 / np.log2(3)) / 3)


def test_p52_mtl_evaluate_of_one_passage_says_why_it_has_no_score(tmp_path, capsys):
    """`mtl evaluate --max-examples 1` on a retrieval task: one query over one passage found
    first, 1.0000 before; now no score, and the embeddings suite's note (one rule,
    scoring.embedding.one_passage_corpus). Without the limit its 6 passages are scored."""
    from conftest import ONE_LAYER

    specs, data = user_task(tmp_path, "my_retrieval", [(f"问题{i}", f"段落{i}", 1) for i in range(6)],
                            "retrieval")
    experiment = tmp_path / "experiment.yaml"
    experiment.write_text(json.dumps({
        "data_root": str(data), "cache_dir": str(tmp_path / "cache"), "task_specs": [str(specs)],
        "backbone": ONE_LAYER, "tasks": ["my_retrieval"], "batch_size": 4, "max_length": 16,
        "steps": 1, "checkpoint_every": 1, "eval_every": 0, "precision": "float32"}),
        encoding="utf-8")
    run = tmp_path / "run"
    assert cli.main(["train", str(experiment), "--output", str(run)]) == 0
    capsys.readouterr()
    assert cli.main(["evaluate", str(run), "--max-examples", "1", "--json"]) == 0
    entry = json.loads(capsys.readouterr().out)["tasks"]["my_retrieval"]
    assert entry["score"] is None and entry["result"]["documents"] == 1.0
    assert entry["note"] == ("the score is undefined on this split: its corpus holds one passage: "
                             "every query finds it first (nDCG 1.0 for any encoder); no score this "
                             "step")
    assert cli.main(["evaluate", str(run)]) == 0
    out = capsys.readouterr().out
    assert "my_retrieval" in out and "undefined" not in out
    (scored,) = [json.loads(text) for text in (run / "evaluations.jsonl").read_text("utf-8")
                 .splitlines()][-1:]
    assert scored["tasks"]["my_retrieval"]["result"]["documents"] == 6.0
    assert 0 < scored["tasks"]["my_retrieval"]["score"] <= 1
