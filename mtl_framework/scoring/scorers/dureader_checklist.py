"""DuReader checklist: the official DuReader-Checklist/evaluate.py (LIC 2021).

Gold: the dataset JSON (every article and paragraph; a later duplicate id replaces an
earlier one). An unanswerable question (`is_impossible`) is right, EM and F1 1, only
for the prediction "no answer" (any case); others score as DuReader robust. Beside the
overall F1 / EM, each question type (`type`, the script's --tag runs: in-domain,
vocab, phrase, semantic-role, fault-tolerant, reasoning) that the gold has gets
`f1/<tag>` and `em/<tag>`. Our "no answer" (an empty span) is written "no answer".
"""
from data_adapters.task_types import MRC_SPAN, type_names
from mtl_framework.scoring.scorers import dureader
from mtl_framework.scoring.scorers.release import squad_gold

SOURCE = {"repository": "baidu/DuReader", "path": "DuReader-Checklist/evaluate.py",
          "commit": "9f73af912ce8b0eed8e583b4e4fccd848ce561bd"}
PRIMARY = "f1"
TASK_TYPES = type_names(MRC_SPAN)  # the families it scores
FORMATS = ("squad",)  # the release files its gold is read from
TAGS = ("in-domain", "vocab", "phrase", "semantic-role", "fault-tolerant", "reasoning")
NO_ANSWER = "no answer"


def questions(gold, tag=None):
    """{id: (answers, is_impossible)} as the script's read_mrc_dataset."""
    out = {}
    for article in gold["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                if tag is not None and not qa["type"].startswith(tag):
                    continue
                impossible = qa.get("is_impossible", False)
                answers = [NO_ANSWER] if impossible else [a["text"] for a in qa["answers"]]
                out[qa["id"]] = (answers, impossible)
    return out


def scores(gold_questions, predictions):
    em_sum = f1_sum = skip = 0
    for qid, (answers, impossible) in gold_questions.items():
        if str(qid) not in predictions:
            skip += 1
            continue
        prediction = predictions[str(qid)]
        if impossible:
            right = float(prediction.lower() == NO_ANSWER)
            em_sum, f1_sum = em_sum + right, f1_sum + right
        else:
            f1_sum += dureader.f1(answers, prediction) if answers else 0.0
            em_sum += dureader.em(answers, prediction)
    return dureader.figures(em_sum, f1_sum, len(gold_questions), skip)


def score(gold, predictions):
    """{"f1", "em", "total", "skip", "f1/<tag>", "em/<tag>" ...}."""
    result = scores(questions(gold), predictions)
    for tag in TAGS:
        tagged = questions(gold, tag) if all_typed(gold) else {}
        if tagged:
            figures = scores(tagged, predictions)
            result[f"f1/{tag}"], result[f"em/{tag}"] = figures["f1"], figures["em"]
    return result


def all_typed(gold):
    return all("type" in qa for a in gold["data"] for p in a["paragraphs"] for qa in p["qas"])


def gold_from_release(task, split, data_root, ids=None):
    return squad_gold(task, split, data_root, ids)


def predictions_from_decoded(task, examples, decoded):
    return {str(e.id).strip(): d["text"] or NO_ANSWER for e, d in zip(examples, decoded)}
