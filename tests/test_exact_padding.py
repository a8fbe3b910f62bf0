"""The backbone's exact_padding option (issue 17 item 6): the softmax, the choice made,
the config. That padding leaves real tokens' outputs bit-identical with it, on every
architecture: test_backbone_harness.py (run_padding_test)."""
import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from backbone_harness import synthetic_batch

from mtl_framework import RoFormerV2Backbone
from mtl_framework.layers import attention_softmax, resolve_exact_padding

TINY = dict(vocab_size=200, num_layers=2, hidden_size=32, num_heads=2, dropout=0.0)


@pytest.mark.parametrize("exact", [True, False])
def test_attention_softmax_equals_numpy_and_has_its_gradient(exact):
    rng = np.random.default_rng(1)
    scores = rng.normal(scale=3, size=(2, 3, 5, 70)).astype("float32")
    scores[..., 50:] = -1e9  # padded keys
    upstream = rng.normal(size=scores.shape)
    x = tf.constant(scores)
    with tf.GradientTape() as tape:
        tape.watch(x)
        weights = attention_softmax(x, exact)
        loss = tf.reduce_sum(weights * tf.constant(upstream, "float32"))
    s64 = scores.astype(np.float64)
    want = np.exp(s64 - s64.max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    np.testing.assert_allclose(weights.numpy(), want, atol=1e-7)
    # softmax's Jacobian-vector product: y * (g - sum(g * y))
    want_grad = want * (upstream - (upstream * want).sum(-1, keepdims=True))
    np.testing.assert_allclose(tape.gradient(loss, x).numpy(), want_grad, atol=1e-6)


def test_attention_softmax_16_bit_scores_in_float32():
    x = tf.constant(np.linspace(-4, 4, 64).reshape(1, 1, 1, 64), "bfloat16")
    for exact in (True, False):
        weights = attention_softmax(x, exact)
        assert weights.dtype == tf.bfloat16
        np.testing.assert_allclose(weights.numpy().astype("float32").sum(), 1.0, atol=1e-2)


def test_default_chooses_itself(monkeypatch):
    assert RoFormerV2Backbone(**TINY).exact_padding is True  # float32 on this CPU
    assert RoFormerV2Backbone(**TINY, dtype="mixed_bfloat16").exact_padding is False
    assert RoFormerV2Backbone(**TINY, exact_padding=False).exact_padding is False
    assert RoFormerV2Backbone(**TINY, dtype="mixed_bfloat16", exact_padding=True).exact_padding
    monkeypatch.setattr(tf.config, "list_logical_devices",
                        lambda kind=None: ["/GPU:0"] if kind == "GPU" else [])
    assert resolve_exact_padding(None, "float32") is False
    assert resolve_exact_padding(True, "float32") is True
    with pytest.raises(ValueError, match="exact_padding must be true, false or null"):
        RoFormerV2Backbone(**TINY, exact_padding="false")


def test_layers_get_the_resolved_choice_and_mixed_precision_runs():
    backbone = RoFormerV2Backbone(**TINY, dtype="mixed_bfloat16")
    assert all(layer.attention.exact_padding is False for layer in backbone.transformer_layers)
    ids = synthetic_batch(30, 10)[0]
    out = backbone({"token_ids": ids, "segment_ids": np.zeros_like(ids)})
    assert np.isfinite(np.asarray(out, "float32")).all()


@pytest.mark.parametrize("option", [None, True, False])
def test_config_round_trip(option):
    backbone = RoFormerV2Backbone(**TINY, exact_padding=option)
    assert backbone.get_config()["exact_padding"] is option  # None stays "auto"
    assert RoFormerV2Backbone.from_config(backbone.get_config()).config["exact_padding"] is option


def test_preset_without_the_key_still_loads(tmp_path):
    """Exports written before the option have no exact_padding: they load as auto."""
    keras.utils.set_random_seed(0)
    exact = RoFormerV2Backbone(**TINY, exact_padding=True)
    exact.build()
    exact.save_preset(tmp_path)
    config_path = tmp_path / "config.json"
    config = json.loads(config_path.read_text())
    del config["backbone"]["exact_padding"]
    config_path.write_text(json.dumps(config))
    loaded = RoFormerV2Backbone.from_preset(tmp_path)
    assert loaded.config["exact_padding"] is None and loaded.exact_padding is True
    ids = synthetic_batch(40)[0]
    inputs = {"token_ids": ids, "segment_ids": np.zeros_like(ids)}
    assert np.array_equal(np.asarray(loaded(inputs)), np.asarray(exact(inputs)))
