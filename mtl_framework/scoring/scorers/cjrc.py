"""CJRC / CAIL 2019 reading comprehension: the official evaluate.py (CoQA-based).

Every question of the gold file counts: span, YES, NO and unknown (no answer, gold '')
alike. A text is normalised by lower-casing and keeping only letters and digits
(str.isalpha / isdigit: Chinese characters are letters); EM compares the normalised
texts, F1 their characters as bags; with several gold answers each is left out in turn
and the best over the others is averaged (CoQA's leave-one-out). Figures are means over
all questions, overall and per domain (civil, criminal). The script rounds its printed
figures to 0.1 points; these are unrounded. A question without prediction scores 0.
"""
from collections import Counter

from data_adapters.task_types import MRC_SPAN, type_names
from mtl_framework.scoring.scorers.release import read_json, release_paths

SOURCE = {"repository": "china-ai-law-challenge/CAIL2019", "path": "阅读理解/evaluate/evaluate.py",
          "commit": "10dc21735c00784ee3ad11f5d4c60756529531e2"}
PRIMARY = "f1"
TASK_TYPES = type_names(MRC_SPAN)  # the families it scores
FORMATS = ("squad",)  # the release files its gold is read from
DOMAINS = ("civil", "criminal")


def normalize(text):
    return "".join(c for c in text.lower() if c.isdigit() or c.isalpha())


def exact(gold, prediction):
    return float(normalize(gold) == normalize(prediction))


def f1(gold, prediction):
    gold_chars = list(normalize(gold)) if gold else []
    predicted = list(normalize(prediction)) if prediction else []
    if not gold_chars or not predicted:
        return float(gold_chars == predicted)
    same = sum((Counter(gold_chars) & Counter(predicted)).values())
    if not same:
        return 0.0
    precision, recall = same / len(predicted), same / len(gold_chars)
    return 2 * precision * recall / (precision + recall)


def question_scores(golds, prediction):
    """(em, f1) of one question: leave-one-out over several gold answers."""
    if len(golds) == 1:
        return exact(golds[0], prediction), f1(golds[0], prediction)
    em_sum = f1_sum = 0.0
    for i in range(len(golds)):
        others = golds[:i] + golds[i + 1:]
        em_sum += max(exact(a, prediction) for a in others)
        f1_sum += max(f1(a, prediction) for a in others)
    return em_sum / len(golds), f1_sum / len(golds)


def gold_answers(gold):
    """{qid: ([answer texts] or [''], domain)}, as the script reads the gold file: the first
    paragraph of each case, a later duplicate id replacing an earlier one."""
    answers = {}
    for case in gold["data"]:
        for qa in case["paragraphs"][0]["qas"]:
            texts = [a["text"] for a in qa["answers"]] or [""]
            answers[qa["id"]] = (texts, case["domain"])
    return answers


def score(gold, predictions):
    """{"em", "f1", "civil_em", "civil_f1", "criminal_em", "criminal_f1", "total"}.
    predictions: [{"id", "answer"}] (a later entry for an id replaces an earlier one)."""
    predicted = {p["id"]: p["answer"] for p in predictions}
    totals = {d: Counter() for d in DOMAINS}
    for qid, (golds, domain) in gold_answers(gold).items():
        totals[domain]["count"] += 1  # a domain other than the two: KeyError, as the script
        if qid in predicted:
            em, f = question_scores(golds, predicted[qid] or "")
            totals[domain]["em"] += em
            totals[domain]["f1"] += f
    result = {}
    for domain in DOMAINS:
        count = max(1, totals[domain]["count"])
        result[f"{domain}_em"] = totals[domain]["em"] / count
        result[f"{domain}_f1"] = totals[domain]["f1"] / count
    total = sum(totals[d]["count"] for d in DOMAINS)
    result["em"] = sum(totals[d]["em"] for d in DOMAINS) / max(1, total)
    result["f1"] = sum(totals[d]["f1"] for d in DOMAINS) / max(1, total)
    result["total"] = total
    return result


def gold_from_release(task, split, data_root, ids=None):
    cases = []
    for path in release_paths(task, split, data_root):
        cases += read_json(path)["data"]
    if ids is not None:
        keep = {str(i) for i in ids}
        cases = [{**case, "paragraphs": [{**case["paragraphs"][0], "qas": [
            qa for qa in case["paragraphs"][0]["qas"] if str(qa["id"]) in keep]}]}
            for case in cases]
    return {"data": cases}


def predictions_from_decoded(task, examples, decoded):
    """The span task's answers; "" is the scorer's "unknown"."""
    return [{"id": e.id, "answer": d["text"]} for e, d in zip(examples, decoded)]
