"""mtl_framework/scoring/embedding.py against mteb's own figures and by hand.

tests/fixtures/mteb/*.json hold fixed embeddings and what mteb's task.evaluate reported on them
(bench/mteb_fixtures.py made them in a venv holding mteb; each names the mteb release and files).
Every figure of ours must be within 1e-6 of mteb's. The edge cases (tied similarities, a query
with no relevant document, one with no judgement) are also checked against computations written
here from the definitions.
"""
import json
import math
from pathlib import Path

import numpy as np
import pytest

from mtl_framework.scoring import embedding as es

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "mteb"
TOLERANCE = 1e-6


def load(name):
    with open(FIXTURES / f"{name}.json", encoding="utf-8") as f:
        fixture = json.load(f)
    assert fixture["versions"]["mteb"] == es.MTEB_VERSION
    return fixture["inputs"], fixture["mteb"]


def assert_equal_figures(ours, theirs, keys=None):
    """Every numeric figure mteb reported (or `keys` of them) within TOLERANCE of ours."""
    keys = [k for k, v in theirs.items() if isinstance(v, (int, float)) and k != "main_score"] \
        if keys is None else keys
    assert keys
    for key in keys:
        if math.isnan(theirs[key]):
            assert math.isnan(ours[key]), key
        else:
            assert abs(ours[key] - theirs[key]) <= TOLERANCE, (key, ours[key], theirs[key])


def test_main_scores_are_among_the_figures():
    inputs, _ = load("sts")
    scores = es.sts_scores(inputs["embeddings1"], inputs["embeddings2"], inputs["gold_scores"])
    assert es.MAIN_SCORE["STS"] in scores


# --- against mteb ---------------------------------------------------------------------------------

def test_sts_equals_mteb():
    inputs, theirs = load("sts")
    ours = es.sts_scores(inputs["embeddings1"], inputs["embeddings2"], inputs["gold_scores"])
    assert_equal_figures(ours, theirs)
    assert set(ours) == set(theirs) - {"main_score"}
    assert ours["cosine_spearman"] == pytest.approx(theirs["main_score"], abs=TOLERANCE)


def test_pair_classification_equals_mteb():
    inputs, theirs = load("pair_classification")
    ours = es.pair_classification_scores(inputs["embeddings1"], inputs["embeddings2"], inputs["labels"])
    assert_equal_figures(ours, theirs)
    assert set(ours) == set(theirs) - {"main_score"}
    # the all-zero pair (row 3) is why the model's similarity and sklearn's cosine differ
    assert ours["similarity_ap"] != pytest.approx(ours["cosine_ap"])


@pytest.mark.parametrize("name", ["classification", "classification_binary"])
def test_classification_equals_mteb(name):
    pytest.importorskip("sklearn", reason="classification_scores fits scikit-learn's LogisticRegression: "
                                          "`make install` (requirements.txt pins scikit-learn)")
    inputs, theirs = load(name)
    # float32, as the encoder gave them to mteb: scikit-learn fits in the input's dtype
    ours = es.classification_scores(
        np.asarray(inputs["train_embeddings"], dtype=np.float32), inputs["train_labels"],
        np.asarray(inputs["test_embeddings"], dtype=np.float32), inputs["test_labels"],
        n_experiments=inputs["n_experiments"], samples_per_label=inputs["samples_per_label"],
        seed=inputs["seed"])
    assert_equal_figures(ours, theirs)
    assert len(ours["scores_per_experiment"]) == inputs["n_experiments"]
    for experiment, mteb_experiment in zip(ours["scores_per_experiment"], theirs["scores_per_experiment"]):
        keys = [k for k, v in mteb_experiment.items() if v is not None]
        assert_equal_figures(experiment, mteb_experiment, keys)
        assert {k for k, v in experiment.items() if v is None} == set(mteb_experiment) - set(keys)


def ranking_fixture(name):
    inputs, theirs = load(name)
    if name == "retrieval":
        ours = es.retrieval_scores(
            inputs["query_embeddings"], inputs["corpus_embeddings"],
            [{int(d): g for d, g in judged.items()} for judged in inputs["qrels"]],
            corpus_ids=inputs["corpus_ids"], k_values=inputs["k_values"])
    else:
        ours = es.reranking_scores(
            inputs["query_embeddings"], inputs["candidate_embeddings"], inputs["candidate_grades"],
            candidate_ids=inputs["candidate_ids"], k_values=inputs["k_values"])
    return inputs, ours, theirs


@pytest.mark.parametrize("name", ["retrieval", "reranking"])
def test_ranking_equals_mteb(name):
    inputs, ours, theirs = ranking_fixture(name)
    assert set(ours) == set(theirs["unrounded"])
    assert_equal_figures(ours, theirs["unrounded"])
    # what mteb reports: all but MRR rounded to 5 decimals
    reported = {k: v if k.startswith("mrr") else round(v, 5) for k, v in ours.items()}
    assert_equal_figures(reported, theirs["reported"], keys=list(ours))
    main = es.MAIN_SCORE[name.capitalize()]
    assert reported[main] == pytest.approx(theirs["reported"]["main_score"], abs=TOLERANCE)


def test_reranking_default_ids_are_mteb_ids():
    inputs, theirs = load("reranking")
    ours = es.reranking_scores(inputs["query_embeddings"], inputs["candidate_embeddings"],
                               inputs["candidate_grades"], k_values=inputs["k_values"])
    assert_equal_figures(ours, theirs["unrounded"])


def test_the_fixtures_hold_the_edge_cases():
    """The mteb fixtures exercise what they claim to: tied similarities, a query whose judged
    documents are all grade 0 (kept, scoring 0), one with no judgement (dropped)."""
    inputs, _ = load("retrieval")
    per_query = json.loads((FIXTURES / "retrieval.json").read_text())["mteb"]["per_query"]
    assert inputs["qrels"][7] == {} and "q7" not in per_query
    assert set(inputs["qrels"][6].values()) == {0} and per_query["q6"]["ndcg_cut_10"] == 0.0
    corpus = np.asarray(inputs["corpus_embeddings"])
    assert (corpus[3] == corpus[25]).all()
    inputs, _ = load("pair_classification")
    e1, e2, labels = (np.asarray(inputs[k]) for k in ("embeddings1", "embeddings2", "labels"))
    assert (e1[0] == e1[1]).all() and (e2[0] == e2[1]).all() and labels[0] != labels[1]


# --- by hand ----------------------------------------------------------------------------------------

def ranks_by_counting(values):
    """Average 1-based ranks: below + (equal + 1) / 2."""
    values = np.asarray(values)
    return np.array([np.sum(values < v) + (np.sum(values == v) + 1) / 2 for v in values])


def test_spearman_with_ties_by_hand():
    rng = np.random.default_rng(0)
    e1 = rng.normal(size=(12, 4))
    e2 = e1 + rng.normal(size=(12, 4))
    e1[5], e2[5] = e1[4], e2[4]  # one tied cosine
    gold = np.array([0, 1, 1, 2, 3, 3, 3, 4, 5, 5, 2, 0], dtype=float)  # tied gold scores
    cosine = np.sum(e1 * e2, axis=1) / np.linalg.norm(e1, axis=1) / np.linalg.norm(e2, axis=1)
    expected = np.corrcoef(ranks_by_counting(gold), ranks_by_counting(cosine))[0, 1]
    scores = es.sts_scores(e1, e2, gold)
    assert scores["cosine_spearman"] == pytest.approx(expected, abs=1e-12)
    assert scores["cosine_pearson"] == pytest.approx(np.corrcoef(gold, cosine)[0, 1], abs=1e-12)


def test_sts_constant_gold_is_nan_as_scipy():
    e = np.eye(3)
    assert math.isnan(es.sts_scores(e, e[::-1], [2.0, 2.0, 2.0])["cosine_spearman"])


def best_accuracy_by_thresholds(scores, labels):
    """A threshold between each two adjacent distinct scores (never inside a tie, never above or
    below all), a pair predicted positive when its score is above it."""
    distinct = np.unique(scores)
    thresholds = (distinct[1:] + distinct[:-1]) / 2
    return max((np.mean((scores > t) == labels) for t in thresholds), default=0.0)


def average_precision_by_thresholds(scores, labels):
    total = 0.0
    for v in np.unique(scores)[::-1]:
        above = scores >= v
        total += np.sum(labels[scores == v]) / np.sum(labels) * np.sum(labels[above]) / np.sum(above)
    return total


def test_pair_classification_ties_by_hand_and_order_free():
    # dot products: 3 tied pairs of mixed labels, then distinct ones
    e1 = np.array([[3.0, 0], [3, 0], [3, 0], [2, 0], [1, 0], [0.5, 0], [4, 0]])
    e2 = np.ones((7, 2))
    labels = np.array([1, 0, 1, 1, 0, 0, 1])
    dot = e1[:, 0]
    scores = es.pair_classification_scores(e1, e2, labels)
    assert scores["dot_accuracy"] == pytest.approx(best_accuracy_by_thresholds(dot, labels))
    assert scores["dot_ap"] == pytest.approx(average_precision_by_thresholds(dot, labels))
    permutation = [2, 6, 0, 4, 1, 5, 3]
    assert es.pair_classification_scores(e1[permutation], e2[permutation], labels[permutation]) == scores


def test_pair_classification_refuses_other_labels():
    with pytest.raises(ValueError, match="0 / 1 label"):
        es.pair_classification_scores(np.eye(3), np.eye(3), [0, 1, 2])


def test_undersampling_keeps_small_labels_whole_and_reshuffles_one_list():
    labels = [0] * 10 + [1] * 3
    selections = list(es._undersampled_indices(labels, 3, 4, seed=42))
    for selected in selections:
        assert sorted(labels[i] for i in selected) == [0] * 4 + [1] * 3
    assert selections[0] != selections[1]  # experiment 2 shuffles experiment 1's order again


def ndcg_by_hand(ranked_grades, all_grades, k):
    dcg = sum(g / math.log2(i + 2) for i, g in enumerate(ranked_grades[:k]))
    ideal = sorted((g for g in all_grades if g > 0), reverse=True)
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal[:k]))
    return dcg / idcg if idcg else 0.0


def test_retrieval_by_hand_ties_and_queries_without_relevant_documents():
    # documents on a line: the query [1, 0] scores them by their x; d9 and d10 tie
    corpus = np.array([[1.0, 0.1], [1.0, 0.5], [1.0, 0.5], [1.0, 2.0], [0.0, 1.0]])
    ids = ["d1", "d9", "d10", "d3", "d4"]  # ties broken by id descending: 'd9' > 'd10'
    query = np.array([[1.0, 0.0]])
    qrels = [{2: 2, 3: 1}]  # d10 (grade 2) and d3 (grade 1)
    scores = es.retrieval_scores(query, corpus, qrels, corpus_ids=ids, k_values=(1, 3, 10))
    grades = [0, 0, 2, 1, 0]  # in ranked order: d1, d9 before its tie d10, d10, d3, d4
    assert scores["ndcg_at_10"] == pytest.approx(ndcg_by_hand(grades, grades, 10))
    assert scores["ndcg_at_3"] == pytest.approx(ndcg_by_hand(grades, grades, 3))
    assert scores["mrr_at_10"] == pytest.approx(1 / 3)
    assert scores["map_at_10"] == pytest.approx((1 / 3 + 2 / 4) / 2)
    assert scores["recall_at_3"] == pytest.approx(0.5) and scores["precision_at_3"] == pytest.approx(1 / 3)
    assert scores["hit_rate_at_1"] == 0.0 and scores["hit_rate_at_3"] == 1.0

    # swapping the tied ids puts the relevant d10's embedding first of the two
    swapped = es.retrieval_scores(query, corpus, qrels, corpus_ids=["d1", "d10", "d9", "d3", "d4"],
                                  k_values=(10,))
    assert swapped["mrr_at_10"] == pytest.approx(1 / 2)

    # a query judging only grade-0 documents counts, scoring 0; one with no judgement is dropped
    with_empty = es.retrieval_scores(np.vstack([query, query, query]), corpus, [qrels[0], {0: 0}, {}],
                                     corpus_ids=ids, k_values=(1, 3, 10))
    for key, value in scores.items():
        assert with_empty[key] == pytest.approx(value / 2), key


def test_retrieval_refuses_no_judged_query_and_foreign_rows():
    with pytest.raises(ValueError, match="no query has any judged document"):
        es.retrieval_scores(np.eye(2), np.eye(2), [{}, {}])
    with pytest.raises(ValueError, match="outside 0..1"):
        es.retrieval_scores(np.eye(2), np.eye(2), [{5: 1}, {}])


def test_reranking_tie_ranks_the_negative_first_by_default():
    query = np.array([[1.0, 0.0]])
    candidates = [np.array([[1.0, 1.0], [1.0, 1.0], [0.0, 1.0]])]  # positive and negative tie
    scores = es.reranking_scores(query, candidates, [[1, 0, 0]], k_values=(10, 1000))
    assert scores["mrr_at_10"] == pytest.approx(0.5)
    assert scores["map_at_1000"] == pytest.approx(0.5)
