"""The local C-MTEB-like suite: encoders scored zero-shot, as C-MTEB scores them, on the
catalog's embedding dev sets, ranked with paired 95% intervals.

    results = embedding_benchmark(["runs/a", "exports/b"], "suites/embeddings.yaml",
                                  data_root, output)          # mtl benchmark A B --suite ...

A suite of `kind: embeddings` lists registry tasks; each is scored by what it is:

- a contrastive task with metric cosine_spearman: STS, Spearman of cosine (C-MTEB's main);
- pair_classification: best-threshold accuracy of cosine (max_accuracy, C-MTEB's main);
- retrieval: its split's queries searched over its distinct passages, nDCG@10;
- reranking (a pairs task with `neg` lists): each query ranks its positive among its own
  negatives, MAP (C-MTEB's T2Reranking main score; MRR@10 beside it in `mtl evaluate`);
- a classification task: logistic regression on the embeddings of its train split, accuracy
  on dev (mteb's protocol: n_experiments undersampled training sets of samples_per_label).

The scorers are mtl_framework.scoring.embedding's, equal to mteb's evaluators. Nothing is
fine-tuned. Intervals are bootstrap percentiles over the examples (queries for retrieval),
the same resamples for every encoder, so a difference's interval is paired; the mean over
tasks resamples every task at once. A score whose dataset a model trained on (its train
split; the dev split scored here is never trained) is flagged: C-MTEB's AFQMC, OCNLI and
CMNLI are our dev splits, so a model trained on their train splits is scored in-domain there.
"""
import json
import os

import numpy as np

from data_adapters.task_types import CLASSIFICATION
from mtl_framework.errors import UserError

KIND = "embeddings"
# contrastive task metric -> (what it is, the figure ranked)
SCORED = {"cosine_spearman": ("sts", "cosine_spearman"),
          "pair_classification": ("pair_classification", "max_accuracy"),
          "retrieval": ("retrieval", "ndcg_at_10"),
          "reranking": ("reranking", "map")}
SUITE_KEYS = {"kind", "description", "tasks", "max_examples", "train_examples",
              "n_experiments", "samples_per_label", "bootstrap", "batch_size", "split"}


def read_suite(path, registry):
    """The suite's settings and its TaskSpecs; a UserError naming the key and the fix."""
    from mtl_framework.config.yaml_io import load_yaml

    suite = load_yaml(path).data
    if not isinstance(suite, dict) or suite.get("kind") != KIND:
        raise UserError(f"{path}: not an embeddings suite (`kind: {KIND}`)")
    unknown = sorted(set(suite) - SUITE_KEYS)
    if unknown:
        raise UserError(f"{path}: unknown key(s) {unknown}; allowed: {', '.join(sorted(SUITE_KEYS))}")
    names = suite.get("tasks")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise UserError(f"{path}: tasks must be a list of task names (registry tasks)")
    tasks = []
    for name in names:
        if name not in registry.tasks:
            raise UserError(f"{path}: task {name!r} is not in the registry: see `mtl tasks list`")
        task = registry.tasks[name]
        if kind_of(task) is None:
            raise UserError(f"{path}: task {name!r} ({task.type}, metric {task.metric}) is neither "
                            "a contrastive task nor a single-label classification task")
        tasks.append(task)
    settings = {"max_examples": 2000, "train_examples": 4000, "n_experiments": 10,
                "samples_per_label": 32, "bootstrap": 1000, "batch_size": 32, "split": "dev"}
    for key in settings:
        if key in suite:
            value = suite[key]
            if key == "split" and not isinstance(value, str) or \
                    key != "split" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise UserError(f"{path}: {key} must be "
                                + ("a split name" if key == "split" else "a whole number >= 1")
                                + f", got {value!r}")
            settings[key] = value
    return {**settings, "description": suite.get("description", "")}, tasks


def kind_of(task):
    """sts / pair_classification / retrieval / reranking / classification, or None (not
    scorable zero-shot)."""
    from mtl_framework.config.spec_schema import EMBEDDING_TYPE

    if task.type == EMBEDDING_TYPE:
        return SCORED[task.metric][0]
    if task.type == CLASSIFICATION.name and not task.multi_label:
        return CLASSIFICATION.name
    return None


def task_texts(task, split, data_root, tokenizer, limit=None):
    """(queries, passages, scores, negatives) of a contrastive task's first `limit` pairs
    (None: all), as its featurizer pairs them (unanswered questions, pairs without text_b
    left out; each pair's stored negatives, up to 64)."""
    from data_adapters import read_task
    from mtl_framework.families import featurizer_for_task
    from mtl_framework.families.features import FeatureReport

    featurizer = featurizer_for_task(task, tokenizer, data_root)
    report, out = FeatureReport(), ([], [], [], [])
    for example in read_task(task, split, data_root):
        pair = featurizer.pair(example, report)
        if pair is None:
            continue
        out[0].append(pair[0])
        out[1].append(pair[1])
        out[2].append(np.nan if pair[3] is None else pair[3])
        out[3].append(list(pair[2]))
        if limit is not None and len(out[0]) >= limit:
            break
    return out[0], out[1], np.array(out[2], np.float64), out[3]


def labelled_texts(task, split, data_root, limit):
    from data_adapters import read_task

    texts, labels = [], []
    for example in read_task(task, split, data_root):
        if example.label is None:
            continue
        texts.append(example.text if example.text_b is None else example.text + "，" + example.text_b)
        labels.append(example.label)
        if len(texts) >= limit:
            break
    return texts, np.array(labels)


class TaskScorer:
    """One task's data, read once, and the score of an encoder on it with its resampling."""

    def __init__(self, task, settings, data_root, tokenizer):
        self.task, self.kind, self.settings = task, kind_of(task), settings
        limit, split = settings["max_examples"], settings["split"]
        if self.kind == CLASSIFICATION.name:
            self.train = labelled_texts(task, "train", data_root, settings["train_examples"])
            self.test = labelled_texts(task, split, data_root, limit)
            self.size = len(self.test[0])
        else:
            self.queries, self.passages, self.scores, self.negatives = task_texts(
                task, split, data_root, tokenizer, limit)
            self.size = len(self.queries)
        if not self.size:
            raise UserError(f"task {task.name}: no scorable {split} examples under the data root")

    def score(self, encoder):
        """(the score, per example values or a resampling function)."""
        from mtl_framework.scoring import embedding as scores

        batch = self.settings["batch_size"]
        if self.kind == CLASSIFICATION.name:
            train = encoder.encode(self.train[0], batch_size=batch)
            test = encoder.encode(self.test[0], batch_size=batch)
            result = scores.classification_scores(
                train, self.train[1], test, self.test[1],
                n_experiments=self.settings["n_experiments"],
                samples_per_label=self.settings["samples_per_label"])
            return result["accuracy"], result["accuracy_per_example"]
        queries = encoder.encode(self.queries, side="query", batch_size=batch)
        if self.kind == "retrieval":
            corpus, qrels = {}, []
            for passage in self.passages:
                qrels.append({corpus.setdefault(passage, len(corpus)): 1})
            documents = encoder.encode(list(corpus), side="passage", batch_size=batch)
            result = scores.retrieval_scores(queries, documents, qrels, k_values=(1, 10, 100),
                                             per_query=True)
            return result["ndcg_at_10"], np.array([q["ndcg_at_10"] for q in result["per_query"]])
        passages = encoder.encode(self.passages, side="passage", batch_size=batch)
        if self.kind == "reranking":  # each query's positive among its own negatives
            flat = encoder.encode([t for row in self.negatives for t in row], side="passage",
                                  batch_size=batch)
            negatives = np.split(flat, np.cumsum([len(row) for row in self.negatives])[:-1])
            result = scores.positive_among_negatives(queries, passages, negatives, per_query=True)
            return result["map_at_1000"], np.array([q["map_at_1000"] for q in result["per_query"]])
        if self.kind == "sts":
            keep = np.isfinite(self.scores)
            a, b, gold = queries[keep], passages[keep], self.scores[keep]
            return (scores.sts_scores(a, b, gold)["cosine_spearman"],
                    lambda rows: scores.sts_scores(a[rows], b[rows], gold[rows])["cosine_spearman"])
        a, b, labels = queries, passages, self.scores.astype(int)
        return (scores.pair_classification_scores(a, b, labels)["max_accuracy"],
                lambda rows: scores.pair_classification_scores(a[rows], b[rows], labels[rows])
                ["max_accuracy"])


def resampled(values, samples):
    """A score's value on each resample (rows: [resamples, n] indices)."""
    if callable(values):
        return np.array([values(rows) for rows in samples])
    return np.asarray(values)[samples].mean(axis=1)


def interval(draws):
    return [float(np.percentile(draws, 2.5)), float(np.percentile(draws, 97.5))]


def trained_datasets(path, registry):
    """The datasets whose train split a model trained on: a run's experiment tasks, an
    export's recorded run tasks (config.json "run", provenance.json "tasks"); None: unknown."""
    from mtl_framework.rundir import RunDir

    names = None
    if RunDir(path).is_run():
        from mtl_framework.config.experiment import load_experiment

        names = [t["name"] for t in load_experiment(RunDir(path).experiment_file()).tasks]
    else:
        for file, keys in (("config.json", ("run", "tasks")), ("provenance.json", ("tasks",))):
            try:
                with open(os.path.join(path, file), encoding="utf-8") as f:
                    value = json.load(f)
            except (OSError, ValueError):
                continue
            for key in keys:
                value = value.get(key) if isinstance(value, dict) else None
            if isinstance(value, list):
                names = value
                break
    if names is None:
        return None
    return sorted({registry.tasks[n].dataset for n in names if n in registry.tasks})


def embedding_benchmark(models, suite_path, data_root, output, task_specs=(), log=print):
    """Score each model (run directory or folder) on the suite; writes results.json and
    results.md to `output` and returns the results."""
    from mtl_framework.config.registry import load_registry
    from mtl_framework.evaluation.encode import Encoder

    registry = load_registry(list(task_specs))  # label files are checked when a task is read
    settings, tasks = read_suite(suite_path, registry)
    os.makedirs(output, exist_ok=True)
    encoders = {}
    for path in models:
        encoders[path] = Encoder(path, log=log)
        log(f"{path}: {encoders[path].pooling} pooling"
            f"{', normalised' if encoders[path].normalize else ''}")
    tokenizer = next(iter(encoders.values())).tokenizer
    rng = np.random.default_rng(0)
    rows, per_task = [], {}
    for task in tasks:
        scorer = TaskScorer(task, settings, data_root, tokenizer)
        samples = rng.integers(0, scorer.size, (settings["bootstrap"], scorer.size))
        per_task[task.name] = {"kind": scorer.kind, "examples": scorer.size, "draws": {}}
        for path, encoder in encoders.items():
            value, values = scorer.score(encoder)
            draws = resampled(values, samples)
            per_task[task.name]["draws"][path] = draws
            rows.append({"model": path, "task": task.name, "kind": scorer.kind,
                         "dataset": task.dataset, "score": float(value),
                         "interval": interval(draws), "examples": scorer.size})
            log(f"{task.name} ({scorer.kind}, {scorer.size} examples): {path} {value:.4f}")
    trained = {path: trained_datasets(path, registry) for path in models}
    for row in rows:
        datasets = trained[row["model"]]
        row["trained_on_dataset"] = None if datasets is None else row["dataset"] in datasets
    means = {path: np.mean([per_task[t]["draws"][path] for t in per_task], axis=0) for path in models}
    summary = {path: {"mean": float(np.mean([r["score"] for r in rows if r["model"] == path])),
                      "interval": interval(means[path])} for path in models}
    differences = []
    for i, first in enumerate(models):
        for second in models[i + 1:]:
            entry = {"first": first, "second": second,
                     "mean": summary[first]["mean"] - summary[second]["mean"],
                     "interval": interval(means[first] - means[second]), "tasks": {}}
            for name, data in per_task.items():
                first_row = next(r for r in rows if r["model"] == first and r["task"] == name)
                second_row = next(r for r in rows if r["model"] == second and r["task"] == name)
                entry["tasks"][name] = {
                    "difference": first_row["score"] - second_row["score"],
                    "interval": interval(data["draws"][first] - data["draws"][second])}
            differences.append(entry)
    results = {"suite": os.path.abspath(suite_path), "settings": settings, "models": list(models),
               "trained_datasets": trained, "rows": rows, "summary": summary,
               "differences": differences}
    with open(os.path.join(output, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(output, "results.md"), "w", encoding="utf-8") as f:
        f.write(markdown(results))
    return results


def markdown(results):
    models, rows = results["models"], results["rows"]
    label = {m: os.path.basename(os.path.normpath(m)) for m in models}
    lines = ["| task | kind | examples | " + " | ".join(label[m] for m in models) + " |",
             "|---|---|---:|" + "---:|" * len(models)]
    for task in dict.fromkeys(r["task"] for r in rows):
        cells = []
        for model in models:
            row = next(r for r in rows if r["model"] == model and r["task"] == task)
            flag = " †" if row["trained_on_dataset"] else ""
            cells.append(f"{100 * row['score']:.2f} [{100 * row['interval'][0]:.2f}, "
                         f"{100 * row['interval'][1]:.2f}]{flag}")
        first = next(r for r in rows if r["task"] == task)
        lines.append(f"| {task} | {first['kind']} | {first['examples']} | " + " | ".join(cells) + " |")
    lines.append("| **mean** | | | " + " | ".join(
        f"**{100 * results['summary'][m]['mean']:.2f}** [{100 * results['summary'][m]['interval'][0]:.2f}, "
        f"{100 * results['summary'][m]['interval'][1]:.2f}]" for m in models) + " |")
    lines.append("")
    lines.append("Scores x 100 with 95% bootstrap intervals over the examples; † the model trained "
                 "on this dataset's train split (its dev split, scored here, was held out).")
    for entry in results["differences"]:
        lines.append("")
        lines.append(f"{label[entry['first']]} − {label[entry['second']]}: mean "
                     f"{100 * entry['mean']:+.2f} [{100 * entry['interval'][0]:+.2f}, "
                     f"{100 * entry['interval'][1]:+.2f}] (paired)")
        for task, value in entry["tasks"].items():
            lines.append(f"- {task}: {100 * value['difference']:+.2f} "
                         f"[{100 * value['interval'][0]:+.2f}, {100 * value['interval'][1]:+.2f}]")
    return "\n".join(lines) + "\n"
