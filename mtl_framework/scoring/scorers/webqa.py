"""SogouQA / WebQA: the evaluation tool Sogou gave with CIPS-SOGOU QA (evaluate_tool/,
as Su Jianlin's dgcnn_for_reading_comprehension publishes it; bert4keras' reading
comprehension examples score with it).

One answer per question. Gold: the tool's `qid_answer_expand` file, lines
`qid<TAB>answer<TAB>alternatives joined by "|"`; predictions: lines
`qid<TAB>answer`. A text is normalised as the tool does on UTF-8 bytes in Python 2:
full-width to half-width, ASCII letters lower-cased, the tool's punctuation replaced
by spaces, ASCII whitespace removed. Right (accuracy) when the normalised prediction
is an alternative (raw or normalised), or its space-separated words equal the
answer's; F1 over characters (a multiset), best over the alternatives; an empty
prediction scores 0. final = (accuracy + F1) / 2. Every prediction line counts, so
one line per question is written (an empty answer where we predict none).

Sogou's qid_answer_expand lists alternatives (e.g. 林含英 beside 林海音) that Su's
SogouQA.json / WebQA.json do not hold: gold_from_release builds the file from the
JSON, each question's answer the first non-empty passage answer and its alternatives
the distinct non-empty passage answers. Where the tool stops (a prediction for a
question the gold lacks: ValueError), this counts the line as wrong.
"""
import re

from data_adapters.task_types import MRC_SPAN, type_names
from mtl_framework.scoring.scorers.cmrc2017 import lines
from mtl_framework.scoring.scorers.release import read_json, release_paths

SOURCE = {"repository": "bojone/dgcnn_for_reading_comprehension",
          "path": "evaluate_tool/evaluate.py", "commit": "ef08505563cd98719dcda4314e5786cb901a6aa2"}
PRIMARY = "final"
TASK_TYPES = type_names(MRC_SPAN)  # the families it scores
FORMATS = ("multi_passage_qa",)  # the release files its gold is read from

# evaluate_tool/punctuation as string_tool.py reads it (lines stripped as bytes)
PUNCTUATION = set(
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~\u007f\u00a4\u00a7\u00a8\u00b0\u00b1\u00b7\u00d7\u00f7"
    "\u02c7\u02c9\u2014\u2016\u2018\u2019\u201c\u201d\u2022\u2026\u2030\u2032\u2033\u203b"
    "\u2116\u2190\u2191\u2192\u2193\u2208\u2211\u221a\u221e\u2220\u2228\u2229\u2234\u2235"
    "\u2236\u2248\u224c\u2260\u2261\u2264\u2265\u226e\u226f\u2299\u22a5\u2312\u25a0\u25a1"
    "\u25b2\u25b3\u25c6\u25c7\u25ce\u25cf\u2605\u2606\u2640\u2642\u3000\u3001\u3002\u3003"
    "\u3005\u3008\u3009\u300a\u300b\u300c\u300d\u300e\u300f\u3010\u3011\u3013\u3014\u3015"
    "\u3016\u3017\ufe51\uff01\uff04\uff08\uff09\uff0c\uff0e\uff1a\uff1b\uff1f\uff3f\uff5e"
    "\uffe0\uffe3\uffe5")
ASCII_BLANKS = re.compile("[ \t\n\r\x0b\x0c]+")  # Python 2's \s on bytes
ASCII_STRIP = " \t\n\r\x0b\x0c"


def half_width(text):
    out = []
    for char in text:
        code = ord(char)
        if code == 12288:
            code = 32
        elif 65281 <= code <= 65374:
            code -= 65248
        out.append(chr(code))
    return "".join(out)


def ascii_lower(text):
    """bytes.lower(): A-Z only."""
    return "".join(c.lower() if "A" <= c <= "Z" else c for c in text)


def drop_punctuation(text):
    return "".join(" " if c in PUNCTUATION else c for c in text)


def normalize(text):
    text = drop_punctuation(ascii_lower(half_width(text)))
    return ASCII_BLANKS.sub("", text).strip(ASCII_STRIP)


def read_gold(gold):
    """{qid: (answer, {alternatives, raw and normalised})}."""
    out = {}
    for line in gold.split("\n"):
        if not line.strip(ASCII_STRIP):
            continue  # the tool reads no blank lines: its files have none
        qid, answer, alternatives = line.strip(ASCII_STRIP).split("\t")
        expand = set(alternatives.split("|"))
        out[qid] = (answer, expand | {normalize(a) for a in expand})
    return out


def exact(answer, expand, prediction):
    prediction = prediction.strip(ASCII_STRIP)
    if not prediction:
        return 0.0
    if normalize(prediction) in expand:
        return 1.0
    words = lambda text: {normalize(w) for w in ascii_lower(drop_punctuation(text)).split(" ")}
    return float(words(prediction) == words(answer))


def character_f1(expand, prediction):
    prediction = prediction.strip(ASCII_STRIP)
    if not prediction:
        return 0.0
    predicted = list(normalize(prediction))
    best = 0.0
    for alternative in expand:
        gold = list(normalize(alternative))
        left, right = list(gold), 0
        for char in predicted:
            if char in left:
                right += 1
                left.remove(char)
        if right:
            precision, recall = right / len(predicted), right / len(gold)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def score(gold, predictions):
    """gold: the qid_answer_expand text; predictions: the `qid<TAB>answer` lines' text.
    {"final", "accuracy", "f1", "total"} over the prediction lines."""
    reference = read_gold(gold)
    total = right = f1_sum = 0
    for line in lines(predictions):
        total += 1
        qid, answer = line.split("\t")  # a line without one tab: ValueError, as the tool
        if qid not in reference:
            continue
        expected, expand = reference[qid]
        right += exact(expected, expand, answer)
        f1_sum += character_f1(expand, answer)
    # no line at all: the tool divides by zero; 0 here
    accuracy, f1 = (right / total, f1_sum / total) if total else (0.0, 0.0)
    return {"final": (accuracy + f1) / 2, "accuracy": accuracy, "f1": f1, "total": total}


def gold_from_release(task, split, data_root, ids=None):
    """qid_answer_expand lines built from Su's JSON (module docstring)."""
    keep = None if ids is None else {str(i).rsplit("-", 1)[0] for i in ids}
    lines = []
    for path in release_paths(task, split, data_root):
        for record in records(path):
            if not isinstance(record, dict) or not isinstance(record.get("question"), str):
                continue  # the adapter skips it too: not a question
            qid = str(record.get("id"))
            if keep is not None and qid not in keep:
                continue
            answers = list(dict.fromkeys(p.get("answer") for p in record.get("passages", [])
                                         if isinstance(p, dict) and p.get("answer")))
            if answers:
                lines.append(f"{qid}\t{answers[0]}\t{'|'.join(answers)}\n")
    return "".join(lines)


def records(path):
    """A JSON array, or JSON lines (the adapter reads both)."""
    try:
        data = read_json(path)
        return data if isinstance(data, list) else [data]
    except ValueError:
        import json
        with open(path, encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]


def predictions_from_decoded(task, examples, decoded):
    """One line per question: the non-empty answer most of its passages give (ties: the
    one met first); empty when no passage gives one. Example ids are `<qid>-<passage>`."""
    votes = {}
    for example, answer in zip(examples, decoded):
        qid = str(example.id).rsplit("-", 1)[0]
        counts = votes.setdefault(qid, {})
        text = answer["text"].replace("\t", " ").replace("\n", " ")
        if text:
            counts[text] = counts.get(text, 0) + 1
    return "".join(f"{qid}\t{max(c, key=c.get) if c else ''}\n" for qid, c in votes.items())
