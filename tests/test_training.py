import keras
import numpy as np
import pytest
import tensorflow as tf

from mtl_framework import RoFormerV2Backbone
from mtl_framework.families.heads import build_head
from mtl_framework.step.model import MultiTaskModel, NonFiniteLossError

from conftest import classification_batch as batch

TINY = dict(vocab_size=50, num_layers=2, hidden_size=32, num_heads=2, intermediate_size=64, dropout=0.0)


def make_model(balancing="gradient_norm", loss_weights=None, seed=0, optimizer=None):
    keras.utils.set_random_seed(seed)
    backbone = RoFormerV2Backbone(**TINY)
    backbone.build()
    heads = {"a": build_head("classification", 3, 32, name="a"),
             "b": build_head("classification", 2, 32, name="b")}
    model = MultiTaskModel(backbone, heads, tasks_per_update=2, balancing=balancing,
                           loss_weights=loss_weights)
    model.compile(optimizer=optimizer or keras.optimizers.SGD(learning_rate=1.0))
    model.build_all()
    return model


def reference_update(model, micro_batches, scale_fn):
    """Independent: sum over micro-batches of scale * gradient, per variable."""
    total = [np.zeros(v.shape, "float64") for v in model.all_variables]
    index = {id(v): i for i, v in enumerate(model.all_variables)}
    for task, b in micro_batches:
        head = model.heads[task]
        variables = model.backbone.trainable_variables + head.trainable_variables
        with tf.GradientTape() as tape:
            hidden = model.backbone({"token_ids": b["token_ids"], "segment_ids": b["segment_ids"]})
            logits = hidden[:, 0] @ head.dense.kernel + head.dense.bias
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(b["label"], logits))
            loss = loss * model.loss_weights[task]
        grads = [np.asarray(tf.convert_to_tensor(g), "float64") for g in tape.gradient(loss, variables)]
        n_backbone = len(model.backbone.trainable_variables)
        norm = np.sqrt(sum((g ** 2).sum() for g in grads[:n_backbone]))
        for v, g in zip(variables, grads):
            total[index[id(v)]] += scale_fn(norm, float(loss)) * g
    return total


@pytest.mark.parametrize("balancing,scale_fn", [
    ("gradient_norm", lambda norm, loss: 1.0 / norm),
    ("none", lambda norm, loss: 1.0),
    ("loss_norm", lambda norm, loss: 1.0 / loss),
])
def test_update_equals_independent_tape_computation(balancing, scale_fn):
    model = make_model(balancing)
    micro = [("a", batch(1, 3)), ("b", batch(2, 2))]
    before = [np.asarray(v, "float64") for v in model.all_variables]
    expected = reference_update(model, micro, scale_fn)
    logs = model.run_update(micro)
    assert all(log["finite"] for log in logs)
    for v, b0, g in zip(model.all_variables, before, expected):
        np.testing.assert_allclose(np.asarray(v) - b0, -g, rtol=2e-4, atol=1e-6)


@pytest.mark.slow  # default suite: test_scale_invariance.py (AdamW, mtl train) and the
# balancing harness's loss-scale step (SGD, in process) check this promise both ways
def test_loss_weight_does_not_change_update_under_gradient_norm():
    micro = [("a", batch(1, 3)), ("b", batch(2, 2)), ("a", batch(3, 3))]
    results = {}
    for balancing in ("gradient_norm", "none"):
        for weight in (1.0, 1000.0):
            model = make_model(balancing, loss_weights={"a": weight},
                               optimizer=keras.optimizers.AdamW(learning_rate=1e-3))
            model.tasks_per_update = 3
            for _ in range(3):
                model.run_update(micro)
            results[balancing, weight] = [np.asarray(v) for v in model.backbone.trainable_variables]
    for a, b in zip(results["gradient_norm", 1.0], results["gradient_norm", 1000.0]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    differences = [np.abs(a - b).max() for a, b in zip(results["none", 1.0], results["none", 1000.0])]
    assert max(differences) > 1e-4


def test_non_finite_micro_batch_is_skipped_counted_then_fatal():
    model = make_model(loss_weights={"a": float("nan")})  # every task-a loss is NaN
    model.max_consecutive_bad = 2
    head_a_before = [np.asarray(v) for v in model.head_variables["a"]]
    backbone_before = [np.asarray(v) for v in model.backbone_variables]
    logs = model.run_update([("a", batch(1, 3)), ("b", batch(2, 2))])
    assert [log["finite"] for log in logs] == [False, True]
    assert model.skipped == {"a": 1, "b": 0}
    for before, v in zip(head_a_before, model.head_variables["a"]):  # SGD: no update without gradient
        np.testing.assert_array_equal(before, np.asarray(v))
    assert all(np.isfinite(np.asarray(v)).all() for v in model.backbone_variables)
    assert any(np.abs(np.asarray(v) - b).max() > 0 for v, b in zip(model.backbone_variables, backbone_before))
    with pytest.raises(NonFiniteLossError, match="task 'a'"):
        model.run_update([("a", batch(3, 3)), ("a", batch(4, 3))])
