"""Evaluation: each task's dev split through its head, scored with the spec's metric.

    results = evaluate_tasks(model, tasks, tokenizer, data_root, split="dev")
    evaluate_run("runs/demo")            # latest checkpoint -> evaluations.jsonl

Per task: predictions = head.decode(outputs), references = head.targets(batch),
both in the feature space (class ids, token spans), then metrics.compute_metric.
What the features cannot show is put back so the score is not flattered:
- mrc_span: windows are grouped per question, the best-scoring window's span
  is mapped back to characters and scored against every gold answer text
  (CMRC2018 EM/F1);
- span families: gold spans the featurizer lost (truncated, on no token)
  count as missed gold, so truncation lowers recall instead of vanishing;
- unlabelled rows (label -1 / NaN) are left out and counted.
Scores come with the task's majority baseline (train labels when given).

A task whose spec names a publisher's scorer (`scorer:`, mtl_framework.scoring.scorers) is
scored by it too, on the split's release gold: its primary figure is the entry's
`score` (what keep_best, the benchmark and the model card read), the generic metric
stays beside it as `metric_score` / `result`. Split files are read for scoring with
the adapter's `scoring_options` (nothing training skips is left out of the score).

RUN_DIR/evaluations.jsonl gets one line per evaluation:
    {"step", "split", "time", "tasks": {task: {"metric", "score", "result",
     "baseline", "examples", ...}}, "aggregate"}
with, for a task with a scorer, "scorer", "scorer_figure", "scorer_result",
"metric_score" and "metric_baseline" (older lines have none: there "score" is the
generic metric's).
"""
import math
import os
import time

import keras
import numpy as np

from mtl_framework.config.registry import load_registry
from mtl_framework.errors import UserError
from mtl_framework.families import family
from mtl_framework.mixing.mixture import iterate_batches
from mtl_framework.plan import missing_files
from mtl_framework.prepare.cache import CacheNotes, cached_features
from mtl_framework.rundir import RunDir
from mtl_framework.rundir.records import RecordNotWritten
from mtl_framework.saving.trained import open_run
from mtl_framework.scoring.embedding import one_passage_corpus
from mtl_framework.scoring.metrics import (
    compute_metric,
    majority_predictions,
    primary_score,
    score_with_baseline,
)
from mtl_framework.scoring.scorers import Scoring, scoring_task
from mtl_framework.tokenizer import Tokenizer

# Lost spans that are not gold for the task (a type the task does not predict).
NOT_GOLD = "not in the task's labels"


class TaskPredictor:
    """Forward passes of a MultiTaskModel, traced once per trace group (heads of one class
    and settings; MultiTaskModel.traced_outputs), shapes relaxed as batches vary in length."""

    def __init__(self, model):
        self.model = model

    def __call__(self, task, batch):
        inputs = self.model._to_tensors(batch)
        return keras.tree.map_structure(np.asarray, self.model.traced_outputs(task, inputs))


def evaluation_rows(task_family, features, max_examples=None):
    """Feature rows of the first `max_examples` examples (all windows of an MRC question)."""
    if not max_examples:
        return np.arange(len(features))
    return task_family.example_rows(features, max_examples)


def predict(predictor, task_name, head, task_family, features, rows, batch_size):
    """(predictions, references, windows) over `rows`, in row order. Rows that are
    windows (mrc_span) give decoded window spans in `windows` instead of predictions."""
    predictions, references, windows = [], [], []
    for batch, outputs in head_outputs(predictor, task_name, features, rows, batch_size):
        if task_family.windows:
            windows += head.decode(outputs, batch)
        else:
            predictions += head.decode(outputs, batch)
            references += head.targets(batch)
    return predictions, references, windows


def head_outputs(predictor, task_name, features, rows, batch_size):
    """(batch, the head's outputs) over `rows`, in row order."""
    for batch in iterate_batches(features, batch_size, rows=rows):
        yield batch, predictor(task_name, batch)


def lost_gold(features, examples=None):
    """Gold spans the featurizer could not place (truncation, no token): missed by
    any model, so they count against recall. Pro rata when only some examples ran."""
    report = features.report
    lost = sum(n for reason, n in report.spans_lost.items() if NOT_GOLD not in reason)
    if examples is not None and report.examples and examples < report.examples:
        lost = int(round(lost * examples / report.examples))
    return lost


def train_labels(task_family, features):
    """Train labels for the majority baseline, where the family has a label array."""
    if features is None or not task_family.labelled:
        return None
    labels = np.asarray(features["label"])
    if labels.ndim == 2:  # multi-label rows
        return [list(np.flatnonzero(row)) for row in labels]
    keep = ~np.isnan(labels) if labels.dtype.kind == "f" else labels >= 0
    return labels[keep].tolist()


def evaluate_features(model, task, features, predictor=None, batch_size=32, max_examples=None,
                      train_features=None, scoring=None):
    """One task's score on already-built features; see the module docstring.
    scoring: a Scoring (the task's publisher's scorer on these features' examples)."""
    predictor = predictor or TaskPredictor(model)
    task_family = family(features.family)
    rows = evaluation_rows(task_family, features, max_examples)
    if task.metric == "mrr" and task_family.rank_groups is not None:
        entry = ranking_entry(predictor, task, task_family, features, rows, batch_size,
                              train_features)
    else:
        predictions, references, windows = predict(predictor, task.name, model.heads[task.name],
                                                   task_family, features, rows, batch_size)
        entry = scored_entry(task, task_family, features, rows, predictions, references, windows,
                             train_features, scoring)
    return defined(entry)


def defined(entry):
    """The entry with every undefined figure (nan, inf: Spearman of constant gold scores) as
    None, so evaluations.jsonl stays strict JSON; an undefined score is no score that step,
    with a note, and the aggregate is over the other tasks."""
    undefined = isinstance(entry.get("score"), float) and not math.isfinite(entry["score"])
    entry = _finite_or_none(entry)
    if undefined:
        why = undefined_why(entry)
        entry["note"] = f"the score is undefined on this split: {why}; no score this step"
    return entry


def _finite_or_none(value):
    """`value` with every float that is not finite, however deep in dicts and lists, as None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite_or_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(item) for item in value]
    return value


def undefined_why(entry):
    """Why a task's score is undefined: a retrieval corpus of one passage (the embeddings
    suite's note, scoring.embedding.one_passage_corpus), else a figure without a value."""
    documents = (entry.get("result") or {}).get("documents")
    retrieval = entry.get("metric") == "retrieval" and one_passage_corpus(documents)
    return retrieval or "constant gold scores or similarities"


def gold_answers(task_family, features, rows, predictions, references, windows, scoring, entry):
    """(predictions, references) as scored: MRC windows grouped into each question's answer
    (with the answers no span supports, where the publisher's gold has them), span answers
    as texts, sentinels for the gold spans the featurizer lost, unlabelled rows left out;
    what was done is noted in `entry`. Also the publisher's figure (None without one)."""
    if task_family.windows:
        predictions, references = task_family.window_answers(features, windows)
        entry["windows"] = len(windows)
    publisher = scoring(predictions, features, rows, task_family) if scoring else None
    if scoring and task_family.windows:
        # the generic metric's gold too: answers no span supports are still answers
        references = scoring.references(references)
    if task_family.text_answers is not None:
        # gold as read: what the featurizer lost is in it (counted, not added again)
        predictions, references = task_family.text_answers(features, rows, predictions)
        lost = lost_gold(features, len(rows))
        if lost:
            entry["gold_lost_in_features"] = lost
    if task_family.unlabelled is not None:  # -1 / NaN targets
        keep = [i for i, r in enumerate(references) if not task_family.unlabelled(r)]
        if len(keep) < len(references):
            entry["unlabelled"] = len(references) - len(keep)
        predictions, references = [predictions[i] for i in keep], [references[i] for i in keep]
    if task_family.counts_lost_gold:
        lost = lost_gold(features, len(rows))
        if lost:
            # Sentinel gold items no prediction can match: recall counts them as missed.
            references = [list(r) for r in references]
            references[0] += [("lost-in-featurizing", i) for i in range(lost)]
            entry["gold_lost_in_features"] = lost
    return predictions, references, publisher


def scored_entry(task, task_family, features, rows, predictions, references, windows,
                 train_features, scoring):
    """The entry of a task's decoded predictions: its metric and the majority baseline,
    and the publisher's figure as its score where the task has a scorer."""
    entry, baseline_train = {"metric": task.metric}, train_labels(task_family, train_features)
    predictions, references, publisher = gold_answers(task_family, features, rows, predictions,
                                                      references, windows, scoring, entry)
    entry["examples"] = len(references)
    if not references:
        return {**entry, "score": None, "note": "no labelled examples in this split"}
    if not task_family.labelled and not any(len(r) for r in references):
        # Span gold (entities, answers, triples) empty everywhere: an unlabelled split
        # (a test file). F1 would be 1.0 for a model that predicts nothing.
        return {**entry, "score": None, "note": "no gold spans in this split (unlabelled?)"}
    metric = task.metric
    if metric == "mrr":
        # Ranking needs candidates grouped by question: only matching features give them.
        metric, entry["note"] = "accuracy", f"mrr not computed for {features.family} tasks; accuracy"
        entry["metric"] = metric
    entry["result"], entry["score"], entry["baseline"], majority = score_with_baseline(
        metric, predictions, references, baseline_train)
    if publisher is not None:
        entry = scoring.with_figure(entry, publisher, majority, features, rows, task_family)
    return entry


def ranking_entry(predictor, task, task_family, features, rows, batch_size, train_features=None):
    """mrr: candidates grouped per question (the family's rank_groups), ranked by the
    head's score for the right label; the baseline ranks candidate positions by how often
    each was right in train (metrics.majority_predictions)."""
    scores = np.concatenate([task_family.rank_scores(outputs) for _, outputs in
                             head_outputs(predictor, task.name, features, rows, batch_size)])
    predictions, references, unanswered = task_family.rank_groups(features, rows, scores)
    entry = {"metric": "mrr", "examples": len(references)}
    if unanswered:
        entry["questions_without_answer"] = unanswered
    if not references:
        return {**entry, "score": None, "note": "no question with a right candidate in this split"}
    entry["result"] = compute_metric("mrr", predictions, references)
    entry["score"] = primary_score("mrr", entry["result"])
    train = None
    if train_features is not None:
        train = task_family.rank_groups(train_features, np.arange(len(train_features)))[1]
    most = max(len(p) for p in predictions)
    prior = majority_predictions("mrr", references, train or None, num_candidates=most)[0]
    baseline = compute_metric("mrr", [prior[:len(p)] for p in predictions], references)
    entry["baseline"] = primary_score("mrr", baseline)
    return entry


def evaluate_tasks(model, tasks, tokenizer, data_root, split="dev", batch_size=32, max_examples=None,
                   cache_dir=None, max_length=None, train_features=None, log=None):
    """{task name: entry} for every task with `split` in its files (others get a note).
    The caches loaded are one line of `log` (a CacheNotes, as a Run keeps: only the first
    time)."""
    predictor = TaskPredictor(model)
    results = {}
    if log is not None and not isinstance(log, CacheNotes):
        log = CacheNotes(log)
    for task in tasks:
        if split not in task.files:
            results[task.name] = {"metric": task.metric, "score": None,
                                  "note": f"no {split!r} split in the task's spec"}
            continue
        length = min(task.max_length, max_length) if max_length else task.max_length
        features = cached_features(scoring_task(task, split), split, tokenizer, data_root,
                                   cache_dir, max_length=length, log=log)
        started = time.time()
        scoring = Scoring(task, split, data_root) if getattr(task, "scorer", None) else None
        results[task.name] = evaluate_features(
            model, task, features, predictor, batch_size, max_examples,
            (train_features or {}).get(task.name), scoring)
        results[task.name]["seconds"] = round(time.time() - started, 2)
    if log is not None:
        log.summary(f"{split} features")
    return results


def aggregate(results):
    """Mean primary score over the tasks that have one (a finite one)."""
    scores = [r["score"] for r in results.values()
              if r.get("score") is not None and math.isfinite(r["score"])]
    return float(np.mean(scores)) if scores else None


def record(run_dir, step, split, results, settings=None):
    """Append one evaluation to the run's evaluations.jsonl; returns the line's dict.
    settings: what differed from training (max_length, rope_scaling), kept in the line."""
    line = {"step": int(step), "split": split, "time": time.time(), "tasks": results,
            "aggregate": aggregate(results), **(settings or {})}
    try:
        RunDir(run_dir).append_evaluation(line)
    except RecordNotWritten as error:
        error.line = line  # the scores: `mtl evaluate` shows them before the error's line
        raise
    return line


def format_results(line):
    """A table: task, metric, score, majority baseline, examples."""
    rows = [("task", "scored by", "score", "baseline", "metric", "examples")]
    number = lambda value: "-" if value is None else f"{value:.4f}"
    for name, entry in line["tasks"].items():
        scorer = entry.get("scorer_figure") and f"{entry['scorer']} {entry['scorer_figure']}"
        generic = f"{entry['metric']} {number(entry.get('metric_score'))}" if scorer else ""
        rows.append((name, scorer or entry["metric"], number(entry.get("score")),
                     number(entry.get("baseline")), generic, str(entry.get("examples", "-"))))
    widths = [max(len(r[i]) for r in rows) for i in range(6)]
    out = ["  ".join(c.ljust(w) if i in (0, 1, 4) else c.rjust(w)
                     for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    notes = [f"  {name}: {e[key]}" for name, e in line["tasks"].items()
             for key in ("note", "scorer_note") if e.get(key)]
    total = line.get("aggregate")
    out.append(f"aggregate (mean score over {sum(e.get('score') is not None for e in line['tasks'].values())}"
               f" tasks): {'-' if total is None else f'{total:.4f}'}  [step {line['step']}, "
               f"split {line['split']}]")
    return "\n".join(out + notes)


def evaluate_run(run_dir, split="dev", tasks=None, batch_size=32, max_examples=None, log=print,
                 data_root=None, max_length=None, rope_scaling=None):
    """Score the run's newest readable checkpoint on its tasks (or `tasks`); record and
    return the line. Reads the run, not its training side: the model is the checkpoint's
    backbone and heads (built from trainer.json's head metadata), with no optimizer,
    mixture or sampler; train features are read (from the feature cache, built if it
    was deleted) only for the majority baselines.

    max_length: the cap on each task's length instead of the run's (it may exceed the
    trained length: an mrc_span context then fits fewer windows); rope_scaling: `none`
    or TYPE:FACTOR[:ORIGINAL] (rope_scaling.parse) instead of the run's own setting.
    Both are recorded in the line when given."""
    if data_root and not os.path.isdir(data_root):
        raise UserError(f"--data-root {data_root}: no such folder")
    trained = open_run(run_dir, log=log, rope_scaling=rope_scaling)
    trained.check_length(max_length)  # before anything is built
    experiment, checkpoint = trained.experiment, trained.checkpoint
    settings = {**({"max_length": int(max_length)} if max_length is not None else {}),
                **({"rope_scaling": trained.rope_scaling} if rope_scaling is not None else {})}
    registry = load_registry([experiment.resolve_path(d) for d in experiment.task_specs] or None)
    names = [task for task, meta in trained.head_metadata.items() if family(meta["type"]).scored]
    unknown = sorted(set(tasks or []) - set(names))
    if unknown:
        raise UserError(f"{run_dir}: the run has no task(s) {unknown}; its tasks: "
                        f"{', '.join(names)}")
    data_root = data_root or experiment.resolve_path(experiment.raw.get("data_root")) or \
        os.environ.get("MTL_DATA_ROOT", "data")
    # each spec's labels against the ones its head records: mapped by name, or refused
    selected = [trained.task(task, data_root)
                for task in registry.select([n for n in names if not tasks or n in tasks])]
    # the split's files before the model is built (a task without the split is scored
    # as "no such split", not refused)
    if not any(split in t.files for t in selected):
        splits = sorted({s for t in selected for s in t.files})
        raise UserError(f"--split {split}: none of the run's tasks has it; their splits: "
                        f"{', '.join(splits)}")
    problems = missing_files([t for t in selected if split in t.files], data_root, split,
                             "pass --data-root DIR")
    if problems:
        raise UserError("\n".join(problems))
    tokenizer = Tokenizer(trained.vocab)
    for task in selected:
        if settings.get("max_length", 0) > task.max_length and log:
            log(f"{task.name}: scored at max_length {task.max_length}, its spec's cap "
                f"(--max-length {settings['max_length']} asked)")
    model = trained.model()
    cache_dir = experiment.resolve_path(experiment.raw.get("cache_dir"))
    notes = CacheNotes(log) if log else None
    train = {task.name: cached_features(task, "train", tokenizer, data_root, cache_dir, log=notes,
                                        max_length=min(task.max_length, experiment.max_length))
             for task in selected}
    if notes:
        notes.summary("train features (majority baselines)")
    results = evaluate_tasks(model, selected, tokenizer, data_root, split, batch_size, max_examples,
                             cache_dir, settings.get("max_length", experiment.max_length), train,
                             log=log)
    partial = {**({"max_examples": max_examples} if max_examples else {}),
               **({"tasks_asked": sorted(tasks)} if tasks else {})}  # not the model card's
    return record(run_dir, checkpoint.step, split, results, {**settings, **partial})
