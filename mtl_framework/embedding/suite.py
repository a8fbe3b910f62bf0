"""The local C-MTEB suite: encoders scored zero-shot, as C-MTEB scores them, on the catalog's
embedding sets, ranked with paired 95% intervals.

    results = embedding_benchmark(["runs/a", "exports/b"], "suites/cmteb.yaml",
                                  data_root, output)          # mtl benchmark A B --suite ...

A suite of `kind: embeddings` lists registry tasks, each a name or `{task, split,
max_examples, kind}` (C-MTEB scores ATEC, BQ and STS-B on their test splits, whole:
`{task: stsb_zh_sts, split: test, max_examples: all}`). Each is scored by what it is:

- a contrastive task with metric cosine_spearman: STS, Spearman of cosine (C-MTEB's main);
- pair_classification: best-threshold accuracy of cosine (max_accuracy, C-MTEB's main);
- retrieval: the split's distinct queries searched over its distinct passages, each query's
  positives judged together (mteb's qrels), nDCG@10;
- reranking (a pairs task with `neg` lists): each query ranks its positive among its own
  negatives, MAP (C-MTEB's T2Reranking main score);
- a classification task: logistic regression on the embeddings of its train split, accuracy
  on the scored split (mteb's protocol: n_experiments undersampled training sets of
  samples_per_label); or, with `kind: clustering`, k-means of the scored split's texts
  against their labels, V-measure (mteb's clustering evaluator, C-MTEB's CLS / ThuNews tasks).

Texts are prefixed as mteb prefixes them for a model whose prompts are `query` / `document`:
retrieval and reranking queries get the query prefix, their passages the passage prefix;
STS, pair classification, classification and clustering texts get none.

The scorers are mtl_framework.scoring.embedding's, equal to mteb's evaluators
(bench/mteb_local.py runs mteb itself on the data a suite scored, `--mteb-data`). Nothing is
fine-tuned. Intervals are bootstrap percentiles over the examples (queries for retrieval),
the same resamples for every encoder, so a difference's interval is paired; the mean over
tasks resamples every task at once. A score whose dataset a model trained on (its train
split) is flagged: C-MTEB's AFQMC, OCNLI and CMNLI are our dev splits, so a model trained on
their train splits is scored in-domain there.

Each (task, model) is written to OUTPUT/tasks/TASK.json as it finishes (atomically); a suite
run again into the same OUTPUT reuses what was scored with the same settings and weights and
refuses, before writing anything, a task scored there with other ones.
"""
import hashlib
import json
import math
import os
import time

import numpy as np

from data_adapters.task_types import CLASSIFICATION
from mtl_framework.errors import UserError

KIND = "embeddings"
CLUSTERING = "clustering"
# contrastive task metric -> (what it is, the figure ranked)
SCORED = {"cosine_spearman": ("sts", "cosine_spearman"),
          "pair_classification": ("pair_classification", "max_accuracy"),
          "retrieval": ("retrieval", "ndcg_at_10"),
          "reranking": ("reranking", "map")}
SUITE_KEYS = {"kind", "description", "tasks", "max_examples", "train_examples",
              "n_experiments", "samples_per_label", "bootstrap", "batch_size", "split"}
ENTRY_KEYS = {"task", "split", "max_examples", "kind"}
DEFAULTS = {"max_examples": 2000, "train_examples": 4000, "n_experiments": 10,
            "samples_per_label": 32, "bootstrap": 1000, "batch_size": 32, "split": "dev"}
# Resamples are drawn a block at a time (memory stays at ~32 MB of row indices whatever the
# split's size); more than this many would run for hours on a large split for no gain
# (1,000 put a 95% percentile within ~0.1 point).
MOST_RESAMPLES = 10_000
WHOLE_SPLIT = ("max_examples", "train_examples")  # `all`: every row of the split
TASKS_FOLDER = "tasks"
RESULTS_FORMAT = 2  # results.json beside OUTPUT/tasks/ (format 1 had no per-task records)


def read_suite(path, registry):
    """The suite's settings and its entries ({"name", "task", "kind", "settings"}: each
    task's own settings merged over the suite's); a UserError `file:line: ...` naming the key
    and the fix."""
    from mtl_framework.config.yaml_io import load_yaml

    doc = load_yaml(path)
    suite = doc.data
    if not isinstance(suite, dict) or suite.get("kind") != KIND:
        raise UserError(f"{path}: not an embeddings suite (`kind: {KIND}`)")
    unknown = sorted(set(suite) - SUITE_KEYS)
    if unknown:
        raise UserError(f"{doc.where(unknown[0])}: unknown key(s) {unknown}; allowed: "
                        f"{', '.join(sorted(SUITE_KEYS))}")
    settings = dict(DEFAULTS)
    for key in DEFAULTS:
        if key in suite:
            settings[key] = checked_setting(key, suite[key], doc.where(key))
    names = suite.get("tasks")
    if not isinstance(names, list) or not names:
        raise UserError(f"{doc.where('tasks')}: tasks must be a list of task names (registry "
                        "tasks) or {task, split, max_examples, kind} entries")
    entries, seen = [], {}
    for i, item in enumerate(names):
        entry = suite_entry(item, settings, registry, doc.where("tasks", i))
        if entry["name"] in seen:
            raise UserError(f"{doc.where('tasks', i)}: task {entry['name']!r} is listed twice "
                            f"(first on line {seen[entry['name']]}): list it once")
        seen[entry["name"]] = doc.line("tasks", i)
        entries.append(entry)
    return {**settings, "description": suite.get("description", "")}, entries


def checked_setting(key, value, where):
    """A suite or task setting as given, or a UserError: split a name, max_examples and
    train_examples a whole number or `all` (None), the rest whole numbers >= 1, bootstrap at
    most MOST_RESAMPLES."""
    if key == "split":
        if not isinstance(value, str) or not value:
            raise UserError(f"{where}: split must be a split name (train, dev, test), got {value!r}")
        return value
    if key in WHOLE_SPLIT and value == "all":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        also = " or `all`" if key in WHOLE_SPLIT else ""
        raise UserError(f"{where}: {key} must be a whole number >= 1{also}, got {value!r}")
    if key == "bootstrap" and value > MOST_RESAMPLES:
        raise UserError(f"{where}: bootstrap {value:,} resamples is more than {MOST_RESAMPLES:,} "
                        "(1,000 already put a 95% interval's ends within ~0.1 point): give "
                        f"at most {MOST_RESAMPLES:,}")
    return value


def suite_entry(item, settings, registry, where):
    """One `tasks:` item -> {"name", "task", "kind", "settings"}."""
    if isinstance(item, str):
        item = {"task": item}
    if not isinstance(item, dict) or not isinstance(item.get("task"), str):
        raise UserError(f"{where}: a task is a registry task name or a mapping with `task: NAME` "
                        "(and split, max_examples, kind)")
    unknown = sorted(set(item) - ENTRY_KEYS)
    if unknown:
        raise UserError(f"{where}: unknown key(s) {unknown} for task {item['task']!r}; allowed: "
                        f"{', '.join(sorted(ENTRY_KEYS))}")
    name = item["task"]
    if name not in registry.tasks:
        raise UserError(f"{where}: task {name!r} is not in the registry: see `mtl tasks list`")
    task = registry.tasks[name]
    kind = kind_of(task)
    if kind is None:
        raise UserError(f"{where}: task {name!r} ({task.type}, metric {task.metric}) is neither "
                        "a contrastive task nor a single-label classification task")
    if "kind" in item:
        if item["kind"] != CLUSTERING or kind != CLASSIFICATION.name:
            raise UserError(f"{where}: kind {item['kind']!r}: the one kind a task may be given is "
                            f"`{CLUSTERING}`, for a single-label classification task (its texts "
                            "clustered by label); leave kind out to score the task as it is")
        kind = CLUSTERING
    own = {**settings, **{key: checked_setting(key, item[key], where)
                          for key in ("split", "max_examples") if key in item}}
    needed = [own["split"]] + (["train"] if kind == CLASSIFICATION.name else [])
    for split in needed:
        if split not in task.files:
            why = " (the logistic regression trains on it)" if split != own["split"] else ""
            raise UserError(f"{where}: task {name!r} has no {split!r} split{why}; its splits: "
                            f"{', '.join(task.files) or 'none'}: give `split:` one of them"
                            + (" or another task" if why else ""))
    return {"name": name if kind == kind_of(task) else f"{name}_{kind}", "task": task,
            "kind": kind, "settings": own}


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
        if limit is not None and len(texts) >= limit:
            break
    return texts, np.array(labels)


def grouped_queries(queries, passages):
    """(distinct queries, distinct passages, qrels): each query once with all its positives
    judged 1, as mteb's qrels hold them (a query's second positive is not a miss)."""
    corpus, judged = {}, {}
    for query, passage in zip(queries, passages):
        judged.setdefault(query, {})[corpus.setdefault(passage, len(corpus))] = 1
    return list(judged), list(corpus), list(judged.values())


class TaskScorer:
    """One task's data, read once, and the score of an encoder on it with its resampling.
    `settings`: the suite's with the task's own split and max_examples; `kind` clustering
    for a classification task clustered by label."""

    def __init__(self, task, settings, data_root, tokenizer, kind=None):
        self.task, self.kind, self.settings = task, kind or kind_of(task), settings
        self.note = None  # why the data cannot be scored, whatever the encoder
        limit, split = settings["max_examples"], settings["split"]
        if self.kind in (CLASSIFICATION.name, CLUSTERING):
            if self.kind == CLASSIFICATION.name:
                self.train = labelled_texts(task, "train", data_root, settings["train_examples"])
            self.test = labelled_texts(task, split, data_root, limit)
            self.size = len(self.test[0])
            if self.kind == CLUSTERING and len(set(self.test[1].tolist())) < 2:
                self.note = "every text has the same label: nothing to cluster (mteb gives 1.0)"
        else:
            self.queries, self.passages, self.scores, self.negatives = task_texts(
                task, split, data_root, tokenizer, limit)
            self.size = len(self.queries)
            if self.kind == "retrieval":
                self.queries, self.passages, self.qrels = grouped_queries(self.queries, self.passages)
                self.size = len(self.queries)
                from mtl_framework.scoring.embedding import one_passage_corpus

                self.note = one_passage_corpus(len(self.passages))
            elif self.kind == "sts" and len(set(self.scores[np.isfinite(self.scores)])) < 2:
                self.note = ("its gold scores are all equal (or missing): Spearman is undefined")
            elif self.kind == "reranking" and not any(self.negatives):
                self.note = "no pair has negatives: every positive ranks first (MAP 1.0)"
        if not self.size:
            raise UserError(f"task {task.name}: no scorable {split} examples under the data root")

    def drawn_train_rows(self):
        """The train rows the undersampled experiments draw (scoring.embedding's draw, mteb's)."""
        from mtl_framework.scoring.embedding import _undersampled_indices

        drawn = _undersampled_indices(self.train[1].tolist(), self.settings["n_experiments"],
                                      self.settings["samples_per_label"], seed=42)
        return sorted(set().union(*drawn))

    def texts(self):
        """How many texts an encoder encodes for this task (for the time estimate)."""
        if self.kind == CLASSIFICATION.name:
            return len(self.drawn_train_rows()) + self.size
        if self.kind == CLUSTERING:
            return self.size
        return len(self.queries) + len(self.passages) + sum(len(n) for n in self.negatives)

    def score(self, encoder, progress=None):
        """(the score or None, per example values or a function of resampled rows, a note or
        None)."""
        from mtl_framework.scoring import embedding as scores

        if self.note:
            return None, None, self.note
        batch = self.settings["batch_size"]

        def encode(texts, side=None):
            return encoder.encode(texts, side=side, batch_size=batch, progress=progress)

        if self.kind == CLASSIFICATION.name:
            drawn = self.drawn_train_rows()  # as mteb: only the rows some experiment trains on
            train = np.zeros((len(self.train[0]), 1), np.float32)
            if drawn:
                vectors = encode([self.train[0][i] for i in drawn])
                train = np.zeros((len(self.train[0]), vectors.shape[1]), vectors.dtype)
                train[drawn] = vectors
            result = scores.classification_scores(
                train, self.train[1], encode(self.test[0]), self.test[1],
                n_experiments=self.settings["n_experiments"],
                samples_per_label=self.settings["samples_per_label"])
            return result["accuracy"], result["accuracy_per_example"], None
        if self.kind == CLUSTERING:
            from sklearn.metrics.cluster import v_measure_score

            labels = self.test[1]
            clusters = scores.clustering_scores(encode(self.test[0]), labels)
            return (clusters["v_measure"],
                    lambda rows: v_measure_score(labels[rows], clusters["assignment"][rows]), None)
        if self.kind == "retrieval":
            queries = encode(self.queries, "query")
            result = scores.retrieval_scores(queries, encode(self.passages, "passage"), self.qrels,
                                             k_values=(1, 10, 100), per_query=True)
            return result["ndcg_at_10"], np.array([q["ndcg_at_10"] for q in result["per_query"]]), None
        if self.kind == "reranking":  # each query's positive among its own negatives
            queries, passages = encode(self.queries, "query"), encode(self.passages, "passage")
            flat = encode([t for row in self.negatives for t in row], "passage")
            negatives = np.split(flat, np.cumsum([len(row) for row in self.negatives])[:-1])
            result = scores.positive_among_negatives(queries, passages, negatives, per_query=True)
            return result["map_at_1000"], np.array([q["map_at_1000"] for q in result["per_query"]]), None
        # STS and pair classification: no prefix on either side, as mteb encodes them
        first, second = encode(self.queries), encode(self.passages)
        if self.kind == "sts":
            keep = np.isfinite(self.scores)
            cosines, gold = scores.paired_cosines(first[keep], second[keep]), self.scores[keep]
            value = scores.spearman(gold, cosines)
            if not math.isfinite(value):
                return None, None, ("every pair has the same cosine under this encoder: "
                                    "Spearman is undefined")
            return value, lambda rows: scores.spearman(gold[rows], cosines[rows]), None
        labels = self.scores.astype(int)
        similarities = scores.pair_similarities(first, second)  # float32, as mteb computes them
        return (scores.max_accuracy(similarities, labels),
                lambda rows: scores.max_accuracy(similarities, labels, rows), None)


def resampled(values, size, count, seed):
    """A score's value on each of `count` resamples of its `size` examples (values: per
    example, or a function of the resampled rows). The resamples come from `seed` alone, a
    block at a time: every model gets the same ones."""
    rng, block = np.random.default_rng(seed), max(1, 4_000_000 // size)
    draws = []
    for start in range(0, count, block):
        rows = rng.integers(0, size, (min(block, count - start), size))
        if callable(values):
            draws.extend(values(r) for r in rows)
        else:
            draws.extend(np.asarray(values)[rows].mean(axis=1))
    return np.array(draws, np.float64)


def resample_seed(name):
    """The seed of a task's resamples: from its name, the same in every run of the suite."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "little")


def interval(draws):
    """2.5th and 97.5th percentiles of the draws that are defined (a resample of an STS split
    can hold equal gold scores only); None when none is."""
    draws = np.asarray(draws, np.float64)
    draws = draws[np.isfinite(draws)]
    if not len(draws):
        return None
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


# --- models, the output folder and what an earlier run of the suite left there ----------------------

def model_label(path):
    return os.path.normpath(str(path))


def checked_models(models):
    """The models' labels, in order; one line when a model is given twice (its paired
    difference would be zero and the summary would merge it)."""
    seen, labels = {}, []
    for path in models:
        real = os.path.realpath(path)
        if real in seen:
            raise UserError(f"{path}: the same model is given twice (as {seen[real]} too): "
                            "give each model once")
        seen[real] = path
        labels.append(model_label(path))
    return labels


def model_fingerprint(path):
    """SHA-256 of what the encoder reads: a run's newest checkpoint folder, or the folder's
    files (rundir.trained_on.export_fingerprint); a model's scores are reused for these only."""
    from mtl_framework.rundir import RunDir
    from mtl_framework.rundir.trained_on import export_fingerprint

    run = RunDir(path)
    if run.is_run():
        return export_fingerprint(run.trained_checkpoint(None, lambda *a: None).path)
    return export_fingerprint(path)


def task_record_settings(entry, scorer):
    """What a task's scores depend on, to decide whether a record may be reused: the suite's
    settings that touch the task (not batch_size: padding moves a figure by ~1e-7) and the
    task's data (its spec's files and the examples read)."""
    keys = ["split", "max_examples", "bootstrap"]
    if entry["kind"] == CLASSIFICATION.name:
        keys += ["train_examples", "n_experiments", "samples_per_label"]
    settings = {"task": entry["task"].name, "kind": entry["kind"], "dataset": entry["task"].dataset,
                "files": entry["task"].files.get(entry["settings"]["split"]),
                "examples": scorer.size, **{k: entry["settings"][k] for k in keys}}
    return json.loads(json.dumps(settings))  # as a record read back holds it (lists, not tuples)


def task_record_path(output, name):
    return os.path.join(output, TASKS_FOLDER, f"{name}.json")


def earlier_records(output, entries, scorers, fingerprints):
    """{task name: its record} of an earlier run into `output`, checked against this one
    before anything is written: a task scored there with other settings, or a model with
    other weights, is one line (nothing is replaced)."""
    results = os.path.join(output, "results.json")
    if os.path.isfile(results):
        try:
            with open(results, encoding="utf-8") as f:
                earlier = json.load(f)
        except (OSError, ValueError):
            earlier = None
        if not isinstance(earlier, dict) or earlier.get("format") != RESULTS_FORMAT:
            raise UserError(f"{results}: results of another suite or of an earlier release, "
                            "which this run would replace: give a new --output")
    records = {}
    for entry, scorer in zip(entries, scorers):
        path = task_record_path(output, entry["name"])
        if not os.path.exists(path):
            continue
        try:
            with open(path, encoding="utf-8") as f:
                record = json.load(f)
        except (OSError, ValueError) as error:
            raise UserError(f"{path}: not a task record the suite wrote ({error}): delete it to "
                            "score the task again") from None
        wanted = task_record_settings(entry, scorer)
        if record.get("settings") != wanted:
            differ = sorted(k for k in set(wanted) | set(record.get("settings") or {})
                            if (record.get("settings") or {}).get(k) != wanted.get(k))
            raise UserError(f"{path}: {entry['name']} was scored there with other settings "
                            f"({', '.join(differ)}): give a new --output, or delete that file to "
                            "score it again")
        for label, model in record.get("models", {}).items():
            if label in fingerprints and model.get("fingerprint") != fingerprints[label]:
                raise UserError(f"{path}: {label} was scored there with other weights: give a "
                                "new --output, or delete that file to score it again")
        records[entry["name"]] = record
    return records


def write_json(path, value):
    """`value` as strict JSON (no NaN: a figure that is undefined is null), whole or not at all."""
    from mtl_framework.files import write_text_atomic

    write_text_atomic(path, json.dumps(value, indent=1, ensure_ascii=False, allow_nan=False) + "\n")


# --- the run ----------------------------------------------------------------------------------------

class Clock:
    """Texts encoded so far against the texts still to encode: the time left, said in words."""

    def __init__(self, total):
        self.total, self.done, self.started = max(1, total), 0, time.monotonic()

    def add(self, n):
        self.done += n

    def estimate(self):
        spent = time.monotonic() - self.started
        if not self.done:
            return f"{spent:.0f} s so far"
        left = spent / self.done * max(0, self.total - self.done)
        return f"{duration(spent)} so far, about {duration(left)} left"


def duration(seconds):
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def embedding_benchmark(models, suite_path, data_root, output, task_specs=(), log=print,
                        mteb_data=None):
    """Score each model (run directory or folder) on the suite; writes OUTPUT/tasks/*.json as
    each task finishes, then results.json and results.md, and returns the results.
    mteb_data: a folder to write each task's data into, as bench/mteb_local.py gives it to
    mteb."""
    from mtl_framework.config.registry import load_registry
    from mtl_framework.console import progress_bar
    from mtl_framework.embedding.encode import Encoder
    from mtl_framework.files import check_folder

    if data_root is None:
        raise UserError("no data root: pass --data-root DIR (the folder holding the datasets, "
                        "or set MTL_DATA_ROOT)")
    registry = load_registry(list(task_specs))  # label files are checked when a task is read
    settings, entries = read_suite(suite_path, registry)
    labels = checked_models(models)
    check_folder(output)
    if mteb_data is not None:
        check_folder(mteb_data, "--mteb-data")
    encoders, fingerprints = {}, {}
    for path, label in zip(models, labels):
        encoders[label] = Encoder(path, log=log)
        fingerprints[label] = model_fingerprint(path)
        log(f"{path}: {encoders[label].pooling} pooling"
            f"{', normalised' if encoders[label].normalize else ''}")
    tokenizer = next(iter(encoders.values())).tokenizer
    scorers = [TaskScorer(e["task"], e["settings"], data_root, tokenizer, e["kind"]) for e in entries]
    records = earlier_records(output, entries, scorers, fingerprints)  # refused: nothing written
    os.makedirs(os.path.join(output, TASKS_FOLDER), exist_ok=True)
    if mteb_data is not None:
        os.makedirs(mteb_data, exist_ok=True)
        for entry, scorer in zip(entries, scorers):
            write_json(os.path.join(mteb_data, f"{entry['name']}.json"), mteb_task_data(entry, scorer))
    to_score = [(entry, scorer, label) for entry, scorer in zip(entries, scorers) for label in labels
                if label not in records.get(entry["name"], {}).get("models", {})]
    clock = Clock(sum(scorer.texts() for _, scorer, _ in to_score))
    with progress_bar("suite", clock.total, leave=False, unit="text") as bar:
        def progress(n):
            clock.add(n)
            bar.update(n)

        for number, (entry, scorer, label) in enumerate(to_score, 1):
            record = records.setdefault(entry["name"], {
                "settings": task_record_settings(entry, scorer), "models": {}})
            record["models"][label] = scored(entry, scorer, encoders[label], fingerprints[label],
                                             progress)
            write_json(task_record_path(output, entry["name"]), record)
            score = record["models"][label]["score"]
            log(f"[{number}/{len(to_score)}] {entry['name']} ({scorer.kind}, "
                f"{entry['settings']['split']}, {scorer.size:,} examples): {label} "
                + (f"{score:.4f}" if score is not None else f"no score ({record['models'][label]['note']})")
                + f"; {clock.estimate()}")
    results = summarised(suite_path, settings, entries, scorers, labels, fingerprints, records,
                         {label: trained_datasets(path, registry) for path, label in zip(models, labels)})
    write_json(os.path.join(output, "results.json"), results)
    from mtl_framework.files import write_text_atomic

    write_text_atomic(os.path.join(output, "results.md"), markdown(results))
    return results


def scored(entry, scorer, encoder, fingerprint, progress):
    """A model's record on a task: its score (None, with a note, where undefined), its
    interval and its bootstrap draws."""
    started = time.monotonic()
    value, values, note = scorer.score(encoder, progress)
    record = {"fingerprint": fingerprint, "score": None, "interval": None, "draws": None,
              "seconds": None}
    if value is not None and not math.isfinite(value):
        value, note = None, "the figure is undefined on this split (nan)"
    if value is not None:
        draws = resampled(values, scorer.size, entry["settings"]["bootstrap"],
                          resample_seed(entry["name"]))
        if scorer.kind == CLUSTERING:
            # V-measure is not adjusted for chance: a resample's repeated rows raise it (300
            # random vectors of 15 labels: 0.14, their resamples 0.20-0.25), so its percentiles
            # would miss the figure: the resamples' spread is kept, their median moved to it.
            draws = draws - (np.nanmedian(draws) - value)
        record.update(score=float(value), interval=interval(draws),
                      draws=[float(d) if math.isfinite(d) else None for d in draws])
    record["seconds"] = round(time.monotonic() - started, 2)
    if note:
        record["note"] = note
    return record


def summarised(suite_path, settings, entries, scorers, labels, fingerprints, records, trained):
    """results.json's content: rows, the mean over the tasks every model has a score on (with
    its paired interval), the paired differences."""
    rows, draws, notes = [], {}, []
    for entry, scorer in zip(entries, scorers):
        models = records[entry["name"]]["models"]
        for label in labels:
            model = models[label]
            row = {"model": label, "task": entry["name"], "kind": scorer.kind,
                   "dataset": entry["task"].dataset, "split": entry["settings"]["split"],
                   "score": model["score"], "interval": model["interval"],
                   "examples": scorer.size}
            datasets = trained[label]
            row["trained_on_dataset"] = None if datasets is None else row["dataset"] in datasets
            if model.get("note"):
                row["note"] = model["note"]
            rows.append(row)
        if all(models[label]["score"] is not None for label in labels):
            draws[entry["name"]] = {label: np.array([np.nan if d is None else d
                                                     for d in models[label]["draws"]])
                                    for label in labels}
        else:
            notes.append(f"{entry['name']}: left out of the mean ("
                         + "; ".join(sorted({models[m]['note'] for m in labels if models[m].get('note')}))
                         + ")")
    def score_of(label, name):
        return next(r["score"] for r in rows if r["model"] == label and r["task"] == name)

    means = {label: np.mean([draws[t][label] for t in draws], axis=0) if draws else None
             for label in labels}
    summary = {label: {"mean": float(np.mean([score_of(label, t) for t in draws])) if draws else None,
                       "interval": interval(means[label]) if draws else None, "tasks": len(draws)}
               for label in labels}
    differences = []
    for i, first in enumerate(labels):
        for second in labels[i + 1:]:
            entry = {"first": first, "second": second, "tasks": {},
                     "mean": None if not draws else summary[first]["mean"] - summary[second]["mean"],
                     "interval": None if not draws else interval(means[first] - means[second])}
            for name, task_draws in draws.items():
                entry["tasks"][name] = {
                    "difference": score_of(first, name) - score_of(second, name),
                    "interval": interval(task_draws[first] - task_draws[second])}
            differences.append(entry)
    return {"format": RESULTS_FORMAT, "suite": os.path.abspath(suite_path),
            "settings": settings, "models": labels, "fingerprints": fingerprints,
            "tasks": [{"name": e["name"], "task": e["task"].name, "kind": e["kind"],
                       "split": e["settings"]["split"], "examples": s.size,
                       "max_examples": e["settings"]["max_examples"]} for e, s in zip(entries, scorers)],
            "trained_datasets": trained, "rows": rows, "summary": summary,
            "differences": differences, "notes": notes}


def mteb_task_data(entry, scorer):
    """A task's data as the suite scored it, in mteb's columns (bench/mteb_local.py builds an
    mteb task of it): sts / pair_classification sentence1, sentence2, score or labels;
    retrieval queries, corpus, qrels; reranking each query's candidates; classification
    train and test; clustering sentences and labels (one cluster set)."""
    data = {"name": entry["name"], "kind": scorer.kind, "split": entry["settings"]["split"],
            "settings": {k: entry["settings"][k] for k in ("n_experiments", "samples_per_label")}}
    if scorer.kind in (CLASSIFICATION.name, CLUSTERING):
        data["test"] = {"text": scorer.test[0], "label": scorer.test[1].tolist()}
        if scorer.kind == CLASSIFICATION.name:
            data["train"] = {"text": scorer.train[0], "label": scorer.train[1].tolist()}
    elif scorer.kind == "retrieval":
        data.update(queries=scorer.queries, corpus=scorer.passages,
                    qrels=[{str(row): grade for row, grade in q.items()} for q in scorer.qrels])
    elif scorer.kind == "reranking":
        data.update(queries=scorer.queries, positives=scorer.passages, negatives=scorer.negatives)
    else:
        keep = np.isfinite(scorer.scores)
        data.update(sentence1=[t for t, k in zip(scorer.queries, keep) if k],
                    sentence2=[t for t, k in zip(scorer.passages, keep) if k],
                    score=scorer.scores[keep].tolist())
    return data


def markdown(results):
    models, rows = results["models"], results["rows"]
    label = {m: os.path.basename(os.path.normpath(m)) for m in models}

    def cell(value, bounds, bold=False):
        if value is None:
            return "–"
        text = f"{100 * value:.2f}"
        text = f"**{text}**" if bold else text
        return text + (f" [{100 * bounds[0]:.2f}, {100 * bounds[1]:.2f}]" if bounds else "")

    lines = ["| task | kind | split | examples | " + " | ".join(label[m] for m in models) + " |",
             "|---|---|---|---:|" + "---:|" * len(models)]
    for task in dict.fromkeys(r["task"] for r in rows):
        cells = []
        for model in models:
            row = next(r for r in rows if r["model"] == model and r["task"] == task)
            cells.append(cell(row["score"], row["interval"]) + (" †" if row["trained_on_dataset"] else ""))
        first = next(r for r in rows if r["task"] == task)
        lines.append(f"| {task} | {first['kind']} | {first['split']} | {first['examples']} | "
                     + " | ".join(cells) + " |")
    tasks = next(iter(results["summary"].values()))["tasks"] if models else 0
    lines.append(f"| **mean** ({tasks} tasks) | | | | " + " | ".join(
        cell(results["summary"][m]["mean"], results["summary"][m]["interval"], bold=True)
        for m in models) + " |")
    lines.append("")
    lines.append("Scores x 100 with 95% bootstrap intervals over the examples; † the model trained "
                 "on this dataset's train split (the split scored here was held out).")
    for note in results["notes"] + sorted({f"{r['task']} / {label[r['model']]}: {r['note']}"
                                           for r in rows if r.get("note")}):
        lines.append(f"- {note}")
    for entry in results["differences"]:
        if entry["mean"] is None:
            continue
        lines.append("")
        lines.append(f"{label[entry['first']]} − {label[entry['second']]}: mean "
                     f"{100 * entry['mean']:+.2f} [{100 * entry['interval'][0]:+.2f}, "
                     f"{100 * entry['interval'][1]:+.2f}] (paired)")
        for task, value in entry["tasks"].items():
            bounds = value["interval"] or [math.nan, math.nan]
            lines.append(f"- {task}: {100 * value['difference']:+.2f} "
                         f"[{100 * bounds[0]:+.2f}, {100 * bounds[1]:+.2f}]")
    return "\n".join(lines) + "\n"
