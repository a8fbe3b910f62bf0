"""Embedding scores as C-MTEB computes them, on fixed embeddings (NumPy; scikit-learn for
classification's logistic regression only).

One pure function per task kind, each mirroring an evaluator of the `mteb` package
(github.com/embeddings-benchmark/mteb) at MTEB_VERSION, and returning a dict of named
scores with mteb's own key names:

- sts_scores:                   AbsTaskSTS + AnySTSEvaluator (main: cosine_spearman)
- pair_classification_scores:   AbsTaskPairClassification + PairClassificationEvaluator
                                (main for C-MTEB's Ocnli / Cmnli: max_accuracy)
- classification_scores:        AbsTaskClassification + SklearnEvaluator, with scikit-learn's
                                LogisticRegression(max_iter=100) itself (main: accuracy)
- reranking_scores:             AbsTaskReranking = AbsTaskRetrieval over each query's own
                                candidates (main for C-MTEB's rerankers: map_at_1000; mrr_at_10)
- retrieval_scores:             AbsTaskRetrieval + RetrievalEvaluator, i.e. pytrec_eval's
                                ndcg_cut / map_cut / recall / P / success and mteb's MRR@k
                                (main: ndcg_at_10)
- clustering_scores:            AbsTaskClusteringLegacy + ClusteringEvaluator, scikit-learn's
                                MiniBatchKMeans and v_measure_score themselves (main: v_measure;
                                C-MTEB's CLS / ThuNews clustering tasks in MTEB(cmn, v1))

tests/fixtures/mteb/ holds mteb's own figures on fixed embeddings (bench/mteb_fixtures.py
made them, in a venv of its own) and tests/test_embedding_scores.py holds every function
here to them within 1e-6. Similarities are computed in the embeddings' own dtype, float32
for an encoder's vectors, as mteb's scikit-learn calls compute them (float64 for anything
else): on a nearly collapsed model (every cosine within 1e-5 of 1) float32 resolution ties
pairs, and mteb's Spearman is that of the tied values (a 3-update run's AFQMC: 0.2541 in
float32, 0.2565 in float64). mteb's torch similarities (the model's own, retrieval's search)
are float32 too, summed in another order: they can still part from these by float32 noise.
"""
import warnings
from collections import defaultdict

import numpy as np

from mtl_framework.numbers import l2_normalize

MTEB_VERSION = "2.26.24"
# mteb's task type (its AbsTask name) -> the figure it ranks models by
MAIN_SCORE = {
    "STS": "cosine_spearman",
    "PairClassification": "max_accuracy",
    "Classification": "accuracy",
    "Reranking": "map_at_1000",
    "Retrieval": "ndcg_at_10",
    "Clustering": "v_measure",
}
# AbsTaskRetrieval.k_values (reranking tasks inherit them).
RETRIEVAL_K_VALUES = (1, 3, 5, 10, 20, 100, 1000)


# --- similarities, as scikit-learn's paired_* distances compute them ---------------------------

def _as_matrix(embeddings, name):
    matrix = np.asarray(embeddings)
    if matrix.dtype != np.float32:
        matrix = matrix.astype(np.float64)
    if matrix.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (n, dim), got shape {matrix.shape}")
    return matrix


def _paired_cosine(a, b):
    # 1 - sklearn's paired_cosine_distances = 1 - ||a/|a| - b/|b|||^2 / 2: the cosine for
    # non-zero rows, and 0.5 (not 0) against an all-zero row, as mteb reports it. sklearn's
    # normalize leaves an all-zero row zero, as numbers.l2_normalize does (the two part only
    # for a norm below 1e-12, which no encoder's vector has).
    difference = l2_normalize(a) - l2_normalize(b)
    return 1.0 - 0.5 * np.einsum("ij,ij->i", difference, difference)


def _model_cosine(a, b):
    # mteb's pairwise_cos_sim, the `similarity` of a cosine model: torch's normalize divides by
    # max(norm, 1e-12) (numbers.l2_normalize), so an all-zero row scores 0 here (where
    # sklearn's form above gives 0.5).
    return np.einsum("ij,ij->i", l2_normalize(a), l2_normalize(b))


def _paired_manhattan(a, b):
    return np.abs(a - b).sum(axis=1)


def _paired_euclidean(a, b):
    difference = a - b
    return np.sqrt(np.einsum("ij,ij->i", difference, difference))


def _pair_embeddings(embeddings1, embeddings2):
    a = _as_matrix(embeddings1, "embeddings1")
    b = _as_matrix(embeddings2, "embeddings2")
    if a.shape != b.shape:
        raise ValueError(f"embeddings1 {a.shape} and embeddings2 {b.shape} must have the same shape")
    return a, b


# --- correlations, as scipy.stats computes them ------------------------------------------------

def average_ranks(values):
    """scipy.stats.rankdata(method='average'): ties share the mean of their 1-based ranks."""
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    starts = np.r_[True, sorted_values[1:] != sorted_values[:-1]]
    group = np.cumsum(starts) - 1
    first = np.flatnonzero(starts)
    last = np.r_[first[1:], len(values)]
    ranks = np.empty(len(values))
    ranks[order] = ((first + 1 + last) / 2.0)[group]
    return ranks


def _pearson(x, y):
    """scipy.stats.pearsonr's r; nan when either side is constant (scipy warns and returns nan)."""
    x_centred = np.asarray(x, dtype=np.float64) - np.mean(x)
    y_centred = np.asarray(y, dtype=np.float64) - np.mean(y)
    x_norm, y_norm = np.linalg.norm(x_centred), np.linalg.norm(y_centred)
    if x_norm == 0.0 or y_norm == 0.0:
        return float("nan")
    return float(np.clip(np.dot(x_centred / x_norm, y_centred / y_norm), -1.0, 1.0))


def _spearman(x, y):
    return _pearson(average_ranks(x), average_ranks(y))


def spearman(x, y):
    """scipy.stats.spearmanr's rho (average ranks for ties); nan when either side is constant."""
    return _spearman(x, y)


def paired_cosines(embeddings1, embeddings2):
    """sts_scores' cosine of each pair (1 - sklearn's paired cosine distance)."""
    return _paired_cosine(*_pair_embeddings(embeddings1, embeddings2))


def sts_scores(embeddings1, embeddings2, gold_scores):
    """Pearson and Spearman of each pair similarity against the gold scores.

    Mirrors mteb 2.26 AbsTaskSTS._calculate_scores over AnySTSEvaluator's similarities
    (mteb/abstasks/sts.py, mteb/_evaluators/any_sts_evaluator.py): cosine = 1 - sklearn's
    paired_cosine_distances, manhattan / euclidean = minus sklearn's paired distances,
    scipy's pearsonr and spearmanr (average ranks for ties). mteb's min-max normalisation of
    the gold scores is linear and changes neither correlation. `pearson` / `spearman` are
    mteb's figures under the model's own similarity, cosine for our encoders, which differs from
    cosine_* only on an all-zero embedding (see _model_cosine).
    """
    a, b = _pair_embeddings(embeddings1, embeddings2)
    gold = np.asarray(gold_scores, dtype=np.float64)
    if gold.shape != (len(a),):
        raise ValueError(f"gold_scores must hold one score per pair ({len(a)}), got shape {gold.shape}")
    scores = {}
    for name, similarity in (("", _model_cosine(a, b)), ("cosine_", _paired_cosine(a, b)),
                             ("manhattan_", -_paired_manhattan(a, b)),
                             ("euclidean_", -_paired_euclidean(a, b))):
        scores[f"{name}pearson"] = _pearson(gold, similarity)
        scores[f"{name}spearman"] = _spearman(gold, similarity)
    return scores


# --- pair classification -------------------------------------------------------------------------

def _cuts(scores, labels, high_score_more_similar):
    """The pairs sorted most similar first, and where a threshold may fall: after each of the
    first n-1 sorted pairs whose score differs from the next one's (mteb 2.26 never splits tied
    scores, so input order cannot leak into a figure; predicting all pairs alike is not tried)."""
    order = np.argsort(-scores if high_score_more_similar else scores, kind="stable")
    sorted_scores = scores[order]
    return labels[order][:-1] == 1, sorted_scores[:-1] != sorted_scores[1:]


def _best_accuracy(scores, labels, high_score_more_similar):
    """mteb's _find_best_acc_and_threshold: the best accuracy over the allowed cuts (0 if none)."""
    positive, allowed = _cuts(scores, labels, high_score_more_similar)
    accuracy = (np.cumsum(positive) + np.sum(labels == 0) - np.cumsum(~positive)) / len(labels)
    return float(np.max(accuracy[allowed], initial=0.0))


def _best_f1(scores, labels, high_score_more_similar):
    """mteb's _find_best_f1_and_threshold: (f1, precision, recall) of the first allowed cut reaching
    the best F1 (0, 0, 0 when no allowed cut has a true positive)."""
    positive, allowed = _cuts(scores, labels, high_score_more_similar)
    best = (0.0, 0.0, 0.0)
    for extracted, correct in zip(np.flatnonzero(allowed) + 1, np.cumsum(positive)[allowed]):
        if correct == 0:
            continue
        precision, recall = correct / extracted, correct / np.sum(labels)
        f1 = 2 * precision * recall / (precision + recall)
        if f1 > best[0]:
            best = (float(f1), float(precision), float(recall))
    return best


def _average_precision(labels, scores):
    """sklearn.metrics.average_precision_score for binary labels (positive = 1): the sum over
    distinct score thresholds, highest first, of (recall gained) x (precision there); 0 when no
    label is positive."""
    order = np.argsort(-scores, kind="stable")
    sorted_scores, positive = scores[order], labels[order] == 1
    threshold_ends = np.r_[np.flatnonzero(sorted_scores[1:] != sorted_scores[:-1]), len(scores) - 1]
    true_positives = np.cumsum(positive)[threshold_ends]
    if true_positives[-1] == 0:
        return 0.0
    precision = true_positives / (threshold_ends + 1)
    recall_gained = np.diff(np.r_[0, true_positives]) / true_positives[-1]
    return float(max(0.0, np.sum(recall_gained * precision)))


def pair_similarities(a, b):
    """(name, per-pair values, higher means more similar) of each similarity mteb's pair
    classification scores: the model's own (cosine), cosine, manhattan, euclidean, dot."""
    return (("similarity", _model_cosine(a, b), True), ("cosine", _paired_cosine(a, b), True),
            ("manhattan", _paired_manhattan(a, b), False),
            ("euclidean", _paired_euclidean(a, b), False),
            ("dot", np.einsum("ij,ij->i", a, b), True))


def max_accuracy(similarities, labels, rows=slice(None)):
    """pair_classification_scores' max_accuracy from pair_similarities' output, on `rows` of
    the pairs (a bootstrap resample reuses the similarities)."""
    return max(_best_accuracy(values[rows], labels[rows], higher)
               for _, values, higher in similarities)


def pair_classification_scores(embeddings1, embeddings2, labels):
    """Best-threshold accuracy, best F1 (its precision and recall) and average precision of each
    pair similarity, and the max of each over the similarities.

    Mirrors mteb 2.26 AbsTaskPairClassification._compute_metrics over PairClassificationEvaluator
    (mteb/abstasks/pair_classification.py, mteb/_evaluators/pair_classification_evaluator.py):
    similarities cosine and dot (higher = more similar), manhattan and euclidean distances (lower
    = more similar); `similarity` is the model's own, cosine for our encoders (an all-zero
    embedding scores 0 there, 0.5 under `cosine`: see _model_cosine). AP is sklearn's on
    the scores (distances negated). Labels are 0 / 1. C-MTEB's main score is max_accuracy.
    """
    a, b = _pair_embeddings(embeddings1, embeddings2)
    labels = np.asarray(labels)
    if labels.shape != (len(a),) or not np.isin(labels, (0, 1)).all():
        raise ValueError(f"labels must hold one 0 / 1 label per pair ({len(a)})")
    labels = labels.astype(np.int64)
    scores, best = {}, defaultdict(list)
    for name, values, high_score_more_similar in pair_similarities(a, b):
        f1, precision, recall = _best_f1(values, labels, high_score_more_similar)
        metrics = {
            "accuracy": _best_accuracy(values, labels, high_score_more_similar),
            "f1": f1, "precision": precision, "recall": recall,
            "ap": _average_precision(labels, values if high_score_more_similar else -values),
        }
        for metric, value in metrics.items():
            scores[f"{name}_{metric}"] = value
            best[metric].append(value)
    scores.update({f"max_{metric}": max(values) for metric, values in best.items()})
    return scores


# --- classification: logistic regression on embeddings --------------------------------------------

def _undersampled_indices(labels, n_experiments, samples_per_label, seed):
    """mteb's AbsTaskClassification._undersample_data, experiment by experiment: ONE index list,
    shuffled in place by a fresh RandomState(seed) each experiment (so experiment i sees that
    permutation applied i+1 times), then the first samples_per_label indices of each label."""
    indices = list(range(len(labels)))
    for _ in range(n_experiments):
        np.random.RandomState(seed).shuffle(indices)
        taken, selected = defaultdict(int), []
        for index in indices:
            if taken[labels[index]] < samples_per_label:
                selected.append(index)
                taken[labels[index]] += 1
        yield selected


def _prf_per_label(y_true, y_pred, classes):
    """sklearn's precision / recall / F1 per label (0 where undefined: zero_division='warn')."""
    tp = np.array([np.sum((y_pred == c) & (y_true == c)) for c in classes], dtype=np.float64)
    predicted = np.array([np.sum(y_pred == c) for c in classes], dtype=np.float64)
    support = np.array([np.sum(y_true == c) for c in classes], dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(predicted > 0, tp / predicted, 0.0)
        recall = np.where(support > 0, tp / support, 0.0)
        denominator = predicted + support  # = 2tp + fp + fn
        f1 = np.where(denominator > 0, 2 * tp / denominator, 0.0)
    return precision, recall, f1, support


def _classification_metrics(y_true, y_pred):
    """mteb's AbsTaskClassification._calculate_scores: sklearn's accuracy, macro and weighted
    precision / recall / F1 over the labels seen in truth or prediction, and for a binary truth
    average_precision_score of the predicted labels (positive label 1; macro = weighted there)."""
    classes = np.unique(np.concatenate([y_true, y_pred]))
    precision, recall, f1, support = _prf_per_label(y_true, y_pred, classes)
    weights = support / support.sum()
    metrics = {"accuracy": float(np.mean(y_true == y_pred))}
    for name, values in (("f1", f1), ("precision", precision), ("recall", recall)):
        metrics[name] = float(np.mean(values))
        metrics[f"{name}_weighted"] = float(np.sum(values * weights))
    metrics["ap"] = metrics["ap_weighted"] = None
    if len(np.unique(y_true)) == 2:
        ap = _average_precision((y_true == 1).astype(np.int64), y_pred.astype(np.float64))
        metrics["ap"] = metrics["ap_weighted"] = ap
    return metrics


def classification_scores(train_embeddings, train_labels, test_embeddings, test_labels, *,
                          n_experiments=10, samples_per_label=8, seed=42):
    """Logistic regression on embeddings, averaged over n_experiments undersampled training sets.

    Mirrors mteb 2.26 AbsTaskClassification._evaluate_subset with its default evaluator_model
    (mteb/abstasks/classification.py, mteb/_evaluators/sklearn_evaluator.py): per experiment,
    samples_per_label training examples of each label drawn as _undersampled_indices says,
    scikit-learn's LogisticRegression(max_iter=100, random_state=seed) fitted on them, the test set
    predicted and scored; each figure is the mean over the experiments (ap only when the test labels
    are binary, else nan). mteb's defaults are n_experiments=10, samples_per_label=8, seed=42;
    C-MTEB's TNews, MultilingualSentiment, JDReview, OnlineShopping and Waimai use
    samples_per_label=32, IFlyTek 32 and n_experiments=5. `scores_per_experiment` holds each
    experiment's figures.

    scikit-learn itself fits the regression (imported here only): its lbfgs stops at gradient 1e-4
    or 100 iterations, computing in the embeddings' own dtype, and where it stops decides the
    figures (a NumPy solver run to the exact optimum predicted 1 of the binary fixture's 150 test
    rows differently: accuracy 0.960 against mteb's 0.953). So pass the embeddings in the dtype the
    encoder produced (float32), as mteb receives them.
    """
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    x_train, x_test = np.asarray(train_embeddings), np.asarray(test_embeddings)
    y_train, y_test = np.asarray(train_labels), np.asarray(test_labels)
    if x_train.ndim != 2 or x_test.ndim != 2 or x_train.shape[1] != x_test.shape[1]:
        raise ValueError(f"train and test embeddings must be 2-D arrays of one width, got "
                         f"{x_train.shape} and {x_test.shape}")
    if y_train.shape != (len(x_train),) or y_test.shape != (len(x_test),):
        raise ValueError("train_labels and test_labels must hold one label per embedding row")
    per_experiment, correct = [], []
    for selected in _undersampled_indices(y_train.tolist(), n_experiments, samples_per_label, seed):
        regression = LogisticRegression(max_iter=100, random_state=seed)
        with warnings.catch_warnings():
            # stopping at 100 iterations is the protocol (mteb's figures stop there too), not news
            warnings.simplefilter("ignore", ConvergenceWarning)
            regression.fit(x_train[selected], y_train[selected])
        predicted = regression.predict(x_test)
        correct.append(predicted == y_test)
        per_experiment.append(_classification_metrics(y_test, predicted))
    scores = {}
    for key in per_experiment[0]:
        values = [experiment[key] for experiment in per_experiment if experiment[key] is not None]
        scores[key] = float(np.mean(values)) if values else float("nan")
    scores["scores_per_experiment"] = per_experiment
    # per test row, the fraction of experiments that got it right (its mean is `accuracy`):
    # what a bootstrap over the test rows resamples
    scores["accuracy_per_example"] = np.mean(correct, axis=0)
    return scores


# --- ranking: retrieval over a corpus and reranking of candidates -----------------------------------

def _cosine_matrix(queries, documents):
    return l2_normalize(queries) @ l2_normalize(documents).T


def _ranked_top(scores, id_order, depth):
    """Indices of the `depth` best documents, ordered as trec_eval (and mteb's MRR) order them:
    by score descending, ties by document id descending (a string comparison)."""
    if len(scores) > depth:  # keep every document tied with the depth-th score
        cutoff = np.partition(scores, len(scores) - depth)[len(scores) - depth]
        candidates = np.flatnonzero(scores >= cutoff)
    else:
        candidates = np.arange(len(scores))
    ranked = candidates[np.lexsort((-id_order[candidates], -scores[candidates]))]
    return ranked[:depth]


def _query_metrics(ranked_grades, n_relevant, ideal_grades, k_values):
    """pytrec_eval's ndcg_cut_k, map_cut_k, recall_k, P_k, success_k (relevance level 1: a grade
    >= 1 is relevant; nDCG gains are the grades, discounts log2(rank + 1)) and mteb's MRR@k
    (relevant: grade > 0) for one query, from the grades of its ranked documents."""
    relevant = ranked_grades >= 1
    ranks = np.arange(1, len(ranked_grades) + 1)
    discounts = 1.0 / np.log2(ranks + 1)
    gains = np.where(ranked_grades > 0, ranked_grades, 0.0) * discounts
    ideal = ideal_grades * (1.0 / np.log2(np.arange(2, len(ideal_grades) + 2)))
    hits = np.cumsum(relevant)
    precision_at_hits = np.where(relevant, hits / ranks, 0.0)
    first_relevant = np.flatnonzero(ranked_grades > 0)
    metrics = {}
    for k in k_values:
        ideal_dcg = ideal[:k].sum()
        hits_at_k = hits[min(k, len(hits)) - 1] if len(hits) else 0
        metrics[f"ndcg_at_{k}"] = gains[:k].sum() / ideal_dcg if ideal_dcg > 0 else 0.0
        metrics[f"map_at_{k}"] = precision_at_hits[:k].sum() / n_relevant if n_relevant else 0.0
        metrics[f"recall_at_{k}"] = hits_at_k / n_relevant if n_relevant else 0.0
        metrics[f"precision_at_{k}"] = hits_at_k / k
        metrics[f"hit_rate_at_{k}"] = float(hits_at_k > 0)
        found = len(first_relevant) and first_relevant[0] < k
        metrics[f"mrr_at_{k}"] = 1.0 / (first_relevant[0] + 1) if found else 0.0
    return metrics


def _id_order(ids, count, name):
    ids = [str(i) for i in range(count)] if ids is None else [str(i) for i in ids]
    if len(ids) != count or len(set(ids)) != count:
        raise ValueError(f"{name} must hold {count} distinct ids")
    order = np.empty(count, dtype=np.int64)
    order[np.argsort(np.array(ids), kind="stable")] = np.arange(count)
    return order


def _mean_over_queries(per_query, k_values):
    """mteb averages every figure over the queries pytrec_eval scored (those with qrels)."""
    if not per_query:
        raise ValueError("no query has any judged document (qrels): nothing to score")
    keys = [f"{m}_at_{k}" for m in ("ndcg", "map", "recall", "precision", "mrr", "hit_rate")
            for k in k_values]
    return {key: float(np.mean([query[key] for query in per_query])) for key in keys}


def _check_k_values(k_values):
    k_values = tuple(int(k) for k in k_values)
    if not k_values or min(k_values) < 1:
        raise ValueError(f"k_values must be positive integers, got {k_values}")
    return k_values


def one_passage_corpus(passages):
    """Why a retrieval corpus of `passages` distinct passages has no score, or None (R5-45):
    with one, every query finds it first, 1.0 for any encoder. The one rule for the
    embeddings suite and for training's and `mtl evaluate`'s dev retrieval."""
    if passages == 1:
        return "its corpus holds one passage: every query finds it first (nDCG 1.0 for any encoder)"
    return None


def retrieval_scores(query_embeddings, corpus_embeddings, qrels, *, corpus_ids=None,
                     k_values=RETRIEVAL_K_VALUES, per_query=False):
    """nDCG, MAP, recall, precision, hit rate and MRR at each k for queries searched over a corpus.

    Mirrors mteb 2.26 AbsTaskRetrieval._evaluate_subset -> RetrievalEvaluator.evaluate ->
    calculate_retrieval_scores (mteb/abstasks/retrieval.py, mteb/_evaluators/retrieval_evaluator.py,
    mteb/_evaluators/retrieval_metrics.py), with cosine similarity:
    - qrels[i] maps corpus row -> grade for query i; a query with no entry at all is dropped, as
      mteb's _filter_queries_without_positives drops it; a query whose entries are all grade 0
      stays and scores 0 everywhere;
    - each query's documents are ranked by score, ties by corpus id descending as strings (ids
      default to the row numbers as strings, '9' > '10'), as trec_eval and mteb's MRR break them;
      the ranking is cut at max(k_values), mteb's top_k;
    - ndcg_at_k, map_at_k, recall_at_k, precision_at_k, hit_rate_at_k are pytrec_eval's
      ndcg_cut, map_cut, recall, P, success; mrr_at_k is mteb's; each is the mean over queries.
    mteb rounds all but MRR to 5 decimals in what it reports; these are unrounded. `per_query`
    adds each kept query's figures under "per_query".
    """
    queries = _as_matrix(query_embeddings, "query_embeddings")
    corpus = _as_matrix(corpus_embeddings, "corpus_embeddings")
    if len(qrels) != len(queries):
        raise ValueError(f"qrels must hold one mapping per query ({len(queries)}), got {len(qrels)}")
    k_values = _check_k_values(k_values)
    id_order = _id_order(corpus_ids, len(corpus), "corpus_ids")
    kept = [i for i, judged in enumerate(qrels) if len(judged)]
    each = []
    for start in range(0, len(kept), 64):  # 64 queries x 100k documents: 51 MB of similarities
        chunk = kept[start:start + 64]
        similarities = _cosine_matrix(queries[chunk], corpus)
        for row, query in zip(similarities, chunk):
            grades = np.zeros(len(corpus))
            for document, grade in qrels[query].items():
                if not 0 <= int(document) < len(corpus):
                    raise ValueError(f"qrels[{query}] names corpus row {document}, "
                                     f"outside 0..{len(corpus) - 1}")
                grades[int(document)] = grade
            ranked = _ranked_top(row, id_order, max(k_values))
            each.append(_query_metrics(grades[ranked], int(np.sum(grades >= 1)),
                                       np.sort(grades[grades > 0])[::-1], k_values))
    scores = _mean_over_queries(each, k_values)
    if per_query:  # each kept query's figures (their means are the scores): for a bootstrap
        scores["per_query"] = each
    return scores


def reranking_scores(query_embeddings, candidate_embeddings, candidate_grades, *, candidate_ids=None,
                     k_values=RETRIEVAL_K_VALUES, per_query=False):
    """MAP, MRR, nDCG ... at each k for queries that each rank their own candidate documents.

    Mirrors mteb 2.26 AbsTaskReranking, which is AbsTaskRetrieval with `top_ranked` candidates
    (mteb/abstasks/text/reranking.py; the search wrapper scores only a query's candidates), so the
    figures are retrieval_scores' over each query's candidates: C-MTEB's T2 / MMarco / CMedQA
    rerankers report map_at_1000 (main) and mrr_at_10. candidate_embeddings[i] is query i's
    (n_i, dim) candidates, candidate_grades[i] their grades (1 relevant, 0 not). Tied scores are
    broken by candidate id descending; by default the ids are those mteb gives an old-format
    reranking set (`apositive_<query>_<00000>` for grade >= 1, `negative_<query>_<00000>` for the
    rest, numbered in input order), which ranks a tied negative above a tied positive.
    `per_query` adds each kept query's figures under "per_query" (as retrieval_scores).
    """
    queries = _as_matrix(query_embeddings, "query_embeddings")
    if not len(candidate_embeddings) == len(candidate_grades) == len(queries):
        raise ValueError("candidate_embeddings and candidate_grades must hold one entry per query "
                         f"({len(queries)})")
    k_values = _check_k_values(k_values)
    each = []
    for query, (candidates, grades) in enumerate(zip(candidate_embeddings, candidate_grades)):
        candidates = _as_matrix(candidates, f"candidate_embeddings[{query}]")
        grades = np.asarray(grades, dtype=np.float64)
        if grades.shape != (len(candidates),):
            raise ValueError(f"candidate_grades[{query}] must hold one grade per candidate "
                             f"({len(candidates)})")
        if len(candidates) == 0:
            continue  # no judged document: mteb drops the query
        if candidate_ids is None:
            positives, negatives = np.cumsum(grades >= 1) - 1, np.cumsum(grades < 1) - 1
            ids = [f"apositive_q{query}_{p:05d}" if g >= 1 else f"negative_q{query}_{n:05d}"
                   for g, p, n in zip(grades, positives, negatives)]
        else:
            ids = candidate_ids[query]
        id_order = _id_order(ids, len(candidates), f"candidate_ids[{query}]")
        similarities = _cosine_matrix(queries[query:query + 1], candidates)[0]
        ranked = _ranked_top(similarities, id_order, max(k_values))
        each.append(_query_metrics(grades[ranked], int(np.sum(grades >= 1)),
                                   np.sort(grades[grades > 0])[::-1], k_values))
    scores = _mean_over_queries(each, k_values)
    if per_query:
        scores["per_query"] = each
    return scores


def positive_among_negatives(queries, positives, negatives, per_query=False):
    """reranking_scores (k 10 and 1000: MAP, MRR@10) of each query ranking its one positive
    among its own negatives: queries, positives [n, dim]; negatives[i] query i's [m_i, dim]."""
    candidates = [np.vstack([positive[None]] + ([rows] if len(rows) else []))
                  for positive, rows in zip(np.asarray(positives), negatives)]
    grades = [np.r_[1.0, np.zeros(len(c) - 1)] for c in candidates]
    return reranking_scores(queries, candidates, grades, k_values=(10, 1000), per_query=per_query)


# --- clustering: k-means on embeddings ---------------------------------------------------------------

def clustering_scores(embeddings, labels, *, batch_size=500, seed=42):
    """V-measure of k-means clusters of the embeddings against their labels, one cluster set.

    Mirrors mteb 2.26 AbsTaskClusteringLegacy._evaluate_subset over ClusteringEvaluator
    (mteb/abstasks/clustering_legacy.py, mteb/_evaluators/clustering_evaluator.py), the protocol
    of MTEB(cmn, v1)'s CLSClusteringS2S / P2P and ThuNewsClusteringS2S / P2P: per cluster set,
    scikit-learn's MiniBatchKMeans(n_clusters = the number of distinct labels, batch_size=500,
    n_init="auto", compute_labels=True, random_state=seed) fitted on the set's embeddings as the
    encoder gave them (float32: k-means computes in that dtype), then v_measure_score of the
    labels against its labels_; a set with one label is 1.0 without clustering (mteb skips it).
    mteb's task figure is the mean over its sets; this is one set's. (mteb's newer `.v2` tasks,
    AbsTaskClustering, instead cluster 10 resamples drawn with replacement, n_init=1, k-means++,
    batch 512; MTEB(cmn, v1) does not use them.) `assignment` holds the clusters, for a
    bootstrap of the V-measure over the examples with the clustering fixed."""
    from sklearn.cluster import MiniBatchKMeans
    from sklearn.metrics.cluster import v_measure_score

    vectors, labels = np.asarray(embeddings), np.asarray(labels)
    if vectors.ndim != 2 or labels.shape != (len(vectors),):
        raise ValueError(f"embeddings must be a 2-D array with one label per row, got "
                         f"{vectors.shape} and {labels.shape}")
    distinct = len(set(labels.tolist()))
    if distinct <= 1:
        return {"v_measure": 1.0, "assignment": np.zeros(len(labels), np.int64)}
    model = MiniBatchKMeans(n_clusters=distinct, batch_size=batch_size, n_init="auto",
                            compute_labels=True, random_state=seed)
    model.fit(vectors)
    return {"v_measure": float(v_measure_score(labels, model.labels_)),
            "assignment": np.asarray(model.labels_)}
