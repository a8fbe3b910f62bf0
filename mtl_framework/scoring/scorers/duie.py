"""DuIE 2.0's re_official_evaluation.py (no alias file): F1 over whole triples.

A triple is (predicate, subject, object) with the object whole: "@value"
and, for the five complex predicates, its slots (inWork, onDate, inArea,
period). Mentions are lowercased and lose a 《...》 around them; a line's
triples are de-duplicated after that. Lines are matched by their text (the
last line of a text wins, as in the script's dict); predictions for a text
not in gold are ignored. The script rounds its figures to 4 places; these
are not rounded.

A task that does not list "<predicate>_<slot>" labels predicts objects with
"@value" only: a gold complex object then counts as missed and the prediction
as wrong, which is the official score of such predictions (the gold is
never reduced to match).
"""
import json

from data_adapters.task_types import EXTRACTION_RELATION, type_names
from mtl_framework.scoring.scorers.release import release_paths

SOURCE = {"repository": "PaddlePaddle/PaddleNLP",
          "path": "examples/information_extraction/DuIE/re_official_evaluation.py",
          "commit": "0025c3d29c3f923720afcc24c012813b1d543dd9"}
PRIMARY = "f1"
TASK_TYPES = type_names(EXTRACTION_RELATION)  # the families it scores
FORMATS = ("spo_json",)  # the release files its gold is read from
VALUE = "@value"
SLOTS = ("inWork", "onDate", "inArea", "period")


def del_bookname(mention):
    return mention[1:-1] if mention.startswith("《") and mention.endswith("》") else mention


def normalised(spo):
    obj = spo["object"]
    return (spo["predicate"], del_bookname(spo["subject"].lower()),
            frozenset((k, del_bookname(v).lower()) for k, v in obj.items()))


def by_text(lines):
    return {line["text"]: {normalised(spo) for spo in line["spo_list"]} for line in lines}


def score(gold, predictions):
    """gold, predictions: DuIE lines {"text", "spo_list": [{"subject", "predicate",
    "object": {"@value", slot...}}]}, in any order (matched by text)."""
    gold, predicted = by_text(gold), by_text(predictions)
    correct = submitted = golden = 0
    for text, triples in gold.items():
        guesses = predicted.get(text, set())
        golden += len(triples)
        submitted += len(guesses)
        correct += len(triples & guesses)
    precision = correct / submitted if submitted else 0.0
    recall = correct / golden if golden else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"f1": f1, "precision": precision, "recall": recall}


def prediction_line(text, triples):
    """A DuIE line from our triples [{"subject": {"text"}, "predicate", "object": {"text"}}].
    Triples of "<predicate>_<slot>" labels (subject, slot value) are joined to the
    "<predicate>" triples of the same subject into complex objects, one object per
    combination of slot values (Baidu's DuIE baseline's convention)."""
    mains, slots = {}, {}
    for triple in triples:
        subject, predicate, value = triple["subject"]["text"], triple["predicate"], triple["object"]["text"]
        base, _, slot = predicate.rpartition("_")
        if base and slot in SLOTS:
            values = slots.setdefault((subject, base), {}).setdefault(slot, [])
            if value not in values:
                values.append(value)
        else:
            mains.setdefault((subject, predicate), [])
            if value not in mains[(subject, predicate)]:
                mains[(subject, predicate)].append(value)
    spo_list = []
    for (subject, predicate), values in mains.items():
        objects = [{VALUE: v} for v in values]
        for slot, slot_values in slots.get((subject, predicate), {}).items():
            objects = [{**o, slot: v} for o in objects for v in slot_values]
        spo_list += [{"subject": subject, "predicate": predicate, "object": o} for o in objects]
    return {"text": text, "spo_list": spo_list}


def gold_from_release(task, split, data_root, ids=None):
    """The split's DuIE lines, whole (slots kept); with `ids` (a partial evaluation of the
    first examples), the first len(ids) lines."""
    lines = []
    for path in release_paths(task, split, data_root):
        with open(path, encoding="utf-8") as handle:
            lines += [json.loads(line) for line in handle if line.strip()]
    lines = [{"text": line.get("text", ""), "spo_list": line.get("spo_list") or []} for line in lines]
    return lines if ids is None else lines[:len(ids)]


def predictions_from_decoded(task, examples, decoded):
    """One DuIE line per example from what `mtl predict` writes for it (its triples)."""
    return [prediction_line(example.text, triples) for example, triples in zip(examples, decoded)]
