"""RoFormerV2's own blocks (bert4keras's `roformer_v2`), one idea per layer.

No biases and no norm weights anywhere: RoFormerV2 drops them for speed and
for a simpler, scale-free residual stream (Su et al., 2022). The pieces every
architecture shares (attention softmax, bias-free matmul, rotary tables) are in
mtl_framework/layers.py.
"""
import math

import keras
from keras import ops

from mtl_framework.layers import Dropout, apply_rotary, attend, dense, rows_at, table_rows_at


class RMSNorm(keras.layers.Layer):
    """x / sqrt(mean(x^2) + eps), without any trainable weight.

    Its gradient is written out, r * (g - y * mean(g * y)) with r = 1 / sqrt(...)
    and y the output, instead of autodiff's chain back through square/mean/rsqrt.
    """

    def __init__(self, epsilon=1e-7, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon
        self.built = True  # no weights: fit under a tf.distribute strategy checks every layer is built

    def call(self, x):
        if keras.backend.standardize_dtype(x.dtype) in ("float16", "bfloat16"):  # mixed: in float32
            return ops.cast(self.call(ops.cast(x, "float32")), x.dtype)
        epsilon = self.epsilon

        @ops.custom_gradient
        def rms_norm(x):
            inverse_rms = ops.rsqrt(ops.mean(ops.square(x), axis=-1, keepdims=True) + epsilon)
            y = x * inverse_rms

            def grad(*args, upstream=None):
                if upstream is None:
                    (upstream,) = args
                return inverse_rms * (upstream - y * ops.mean(upstream * y, axis=-1, keepdims=True))

            return y, grad

        return rms_norm(x)

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon}


class SelfAttention(keras.layers.Layer):
    """Multi-head self-attention with rotary q/k, no biases, padded keys masked.

    q, k and v come from one fused kernel [hidden, 3 * heads * head_size]
    (one matmul instead of three); checkpoints store them apart. One transpose
    puts them head-major ([3, batch, heads, length, d]), q and k are rotated
    together, and 1/sqrt(d) is folded into q's rotary tables instead of the scores.
    exact_padding: see `attention_softmax`.
    """

    def __init__(self, num_heads, head_size, kernel_initializer="glorot_uniform",
                 attention_dropout=0.0, exact_padding=True, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.head_size = head_size
        self.exact_padding = exact_padding
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.attention_dropout = attention_dropout
        self.dropout = Dropout(attention_dropout)

    def build(self, input_shape):
        hidden_size = input_shape[-1]
        inner = self.num_heads * self.head_size
        self.qkv_kernel = self.add_weight(
            name="qkv_kernel", shape=(hidden_size, 3 * inner), initializer=self.fused_initializer
        )
        self.output_kernel = self.add_weight(
            name="output_kernel", shape=(inner, hidden_size), initializer=self.kernel_initializer
        )

    def fused_initializer(self, shape, dtype=None):
        """q, k and v drawn apart, each [hidden, inner] as bert4keras builds them (the
        fan rule reads each kernel's own shape), then side by side."""
        part = (shape[0], shape[1] // 3)
        return ops.concatenate([self.kernel_initializer(part, dtype) for _ in range(3)], axis=1)

    def call(self, x, attention_bias, cos, sin, output_scale=None, training=False, packing=None,
             reads=None):
        """x [batch, length, hidden], or with `packing` (layers.Packing) the real tokens
        [T, hidden], padded for attention alone; attention_bias [batch, 1, 1, length] (0
        or -inf); cos, sin [length, head_size] or [batch, length, head_size] from
        `rotary_tables`; output_scale multiplies the output (applied to the [inner,
        hidden] output kernel, not to the activations). reads [batch, R]: queries at those
        positions alone, the output [batch, R, hidden] (`attend_from`)."""
        if reads is not None:
            return self.attend_from(x, reads, attention_bias, cos, sin, output_scale, training,
                                    packing)
        qkv = dense(x, self.qkv_kernel)
        if packing is not None:
            qkv = packing.pad(qkv)
        batch, length = ops.shape(qkv)[0], ops.shape(qkv)[1]
        qkv = ops.reshape(qkv, (batch, length, 3, self.num_heads, self.head_size))
        qk, v = ops.split(ops.transpose(qkv, (2, 0, 3, 1, 4)), [2], axis=0)
        # q and k rotated in one pass over [2, batch, heads, length, d] (half the ops of
        # two passes: 3-6% of a CPU step at small/128); q's tables carry 1/sqrt(d), so
        # the scores come out scaled
        scale = 1.0 / math.sqrt(self.head_size)
        # tables [length, d] or (dynamic_ntk) [batch, length, d] -> [2, 1 or batch, 1, length, d]
        if len(cos.shape) == 2:
            cos, sin = cos[None], sin[None]
        qk = apply_rotary(qk, ops.stack([cos * scale, cos])[:, :, None],
                          ops.stack([sin * scale, sin])[:, :, None])
        q, k = (ops.squeeze(t, 0) for t in ops.split(qk, 2))
        v = ops.squeeze(v, 0)
        context = attend(q, k, v, attention_bias, self.exact_padding, self.dropout, training)
        if packing is not None:
            context = packing.pack(context)
        return dense(context, scaled(self.output_kernel, output_scale))

    def attend_from(self, x, reads, attention_bias, cos, sin, output_scale, training, packing):
        """`call` with queries at `reads` [batch, R] alone (the positions a head reads of
        the last layer): keys and values of every token, queries, output and so the
        layer's feed-forward for R rows a text instead of its length. The same products
        for those rows as `call`'s, the fused kernel's q columns apart from its k, v ones."""
        inner = self.num_heads * self.head_size
        kv = dense(x, self.qkv_kernel[:, inner:])
        if packing is not None:
            kv, x = packing.pad(kv), packing.pad(x)
        batch, length = ops.shape(kv)[0], ops.shape(kv)[1]
        kv = ops.transpose(ops.reshape(kv, (batch, length, 2, self.num_heads, self.head_size)),
                           (2, 0, 3, 1, 4))
        k, v = kv[0], kv[1]
        q = dense(rows_at(x, reads), self.qkv_kernel[:, :inner])
        q = ops.transpose(ops.reshape(q, (batch, -1, self.num_heads, self.head_size)), (0, 2, 1, 3))
        # as `call`'s tables: q's carry 1/sqrt(d); [B, 1, R, d] at the read positions
        scale = 1.0 / math.sqrt(self.head_size)
        q = apply_rotary(q, table_rows_at(cos, reads)[:, None] * scale,
                         table_rows_at(sin, reads)[:, None] * scale)
        k = apply_rotary(k, *((t[None] if len(t.shape) == 2 else t)[:, None] for t in (cos, sin)))
        context = attend(q, k, v, attention_bias, self.exact_padding, self.dropout, training)
        return dense(context, scaled(self.output_kernel, output_scale))

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "head_size": self.head_size,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "attention_dropout": self.attention_dropout,
            "exact_padding": self.exact_padding,
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

    def call(self, x, output_scale=None):
        """output_scale multiplies the output (applied to the output kernel)."""
        hidden = ops.relu(dense(x, self.inner_kernel))
        return dense(hidden, scaled(self.output_kernel, output_scale))

    def get_config(self):
        return {
            **super().get_config(),
            "intermediate_size": self.intermediate_size,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        }


def scaled(kernel, scale):
    return kernel if scale is None else kernel * scale


class TransformerLayer(keras.layers.Layer):
    """Post-norm block: x = norm(x + a * Attention(x)); x = norm(x + a * FFN(x)).

    `a` is the residual scale (RoFormerV2 paper); the backbone owns it so that
    one variable drives every layer and checkpoints carry it. Both branches end
    in a bias-free matmul, so `a` scales their output kernels ([inner, hidden])
    rather than their [batch, length, hidden] outputs: same product, less work.
    """

    def __init__(self, num_heads, head_size, intermediate_size, dropout=0.0,
                 attention_dropout=0.0, kernel_initializer="glorot_uniform",
                 exact_padding=True, **kwargs):
        super().__init__(**kwargs)
        self.attention = SelfAttention(num_heads, head_size, kernel_initializer,
                                       attention_dropout, exact_padding, name="attention")
        self.feed_forward = FeedForward(intermediate_size, kernel_initializer, name="feed_forward")
        self.attention_norm = RMSNorm(name="attention_norm")
        self.feed_forward_norm = RMSNorm(name="feed_forward_norm")
        self.dropout = Dropout(dropout)
        self.config = dict(num_heads=num_heads, head_size=head_size,
                           intermediate_size=intermediate_size, dropout=dropout,
                           attention_dropout=attention_dropout, exact_padding=exact_padding)

    def build(self, input_shape):
        self.attention.build(input_shape)
        self.feed_forward.build(input_shape)

    def call(self, x, attention_bias, cos, sin, alpha, training=False, packing=None, reads=None):
        """reads [batch, R]: the block at those positions alone, [batch, R, hidden]
        (a last layer: SelfAttention.attend_from)."""
        residual = self.attention(x, attention_bias, cos, sin, output_scale=alpha,
                                  training=training, packing=packing, reads=reads)
        if reads is not None:
            x = rows_at(x if packing is None else packing.pad(x), reads)
        x = self.attention_norm(x + self.dropout(residual, training=training))
        residual = self.feed_forward(x, output_scale=alpha)
        return self.feed_forward_norm(x + self.dropout(residual, training=training))

    def get_config(self):
        return {**super().get_config(), **self.config}
