"""Writes tests/fixtures/mteb/*.json: mteb's own figures on fixed embeddings.

Runs ONLY in a venv of its own holding `mteb` (not a dependency of this repository):

    python3 -m venv /work/venv-mteb && /work/venv-mteb/bin/pip install mteb
    /work/venv-mteb/bin/python bench/mteb_fixtures.py

As mteb's own tests do, nothing comes from a hub: each task is one of mteb's mock tasks whose
load_data puts small synthetic data in place, and the model is mteb's random-encoder baseline
whose encode returns the precomputed embedding of each text (texts are ids: "s1_7" ...). Each
fixture holds the inputs (embeddings as float32 values, labels, grades), the figures mteb's
task.evaluate reported, the versions, and the mteb files whose computation
mtl_framework/scoring/embedding.py mirrors. tests/test_embedding_scores.py holds our
functions to these figures.
"""
import hashlib
import json
import sys
from importlib.metadata import version
from pathlib import Path

import mteb
import numpy as np
from datasets import Dataset, DatasetDict
from mteb._evaluators.retrieval_evaluator import RetrievalEvaluator
from mteb.abstasks.retrieval_dataset_loaders import RetrievalSplitData
from mteb.mocks.mock_tasks.classification import MockClassificationTask
from mteb.mocks.mock_tasks.pair_classification import MockPairClassificationTask
from mteb.mocks.mock_tasks.reranking import MockRerankingTask
from mteb.mocks.mock_tasks.retrieval import MockRetrievalTask
from mteb.mocks.mock_tasks.sts import MockSTSTask
from mteb.models.model_implementations.random_baseline import RandomEncoderBaseline, random_encoder_baseline

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "mteb"
SITE = Path(mteb.__file__).resolve().parent
REPOSITORY = "embeddings-benchmark/mteb"
DIM = 16


class FixedEmbeddings(RandomEncoderBaseline):
    """mteb's random-encoder baseline (cosine similarity) whose encode returns the embeddings
    this script assigned to each text, instead of hashing the text."""

    mteb_model_meta = random_encoder_baseline

    def __init__(self):
        super().__init__(model_name="fixed-embeddings", revision=None)
        self.table = {}

    def encode(self, inputs, **kwargs):
        return np.stack([self.table[text.strip()] for batch in inputs for text in batch["text"]])


MODEL = FixedEmbeddings()
ENCODE = {"batch_size": 8}


def embed(prefix, vectors):
    """Registers each row under the text `prefix_i`; returns the texts and the float32 rows."""
    vectors = np.asarray(vectors, dtype=np.float32)
    texts = [f"{prefix}_{i}" for i in range(len(vectors))]
    MODEL.table.update(zip(texts, vectors))
    return texts, vectors


def mirrors(*paths):
    """The mteb files mirrored: repository, path, the installed release, and the file's sha256 in
    it (the release's tag names the commit)."""
    return [{"repository": REPOSITORY, "path": f"mteb/{path}", "release": version("mteb"),
             "sha256": hashlib.sha256((SITE / path).read_bytes()).hexdigest()} for path in paths]


def write(name, inputs, figures, mirrored, note):
    OUT.mkdir(parents=True, exist_ok=True)
    fixture = {
        "note": note,
        "versions": {p: version(p) for p in ("mteb", "scikit-learn", "scipy", "numpy",
                                             "pytrec-eval-terrier", "torch")},
        "python": sys.version.split()[0],
        "mirrors": mirrors(*mirrored),
        "inputs": inputs,
        "mteb": figures,
    }
    (OUT / f"{name}.json").write_text(json.dumps(fixture, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {OUT / name}.json")


def evaluate(task):
    task.load_data()
    task.data_loaded = True
    return task.evaluate(MODEL, split="test", encode_kwargs=ENCODE)["default"]


def rows(matrix):
    return [[float(v) for v in row] for row in matrix]


def sts(rng):
    """40 pairs; gold scores 0..5 in whole steps (many ties); pairs 1 and 2 repeat pair 0, so
    three cosines tie."""
    left = rng.normal(size=(40, DIM))
    closeness = rng.uniform(0, 1, size=40)
    right = closeness[:, None] * left + (1 - closeness[:, None]) * rng.normal(size=(40, DIM))
    left[1:3], right[1:3] = left[0], right[0]
    gold = np.clip(np.round(5 * closeness + rng.normal(scale=0.7, size=40)), 0, 5)
    texts1, e1 = embed("sts1", left)
    texts2, e2 = embed("sts2", right)

    class Task(MockSTSTask):
        min_score, max_score = 0, 5

        def load_data(self, **kwargs):
            self.dataset = DatasetDict({"test": Dataset.from_dict(
                {"sentence1": texts1, "sentence2": texts2, "score": gold.tolist()})})

    write("sts", {"embeddings1": rows(e1), "embeddings2": rows(e2), "gold_scores": gold.tolist()},
          evaluate(Task()), ["abstasks/sts.py", "_evaluators/any_sts_evaluator.py"],
          "AbsTaskSTS.evaluate on MockSTSTask's shape; gold 0..5 (mteb normalises by min 0, max 5)")


def pair_classification(rng):
    """40 pairs, labels 0/1 from a noisy threshold on closeness; pairs 1 and 2 repeat pair 0 with
    the opposite label (tied scores across labels), pair 3 is a zero vector against a non-zero one."""
    left = rng.normal(size=(40, DIM))
    closeness = rng.uniform(0, 1, size=40)
    right = closeness[:, None] * left + (1 - closeness[:, None]) * rng.normal(size=(40, DIM))
    labels = (closeness + rng.normal(scale=0.15, size=40) > 0.5).astype(int)
    left[1:3], right[1:3] = left[0], right[0]
    labels[1:3] = 1 - labels[0]
    left[3] = 0.0
    texts1, e1 = embed("pc1", left)
    texts2, e2 = embed("pc2", right)

    class Task(MockPairClassificationTask):
        def load_data(self, **kwargs):
            self.dataset = DatasetDict({"test": Dataset.from_dict(
                {"sentence1": texts1, "sentence2": texts2, "labels": labels.tolist()})})

    write("pair_classification", {"embeddings1": rows(e1), "embeddings2": rows(e2),
                                  "labels": labels.tolist()},
          evaluate(Task()), ["abstasks/pair_classification.py",
                             "_evaluators/pair_classification_evaluator.py"],
          "AbsTaskPairClassification.evaluate; C-MTEB's Ocnli / Cmnli main score is max_accuracy")


def classification(rng, name, n_labels, train_counts, n_test, samples_per_label, n_experiments):
    """Labels with class means apart by about the noise; train_counts per label (some below
    samples_per_label, so undersampling keeps them whole)."""
    means = rng.normal(scale=0.8, size=(n_labels, DIM))
    train_labels = np.repeat(np.arange(n_labels), train_counts)
    rng.shuffle(train_labels)
    test_labels = rng.integers(0, n_labels, size=n_test)
    train_x = means[train_labels] + rng.normal(size=(len(train_labels), DIM))
    test_x = means[test_labels] + rng.normal(size=(n_test, DIM))
    train_texts, e_train = embed(f"{name}_train", train_x)
    test_texts, e_test = embed(f"{name}_test", test_x)

    class Task(MockClassificationTask):
        def load_data(self, **kwargs):
            self.dataset = DatasetDict({
                "train": Dataset.from_dict({"text": train_texts, "label": train_labels.tolist()}),
                "test": Dataset.from_dict({"text": test_texts, "label": test_labels.tolist()})})

    task = Task()
    task.samples_per_label, task.n_experiments = samples_per_label, n_experiments
    write(name, {"train_embeddings": rows(e_train), "train_labels": train_labels.tolist(),
                 "test_embeddings": rows(e_test), "test_labels": test_labels.tolist(),
                 "samples_per_label": samples_per_label, "n_experiments": n_experiments,
                 "seed": task.seed, "evaluator_model": repr(task.evaluator_model)},
          evaluate(task), ["abstasks/classification.py", "_evaluators/sklearn_evaluator.py"],
          "AbsTaskClassification.evaluate with its default LogisticRegression(max_iter=100)")


class Captured:
    """RetrievalEvaluator.evaluate's result (pytrec_eval's unrounded per-query figures) on the
    last call, beside the rounded ones the task reports."""

    last = None
    original = RetrievalEvaluator.evaluate

    @staticmethod
    def evaluate(self, *args, **kwargs):
        Captured.last = Captured.original(self, *args, **kwargs)
        return Captured.last


RetrievalEvaluator.evaluate = Captured.evaluate
PYTREC = {"ndcg_cut": "ndcg_at", "map_cut": "map_at", "recall": "recall_at", "P": "precision_at",
          "success": "hit_rate_at"}


def unrounded():
    """Means over queries of pytrec_eval's per-query figures, named as mteb names them (mteb rounds
    its reported means to 5 decimals; its MRR is not rounded)."""
    per_query = Captured.last.all_scores
    means = {}
    for measure in next(iter(per_query.values())):
        prefix, k = measure.rsplit("_", 1)
        means[f"{PYTREC[prefix]}_{k}"] = float(np.mean([q[measure] for q in per_query.values()]))
    means.update({k.replace("MRR@", "mrr_at_"): v for k, v in Captured.last.mrr.items()})
    return means, {qid: dict(scores) for qid, scores in per_query.items()}


def retrieval(rng):
    """30 documents, 8 queries, graded qrels (0, 1, 2). Documents d3 and d25 share an embedding
    (a tie broken by id: 'd3' > 'd25' as strings); query 6 judges only grade-0 documents (no
    relevant one); query 7 has no qrels at all (mteb drops it)."""
    corpus = rng.normal(size=(30, DIM))
    corpus[25] = corpus[3]
    targets = rng.integers(0, 30, size=(8, 3))
    targets[0, :2] = (3, 25)
    queries = corpus[targets].mean(axis=1) + rng.normal(scale=0.6, size=(8, DIM))
    qrels = []
    for q in range(8):
        judged = {int(targets[q, 0]): 2, int(targets[q, 1]): 1, int(rng.integers(0, 30)): 0}
        qrels.append(judged)
    qrels[0] = {25: 1, 3: 0, 7: 2}
    qrels[6] = {int(d): 0 for d in targets[6]}
    qrels[7] = {}
    corpus_ids = [f"d{i}" for i in range(30)]
    _, e_corpus = embed("doc", corpus)
    _, e_queries = embed("query", queries)
    MODEL.table.update(zip(corpus_ids, e_corpus))
    query_ids = [f"q{q}" for q in range(8)]
    MODEL.table.update(zip(query_ids, e_queries))

    class Task(MockRetrievalTask):
        def load_data(self, **kwargs):
            self.dataset = {"default": {"test": RetrievalSplitData(
                queries=Dataset.from_dict({"id": query_ids, "text": query_ids}),
                corpus=Dataset.from_dict({"id": corpus_ids, "text": corpus_ids}),
                relevant_docs={f"q{q}": {f"d{d}": g for d, g in judged.items()}
                               for q, judged in enumerate(qrels)},
                top_ranked=None)}}

    task = Task()
    figures = evaluate(task)
    means, per_query = unrounded()
    write("retrieval", {"query_embeddings": rows(e_queries), "corpus_embeddings": rows(e_corpus),
                        "corpus_ids": corpus_ids, "k_values": list(task.k_values),
                        "qrels": [{str(d): g for d, g in judged.items()} for judged in qrels]},
          {"reported": figures, "unrounded": means, "per_query": per_query},
          ["abstasks/retrieval.py", "_evaluators/retrieval_evaluator.py",
           "_evaluators/retrieval_metrics.py", "models/search_wrappers.py"],
          "AbsTaskRetrieval.evaluate, full-corpus search; 'unrounded' = means of RetrievalEvaluator's "
          "per-query pytrec_eval figures")


def reranking(rng):
    """8 queries, each with its own 3-12 candidates (1-3 relevant), ids as mteb gives an
    old-format reranking set (apositive_<q>_<i> / negative_<q>_<i>). Query 0's first negative
    repeats its first positive's embedding (a tie: the negative ranks first, 'n' > 'a')."""
    query_ids, candidates, grades, ids = [], [], [], []
    queries = rng.normal(size=(8, DIM))
    for q in range(8):
        n_positive, n_negative = int(rng.integers(1, 4)), int(rng.integers(2, 10))
        positives = queries[q] + rng.normal(scale=1.2, size=(n_positive, DIM))
        negatives = rng.normal(size=(n_negative, DIM))
        if q == 0:
            negatives[0] = positives[0]
        order = rng.permutation(n_positive + n_negative)  # candidates arrive mixed
        vectors = np.vstack([positives, negatives])[order]
        grade = np.r_[np.ones(n_positive, int), np.zeros(n_negative, int)][order]
        names = ([f"apositive_q{q}_{i:05d}" for i in range(n_positive)]
                 + [f"negative_q{q}_{i:05d}" for i in range(n_negative)])
        query_ids.append(f"q{q}")
        candidates.append(vectors)
        grades.append(grade.tolist())
        ids.append([names[i] for i in order])
    _, e_queries = embed("rq", queries)
    MODEL.table.update(zip(query_ids, e_queries))
    e_candidates = []
    for q in range(8):
        _, vectors = embed(f"rc{q}", candidates[q])
        MODEL.table.update(zip(ids[q], vectors))
        e_candidates.append(vectors)

    class Task(MockRerankingTask):
        def load_data(self, **kwargs):
            all_ids = [i for group in ids for i in group]
            self.dataset = {"default": {"test": RetrievalSplitData(
                queries=Dataset.from_dict({"id": query_ids, "text": query_ids}),
                corpus=Dataset.from_dict({"id": all_ids, "text": all_ids}),
                relevant_docs={query_ids[q]: dict(zip(ids[q], grades[q])) for q in range(8)},
                top_ranked={query_ids[q]: list(ids[q]) for q in range(8)})}}

    task = Task()
    figures = evaluate(task)
    means, per_query = unrounded()
    write("reranking", {"query_embeddings": rows(e_queries),
                        "candidate_embeddings": [rows(v) for v in e_candidates],
                        "candidate_grades": grades, "candidate_ids": ids,
                        "k_values": list(task.k_values)},
          {"reported": figures, "unrounded": means, "per_query": per_query},
          ["abstasks/retrieval.py", "abstasks/text/reranking.py", "_evaluators/retrieval_evaluator.py",
           "_evaluators/retrieval_metrics.py", "models/search_wrappers.py"],
          "AbsTaskRetrieval.evaluate with top_ranked candidates (MockRerankingTask, main map_at_1000)")


def main():
    rng = np.random.default_rng(20261127)
    sts(rng)
    pair_classification(rng)
    classification(rng, "classification", 4, [25, 15, 12, 6], 40, samples_per_label=8, n_experiments=10)
    classification(rng, "classification_binary", 2, [30, 20], 30, samples_per_label=16, n_experiments=5)
    retrieval(rng)
    reranking(rng)


if __name__ == "__main__":
    main()
