"""CMRC 2017 cloze: the official results/evaluate.py, accuracy by exact string equality.

Gold: the `.answer` file (`<qid_N> ||| answer` lines); predictions: the same layout,
one line per query (`<qid_N> |||` or a bare `<qid_N>` for no answer). A line is
stripped of surrounding whitespace and split at " ||| "; an answer is right when it
is the same string as the reference (no normalisation: a trailing "。" is wrong).
Accuracy = right lines / reference lines; as in the script every prediction line
counts, so a query predicted twice rightly counts twice. Where the script stops (a
prediction for a query the reference lacks: KeyError), this counts the line as wrong.
"""
from data_adapters.task_types import MRC_SPAN, type_names
from mtl_framework.scoring.scorers.release import release_paths

SOURCE = {"repository": "ymcui/cmrc2017", "path": "results/evaluate.py",
          "commit": "c17955e9169005c14b97abc2c944fb48f0415ad9"}
PRIMARY = "accuracy"
TASK_TYPES = type_names(MRC_SPAN)  # the families it scores
FORMATS = ("cmrc2017_cloze",)  # the release files its gold is read from
SEPARATOR = " ||| "


def lines(text):
    """The lines Python 2's readlines() gives of a file's bytes: split at "\\n" only."""
    parts = text.split("\n")
    return parts[:-1] if parts and parts[-1] == "" else parts


def score(gold, predictions):
    """gold, predictions: the two files' text. {"accuracy", "right", "total"}."""
    reference = {}
    gold_lines = lines(gold)
    for line in gold_lines:
        qid, answer = line.strip().split(SEPARATOR)
        reference[qid] = answer
    right = 0
    for line in lines(predictions):
        parts = line.strip().split(SEPARATOR)
        qid, answer = parts[0], (parts[1] if len(parts) > 1 else "")
        right += qid in reference and answer == reference[qid]
    total = len(gold_lines)
    return {"accuracy": right / total if total else 0.0, "right": right, "total": total}


def gold_from_release(task, split, data_root, ids=None):
    answer_files = [p for p in release_paths(task, split, data_root) if str(p).endswith(".answer")]
    text = ""
    for path in answer_files:
        with open(path, encoding="utf-8", newline="") as handle:  # "\r" kept, as bytes
            text += handle.read()
    if ids is None:
        return text
    keep = {str(i) for i in ids}
    return "".join(line + "\n" for line in lines(text)
                   if line.strip().split(SEPARATOR)[0] in keep)


def predictions_from_decoded(task, examples, decoded):
    # an empty answer as a bare id: the script reads "<qid> |||" as the id "<qid> |||"
    return "".join(f"{e.id}{SEPARATOR}{d['text']}\n" if d["text"] else f"{e.id}\n"
                   for e, d in zip(examples, decoded))
