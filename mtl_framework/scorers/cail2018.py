"""CAIL2018's judger (judger/judger.py): per subtask, (micro F1 + macro F1) / 2.

Macro F1 averages over every label of the label file (accu.txt: 202 charges,
law.txt: 183 articles), and a label that neither gold nor prediction holds
scores 1.0 (the judger's get_value: TP = FP = FN = 0); a label with no hit
otherwise scores 0.0. Micro F1 pools TP, FP and FN over the labels. Charges
are looked up after removing "[" and "]" as the judger does. The judger's
third figure (imprisonment) needs a term prediction, which no task of this
framework makes; it is not computed.
"""
SOURCE = {"repository": "china-ai-law-challenge/CAIL2018", "path": "judger/judger.py",
          "commit": "599781ffcbfb33237580c6766afe3af9e1ff7229"}
PRIMARY = "accusation"  # the charge task's figure; the article task's is "articles"
FIGURES = ("accusation", "articles")


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


def score(gold, predictions):
    """gold: {"accusations": accu.txt's lines, "articles": law.txt's numbers,
    "truth": the cases' `meta` objects}; predictions: the judger's output lines
    ({"accusation": [1-based charge ids], "articles": [1-based article ids]}).
    A figure is given for each subtask the predictions hold."""
    truth = gold["truth"]
    if len(truth) != len(predictions):
        raise ValueError(f"{len(predictions)} prediction lines for {len(truth)} cases")
    charge_id = {name: i + 1 for i, name in enumerate(gold["accusations"])}
    article_id = {int(number): i + 1 for i, number in enumerate(gold["articles"])}
    figures = {}
    if all("accusation" in p for p in predictions):
        figures["accusation"] = subtask_score(
            [{charge_id[a.replace("[", "").replace("]", "")] for a in t["accusation"]} for t in truth],
            [set(map(int, p["accusation"])) for p in predictions], len(charge_id))
    if all("articles" in p for p in predictions):
        figures["articles"] = subtask_score(
            [{article_id[int(a)] for a in t["relevant_articles"]} for t in truth],
            [set(map(int, p["articles"])) for p in predictions], len(article_id))
    return figures


def prediction_line(charges=None, articles=None, accusations=(), article_numbers=()):
    """The judger's output line from predicted charge names and article numbers."""
    line = {}
    if charges is not None:
        index = {name: i + 1 for i, name in enumerate(accusations)}
        line["accusation"] = sorted(index[c] for c in charges)
    if articles is not None:
        index = {int(n): i + 1 for i, n in enumerate(article_numbers)}
        line["articles"] = sorted(index[int(a)] for a in articles)
    return line
