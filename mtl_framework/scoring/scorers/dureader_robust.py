"""DuReader robust: the official DuReader-Robust/evaluate.py (LIC 2020).

Gold: the dataset JSON; as the script, only its first `data` entry is read (the
release has one). Predictions: {question id: answer text}. F1 and EM (dureader.py)
averaged over every gold question; a question without prediction scores 0. The
script's max() over no answer raises; a question without gold scores 0 here.
"""
from data_adapters.task_types import MRC_SPAN, type_names
from mtl_framework.scoring.scorers import dureader
from mtl_framework.scoring.scorers.release import squad_gold

SOURCE = {"repository": "baidu/DuReader", "path": "DuReader-Robust/evaluate.py",
          "commit": "9f73af912ce8b0eed8e583b4e4fccd848ce561bd"}
PRIMARY = "f1"
TASK_TYPES = type_names(MRC_SPAN)  # the families it scores
FORMATS = ("squad",)  # the release files its gold is read from


def score(gold, predictions):
    """{"f1", "em", "total", "skip"}."""
    em_sum = f1_sum = total = skip = 0
    for paragraph in gold["data"][0]["paragraphs"]:
        for qa in paragraph["qas"]:
            total += 1
            answers = [a["text"] for a in qa["answers"]]
            if str(qa["id"]) not in predictions:
                skip += 1
                continue
            prediction = predictions[str(qa["id"])]
            f1_sum += dureader.f1(answers, prediction) if answers else 0.0
            em_sum += dureader.em(answers, prediction)
    return dureader.figures(em_sum, f1_sum, total, skip)


def gold_from_release(task, split, data_root, ids=None):
    """One data entry holding every paragraph of the split's files."""
    gold = squad_gold(task, split, data_root, ids)
    return {"data": [{"paragraphs": [p for article in gold["data"] for p in article["paragraphs"]]}]}


def predictions_from_decoded(task, examples, decoded):
    return {str(e.id): d["text"] for e, d in zip(examples, decoded)}
