"""CMRC 2018 (and DRCD): the official cmrc2018_evaluate.py (v5, SQuAD-style files).

Per question the best over its gold answers of EM (equal after lower-casing, stripping
and removing the script's punctuation) and F1 (longest common substring of the "mixed
segmentations": Chinese characters one by one, other runs by nltk.word_tokenize),
averaged over every question of the gold file; a question without prediction scores 0.
All gold answers count, whatever their answer_start. AVERAGE = (EM + F1) / 2 is the
leaderboard's figure.
"""
import re

from data_adapters.task_types import MRC_SPAN, type_names
from mtl_framework.scoring.scorers.lcs import lcs_f1
from mtl_framework.scoring.scorers.release import answers_by_id, squad_gold
from mtl_framework.scoring.scorers.treebank import word_tokenize

SOURCE = {"repository": "ymcui/cmrc2018", "path": "squad-style-data/cmrc2018_evaluate.py",
          "commit": "5c81039ef856de178b5198391b3cd40f4e5e8514"}
PRIMARY = "average"
TASK_TYPES = type_names(MRC_SPAN)  # the families it scores
FORMATS = ("squad",)  # the release files its gold is read from

# The script's list; its "……" (two characters) never equals the one character it is
# compared with, so it removes nothing.
PUNCTUATION = set("-:_*^/\\~`+=，。：？！“”；’《》·、「」（）－～『』")
CHINESE = re.compile("[\u4e00-\u9fa5]")


def mixed_segmentation(text, rm_punc=False):
    text = str(text).lower().strip()
    segments, run = [], ""
    for char in text:
        if rm_punc and char in PUNCTUATION:
            continue
        if CHINESE.search(char) or char in PUNCTUATION:
            if run:
                segments += word_tokenize(run)
                run = ""
            segments.append(char)
        else:
            run += char
    if run:
        segments += word_tokenize(run)
    return segments


def remove_punctuation(text):
    return "".join(c for c in str(text).lower().strip() if c not in PUNCTUATION)


def f1(answers, prediction):
    """Best over the answers of the script's LCS F1 (find_lcs: scorers/lcs.py)."""
    prediction = mixed_segmentation(prediction, rm_punc=True)
    return max([0.0] + [lcs_f1(mixed_segmentation(a, rm_punc=True), prediction) for a in answers])


def em(answers, prediction):
    prediction = remove_punctuation(prediction)
    return float(any(remove_punctuation(a) == prediction for a in answers))


def questions(gold):
    """(id, [answer texts]) of every question of a SQuAD-style gold dict. An id is read as
    a string: the script's `qas['id'].strip()` fails on a number, and the prediction file
    it looks ids up in is a JSON object, whose keys are strings ("7" for question 7)."""
    for article in gold["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                yield str(qa["id"]).strip(), [a["text"] for a in qa["answers"]]


def score(gold, predictions):
    """{"average", "em", "f1", "total", "skip"}: the script's figures / 100."""
    total = skip = em_sum = f1_sum = 0
    for id_, answers in questions(gold):
        total += 1
        if id_ not in predictions:
            skip += 1
            continue
        prediction = str(predictions[id_])
        # The script's max() over no answer raises; a question without gold scores 0.
        f1_sum += f1(answers, prediction) if answers else 0.0
        em_sum += em(answers, prediction)
    em_score, f1_score = (em_sum / total, f1_sum / total) if total else (0.0, 0.0)
    return {"average": (em_score + f1_score) / 2, "em": em_score, "f1": f1_score,
            "total": total, "skip": skip}


def gold_from_release(task, split, data_root, ids=None):
    return squad_gold(task, split, data_root, ids)


def predictions_from_decoded(task, examples, decoded):
    return answers_by_id(examples, [d["text"] for d in decoded])
