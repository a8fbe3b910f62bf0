"""CLUENER2020's score.py: F1 per entity type, averaged over the 10 types.

Entities are matched by mention text within a line (the keys of
`label[type]`), so a mention found at another position still counts and a
mention listed twice counts once.

score.py divides by zero for a type with no hit (nothing predicted, or
nothing right): we return 0.0 for that type, the limit of 2TP/(2TP+FP+FN) as
TP goes to 0, which is what its F1 is on every other case with TP = 0; a
type absent from both gold and prediction scores 1.0 (nothing to find,
nothing claimed), as this framework's set F1 does. On the full dev set every
type has gold, so only the first rule can apply there.
"""
import json

from data_adapters.task_types import EXTRACTION_NER, type_names
from mtl_framework.scoring.scorers.release import release_paths

SOURCE = {"repository": "CLUEbenchmark/CLUENER2020", "path": "score.py",
          "commit": "a3e03f619dbfd929c8e162f797a98f52c27893a1"}
PRIMARY = "macro_f1"
TASK_TYPES = type_names(EXTRACTION_NER)  # the families it scores
FORMATS = ("span_json",)  # the release files its gold is read from
TYPES = ("address", "book", "company", "game", "government", "movie", "name",
         "organization", "position", "scene")


def type_f1(predictions, gold, type_):
    """score.py's get_f1_score_label for one type (with the zero rules above)."""
    tp = fp = fn = 0
    for pre, ref in zip(predictions, gold):
        pre = set(pre.get("label", {}).get(type_, {}))
        ref = set(ref.get("label", {}).get(type_, {}))
        tp += len(pre & ref)
        fp += len(pre - ref)
        fn += len(ref - pre)
    if tp == 0:
        return 1.0 if fp == fn == 0 else 0.0
    return 2 * tp / (2 * tp + fp + fn)


def score(gold, predictions):
    """gold, predictions: CLUENER lines ({"text", "label": {type: {mention: [[s, e]]}}}),
    paired by position as score.py pairs the two files' lines."""
    if len(gold) != len(predictions):
        raise ValueError(f"{len(predictions)} prediction lines for {len(gold)} gold lines")
    figures = {f"f1_{t}": type_f1(predictions, gold, t) for t in TYPES}
    figures[PRIMARY] = sum(figures.values()) / len(TYPES)
    return figures


def read_records(path):
    """The JSON objects of a CLUENER file: one per line as released, or pretty-printed
    over several lines (the shared copy)."""
    decoder, out = json.JSONDecoder(), []
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    i = 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return out
        record, i = decoder.raw_decode(text, i)
        out.append(record)


def gold_from_release(task, split, data_root, ids=None):
    """The split's lines ({"text", "label"}) in file order; with `ids` (a partial
    evaluation of the first examples), the first len(ids) of them."""
    lines = [{"text": r.get("text", ""), "label": r.get("label") or {}}
             for path in release_paths(task, split, data_root) for r in read_records(path)]
    return lines if ids is None else lines[:len(ids)]


def predictions_from_decoded(task, examples, decoded):
    """One CLUENER line per example from what `mtl predict` writes for it."""
    return [prediction_line(example.text, entities) for example, entities in zip(examples, decoded)]


def prediction_line(text, entities):
    """One CLUENER line from our entities [{"type", "start", "end"}] (half-open characters),
    with score.py's inclusive ends."""
    label = {}
    for entity in entities:
        mention = text[entity["start"]:entity["end"]]
        label.setdefault(entity["type"], {}).setdefault(mention, []).append(
            [entity["start"], entity["end"] - 1])
    return {"text": text, "label": label}
