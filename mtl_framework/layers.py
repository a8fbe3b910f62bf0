"""RoFormerV2 building blocks, one idea per layer (bert4keras's `roformer_v2`).

No biases and no norm weights anywhere: RoFormerV2 drops them for speed and
for a simpler, scale-free residual stream (Su et al., 2022).
"""
import math

import keras
from keras import ops


def truncated_normal_initializer(hidden_size, num_layers, gain=1.0):
    """bert4keras's RoFormerV2 init: std = 1.13684723 / sqrt(fan) * L^(-1/2).

    1.13684723 undoes the variance lost to truncation at 2 std, so the
    effective std is 1/sqrt(fan); the L^(-1/2) keeps post-norm deep stacks stable.
    """
    stddev = 1.13684723 / math.sqrt(hidden_size) * num_layers ** -0.5
    return keras.initializers.TruncatedNormal(stddev=stddev)


class RMSNorm(keras.layers.Layer):
    """x / sqrt(mean(x^2) + eps), without any trainable weight."""

    def __init__(self, epsilon=1e-7, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon

    def call(self, x):
        variance = ops.mean(ops.square(x), axis=-1, keepdims=True)
        return x * ops.rsqrt(variance + self.epsilon)

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon}


def rotary_tables(length, head_size, base=10000.0, dtype="float32"):
    """cos and sin of m * base^(-2i/d) for positions m < length, shape [length, d/2]."""
    inverse_frequency = base ** (-ops.arange(0, head_size // 2, dtype="float32") * 2.0 / head_size)
    angles = ops.arange(0, length, dtype="float32")[:, None] * inverse_frequency[None, :]
    return ops.cast(ops.cos(angles), dtype), ops.cast(ops.sin(angles), dtype)


def apply_rotary(x, cos, sin):
    """Rotate adjacent pairs (2i, 2i+1) of the last axis; x is [batch, length, ..., d].

    cos/sin are [length, d/2]; they broadcast over the axes between length and d.
    """
    shape = ops.shape(x)
    pairs = ops.reshape(x, (*shape[:-1], shape[-1] // 2, 2))
    even, odd = pairs[..., 0], pairs[..., 1]
    for _ in range(len(x.shape) - 3):  # align [length, d/2] to [length, ..., d/2]
        cos, sin = cos[:, None], sin[:, None]
    rotated = ops.stack([even * cos - odd * sin, odd * cos + even * sin], axis=-1)
    return ops.reshape(rotated, shape)


def softmax_with_exact_sum(scores):
    """Softmax over the last axis whose denominator is summed in float64.

    A float32 sum's rounding depends on how many (masked, zero) terms the
    kernel's vector loop sees, so real-token outputs moved by ~1e-6 when only
    the padding changed (TF switches reduction paths at 64 keys); a float64
    sum rounds back to the same float32 whatever the padding.
    """
    exp = ops.exp(scores - ops.max(scores, axis=-1, keepdims=True))
    total = ops.sum(ops.cast(exp, "float64"), axis=-1, keepdims=True)
    return exp / ops.cast(total, exp.dtype)


class SelfAttention(keras.layers.Layer):
    """Multi-head self-attention with rotary q/k, no biases, padded keys masked.

    q, k and v come from one fused kernel [hidden, 3 * heads * head_size]
    (one matmul instead of three); checkpoints store them apart.
    """

    def __init__(self, num_heads, head_size, kernel_initializer="glorot_uniform",
                 attention_dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.head_size = head_size
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.attention_dropout = attention_dropout
        self.dropout = keras.layers.Dropout(attention_dropout)

    def build(self, input_shape):
        hidden_size = input_shape[-1]
        inner = self.num_heads * self.head_size
        self.qkv_kernel = self.add_weight(
            name="qkv_kernel", shape=(hidden_size, 3 * inner), initializer=self.kernel_initializer
        )
        self.output_kernel = self.add_weight(
            name="output_kernel", shape=(inner, hidden_size), initializer=self.kernel_initializer
        )

    def call(self, x, attention_bias, cos, sin, training=False):
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        qkv = ops.reshape(ops.matmul(x, self.qkv_kernel),
                          (batch, length, 3, self.num_heads, self.head_size))
        qk = apply_rotary(qkv[:, :, :2], cos, sin)  # rotate q and k in one op
        q, k, v = qk[:, :, 0], qk[:, :, 1], qkv[:, :, 2]
        scores = ops.einsum("bjhd,bkhd->bhjk", q, k) / math.sqrt(self.head_size)
        weights = softmax_with_exact_sum(scores + attention_bias)
        weights = self.dropout(weights, training=training)
        context = ops.einsum("bhjk,bkhd->bjhd", weights, v)
        context = ops.reshape(context, (batch, length, self.num_heads * self.head_size))
        return ops.matmul(context, self.output_kernel)

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "head_size": self.head_size,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "attention_dropout": self.attention_dropout,
        }


class FeedForward(keras.layers.Layer):
    """Dense(intermediate, relu) -> Dense(hidden), no biases."""

    def __init__(self, intermediate_size, kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.intermediate_size = intermediate_size
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, input_shape):
        hidden_size = input_shape[-1]
        self.inner_kernel = self.add_weight(
            name="inner_kernel", shape=(hidden_size, self.intermediate_size),
            initializer=self.kernel_initializer,
        )
        self.output_kernel = self.add_weight(
            name="output_kernel", shape=(self.intermediate_size, hidden_size),
            initializer=self.kernel_initializer,
        )

    def call(self, x):
        return ops.matmul(ops.relu(ops.matmul(x, self.inner_kernel)), self.output_kernel)

    def get_config(self):
        return {
            **super().get_config(),
            "intermediate_size": self.intermediate_size,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        }


class TransformerLayer(keras.layers.Layer):
    """Post-norm block: x = norm(x + a * Attention(x)); x = norm(x + a * FFN(x)).

    `a` is the residual scale (RoFormerV2 paper); the backbone owns it so that
    one variable drives every layer and checkpoints carry it.
    """

    def __init__(self, num_heads, head_size, intermediate_size, dropout=0.0,
                 attention_dropout=0.0, kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.attention = SelfAttention(num_heads, head_size, kernel_initializer,
                                       attention_dropout, name="attention")
        self.feed_forward = FeedForward(intermediate_size, kernel_initializer, name="feed_forward")
        self.attention_norm = RMSNorm(name="attention_norm")
        self.feed_forward_norm = RMSNorm(name="feed_forward_norm")
        self.dropout = keras.layers.Dropout(dropout)
        self.config = dict(num_heads=num_heads, head_size=head_size,
                           intermediate_size=intermediate_size, dropout=dropout,
                           attention_dropout=attention_dropout)

    def build(self, input_shape):
        self.attention.build(input_shape)
        self.feed_forward.build(input_shape)

    def call(self, x, attention_bias, cos, sin, alpha, training=False):
        residual = self.attention(x, attention_bias, cos, sin, training=training)
        x = self.attention_norm(x + alpha * self.dropout(residual, training=training))
        residual = self.feed_forward(x)
        return self.feed_forward_norm(x + alpha * self.dropout(residual, training=training))

    def get_config(self):
        return {**super().get_config(), **self.config}
