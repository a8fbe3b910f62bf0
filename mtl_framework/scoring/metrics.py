"""Evaluation metrics, NumPy only (the names of docs/task_specs.md).

    compute_metric(name, predictions, references) -> dict
    primary_score(name, result) -> float (higher is better)

Every score is a fraction in [0, 1] (correlations in [-1, 1]); the official
CMRC2018 script prints EM/F1 times 100.
"""
import re
from collections import Counter

import numpy as np

from mtl_framework.scoring.scorers.lcs import lcs_f1

# ------------------------------------------------------------ classification


def _check(predictions, references):
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions for "
                         f"{len(references)} references: they must pair up")


def _as_set(x):
    """A label, or a list/set of labels (multi-label), as a set."""
    if isinstance(x, (list, tuple, set, frozenset, np.ndarray)):
        return {v.item() if isinstance(v, np.generic) else v for v in x}
    return {x.item() if isinstance(x, np.generic) else x}


def accuracy(predictions, references):
    """Exact matches (a multi-label row counts when its whole set matches)."""
    _check(predictions, references)
    if not len(references):
        return 0.0
    return float(np.mean([_as_set(p) == _as_set(r)
                          for p, r in zip(predictions, references)]))


def _label_counts(predictions, references):
    tp, pred, gold = Counter(), Counter(), Counter()
    for p, r in zip(predictions, references):
        p, r = _as_set(p), _as_set(r)
        tp.update(p & r)
        pred.update(p)
        gold.update(r)
    return tp, pred, gold


def macro_f1(predictions, references):
    """Mean over labels (those seen in predictions or references) of
    2 TP / (predicted + gold); single- or multi-label rows."""
    _check(predictions, references)
    tp, pred, gold = _label_counts(predictions, references)
    labels = set(pred) | set(gold)
    if not labels:
        return 0.0
    return float(np.mean([2 * tp[c] / (pred[c] + gold[c]) for c in labels]))


def micro_f1(predictions, references):
    """2 TP / (predicted + gold) pooled over labels; equals accuracy for
    single-label rows. Returns (f1, precision, recall)."""
    _check(predictions, references)
    tp, pred, gold = _label_counts(predictions, references)
    return _prf(sum(tp.values()), sum(pred.values()), sum(gold.values()))


def _prf(x, y, z):
    """F1, precision, recall from matches x, predicted y, gold z; nothing
    predicted and nothing to find counts as perfect."""
    f1 = 2 * x / (y + z) if y + z else 1.0
    precision = x / y if y else float(z == 0)
    recall = x / z if z else float(y == 0)
    return float(f1), float(precision), float(recall)


# ------------------------------------------------------- CMRC2018 EM and F1

# the official cmrc2018_evaluate.py's punctuation list
CMRC_PUNCTUATION = {
    "-", ":", "_", "*", "^", "/", "\\", "~", "`", "+", "=",
    "，", "。", "：", "？", "！", "“", "”", "；", "’", "《", "》", "……", "·", "、",
    "「", "」", "（", "）", "－", "～", "『", "』"}
_CHINESE = re.compile(r"[\u4e00-\u9fa5]")
# stands in for nltk.word_tokenize on the non-Chinese runs: words and numbers
# (3.5, 1,000, don't) stay whole, other symbols are single tokens
_WORD = re.compile(r"\w+(?:[.,']\w+)*|[^\w\s]")


def mixed_segmentation(text, rm_punc=False):
    """Chinese characters one by one, English words and numbers whole."""
    text = str(text).lower().strip()
    segments, run = [], ""
    for char in text:
        if rm_punc and char in CMRC_PUNCTUATION:
            continue
        if _CHINESE.match(char) or char in CMRC_PUNCTUATION:
            segments.extend(_WORD.findall(run))
            run = ""
            segments.append(char)
        else:
            run += char
    segments.extend(_WORD.findall(run))
    return segments


def remove_punctuation(text):
    return "".join(c for c in str(text).lower().strip() if c not in CMRC_PUNCTUATION)


def cmrc_f1(prediction, answers):
    """Max over answers of the LCS-based F1 of mixed segmentations."""
    pred = mixed_segmentation(prediction, rm_punc=True)
    return max(lcs_f1(mixed_segmentation(answer, rm_punc=True), pred) for answer in answers)


def cmrc_em(prediction, answers):
    pred = remove_punctuation(prediction)
    return float(any(remove_punctuation(a) == pred for a in answers))


def em_f1(predictions, references):
    """CMRC2018 EM and F1, averaged over questions. references: per question
    a list of acceptable answers (or one string). A question with no answer
    scores 1 when the prediction is empty, else 0."""
    _check(predictions, references)
    em, f1 = [], []
    for pred, answers in zip(predictions, references):
        answers = [answers] if isinstance(answers, str) else list(answers)
        if not answers:
            hit = float(not remove_punctuation(pred))
            em.append(hit)
            f1.append(hit)
            continue
        em.append(cmrc_em(pred, answers))
        f1.append(cmrc_f1(pred, answers))
    return (float(np.mean(em)) if em else 0.0), (float(np.mean(f1)) if f1 else 0.0)


# ------------------------------------------------------------ set F1 scores


def set_f1(predictions, references):
    """F1 over per-example sets of hashable items: (type, start, end) spans,
    (s, p, o) triples, ... Returns (f1, precision, recall)."""
    _check(predictions, references)
    x = y = z = 0
    for pred, gold in zip(predictions, references):
        pred, gold = set(map(_hashable, pred)), set(map(_hashable, gold))
        x, y, z = x + len(pred & gold), y + len(pred), z + len(gold)
    return _prf(x, y, z)


def _hashable(item):
    return tuple(_hashable(v) for v in item) if isinstance(item, (list, tuple)) else item


def char_f1(prediction, mention):
    """Character-level matching F1 of two mentions, case-insensitive (bag of characters)."""
    common = sum((Counter(prediction.lower()) & Counter(mention.lower())).values())
    return 2 * common / (len(prediction) + len(mention)) if common else 0.0


def _mentions(mention):
    """A gold argument's mention and its alternatives (DuEE's `alias`), as a tuple."""
    return (mention,) if isinstance(mention, str) else tuple(mention)


def _event_parts(events):
    """(arguments, triggers, whole events) of one text's events: arguments
    {(type, role, mentions)} de-duplicated case-insensitively, triggers
    {(type, trigger)}, events {(type, trigger, frozenset((role, mention)))}."""
    arguments, triggers, whole = {}, set(), set()
    for event in events:
        type_, trigger = event["event_type"], event.get("trigger")
        if trigger is not None:
            triggers.add((type_, trigger.lower()))
        parts = []
        for role, mention in event.get("arguments", ()):
            mentions = _mentions(mention)
            arguments.setdefault((type_, role, mentions[0].lower()), (type_, role, mentions))
            parts.append((role, mentions[0].lower()))
        whole.add((type_, None if trigger is None else trigger.lower(), frozenset(parts)))
    return list(arguments.values()), triggers, whole


def event_f1(predictions, references):
    """DuEE's argument-level score (its task description; no official script is public):
    each predicted argument scores the best character-level matching F1 (case-insensitive)
    against the gold arguments of the same event type and role in its text, over each gold
    argument's alternative mentions; precision = sum of scores / predicted arguments,
    recall = sum / gold arguments. Beside it, F1 over (event type, trigger) and over whole
    events (type, trigger and every argument exact, case-insensitive).

    predictions, references: per text a list of events {"event_type", "trigger" (text or
    None), "arguments": [(role, mention)]}; a gold mention may be a list of alternatives.
    "f1" is the argument F1, or the trigger F1 when no text has a gold argument (a trigger
    task)."""
    _check(predictions, references)
    matched = n_predicted = n_gold = 0.0
    triggers, events = [0, 0, 0], [0, 0, 0]
    any_argument = False
    for predicted, gold in zip(predictions, references):
        p_args, p_triggers, p_events = _event_parts(predicted)
        g_args, g_triggers, g_events = _event_parts(gold)
        any_argument = any_argument or bool(g_args)
        n_predicted, n_gold = n_predicted + len(p_args), n_gold + len(g_args)
        for type_, role, mentions in p_args:
            matched += max((char_f1(mentions[0], m) for t, r, ms in g_args
                            if (t, r) == (type_, role) for m in ms), default=0.0)
        for counts, p, g in ((triggers, p_triggers, g_triggers), (events, p_events, g_events)):
            counts[0] += len(p & g)
            counts[1] += len(p)
            counts[2] += len(g)
    precision = matched / n_predicted if n_predicted else float(n_gold == 0)
    recall = matched / n_gold if n_gold else float(n_predicted == 0)
    argument = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    trigger = _prf(*triggers)
    return {"f1": argument if any_argument else trigger[0], "argument_f1": argument,
            "argument_precision": precision, "argument_recall": recall,
            "trigger_f1": trigger[0], "trigger_precision": trigger[1], "trigger_recall": trigger[2],
            "event_f1": _prf(*events)[0]}


# -------------------------------------------------------------- regression


def rankdata(x):
    """Ranks 1..n, ties get the mean of the ranks they span (scipy's 'average')."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    sorted_x = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and sorted_x[j + 1] == sorted_x[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def pearson(predictions, references):
    """Pearson r; 0.0 when either side is constant (r undefined)."""
    _check(predictions, references)
    x = np.asarray(predictions, dtype=np.float64)
    y = np.asarray(references, dtype=np.float64)
    x, y = x - x.mean(), y - y.mean()
    denominator = np.sqrt((x * x).sum() * (y * y).sum())
    return float((x * y).sum() / denominator) if denominator > 0 else 0.0


def spearman(predictions, references):
    """Spearman rho: Pearson r of the average ranks."""
    _check(predictions, references)
    return pearson(rankdata(predictions), rankdata(references))


def mrr(predictions, references):
    """Mean reciprocal rank. predictions: per query the scores of its
    candidates (higher = better); references: the index (or indices) of the
    right candidate(s). Ties count against the right one (rank = 1 + number
    of others scoring >= it), so a constant scorer gets no credit."""
    _check(predictions, references)
    total = 0.0
    for scores, gold in zip(predictions, references):
        scores = np.asarray(scores, dtype=np.float64)
        gold = sorted(_as_set(gold))
        best = max(gold, key=lambda g: scores[g])
        others = np.delete(scores, best)
        total += 1.0 / (1 + int((others >= scores[best]).sum()))
    return total / len(references) if len(references) else 0.0


# -------------------------------------------------------------- dispatcher


# ------------------------------------------------ sentence embeddings (contrastive)
# predictions: per pair {"query", "positive": vectors, ...}; references: per pair {"score",
# "positive_id"} (ContrastiveHead.decode / targets). Scored as C-MTEB scores
# (mtl_framework.scoring.embedding, equal to mteb's evaluators).


def _pair_vectors(predictions):
    return (np.array([p["query"] for p in predictions]),
            np.array([p["positive"] for p in predictions]))


def _scored(predictions, references):
    _check(predictions, references)
    keep = [i for i, r in enumerate(references) if np.isfinite(r["score"])]
    if not keep:
        raise ValueError("no pair has a score: score a pairs task by `metric: retrieval`")
    return [predictions[i] for i in keep], np.array([references[i]["score"] for i in keep])


def cosine_spearman(predictions, references):
    """C-MTEB's STS score: Spearman of the pairs' cosines against their scores."""
    from mtl_framework.scoring.embedding import sts_scores

    predictions, scores = _scored(predictions, references)
    result = sts_scores(*_pair_vectors(predictions), scores)
    return {"cosine_spearman": result["cosine_spearman"], "cosine_pearson": result["cosine_pearson"]}


def pair_classification(predictions, references):
    """C-MTEB's pair classification: best-threshold accuracy and AP of the cosines against
    0 / 1 scores (max_accuracy is its main score)."""
    from mtl_framework.scoring.embedding import pair_classification_scores

    predictions, scores = _scored(predictions, references)
    if not np.isin(scores, (0.0, 1.0)).all():
        raise ValueError("pair_classification scores 0 / 1 labelled pairs; for graded scores "
                         "use metric: cosine_spearman")
    result = pair_classification_scores(*_pair_vectors(predictions), scores.astype(int))
    return {"max_accuracy": result["max_accuracy"], "cosine_accuracy": result["cosine_accuracy"],
            "cosine_ap": result["cosine_ap"]}


def retrieval(predictions, references):
    """C-MTEB's retrieval scores of the split's distinct queries (by query_id) searched over
    its positives (each distinct positive once, by positive_id), a query's positives judged
    together as mteb's qrels judge them: nDCG@10 (main), MRR@10, recall@10."""
    from mtl_framework.scoring.embedding import one_passage_corpus, retrieval_scores

    _check(predictions, references)
    corpus, judged, queries = {}, {}, {}
    for i, (prediction, reference) in enumerate(zip(predictions, references)):
        row = corpus.setdefault(reference["positive_id"], (len(corpus), prediction["positive"]))[0]
        query = reference.get("query_id", ("pair", i))  # features of before query_id: a pair each
        queries.setdefault(query, prediction["query"])
        judged.setdefault(query, {})[row] = 1
    documents = np.array([vector for _, vector in corpus.values()])
    counts = {"documents": float(len(documents)), "queries": float(len(queries))}
    if one_passage_corpus(len(documents)):  # 1.0 for any model: no score (dev.py's note says why)
        return {"ndcg_at_10": np.nan, "mrr_at_10": np.nan, "recall_at_10": np.nan, **counts}
    result = retrieval_scores(np.array(list(queries.values())), documents, list(judged.values()),
                              k_values=(1, 10, 100))
    return {"ndcg_at_10": result["ndcg_at_10"], "mrr_at_10": result["mrr_at_10"],
            "recall_at_10": result["recall_at_10"], **counts}


def reranking(predictions, references):
    """C-MTEB's reranking scores (T2Reranking's protocol, mteb's reranking evaluator): each
    query ranks its own positive among its own hard negatives: MAP (main; mteb's
    map_at_1000), MRR@10, and the mean number of candidates."""
    from mtl_framework.scoring.embedding import positive_among_negatives

    _check(predictions, references)
    negatives = [p.get("negatives", ()) for p in predictions]
    if not any(len(n) for n in negatives):
        raise ValueError("no pair has hard negatives: reranking ranks each positive among its "
                         "`neg` passages; give the split negatives, or score it by `metric: retrieval`")
    result = positive_among_negatives(np.array([p["query"] for p in predictions]),
                                      np.array([p["positive"] for p in predictions]), negatives)
    return {"map": result["map_at_1000"], "mrr_at_10": result["mrr_at_10"],
            "candidates": float(np.mean([1 + len(n) for n in negatives]))}


EMBEDDING_METRICS = {"cosine_spearman": "cosine_spearman",
                     "pair_classification": "max_accuracy", "retrieval": "ndcg_at_10",
                     "reranking": "map"}


def _named(keys, fn):
    def metric(predictions, references):
        values = fn(predictions, references)
        values = values if isinstance(values, tuple) else (values,)
        return dict(zip(keys, values))
    return metric


# The one list of metric names: a spec's `metric` (spec_schema.METRICS is its keys).
METRICS = {
    "accuracy": _named(("accuracy",), accuracy),
    "macro_f1": _named(("macro_f1", "accuracy"),
                       lambda p, r: (macro_f1(p, r), accuracy(p, r))),
    "micro_f1": _named(("micro_f1", "precision", "recall"), micro_f1),
    "em_f1": _named(("em", "f1"), em_f1),
    "span_f1": _named(("f1", "precision", "recall"), set_f1),
    "triple_f1": _named(("f1", "precision", "recall"), set_f1),
    "event_f1": event_f1,
    "spearman": _named(("spearman",), spearman),
    "pearson": _named(("pearson",), pearson),
    "mrr": _named(("mrr",), mrr),
    "cosine_spearman": cosine_spearman,
    "pair_classification": pair_classification,
    "retrieval": retrieval,
    "reranking": reranking,
}
# Set metrics score predicted sets of spans, triples or event arguments by F1.
SET_METRICS = ("span_f1", "triple_f1", "event_f1")
# The interval each metric's score lies in: fractions, and correlations in [-1, 1].
RANGES = {name: (-1.0, 1.0) if name in ("spearman", "pearson", "cosine_spearman") else (0.0, 1.0)
          for name in METRICS}


def compute_metric(name, predictions, references):
    """The metric `name` (a task spec's `metric`) as a dict of floats."""
    if name not in METRICS:
        raise ValueError(f"unknown metric {name!r}; expected one of: "
                         f"{', '.join(METRICS)}")
    return METRICS[name](predictions, references)


def primary_score(name, result):
    """One number per metric for model selection and averaging across tasks:
    (EM + F1) / 2 for em_f1 (the official script's AVERAGE), F1 for the set
    metrics, else the metric itself."""
    if name == "em_f1":
        return (result["em"] + result["f1"]) / 2
    if name in SET_METRICS:
        return result["f1"]
    if name in EMBEDDING_METRICS:
        return result[EMBEDDING_METRICS[name]]
    if name not in METRICS:
        raise ValueError(f"unknown metric {name!r}; expected one of: "
                         f"{', '.join(METRICS)}")
    return result[name]


# -------------------------------------------------------- majority baseline


def majority_label(labels):
    """The most frequent label (a multi-label row counts as its whole set;
    ties go to the label seen first)."""
    if not len(labels):
        raise ValueError("majority_label needs at least one training label")
    counts = Counter(_hashable(sorted(_as_set(l), key=str)) if isinstance(
        l, (list, tuple, set, frozenset, np.ndarray)) else l for l in labels)
    return counts.most_common(1)[0][0]


def majority_predictions(name, references, train_labels=None, num_candidates=None):
    """What a model blind to the input would predict for each reference,
    learned from train_labels (the references themselves when not given):
    the majority label (classification), the mean (regression), nothing
    (span, triple, event, em), candidates ranked by how often their position
    was right (mrr; num_candidates defaults to the largest index seen + 1)."""
    n = len(references)
    source = train_labels if train_labels is not None else references
    if name in ("accuracy", "macro_f1", "micro_f1"):
        label = majority_label(source)
        return [list(label) if isinstance(label, tuple) else label] * n
    if name in ("spearman", "pearson"):
        return [float(np.mean(np.asarray(source, dtype=np.float64)))] * n
    if name in SET_METRICS:
        return [[] for _ in range(n)]
    if name == "em_f1":
        return [""] * n
    if name in EMBEDDING_METRICS:
        raise ValueError(f"{name} scores embeddings: no input-blind baseline")
    if name == "mrr":
        counts = Counter(i for r in source for i in _as_set(r))
        size = num_candidates or 1 + max(i for r in list(source) + list(references)
                                         for i in _as_set(r))
        # earlier positions win ties, so the ranking is strict
        scores = np.array([counts[i] - i * 1e-6 for i in range(size)])
        return [scores] * n
    raise ValueError(f"unknown metric {name!r}; expected one of: {', '.join(METRICS)}")


def score_with_baseline(name, predictions, references, train_labels=None):
    """(result, primary score, the majority baseline's primary score, the majority
    predictions): the metric beside the floor a model blind to the input reaches (both
    baseline values None where the metric has no such floor)."""
    result = compute_metric(name, predictions, references)
    try:
        majority = majority_predictions(name, references, train_labels)
        baseline = primary_score(name, compute_metric(name, majority, references))
    except ValueError:
        majority, baseline = None, None
    return result, primary_score(name, result), baseline, majority


def majority_baseline(name, references, train_labels=None, **kwargs):
    """compute_metric of majority_predictions: the floor a trained model must
    clear (a benchmark's "majority" row)."""
    return compute_metric(name, majority_predictions(name, references, train_labels, **kwargs),
                          references)
