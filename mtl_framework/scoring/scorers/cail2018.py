"""CAIL2018's judger (judger/judger.py): per subtask, (micro F1 + macro F1) / 2.

Macro F1 averages over every label of the label file (accu.txt: 202 charges,
law.txt: 183 articles), and a label that neither gold nor prediction holds
scores 1.0 (the judger's get_value: TP = FP = FN = 0); a label with no hit
otherwise scores 0.0. Micro F1 pools TP, FP and FN over the labels. Charges
are looked up after removing "[" and "]" as the judger does. The judger's
third figure (imprisonment) needs a term prediction, which no task of this
framework makes; it is not computed.
"""
import json

from data_adapters.task_types import CLASSIFICATION, type_names
from mtl_framework.scoring.scorers.release import release_paths

SOURCE = {"repository": "china-ai-law-challenge/CAIL2018", "path": "judger/judger.py",
          "commit": "599781ffcbfb33237580c6766afe3af9e1ff7229"}
PRIMARY = "score"  # the figure of the subtask the task predicts (charges or articles)
TASK_TYPES = type_names(CLASSIFICATION)  # the families it scores
FORMATS = ("jsonl",)  # the release files its gold is read from
FIGURES = ("accusation", "articles")
ARTICLES_FIELD = "meta.relevant_articles"


def _f1(tp, fp, fn):
    if tp == 0:
        return 1.0 if fp == fn == 0 else 0.0
    return 2 * tp / (2 * tp + fp + fn)


def subtask_score(gold_sets, predicted_sets, num_labels):
    """(micro F1 + macro F1) / 2 over labels 1..num_labels (the judger's gen_score)."""
    tp, fp, fn = [0] * num_labels, [0] * num_labels, [0] * num_labels
    for gold, predicted in zip(gold_sets, predicted_sets):
        for label in range(1, num_labels + 1):
            if label in predicted:
                (tp if label in gold else fp)[label - 1] += 1
            elif label in gold:
                fn[label - 1] += 1
    macro = sum(_f1(*c) for c in zip(tp, fp, fn)) / num_labels
    micro = _f1(sum(tp), sum(fp), sum(fn))
    return (micro + macro) / 2


def label_ids(values, index, key=str):
    """1-based ids of a prediction line's labels: ints as given (the judger's file), label
    names (strings) by their position in the label file."""
    return {index[key(v)] if isinstance(v, str) else int(v) for v in values}


def score(gold, predictions):
    """gold: {"accusations": accu.txt's lines, "articles": law.txt's numbers (either None
    when not scored), "truth": the cases' `meta` objects}; predictions: the judger's
    output lines ({"accusation": [1-based charge ids], "articles": [1-based article ids]}).
    A figure for each subtask the predictions and gold hold; "score" is that figure (the
    mean of the two when both are there)."""
    truth = gold["truth"]
    if len(truth) != len(predictions):
        raise ValueError(f"{len(predictions)} prediction lines for {len(truth)} cases")
    charge_id = {name: i + 1 for i, name in enumerate(gold.get("accusations") or [])}
    article_id = {int(number): i + 1 for i, number in enumerate(gold.get("articles") or [])}
    figures = {}
    if gold.get("accusations") is not None and all("accusation" in p for p in predictions):
        figures["accusation"] = subtask_score(
            [{charge_id[a.replace("[", "").replace("]", "")] for a in t["accusation"]} for t in truth],
            [label_ids(p["accusation"], charge_id) for p in predictions], len(charge_id))
    if gold.get("articles") is not None and all("articles" in p for p in predictions):
        figures["articles"] = subtask_score(
            [{article_id[int(a)] for a in t["relevant_articles"]} for t in truth],
            [label_ids(p["articles"], article_id, int) for p in predictions], len(article_id))
    if figures:
        figures[PRIMARY] = sum(figures.values()) / len(figures)
    return figures


def articles_task(task):
    return task.fields.get("label") == ARTICLES_FIELD


def gold_from_release(task, split, data_root, ids=None):
    """The cases' `meta` objects and the task's label file (accu.txt for the charge task,
    law.txt for the article task); with `ids`, the first len(ids) cases."""
    truth = []
    for path in release_paths(task, split, data_root):
        with open(path, encoding="utf-8") as handle:
            # an unlabelled file (no `meta`) reads as cases without charges or articles
            truth += [json.loads(line).get("meta") or {"accusation": [], "relevant_articles": []}
                      for line in handle if line.strip()]
    labels = task.resolve_labels(data_root)
    articles = articles_task(task)
    return {"accusations": None if articles else labels,
            "articles": [int(n) for n in labels] if articles else None,
            "truth": truth if ids is None else truth[:len(ids)]}


def predictions_from_decoded(task, examples, decoded):
    """The judger's output lines with the predicted label names (one subtask); `score`
    turns names into the label file's 1-based ids, as the judger's lines hold."""
    key = "articles" if articles_task(task) else "accusation"
    return [{key: sorted(set(names))} for names in decoded]
