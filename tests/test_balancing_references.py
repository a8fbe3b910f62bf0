"""pcgrad and gradnorm against their papers, each recomputed independently of our code:

- PCGrad (Yu et al., NeurIPS 2020), Algorithm 1: for each task i, g_i^PC starts at g_i
  and is projected off every g_j, T_j in B minus T_i in random order, with which it
  conflicts; the update is the sum of the g_i^PC. The oracle below runs that on the
  vectors themselves in exact rational arithmetic (ours works on the Gram matrix in
  float64). LibMTL's loop (median-research-group/LibMTL, LibMTL/weighting/PCGrad.py,
  commit 2d842d67260fc1d3881d758c17f13315b79cd287) also visits j = i, which projects a
  g_i^PC that has come to conflict with its own g_i off it: the three-task case here is
  one where that changes the update.
- GradNorm (Chen et al., ICML 2018): the weights balance G_k = ||∇ λ_k L_k|| over the
  shared weights toward G_k ∝ r_k^α (r_k the task's relative inverse training rate), then
  Σ λ_k = K. With steady norms and losses that balance is the closed form
  λ_k = K (r_k^α / ||g_k||) / Σ_j (r_j^α / ||g_j||), where g_k is the task's gradient as
  the update takes it (normalised, when a normalisation is composed), and the total loss
  Σ λ_k L_k scales each head's gradient by λ_k too (LibMTL's GradNorm,
  LibMTL/weighting/GradNorm.py at the same commit, weights the shared gradient only).
"""
import itertools
from fractions import Fraction

import numpy as np
import pytest
from balancing_harness import TASKS, make_model, micro_batches, tape_gradients, train

from mtl_framework.mixing.balancing import GradNorm, pcgrad_coefficients, pcgrad_orders

# three 2-d gradients, pairwise conflicting except g_0 · g_2 = 14
THREE = [(4, 6), (-3, -2), (5, -1)]


def dot(u, v):
    return sum(a * b for a, b in zip(u, v))


def algorithm_1(grads, orders):
    """[g_i^PC], exact: Fractions, no Gram matrix, no coefficients."""
    grads = [tuple(Fraction(x) for x in g) for g in grads]
    projected = []
    for i, g_i in enumerate(grads):
        pc = g_i
        for j in orders[i]:
            g_j = grads[j]
            if dot(pc, g_j) < 0:
                factor = dot(pc, g_j) / dot(g_j, g_j)
                pc = tuple(a - factor * b for a, b in zip(pc, g_j))
        projected.append(pc)
    return projected


def every_order(k):
    """Every choice of each task's order of the other tasks."""
    per_task = [list(itertools.permutations([j for j in range(k) if j != i])) for i in range(k)]
    return list(itertools.product(*per_task))


def ours(grads, orders):
    grads = np.asarray(grads, np.float64)
    return pcgrad_coefficients(grads @ grads.T, orders) @ grads


@pytest.mark.parametrize("orders", every_order(3))
def test_pcgrad_is_algorithm_1_for_three_tasks(orders):
    want = [float(sum(column)) for column in zip(*algorithm_1(THREE, orders))]
    np.testing.assert_allclose(ours(THREE, orders), want, rtol=1e-12)


def test_pcgrad_three_tasks_case_where_a_task_conflicts_with_itself():
    """Orders (1, 2), (0, 2), (0, 1): g_1^PC = (35/338)(1, 5) after g_0 and g_2, and
    g_1^PC · g_1 = -35/26 < 0, so a loop that visits j = i last projects g_1^PC off
    g_1 again. Algorithm 1 (and we) stop before that: the sum is (841, -189)/338."""
    orders = ((1, 2), (0, 2), (0, 1))
    projected = algorithm_1(THREE, orders)
    assert projected[1] == (Fraction(35, 338), Fraction(175, 338))
    assert dot(projected[1], THREE[1]) == Fraction(-35, 26)
    total = tuple(sum(column) for column in zip(*projected))
    assert total == (Fraction(841, 338), Fraction(-189, 338))
    np.testing.assert_allclose(ours(THREE, orders), [841 / 338, -189 / 338], rtol=1e-12)


def test_pcgrad_matches_algorithm_1_on_random_gradients_and_orders():
    rng = np.random.default_rng(0)
    for k, dim in ((2, 7), (4, 6), (5, 12)):
        grads = rng.standard_normal((k, dim)).round(3)
        grads[1] = -grads[0] + 0.3 * grads[1]  # a strong conflict
        orders = pcgrad_orders(k, np.random.default_rng([k, dim]))
        assert [sorted(o) for o in orders] == [[j for j in range(k) if j != i] for i in range(k)]
        want = [float(sum(column)) for column in zip(*algorithm_1(grads.tolist(), orders))]
        np.testing.assert_allclose(ours(grads, orders), want, rtol=1e-9, atol=1e-12)


def test_pcgrad_two_tasks_leave_no_conflict_three_can():
    """The paper's guarantee is for two tasks; with three a projected gradient conflicts
    again with one it was projected off, and the summed update can conflict with a task."""
    rng = np.random.default_rng(1)
    for _ in range(20):
        two = rng.standard_normal((2, 5))
        for orders in every_order(2):
            projected = algorithm_1(two.tolist(), orders)
            assert float(dot(projected[0], two[1])) >= -1e-12
            assert float(dot(projected[1], two[0])) >= -1e-12
            assert all(float(dot(ours(two, orders), g)) >= -1e-9 for g in two)
    for orders in every_order(3):
        projected = algorithm_1(THREE, orders)
        conflicts = [(i, j) for i in range(3) for j in range(3)
                     if i != j and dot(projected[i], THREE[j]) < 0]
        assert conflicts, orders
        assert min(dot(ours(THREE, orders), g) for g in THREE) < 0, orders  # here always task 1


def steady_logs(losses, norms):
    return [{"task": t, "loss": losses[t], "gradient_norm": 123.0,  # raw: not what is balanced
             "normalized_gradient_norm": norms[t], "finite": True} for t in losses]


@pytest.mark.parametrize("first,later,norms", [
    # the case: equal losses, norms 100x apart (the old fixed step alternated one
    # weight between 0.001 and 0.049 around 0.0198)
    ({"a": 1.0, "b": 1.0}, {"a": 1.0, "b": 1.0}, {"a": 1.0, "b": 100.0}),
    ({"a": 2.0, "b": 1.0, "c": 4.0}, {"a": 1.2, "b": 1.0, "c": 5.6}, {"a": 1.0, "b": 3.0, "c": 100.0}),
    ({"a": 2.0, "b": 1.0}, {"a": 1.0, "b": 1.5}, {"a": 1.0, "b": 1.0}),
])
def test_gradnorm_settles_at_the_papers_balance(first, later, norms):
    tasks = list(first)
    method = GradNorm(tasks)
    method.build(None)
    method.after_update(steady_logs(first, norms), 1)
    history = []
    for update in range(2, 250):
        method.after_update(steady_logs(later, norms), update)
        history.append(method.weights())
    # the closed form, from the paper's definitions only
    alpha, k = 1.5, len(tasks)
    inverse_rate = np.array([later[t] / first[t] for t in tasks])
    r = inverse_rate / inverse_rate.mean()
    balance = r ** alpha / np.array([norms[t] for t in tasks])
    want = k * balance / balance.sum()
    for weights in history[-10:]:  # settled: the last 10 updates all at the balance
        np.testing.assert_allclose([weights[t] for t in tasks], want, rtol=1e-5)
    # G_k = λ_k ||g_k|| ∝ r_k^α: the gradnorm objective's equal training rates
    magnitude = np.array([history[-1][t] * norms[t] for t in tasks])
    np.testing.assert_allclose(magnitude / magnitude.sum(), r ** alpha / (r ** alpha).sum(), rtol=1e-5)


def test_gradnorm_scales_each_head_gradient_by_its_weight():
    """SGD lr 1: the second update moves task t's head by -λ_t ∇_head L_t, λ_t the weights
    after the first update (the paper's Σ λ_k L_k; LibMTL would move it by -∇_head L_t)."""
    model = make_model("gradnorm")
    train(model, 1)
    weights = model.balancing.weights()
    assert abs(weights["a"] - weights["b"]) > 1e-3  # the weights have moved apart
    expected = {}
    for task, batch in micro_batches(1):
        _, _, head = tape_gradients(model, task, batch)
        for variable, gradient in zip(model.head_variables[task], head):
            expected[id(variable)] = np.asarray(variable, np.float64) - weights[task] * gradient
    train(model, 2, start=1)
    for task in TASKS:
        for variable in model.head_variables[task]:
            np.testing.assert_allclose(np.asarray(variable, np.float64), expected[id(variable)],
                                       rtol=1e-4, atol=1e-6, err_msg=variable.path)
