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

RUN_DIR/evaluations.jsonl gets one line per evaluation:
    {"step", "split", "time", "tasks": {task: {"metric", "score", "result",
     "baseline", "examples", ...}}, "aggregate"}
"""
import json
import os
import time

import numpy as np
import tensorflow as tf

from mtl_framework import features as F
from mtl_framework.cache import cached_features, iterate_batches
from mtl_framework.metrics import compute_metric, majority_baseline, primary_score

SPAN_FAMILIES = ("extraction_ner", "extraction_relation", "extraction_event")
# Lost spans that are not gold for the task (a type the task does not predict).
NOT_GOLD = "not in the task's labels"
EVALUATIONS = "evaluations.jsonl"


class TaskPredictor:
    """Forward passes of a MultiTaskModel, traced once per trace group (heads of one class
    and settings; MultiTaskModel.traced_outputs), shapes relaxed as batches vary in length."""

    def __init__(self, model):
        self.model = model
        # Relation/choice batches vary in two dims; TF's retracing warning
        # counts the first relaxed retrace of each task as a problem.
        tf.get_logger().setLevel("ERROR")

    def __call__(self, task, batch):
        inputs = {k: tf.convert_to_tensor(v) for k, v in batch.items()}
        return tf.nest.map_structure(lambda x: x.numpy(), self.model.traced_outputs(task, inputs))


def evaluation_rows(features, max_examples=None):
    """Feature rows of the first `max_examples` examples (all windows of an MRC question)."""
    if not max_examples:
        return np.arange(len(features))
    if features.family == "mrc_span":
        return np.flatnonzero(np.asarray(features["example_index"]) < max_examples)
    return np.arange(min(max_examples, len(features)))


def _batches(features, rows, batch_size):
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        yield features.batch(chunk, np.random.default_rng([0, start]))


def predict(predictor, task_name, head, features, rows, batch_size):
    """(predictions, references, extra) over `rows`, in row order. MRC rows give
    decoded window spans in `extra["windows"]` instead of predictions."""
    predictions, references, windows = [], [], []
    for batch in _batches(features, rows, batch_size):
        outputs = predictor(task_name, batch)
        if features.family == "mrc_span":
            windows += head.decode(outputs, batch)
        else:
            predictions += head.decode(outputs, batch)
            references += head.targets(batch)
    return predictions, references, windows


def mrc_predictions(features, windows):
    """Per question (example index) the answer text of its best window, and the
    gold answers: a window's real span wins over "no answer" when it scores higher
    than the question's lowest null score (SQuAD 2.0 practice; CMRC2018 always
    has an answer, so the best span there is the best real one)."""
    best, null = {}, {}
    for window in windows:
        example = int(features["example_index"][window["window_id"]])
        null[example] = min(null.get(example, np.inf), window["null_score"])
        if window["score"] > best.get(example, {"score": -np.inf})["score"]:
            best[example] = window
    predictions, references = [], []
    for example in sorted(best):
        gold = F.mrc_gold(features, example)
        window = best[example]
        if not gold and window["score"] <= null[example]:
            text = ""
        else:
            text = F.mrc_answer(features, window["window_id"], window["start"], window["end"])["text"]
        predictions.append(text)
        references.append(gold)
    return predictions, references


def lost_gold(features, examples=None):
    """Gold spans the featurizer could not place (truncation, no token): missed by
    any model, so they count against recall. Pro rata when only some examples ran."""
    report = features.report
    lost = sum(n for reason, n in report.spans_lost.items() if NOT_GOLD not in reason)
    if examples is not None and report.examples and examples < report.examples:
        lost = int(round(lost * examples / report.examples))
    return lost


def _labelled(family, predictions, references):
    """Drop unlabelled rows (-1 / NaN targets); returns (predictions, references, dropped)."""
    if family in ("classification", "matching", "multiple_choice", "cloze", "coreference"):
        keep = [i for i, r in enumerate(references) if not (isinstance(r, int) and r < 0)]
    elif family == "regression":
        keep = [i for i, r in enumerate(references) if not np.isnan(r)]
    else:
        return predictions, references, 0
    return ([predictions[i] for i in keep], [references[i] for i in keep],
            len(references) - len(keep))


def train_labels(features):
    """Train labels for the majority baseline, where the family has a label array."""
    if features is None or features.family not in ("classification", "matching", "regression",
                                                   "multiple_choice", "cloze", "coreference"):
        return None
    labels = np.asarray(features["label"])
    if labels.ndim == 2:  # multi-label rows
        return [list(np.flatnonzero(row)) for row in labels]
    keep = ~np.isnan(labels) if labels.dtype.kind == "f" else labels >= 0
    return labels[keep].tolist()


def evaluate_features(model, task, features, predictor=None, batch_size=32, max_examples=None,
                      train_features=None):
    """One task's score on already-built features; see the module docstring."""
    predictor = predictor or TaskPredictor(model)
    head = model.heads[task.name]
    rows = evaluation_rows(features, max_examples)
    predictions, references, windows = predict(predictor, task.name, head, features, rows,
                                               batch_size)
    entry = {"metric": task.metric}
    if features.family == "mrc_span":
        predictions, references = mrc_predictions(features, windows)
        entry["windows"] = len(windows)
    predictions, references, unlabelled = _labelled(features.family, predictions, references)
    if unlabelled:
        entry["unlabelled"] = unlabelled
    if features.family in SPAN_FAMILIES:
        lost = lost_gold(features, len(rows))
        if lost:
            # Sentinel gold items no prediction can match: recall counts them as missed.
            references = [list(r) for r in references]
            references[0] += [("lost-in-featurizing", i) for i in range(lost)]
            entry["gold_lost_in_features"] = lost
    entry["examples"] = len(references)
    if not references:
        return {**entry, "score": None, "note": "no labelled examples in this split"}
    metric = task.metric
    if metric == "mrr":
        # Ranking needs the candidates grouped by question, which pair features do not keep.
        metric, entry["note"] = "accuracy", "mrr not computed (candidates not grouped); accuracy"
        entry["metric"] = metric
    result = compute_metric(metric, predictions, references)
    entry["result"] = result
    entry["score"] = primary_score(metric, result)
    baseline_train = train_labels(train_features)
    try:
        baseline = majority_baseline(metric, references, baseline_train)
        entry["baseline"] = primary_score(metric, baseline)
    except ValueError:
        entry["baseline"] = None
    return entry


def evaluate_tasks(model, tasks, tokenizer, data_root, split="dev", batch_size=32, max_examples=None,
                   cache_dir=None, max_length=None, train_features=None, log=None):
    """{task name: entry} for every task with `split` in its files (others get a note)."""
    predictor = TaskPredictor(model)
    results = {}
    for task in tasks:
        if split not in task.files:
            results[task.name] = {"metric": task.metric, "score": None,
                                  "note": f"no {split!r} split in the task's spec"}
            continue
        length = min(task.max_length, max_length) if max_length else task.max_length
        features = cached_features(task, split, tokenizer, data_root, cache_dir, max_length=length,
                                   log=log)
        started = time.time()
        results[task.name] = evaluate_features(
            model, task, features, predictor, batch_size, max_examples,
            (train_features or {}).get(task.name))
        results[task.name]["seconds"] = round(time.time() - started, 2)
    return results


def aggregate(results):
    """Mean primary score over the tasks that have one."""
    scores = [r["score"] for r in results.values() if r.get("score") is not None]
    return float(np.mean(scores)) if scores else None


def record(run_dir, step, split, results):
    """Append one evaluation to RUN_DIR/evaluations.jsonl; returns the line's dict."""
    line = {"step": int(step), "split": split, "time": time.time(), "tasks": results,
            "aggregate": aggregate(results)}
    with open(os.path.join(run_dir, EVALUATIONS), "a", encoding="utf-8") as f:
        f.write(json.dumps(line, ensure_ascii=False, default=float) + "\n")
    return line


def read_evaluations(run_dir):
    """Every line of RUN_DIR/evaluations.jsonl (empty when the run was never evaluated)."""
    path = os.path.join(run_dir, EVALUATIONS)
    if not os.path.exists(path):
        return []
    lines = []
    with open(path, encoding="utf-8") as f:
        for number, text in enumerate(f, 1):
            if text.strip():
                try:
                    lines.append(json.loads(text))
                except json.JSONDecodeError as error:
                    raise ValueError(f"{path}:{number}: not a JSON line ({error})") from None
    return lines


def format_results(line):
    """A table: task, metric, score, majority baseline, examples."""
    rows = [("task", "metric", "score", "baseline", "examples")]
    for name, entry in line["tasks"].items():
        score = "-" if entry.get("score") is None else f"{entry['score']:.4f}"
        baseline = "-" if entry.get("baseline") is None else f"{entry['baseline']:.4f}"
        rows.append((name, entry["metric"], score, baseline, str(entry.get("examples", "-"))))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    out = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
           for r in rows]
    notes = [f"  {name}: {e['note']}" for name, e in line["tasks"].items() if e.get("note")]
    total = line.get("aggregate")
    out.append(f"aggregate (mean score over {sum(e.get('score') is not None for e in line['tasks'].values())}"
               f" tasks): {'-' if total is None else f'{total:.4f}'}  [step {line['step']}, "
               f"split {line['split']}]")
    return "\n".join(out + notes)


def evaluate_run(run_dir, split="dev", tasks=None, batch_size=32, max_examples=None, log=print,
                 data_root=None):
    """Load the run's latest checkpoint, evaluate its tasks (or `tasks`), record and return the line."""
    from mtl_framework.trainer import Run

    run = Run.load(run_dir, log=log, data_root=data_root, split=split, tasks=tasks)
    selected = [t for t in run.tasks if not tasks or t.name in tasks]
    results = run.evaluate(split, selected, batch_size, max_examples)
    return record(run_dir, run.step, split, results)
