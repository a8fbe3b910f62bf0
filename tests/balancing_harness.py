"""One check every balancing method goes through (as family_harness.py does for families);
a method's case supplies only its config, its promise and its NumPy oracle.

    run_balancing_test(BalancingCase(...))

Steps, on a tiny backbone with two classification tasks and SGD (lr 1, so an update is
minus the accumulated gradient):
1. UPDATES updates on fixed micro-batches: every micro-batch finite, every variable finite
   and the backbone moved; the first update equals an independent tape computation:
   Σ_micro-batches normalize(loss, ||g||) · λ_task · g (the case's weights before any
   update), or for pcgrad the NumPy projection of the tasks' tape gradients;
2. the case's oracle: the method's weights after each update recomputed in NumPy from
   the update logs (its paper's formula);
3. scaling: the model's named state put back to its initial values and task a's loss
   multiplied by 1000 (loss_weight): the same updates give the same backbone when the
   method promises invariance, a different one when it does not (the same model, not a
   second one: a model's traced step costs most of a case);
4. checkpoint round trip and exact resume: the named state after update 2 restored by
   name into the model as step 3 left it (so anything kept outside the named variables
   would show), which then makes updates 3.. bit for bit as in step 1.
Bit-exact resume of `mtl train` after SIGKILL: tests/test_balancing_resume.py.
"""
from dataclasses import dataclass
from typing import Callable, Optional

import keras
import numpy as np
import tensorflow as tf

from mtl_framework import RoFormerV2Backbone
from mtl_framework.families.heads import build_head
from mtl_framework.step.model import MultiTaskModel

TINY = dict(vocab_size=50, num_layers=1, hidden_size=16, num_heads=2, intermediate_size=32,
            dropout=0.0)
TASKS = {"a": 3, "b": 2}  # task -> label count
UPDATES = 4
SEED = 7


@dataclass
class BalancingCase:
    config: object  # the experiment's `balancing:` value
    invariant: bool  # promises a shared update independent of a task's loss scale
    normalize: Callable = lambda loss, norm, first: 1.0  # oracle of the per-micro-batch scale
    initial_weight: float = 1.0  # λ before any update (rlw: drawn, see weights_oracle)
    weights_oracle: Optional[Callable] = None  # (update logs so far) -> {task: λ} after them
    pcgrad: bool = False


def make_model(config, loss_weights=None):
    keras.utils.set_random_seed(0)
    backbone = RoFormerV2Backbone(**TINY)
    backbone.build()
    heads = {t: build_head("classification", n, TINY["hidden_size"], name=t) for t, n in TASKS.items()}
    model = MultiTaskModel(backbone, heads, tasks_per_update=2, balancing=config,
                           loss_weights=loss_weights, seed=SEED)
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=1.0))
    model.build_all()
    return model


def micro_batches(update):
    """Update u's two micro-batches: tasks a and b (b first on odd updates)."""
    order = ["a", "b"] if update % 2 == 0 else ["b", "a"]
    return [(t, batch(100 * update + i, TASKS[t])) for i, t in enumerate(order)]


def batch(seed, labels):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, 50, size=(4, 7)).astype("int32")
    ids[:, 0] = 2
    return {"token_ids": ids, "segment_ids": np.zeros_like(ids),
            "label": rng.integers(0, labels, size=4).astype("int32")}


def tape_gradients(model, task, batch):
    """(loss, backbone gradients, head gradients) in float64, outside the training step."""
    head_vars = model.head_variables[task]
    with tf.GradientTape() as tape:
        loss = model.task_loss(task, {k: tf.constant(v) for k, v in batch.items()}, training=True)
        loss = loss * model.loss_weights[task]
    grads = tape.gradient(loss, model.backbone_variables + head_vars)
    grads = [np.asarray(tf.convert_to_tensor(g), np.float64) for g in grads]
    n = len(model.backbone_variables)
    return float(loss), grads[:n], grads[n:]


def expected_first_update(case, model, weights):
    """{variable id: expected change} of update 0, from tape gradients only."""
    change = {id(v): np.zeros(v.shape, np.float64) for v in model.all_variables}
    per_task = {}
    for task, b in micro_batches(0):
        loss, backbone, head = tape_gradients(model, task, b)
        norm = np.sqrt(sum((g ** 2).sum() for g in backbone))
        scale = case.normalize(loss, norm, loss) * weights[task]
        per_task[task] = [scale * g for g in backbone]
        for v, g in zip(model.head_variables[task], head):
            change[id(v)] -= scale * g
    if case.pcgrad:
        combined = pcgrad_numpy([per_task[t] for t, _ in micro_batches(0)],
                                np.random.default_rng([SEED, 1]))
    else:
        combined = [sum(parts) for parts in zip(*per_task.values())]
    for v, g in zip(model.backbone_variables, combined):
        change[id(v)] -= g
    return change


def pcgrad_numpy(grads, rng):
    """Yu et al. 2020, Algorithm 1, on flattened gradients: each g_i projected off every
    other g_j it conflicts with, j ≠ i in the order of one permutation drawn per i."""
    shapes = [g.shape for g in grads[0]]
    flat = [np.concatenate([g.ravel() for g in task]) for task in grads]
    projected = [f.copy() for f in flat]
    for i in range(len(flat)):
        for j in rng.permutation(len(flat)):
            if j == i:
                continue
            dot = projected[i] @ flat[j]
            if dot < 0:
                projected[i] -= dot / (flat[j] @ flat[j]) * flat[j]
    total, out, start = sum(projected), [], 0
    for shape in shapes:
        size = int(np.prod(shape))
        out.append(total[start:start + size].reshape(shape))
        start += size
    return out


def train(model, updates, start=0):
    """Run updates start..updates-1; returns each update's logs and the weights after it."""
    history = []
    for u in range(start, updates):
        logs = model.run_update(micro_batches(u))
        history.append((logs, model.balancing.weights()))
    return history


def restore(model, arrays):
    """Every named state variable set to its value in `arrays` (a checkpoint, by name)."""
    named = model.named_state_variables
    assert set(named) == set(arrays)
    for name, variable in named.items():
        variable.assign(arrays[name])


def set_loss_weight(model, task, value):
    model.loss_weights[task] = value
    model._group_trace_steps()  # its loss weight tensors (inputs of the traced step)


def named_arrays(model):
    return {name: np.array(v.numpy()) for name, v in model.named_state_variables.items()}


def run_balancing_test(case):
    # 1. finite updates; the first equals the tape computation
    model = make_model(case.config)
    initial = named_arrays(model)  # for step 3
    before = {id(v): np.asarray(v, np.float64) for v in model.all_variables}
    first_weights = {t: case.initial_weight for t in TASKS}
    if case.weights_oracle is not None:
        first_weights = case.weights_oracle([]) or first_weights
    expected = expected_first_update(case, model, first_weights)
    history = train(model, 1)
    for v in model.all_variables:
        np.testing.assert_allclose(np.asarray(v, np.float64) - before[id(v)], expected[id(v)],
                                   rtol=2e-3, atol=2e-6)
    history += train(model, 2, start=1)
    snapshot = named_arrays(model)  # after update 2, for step 4
    history += train(model, UPDATES, start=2)
    for logs, _ in history:
        assert all(log["finite"] for log in logs), logs
    final = named_arrays(model)
    assert all(np.isfinite(a).all() for a in final.values() if a.dtype.kind == "f")
    assert any(not np.array_equal(snapshot[n], final[n]) for n in snapshot if n.startswith("backbone"))

    # 2. the method's weights after each update, from its formula
    if case.weights_oracle is not None:
        for u in range(1, UPDATES + 1):
            want = case.weights_oracle([logs for logs, _ in history[:u]])
            got = history[u - 1][1]
            assert set(got) == set(want)
            for t in want:
                np.testing.assert_allclose(got[t], want[t], rtol=1e-4, atol=1e-7,
                                           err_msg=f"update {u} {t}")
    # 3. loss scale: from the initial state again, task a's loss x 1000
    scaled = model
    restore(scaled, initial)
    set_loss_weight(scaled, "a", 1000.0)
    train(scaled, UPDATES)
    same = all(np.allclose(np.asarray(v), final[n], rtol=1e-3, atol=1e-5)
               for n, v in scaled.named_state_variables.items() if n.startswith("backbone"))
    assert same == case.invariant, f"invariant: promised {case.invariant}, measured {same}"
    # 4. checkpoint round trip (by name) and exact continuation, in the model as step 3
    # left it: whatever it kept outside its named variables would show
    set_loss_weight(scaled, "a", 1.0)
    named = scaled.named_state_variables
    assert set(named) == set(snapshot)
    restore(scaled, snapshot)
    assert all(np.array_equal(a, named_arrays(scaled)[n]) for n, a in snapshot.items())
    train(scaled, UPDATES, start=2)
    for name, value in named_arrays(scaled).items():
        np.testing.assert_array_equal(value, final[name], err_msg=name)
