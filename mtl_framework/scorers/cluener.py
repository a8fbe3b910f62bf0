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
SOURCE = {"repository": "CLUEbenchmark/CLUENER2020", "path": "score.py",
          "commit": "a3e03f619dbfd929c8e162f797a98f52c27893a1"}
PRIMARY = "macro_f1"
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


def prediction_line(text, entities):
    """One CLUENER line from our entities [{"type", "start", "end"}] (half-open characters),
    with score.py's inclusive ends."""
    label = {}
    for entity in entities:
        mention = text[entity["start"]:entity["end"]]
        label.setdefault(entity["type"], {}).setdefault(mention, []).append(
            [entity["start"], entity["end"] - 1])
    return {"text": text, "label": label}
