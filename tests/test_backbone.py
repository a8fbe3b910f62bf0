"""RoFormerV2's own: preset sizes, residual alpha, checkpoint errors, its layers bit for
bit. Build, call, padding, round trips and parity: test_backbone_harness.py."""
import json

import numpy as np
import pytest
from backbone_harness import encode

from mtl_framework import RoFormerV2Backbone
from mtl_framework.architectures.roformer_v2 import bert4keras

TINY = dict(num_layers=2, hidden_size=64, num_heads=4, intermediate_size=256, dropout=0.0)


def expected_params(vocab, hidden, layers, intermediate, segments=2):
    """Independent count: embeddings + per layer q,k,v,o (H x H) and the FFN pair."""
    return vocab * hidden + segments * hidden + layers * (4 * hidden * hidden + 2 * hidden * intermediate)


@pytest.mark.parametrize("size,params", [("small", 15_225_600), ("base", 94_152_192)])
def test_preset_parameter_counts(size, params):
    backbone = RoFormerV2Backbone.from_size(size)
    backbone.build()
    c = backbone.config
    assert backbone.count_params_exact() == params
    assert params == expected_params(c["vocab_size"], c["hidden_size"], c["num_layers"],
                                     c["intermediate_size"])
    assert not any("bias" in w.path or "gamma" in w.path for w in backbone.weights)


@pytest.mark.slow
def test_large_parameter_count():
    backbone = RoFormerV2Backbone.from_size("large")
    backbone.build()
    assert backbone.count_params_exact() == 314_279_936


def test_preset_round_trip(tmp_path):
    backbone = RoFormerV2Backbone(vocab_size=300, alpha_warmup_steps=10, **TINY)
    backbone.build()
    backbone.update_residual_alpha(4)
    backbone.save_preset(tmp_path / "preset")
    loaded = RoFormerV2Backbone.from_preset(tmp_path / "preset")
    assert loaded.config == backbone.config
    for a, b in zip(backbone.weights, loaded.weights):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert float(loaded.residual_alpha) == pytest.approx(0.4)


def test_residual_alpha_warmup():
    backbone = RoFormerV2Backbone(vocab_size=300, alpha_warmup_steps=100, **TINY)
    ids = np.array([[2, 7, 8, 9, 3]], dtype="int32")
    segments = np.zeros_like(ids)
    assert float(backbone.residual_alpha) == 0.0
    # with a = 0 every block is norm(x + 0): the output is the normed embedding
    emb = np.asarray(backbone.token_embedding(ids) + backbone.segment_embedding(segments))
    normed = emb / np.sqrt((emb ** 2).mean(-1, keepdims=True) + 1e-7)
    np.testing.assert_allclose(encode(backbone, ids, segments), normed, rtol=1e-5, atol=2e-5)
    for step, alpha in [(25, 0.25), (100, 1.0), (1000, 1.0)]:
        backbone.update_residual_alpha(step)
        assert float(backbone.residual_alpha) == pytest.approx(alpha)
    assert float(RoFormerV2Backbone(vocab_size=300, **TINY).residual_alpha) == 1.0


def test_checkpoint_errors_name_variable_and_fix(tmp_path):
    backbone = RoFormerV2Backbone(vocab_size=300, **TINY)
    backbone.build()
    bert4keras.save_bert4keras(backbone, tmp_path)
    config = json.loads((tmp_path / "bert_config.json").read_text())
    config["intermediate_size"] = 128
    (tmp_path / "bad_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="intermediate/dense/kernel has shape .* check bert_config.json"):
        RoFormerV2Backbone.from_bert4keras(str(tmp_path / "bad_config.json"),
                                           str(tmp_path / "bert_model.ckpt"))
    with pytest.raises(FileNotFoundError, match="pass the prefix"):
        RoFormerV2Backbone.from_bert4keras(str(tmp_path / "bert_config.json"), str(tmp_path / "nothing"))


def test_all_padding_row_stays_finite():
    """A padded choice in a multiple-choice batch is a row of token id 0 only."""
    import tensorflow as tf

    backbone = RoFormerV2Backbone(vocab_size=300, **TINY)
    ids = np.array([[2, 7, 8, 3], [0, 0, 0, 0]], dtype="int32")
    inputs = {"token_ids": ids, "segment_ids": np.zeros_like(ids)}
    with tf.GradientTape() as tape:
        out = backbone(inputs, training=True)
        loss = tf.reduce_sum(out[0] ** 2) + 0.0 * tf.reduce_sum(out[1])
    grads = tape.gradient(loss, backbone.trainable_variables)
    assert np.isfinite(np.asarray(out)).all()
    assert all(np.isfinite(np.asarray(tf.convert_to_tensor(g))).all() for g in grads)


def test_dropout_equals_keras_dropout_with_its_gradient():
    """layers.Dropout (x * mask) draws Keras's masks from the same seed stream: at float32
    outputs and input gradients equal keras.layers.Dropout's bit for bit, call after call."""
    import keras
    import tensorflow as tf

    from mtl_framework.layers import Dropout

    x = keras.random.normal((4, 16, 32), seed=1)
    upstream = keras.random.normal((4, 16, 32), seed=2)
    ours, theirs = Dropout(0.1, seed=3), keras.layers.Dropout(0.1, seed=3)
    for _ in range(3):
        results = []
        for layer in (ours, theirs):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = layer(x, training=True)
            results.append((np.asarray(y), np.asarray(tape.gradient(y, x, upstream))))
        np.testing.assert_array_equal(results[0][0], results[1][0])
        np.testing.assert_array_equal(results[0][1], results[1][1])
        assert 0.05 < (results[0][0] == 0).mean() < 0.15
    np.testing.assert_array_equal(np.asarray(ours(x)), np.asarray(x))  # inference: identity


def test_dropout_on_bfloat16_draws_its_mask_in_float32():
    """On 16-bit inputs the uniform is drawn in float32 (Keras draws it in x's dtype, an
    8-bit-mantissa draw that TensorFlow's CPU makes 1.6x slower): the mask is the seed
    stream's float32 uniform >= rate, the output x * (1 / (1 - rate)) where kept, the input
    gradient upstream times the same factor."""
    import keras
    import tensorflow as tf

    from mtl_framework.layers import Dropout

    x = tf.cast(keras.random.normal((4, 16, 32), seed=1), "bfloat16")
    upstream = tf.cast(keras.random.normal((4, 16, 32), seed=2), "bfloat16")
    layer, stream = Dropout(0.1, seed=3, dtype="bfloat16"), keras.random.SeedGenerator(3)
    for _ in range(3):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True)
        keep = np.asarray(keras.random.uniform(x.shape, dtype="float32", seed=stream)) >= 0.1
        factor = np.where(keep, np.float32(tf.cast(1 / 0.9, "bfloat16")), 0.0)
        expected = tf.cast(tf.cast(x, "float32") * factor, "bfloat16")  # one bfloat16 product
        np.testing.assert_array_equal(np.asarray(tf.cast(y, "float32")),
                                      np.asarray(tf.cast(expected, "float32")))
        gradient = tf.cast(tf.cast(upstream, "float32") * factor, "bfloat16")
        np.testing.assert_array_equal(np.asarray(tf.cast(tape.gradient(y, x, upstream), "float32")),
                                      np.asarray(tf.cast(gradient, "float32")))
        assert 0.05 < (~keep).mean() < 0.15


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_attention_context_equals_the_einsum_with_its_gradient(dtype):
    """attention_context (batched matmul + transpose) gives einsum("bhjk,bhkd->bjhd")'s
    values and gradients bit for bit on TensorFlow, so training is unchanged by it."""
    import tensorflow as tf

    from mtl_framework.layers import attention_context

    rng = np.random.default_rng(0)
    weights = tf.cast(tf.nn.softmax(rng.normal(size=(2, 3, 40, 40)).astype("float32")), dtype)
    v = tf.cast(rng.normal(size=(2, 3, 40, 16)).astype("float32"), dtype)
    upstream = tf.cast(rng.normal(size=(2, 40, 3, 16)).astype("float32"), dtype)
    results = []
    for product in (attention_context, lambda w, x: tf.einsum("bhjk,bhkd->bjhd", w, x)):
        with tf.GradientTape() as tape:
            tape.watch([weights, v])
            out = product(weights, v)
        grads = tape.gradient(out, [weights, v], upstream)
        results.append([np.asarray(tf.cast(t, "float32")) for t in (out, *grads)])
    for ours, einsum in zip(*results):
        np.testing.assert_array_equal(ours, einsum)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_rotary_is_the_textbook_rotation_bit_for_bit_with_its_gradient(dtype):
    """layers.apply_rotary (float32: complex multiply; 16-bit: pair-swap matmul) against
    the textbook pairs (x_2i c - x_2i+1 s, x_2i+1 c + x_2i s) in NumPy, rounded to the dtype
    after each product and sum as TensorFlow's kernels do; its gradient against the
    inverse rotation of the upstream, the same way; tables as q's ([.., L, d], scaled) and
    as the pointer heads' ([B, L, 1, d])."""
    import tensorflow as tf

    from mtl_framework.layers import apply_rotary, rotary_tables

    rng = np.random.default_rng(0)
    x = tf.cast(rng.normal(size=(2, 3, 40, 16)).astype("float32"), dtype)
    upstream = tf.cast(rng.normal(size=(2, 3, 40, 16)).astype("float32"), dtype)
    cos, sin = rotary_tables(40, 16, dtype=dtype)
    for tables in [(cos, sin), (cos * tf.cast(0.25, dtype), sin * tf.cast(0.25, dtype))]:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = apply_rotary(x, *tables)
        grad = tape.gradient(y, x, upstream)

        def as_np(t):
            return np.asarray(tf.cast(t, "float32"))

        def rounded(v):
            return as_np(tf.cast(v, dtype))

        c, s = as_np(tables[0])[:, 0::2], as_np(tables[1])[:, 1::2]
        a, b = as_np(x)[..., 0::2], as_np(x)[..., 1::2]
        even = rounded(rounded(a * c) - rounded(b * s))
        odd = rounded(rounded(b * c) + rounded(a * s))
        np.testing.assert_array_equal(as_np(y)[..., 0::2], even)
        np.testing.assert_array_equal(as_np(y)[..., 1::2], odd)
        ga, gb = as_np(upstream)[..., 0::2], as_np(upstream)[..., 1::2]
        np.testing.assert_array_equal(as_np(grad)[..., 0::2],
                                      rounded(rounded(ga * c) + rounded(gb * s)))
        np.testing.assert_array_equal(as_np(grad)[..., 1::2],
                                      rounded(rounded(gb * c) - rounded(ga * s)))
    heads = tf.transpose(x, (0, 2, 1, 3))  # [B, L, heads, d] with [1, L, 1, d] tables
    got = apply_rotary(heads, cos[None, :, None], sin[None, :, None])
    np.testing.assert_array_equal(as_np(got), as_np(tf.transpose(apply_rotary(x, cos, sin), (0, 2, 1, 3))))
