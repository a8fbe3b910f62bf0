"""Metrics on hand-computed cases."""
import numpy as np
import pytest

from mtl_framework.scoring import metrics as M


def test_accuracy_and_f1_single_label():
    pred, gold = ["a", "a", "b", "c"], ["a", "b", "b", "c"]
    assert M.accuracy(pred, gold) == 0.75
    # a: 2*1/(2+1), b: 2*1/(1+2), c: 2*1/(1+1)
    assert M.macro_f1(pred, gold) == pytest.approx((2 / 3 + 2 / 3 + 1) / 3)
    assert M.micro_f1(pred, gold)[0] == pytest.approx(0.75)  # = accuracy
    assert M.accuracy(np.array([1, 0, 2]), np.array([1, 1, 2])) == pytest.approx(2 / 3)


def test_f1_multi_label():
    pred, gold = [["a", "b"], ["c"]], [["a"], ["c", "d"]]
    f1, p, r = M.micro_f1(pred, gold)  # TP 2, predicted 3, gold 3
    assert (f1, p, r) == pytest.approx((2 / 3, 2 / 3, 2 / 3))
    assert M.macro_f1(pred, gold) == pytest.approx((1 + 0 + 1 + 0) / 4)
    assert M.accuracy(pred, gold) == 0.0


def test_cmrc_segmentation():
    assert M.mixed_segmentation("Hello, world!我们") == ["hello", ",", "world", "!", "我", "们"]
    assert M.mixed_segmentation("iPhone 6s手机") == ["iphone", "6s", "手", "机"]
    assert M.mixed_segmentation("《红楼梦》3.5元", rm_punc=True) == ["红", "楼", "梦", "3.5", "元"]


def test_cmrc_em_f1():
    # pred 北京大学 vs 北京: LCS 2, P = 2/4, R = 2/2 -> F1 2/3
    assert M.cmrc_f1("北京大学", ["北京"]) == pytest.approx(2 / 3)
    assert M.cmrc_em("北京大学", ["北京"]) == 0.0
    assert M.cmrc_f1("iPhone 6s手机", ["iPhone 6s"]) == pytest.approx(2 / 3)
    # LCS is contiguous: 北京 / 京北 share only one segment in a row
    assert M.cmrc_f1("北京", ["京北"]) == pytest.approx(0.5)
    # punctuation is ignored by both; the best reference counts
    em, f1 = M.em_f1(["《红楼梦》", "北京大学", "", "x"],
                     [["红楼梦"], ["上海", "北京大学"], "南京", []])
    assert em == pytest.approx((1 + 1 + 0 + 0) / 4)
    assert f1 == pytest.approx((1 + 1 + 0 + 0) / 4)
    assert M.compute_metric("em_f1", ["北京大学"], [["北京"]]) == pytest.approx({"em": 0.0, "f1": 2 / 3})


def test_set_f1_metrics():
    pred = [{("PER", 1, 2), ("LOC", 3, 4)}, set()]
    gold = [{("PER", 1, 2)}, {("ORG", 0, 1)}]
    assert M.compute_metric("span_f1", pred, gold) == pytest.approx(
        {"f1": 0.5, "precision": 0.5, "recall": 0.5})
    triples = M.compute_metric("triple_f1", [[["s", "p", "o"]]], [[("s", "p", "o"), ("s", "q", "o")]])
    assert triples == pytest.approx({"f1": 2 / 3, "precision": 1.0, "recall": 0.5})
    assert M.set_f1([set()], [set()]) == (1.0, 1.0, 1.0)


def test_event_f1_counts_arguments_only():
    """Triggers are not arguments: the argument F1 is over the arguments alone
    (tests/test_scorers_events.py checks the rest of event_f1)."""
    pred = [[{"event_type": "A", "trigger": "x", "arguments": [("agent", "y")]}]]
    gold = [[{"event_type": "A", "trigger": "z", "arguments": [("agent", "y"), ("time", "t")]}]]
    result = M.compute_metric("event_f1", pred, gold)
    assert (result["f1"], result["argument_precision"], result["argument_recall"]) == \
        pytest.approx((2 / 3, 1.0, 0.5))


def manual_ranks(x):
    """1 + number smaller + (number equal - 1) / 2."""
    x = list(x)
    return [1 + sum(v < u for v in x) + (sum(v == u for v in x) - 1) / 2 for u in x]


def test_rankdata_average_ties():
    x = np.random.default_rng(0).integers(0, 5, size=40)
    np.testing.assert_allclose(M.rankdata(x), manual_ranks(x))
    np.testing.assert_allclose(M.rankdata([1, 2, 2, 3]), [1, 2.5, 2.5, 4])


def test_spearman_and_pearson():
    # ranks [1, 2.5, 2.5, 4] vs [1, 3, 2, 4]: cov 4.5, var 4.5 and 5
    assert M.spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(4.5 / np.sqrt(4.5 * 5))
    r = np.random.default_rng(1)
    x, y = r.normal(size=30), r.normal(size=30)
    assert M.pearson(x, y) == pytest.approx(np.corrcoef(x, y)[0, 1])
    ranks_x, ranks_y = manual_ranks(np.round(x, 0)), manual_ranks(np.round(y, 0))
    assert M.spearman(np.round(x, 0), np.round(y, 0)) == pytest.approx(np.corrcoef(ranks_x, ranks_y)[0, 1])
    assert M.pearson([1, 1, 1], [1, 2, 3]) == 0.0  # undefined -> 0


def test_mrr_pessimistic_ties():
    scores = [[0.1, 0.9, 0.3], [0.5, 0.5, 0.1], [0.2, 0.1, 0.7]]
    assert M.mrr(scores, [1, 0, 0]) == pytest.approx((1 + 1 / 2 + 1 / 2) / 3)
    assert M.mrr([[0.1, 0.9, 0.3]], [[0, 2]]) == pytest.approx(1 / 2)  # best right one counts


def test_dispatcher_and_primary_score():
    assert M.compute_metric("accuracy", [1, 2], [1, 1]) == {"accuracy": 0.5}
    assert set(M.compute_metric("macro_f1", [1, 2], [1, 1])) == {"macro_f1", "accuracy"}
    assert set(M.compute_metric("micro_f1", [1, 2], [1, 1])) == {"micro_f1", "precision", "recall"}
    assert set(M.compute_metric("spearman", [1, 2], [1, 3])) == {"spearman"}
    assert set(M.compute_metric("pearson", [1, 2], [1, 3])) == {"pearson"}
    assert M.primary_score("em_f1", {"em": 0.5, "f1": 0.7}) == pytest.approx(0.6)
    assert M.primary_score("triple_f1", {"f1": 0.3, "precision": 1, "recall": 0.2}) == 0.3
    assert M.primary_score("mrr", {"mrr": 0.25}) == 0.25
    with pytest.raises(ValueError, match="unknown metric 'f1'"):
        M.compute_metric("f1", [1], [1])
    with pytest.raises(ValueError, match="2 predictions for 1 references"):
        M.accuracy([1, 2], [1])


def test_majority_baseline():
    assert M.majority_baseline("accuracy", ["a", "b", "b", "a"], ["a", "a", "b"]) == {"accuracy": 0.5}
    assert M.majority_label([["x", "y"], ["y", "x"], ["z"]]) == ("x", "y")
    assert M.majority_baseline("spearman", [0.1, 0.5, 0.9], [1.0, 2.0]) == {"spearman": 0.0}
    assert M.majority_baseline("span_f1", [{("PER", 1, 2)}], None)["f1"] == 0.0
    assert M.majority_baseline("em_f1", [["北京"]]) == {"em": 0.0, "f1": 0.0}
    # right answer was position 2 twice, 0 once: rank 2 > 0 > 1
    assert M.majority_baseline("mrr", [2, 0, 1], [2, 2, 0]) == pytest.approx({"mrr": (1 + 1 / 2 + 1 / 3) / 3})
