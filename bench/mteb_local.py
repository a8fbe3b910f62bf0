"""mteb itself on the data an embeddings suite scored, offline: each task of
`mtl benchmark ... --mteb-data DIR` becomes an mteb task whose data is put in place instead of
fetched from the hub (as mteb's own tests do, tests/mock_tasks.py), and mteb's evaluator
scores a model on it.

Runs in a venv holding mteb (`.venv-current`, requirements-current.txt), not in .venv:

    mtl benchmark exports/st --suite suites/cmteb.yaml --data-root ../shared/data \\
        --output results/cmteb --mteb-data results/cmteb-data
    .venv-current/bin/python bench/mteb_local.py results/cmteb-data exports/st \\
        --output results/cmteb-mteb.json

MODEL is a sentence-transformers folder (`mtl export RUN --format transformers`), loaded by
mteb's SentenceTransformerEncoderWrapper with the folder's own `query` / `document` prompts;
or, with --vectors TABLE.json ({"prompts": {"query": ..., "document": ...}, "vectors": {text:
[floats]}}), a table of fixed vectors (tests/test_embedding_suite_mteb.py). Writes, per task,
mteb's figures and the one the suite ranks (`figure`); retrieval and reranking figures are
the means of mteb's unrounded per-query values (its report rounds them to 5 decimals).
"""
import argparse
import json
import sys
from importlib.metadata import version
from pathlib import Path

import numpy as np
from datasets import Dataset, DatasetDict
from mteb.abstasks.retrieval_dataset_loaders import RetrievalSplitData
from mteb.mocks.mock_tasks.classification import MockClassificationTask
from mteb.mocks.mock_tasks.clustering import MockClusteringTask
from mteb.mocks.mock_tasks.pair_classification import MockPairClassificationTask
from mteb.mocks.mock_tasks.reranking import MockRerankingTask
from mteb.mocks.mock_tasks.retrieval import MockRetrievalTask
from mteb.mocks.mock_tasks.sts import MockSTSTask
from mteb.models.model_implementations.random_baseline import RandomEncoderBaseline, random_encoder_baseline
from mteb_fixtures import Captured, unrounded  # noqa: F401 (its import captures retrieval's per-query figures)

# the suite's kind -> the mteb figure it ranks
FIGURE = {"sts": "cosine_spearman", "pair_classification": "max_accuracy",
          "retrieval": "ndcg_at_10", "reranking": "map_at_1000", "classification": "accuracy",
          "clustering": "v_measure"}


class TableEncoder(RandomEncoderBaseline):
    """mteb's random-encoder baseline (cosine similarity) whose encode looks up each text, with
    the prompt mteb chose for it (none, `query` or `document`), in a table."""

    mteb_model_meta = random_encoder_baseline

    def __init__(self, table):
        super().__init__(model_name="vector-table", revision=None)
        self.prompts = table["prompts"]
        self.vectors = {text: np.asarray(v, np.float32) for text, v in table["vectors"].items()}

    def encode(self, inputs, *, prompt_type=None, **kwargs):
        prefix = self.prompts[prompt_type.value] if prompt_type else ""
        return np.stack([self.vectors[prefix + text] for batch in inputs for text in batch["text"]])


def sts(data):
    class Task(MockSTSTask):
        min_score, max_score = min(data["score"]), max(data["score"])

        def load_data(self, **kwargs):
            self.dataset = DatasetDict({"test": Dataset.from_dict(
                {"sentence1": data["sentence1"], "sentence2": data["sentence2"],
                 "score": data["score"]})})
    return Task()


def pair_classification(data):
    class Task(MockPairClassificationTask):
        def load_data(self, **kwargs):
            self.dataset = DatasetDict({"test": Dataset.from_dict(
                {"sentence1": data["sentence1"], "sentence2": data["sentence2"],
                 "labels": [int(s) for s in data["score"]]})})
    return Task()


def retrieval(data):
    """Corpus ids are the suite's row numbers as strings: ties break alike (id descending)."""
    query_ids = [f"q{i}" for i in range(len(data["queries"]))]
    corpus_ids = [str(i) for i in range(len(data["corpus"]))]

    class Task(MockRetrievalTask):
        def load_data(self, **kwargs):
            self.dataset = {"default": {"test": RetrievalSplitData(
                queries=Dataset.from_dict({"id": query_ids, "text": data["queries"]}),
                corpus=Dataset.from_dict({"id": corpus_ids, "text": data["corpus"]}),
                relevant_docs={q: judged for q, judged in zip(query_ids, data["qrels"])},
                top_ranked=None)}}
    return Task()


def reranking(data):
    """Each query's positive and negatives, named as mteb names an old-format reranking set's."""
    query_ids, ids, texts, judged = [], [], [], {}
    for q, (positive, negatives) in enumerate(zip(data["positives"], data["negatives"])):
        names = [f"apositive_q{q}_{0:05d}"] + [f"negative_q{q}_{i:05d}" for i in range(len(negatives))]
        query_ids.append(f"q{q}")
        ids.append(names)
        texts += [positive] + list(negatives)
        judged[f"q{q}"] = {name: int(i == 0) for i, name in enumerate(names)}

    class Task(MockRerankingTask):
        def load_data(self, **kwargs):
            self.dataset = {"default": {"test": RetrievalSplitData(
                queries=Dataset.from_dict({"id": query_ids, "text": data["queries"]}),
                corpus=Dataset.from_dict({"id": [n for group in ids for n in group], "text": texts}),
                relevant_docs=judged, top_ranked=dict(zip(query_ids, ids)))}}
    return Task()


def classification(data):
    class Task(MockClassificationTask):
        def load_data(self, **kwargs):
            self.dataset = DatasetDict({split: Dataset.from_dict(
                {"text": data[split]["text"], "label": data[split]["label"]})
                for split in ("train", "test")})
    task = Task()
    task.samples_per_label = data["settings"]["samples_per_label"]
    task.n_experiments = data["settings"]["n_experiments"]
    return task


def clustering(data):
    """One cluster set: the suite clusters its split's texts at once."""
    class Task(MockClusteringTask):
        def load_data(self, **kwargs):
            self.dataset = DatasetDict({"test": Dataset.from_dict(
                {"sentences": [data["test"]["text"]], "labels": [data["test"]["label"]]})})
            self.data_loaded = True
    return Task()


BUILD = {"sts": sts, "pair_classification": pair_classification, "retrieval": retrieval,
         "reranking": reranking, "classification": classification, "clustering": clustering}


def scored(task, kind, model):
    task.load_data()
    task.data_loaded = True
    figures = task.evaluate(model, split="test", encode_kwargs={"batch_size": 32})["default"]
    figures = {k: v for k, v in figures.items() if isinstance(v, (int, float, str))}
    if kind in ("retrieval", "reranking"):
        figures["unrounded"] = unrounded()[0]
        return figures, figures["unrounded"][FIGURE[kind]]
    return figures, figures[FIGURE[kind]]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", help="the folder `mtl benchmark --mteb-data` wrote")
    parser.add_argument("model", nargs="?", help="a sentence-transformers folder")
    parser.add_argument("--vectors", help="a table of fixed vectors instead of a model")
    parser.add_argument("--output", required=True, help="the JSON file to write")
    args = parser.parse_args(argv)
    if (args.model is None) == (args.vectors is None):
        parser.error("give a MODEL folder or --vectors TABLE.json")
    if args.vectors:
        model = TableEncoder(json.loads(Path(args.vectors).read_text(encoding="utf-8")))
    else:
        from mteb.models.sentence_transformer_wrapper import SentenceTransformerEncoderWrapper

        model = SentenceTransformerEncoderWrapper(args.model, device="cpu")
    results = {"versions": {p: version(p) for p in ("mteb", "scikit-learn", "numpy", "torch")},
               "tasks": {}}
    for path in sorted(Path(args.data).glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        figures, figure = scored(BUILD[data["kind"]](data), data["kind"], model)
        results["tasks"][data["name"]] = {"kind": data["kind"], "figure": figure, "mteb": figures}
        print(f"{data['name']} ({data['kind']}): {FIGURE[data['kind']]} {figure:.6f}", flush=True)
    Path(args.output).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
