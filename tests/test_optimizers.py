"""The optimizers: the fused AdamW against Keras's own, the warm-up/decay schedule."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from mtl_framework.step.optimizers import AdamW, WarmupLinearDecay, build_optimizer


def run_adamw(optimizer_class, traced, steps=6):
    rng = np.random.default_rng(0)
    variables = [keras.Variable(rng.normal(size=shape).astype("float32"), name=name)
                 for shape, name in (((5, 3), "kernel"), ((3,), "bias"), ((4, 2, 2), "gamma"))]
    optimizer = optimizer_class(WarmupLinearDecay(0.05, 2, steps, 0.1), weight_decay=0.1,
                                beta_1=0.8, beta_2=0.95, epsilon=1e-6)
    optimizer.exclude_from_weight_decay(var_names=["bias"])
    optimizer.build(variables)
    gradients = [[rng.normal(size=v.shape).astype("float32") for v in variables] for _ in range(steps)]

    def apply(grads):
        optimizer.apply(grads, variables)
    apply = tf.function(apply) if traced else apply
    for grads in gradients:
        apply([tf.constant(g) for g in grads])
    return [v.numpy() for v in variables] + [v.numpy() for v in optimizer.variables]


@pytest.mark.parametrize("traced", [False, True])
def test_fused_adamw_equals_keras_adamw(traced):
    fused, reference = run_adamw(AdamW, traced), run_adamw(keras.optimizers.AdamW, traced)
    assert len(fused) == len(reference) == 3 + 1 + 6  # weights; iterations; m and v each
    for ours, theirs in zip(fused, reference):
        np.testing.assert_allclose(ours, theirs, rtol=2e-6, atol=1e-7)
    assert not np.allclose(fused[0], run_adamw(AdamW, traced, steps=1)[0])  # the steps moved it


def test_fused_adamw_decays_only_included_variables():
    kernel, bias = keras.Variable(np.ones((2, 2), "float32"), name="kernel"), keras.Variable(
        np.ones(2, "float32"), name="bias")
    optimizer = AdamW(0.1, weight_decay=0.5)
    optimizer.exclude_from_weight_decay(var_names=["bias"])
    optimizer.build([kernel, bias])
    optimizer.apply([tf.zeros((2, 2)), tf.zeros(2)], [kernel, bias])
    # zero gradients: Adam moves nothing, so the kernel shows the decay alone: 1 - 0.1 * 0.5
    np.testing.assert_allclose(kernel.numpy(), 0.95, rtol=1e-7)
    np.testing.assert_allclose(bias.numpy(), 1.0)


def test_warmup_linear_decay_values():
    schedule = WarmupLinearDecay(1e-3, warmup_steps=10, total_steps=110, final_fraction=0.2)
    values = [float(schedule(step)) for step in (0, 5, 10, 60, 110, 500)]
    np.testing.assert_allclose(values, [0.0, 5e-4, 1e-3, 6e-4, 2e-4, 2e-4], rtol=1e-6)


def test_build_optimizer_names_and_errors():
    assert isinstance(build_optimizer({"lr": 1e-3}, 100), AdamW)
    assert isinstance(build_optimizer({"name": "lamb"}, 100), keras.optimizers.Lamb)
    with pytest.raises(ValueError, match="choose adamw, lamb, adam or sgd"):
        build_optimizer({"name": "adafactor"}, 100)
