"""Formulations of our backbone's pieces for the speed ablation in bench/backbone.py.

Each attention class is a drop-in `SelfAttention` (same weights: qkv_kernel,
output_kernel; same inputs: the [length, d] tables of `rotary_tables`), so the
ablation swaps only the formulation; likewise for the norm, the residual scale
and the matmul gradient. The chain "original" -> ... -> "ours" retraces the
steps that made mtl_framework/layers.py fast; the others are the roads not
taken (and what they would cost or give up).
"""
import math
import types

from keras import ops

from mtl_framework import RoFormerV2Backbone
from mtl_framework.architectures.roformer_v2.layers import RMSNorm, SelfAttention, scaled
from mtl_framework.layers import dense, softmax_with_exact_sum, swap_pairs


def apply_rotary(x, cos, sin):
    """The rotary of the earlier variants: the pair swap as a reverse of a [..., d/2, 2]
    view (`layers.swap_pairs`); ours multiplies by a permutation (`layers.apply_rotary`)."""
    return x * cos + swap_pairs(x) * sin


def softmax_f64_autodiff(scores):
    """The exact softmax differentiated through its casts (before the custom gradient)."""
    exp = ops.exp(scores - ops.max(scores, axis=-1, keepdims=True))
    total = ops.sum(ops.cast(exp, "float64"), axis=-1, keepdims=True)
    return exp / ops.cast(total, exp.dtype)


def softmax_f32(scores):
    """Plain float32 softmax: not padding-exact (real-token outputs move ~1e-7..1e-6)."""
    return ops.softmax(scores, axis=-1)


def plain_matmul(x, kernel):
    """x @ kernel differentiated by autodiff (MatMul(transpose_b=True) for the input grad)."""
    return ops.matmul(x, kernel)


def half_tables(cos, sin):
    """[length, d] pair-interleaved tables -> the [length, d/2] cos, sin they came from."""
    return cos[:, 0::2], sin[:, 1::2]


def rotary_by_slices(x, cos, sin):
    """The first formulation: strided even/odd slices, stack, reshape ([b, l, ..., d])."""
    shape = ops.shape(x)
    pairs = ops.reshape(x, (*shape[:-1], shape[-1] // 2, 2))
    even, odd = pairs[..., 0], pairs[..., 1]
    for _ in range(len(x.shape) - 3):
        cos, sin = cos[:, None], sin[:, None]
    rotated = ops.stack([even * cos - odd * sin, odd * cos + even * sin], axis=-1)
    return ops.reshape(rotated, shape)


class OriginalAttention(SelfAttention):
    """As first committed: slices of [b, l, 3, h, d], slice-and-stack rotary, einsum over
    [b, l, h, d], scores / sqrt(d), exact softmax differentiated through its casts."""

    rotary = "slices"

    def call(self, x, attention_bias, cos, sin, output_scale=None, training=False):
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        qkv = ops.reshape(ops.matmul(x, self.qkv_kernel),
                          (batch, length, 3, self.num_heads, self.head_size))
        if self.rotary == "slices":
            qk = rotary_by_slices(qkv[:, :, :2], *half_tables(cos, sin))
        else:  # pair swap, tables broadcast over (q/k, heads)
            qk = apply_rotary(qkv[:, :, :2], cos[:, None, None], sin[:, None, None])
        q, k, v = qk[:, :, 0], qk[:, :, 1], qkv[:, :, 2]
        scores = ops.einsum("bjhd,bkhd->bhjk", q, k) / math.sqrt(self.head_size)
        weights = softmax_f64_autodiff(scores + attention_bias)
        weights = self.dropout(weights, training=training)
        context = ops.einsum("bhjk,bkhd->bjhd", weights, v)
        context = ops.reshape(context, (batch, length, self.num_heads * self.head_size))
        return ops.matmul(context, scaled(self.output_kernel, output_scale))


class PairSwapAttention(OriginalAttention):
    """+ rotary as x * cos + swap_pairs(x) * sin (no strided even/odd slices)."""

    rotary = "swap"


class HeadMajorAttention(SelfAttention):
    """+ one transpose to [3, b, h, l, d] and a split (no strided slices at all).

    Class attributes switch on the later steps (and the float32 alternative).
    """

    scale_q = False                                  # 1/sqrt(d) folded into q's tables
    softmax = staticmethod(softmax_f64_autodiff)
    matmul = staticmethod(plain_matmul)

    def call(self, x, attention_bias, cos, sin, output_scale=None, training=False):
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        qkv = ops.reshape(self.matmul(x, self.qkv_kernel),
                          (batch, length, 3, self.num_heads, self.head_size))
        q, k, v = (ops.squeeze(t, 0) for t in ops.split(ops.transpose(qkv, (2, 0, 3, 1, 4)), 3))
        scale = 1.0 / math.sqrt(self.head_size)
        if self.scale_q:
            q = apply_rotary(q, cos * scale, sin * scale)
        else:
            q = apply_rotary(q, cos, sin)
        k = apply_rotary(k, cos, sin)
        scores = ops.einsum("bhjd,bhkd->bhjk", q, k)
        if not self.scale_q:
            scores = scores / math.sqrt(self.head_size)
        weights = self.dropout(self.softmax(scores + attention_bias), training=training)
        context = ops.einsum("bhjk,bhkd->bjhd", weights, v)
        context = ops.reshape(context, (batch, length, self.num_heads * self.head_size))
        return self.matmul(context, scaled(self.output_kernel, output_scale))


class ScaledQAttention(HeadMajorAttention):
    """+ 1/sqrt(d) folded into q's rotary tables ([l, d] once, not [b, h, l, l])."""

    scale_q = True


class CustomSoftmaxAttention(ScaledQAttention):
    """+ the exact softmax with its gradient written out (ours, before `dense`)."""

    softmax = staticmethod(softmax_with_exact_sum)


class Float32SoftmaxAttention(ScaledQAttention):
    """ours with a float32 softmax (what the float64 denominator costs; not padding-exact)."""

    softmax = staticmethod(softmax_f32)
    matmul = staticmethod(dense)


class TokenMajorEinsumAttention(SelfAttention):
    """ours, but q/k/v kept token-major [b, l, h, d] (split on the last axis) and the
    einsums left to transpose internally, instead of one explicit transpose."""

    sdpa = False

    def call(self, x, attention_bias, cos, sin, output_scale=None, training=False):
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        shape = (batch, length, self.num_heads, self.head_size)
        q, k, v = (ops.reshape(t, shape) for t in ops.split(dense(x, self.qkv_kernel), 3, -1))
        scale = 1.0 / math.sqrt(self.head_size)
        cos, sin = cos[:, None], sin[:, None]  # broadcast over heads
        if self.sdpa:
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
            context = ops.dot_product_attention(q, k, v, bias=attention_bias, scale=scale)
        else:
            q, k = apply_rotary(q, cos * scale, sin * scale), apply_rotary(k, cos, sin)
            scores = ops.einsum("bjhd,bkhd->bhjk", q, k)
            weights = softmax_with_exact_sum(scores + attention_bias)
            weights = self.dropout(weights, training=training)
            context = ops.einsum("bhjk,bkhd->bjhd", weights, v)
        context = ops.reshape(context, (batch, length, self.num_heads * self.head_size))
        return dense(context, scaled(self.output_kernel, output_scale))


class SdpaAttention(TokenMajorEinsumAttention):
    """keras.ops.dot_product_attention on [b, l, h, d] (its own float32 softmax, so not
    padding-exact; no attention dropout)."""

    sdpa = True


class ReversePairSwapAttention(SelfAttention):
    """Ours with the rotary's pair swap as a reverse of a [..., d/2, 2] view
    (`layers.swap_pairs`), as before `layers.apply_rotary` multiplied by a permutation."""

    def call(self, x, attention_bias, cos, sin, output_scale=None, training=False):
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        qkv = ops.reshape(dense(x, self.qkv_kernel),
                          (batch, length, 3, self.num_heads, self.head_size))
        qk, v = ops.split(ops.transpose(qkv, (2, 0, 3, 1, 4)), [2], axis=0)
        scale = 1.0 / math.sqrt(self.head_size)
        cos, sin = cos[None], sin[None]
        qk = apply_rotary(qk, ops.stack([cos * scale, cos])[:, :, None],
                          ops.stack([sin * scale, sin])[:, :, None])
        q, k = (ops.squeeze(t, 0) for t in ops.split(qk, 2))
        scores = ops.einsum("bhjd,bhkd->bhjk", q, k) + attention_bias
        weights = softmax_with_exact_sum(scores)
        weights = self.dropout(weights, training=training)
        context = ops.einsum("bhjk,bhkd->bjhd", weights, ops.squeeze(v, 0))
        context = ops.reshape(context, (batch, length, self.num_heads * self.head_size))
        return dense(context, scaled(self.output_kernel, output_scale))


ATTENTION_VARIANTS = {
    "original": OriginalAttention,
    "pair_swap_rotary": PairSwapAttention,
    "head_major_split": HeadMajorAttention,
    "scale_q": ScaledQAttention,
    "custom_softmax": CustomSoftmaxAttention,
    "ours": None,  # mtl_framework.layers.SelfAttention
    "reverse_pair_swap": ReversePairSwapAttention,
    "token_major_einsum": TokenMajorEinsumAttention,
    "float32_softmax": Float32SoftmaxAttention,
    "keras_dot_product_attention": SdpaAttention,
}


class AutodiffRMSNorm(RMSNorm):
    """RMSNorm differentiated by autodiff (before its gradient was written out)."""

    def call(self, x):
        return x * ops.rsqrt(ops.mean(ops.square(x), axis=-1, keepdims=True) + self.epsilon)


def alpha_on_activations(self, x, attention_bias, cos, sin, alpha, training=False):
    """TransformerLayer.call as first committed: `a` multiplies the branch outputs."""
    residual = self.attention(x, attention_bias, cos, sin, training=training)
    x = self.attention_norm(x + alpha * self.dropout(residual, training=training))
    residual = self.feed_forward(x)
    return self.feed_forward_norm(x + alpha * self.dropout(residual, training=training))


def feed_forward_plain_matmul(self, x, output_scale=None):
    """FeedForward.call with autodiff matmuls (before `dense`)."""
    hidden = ops.relu(ops.matmul(x, self.inner_kernel))
    return ops.matmul(hidden, scaled(self.output_kernel, output_scale))


def backbone_variant(attention="ours", norm="ours", alpha="ours", matmul="ours", **config):
    """A RoFormerV2Backbone (same weights) with the attention of ATTENTION_VARIANTS[attention],
    norm "autodiff" | "ours", alpha "activations" | "ours" (on the output kernels) and
    FFN matmul "autodiff" | "ours" (`layers.dense`)."""
    backbone = RoFormerV2Backbone(**config)
    cls = ATTENTION_VARIANTS[attention]
    if norm == "autodiff":
        backbone.embedding_norm = AutodiffRMSNorm(name="embedding_norm")
    for layer in backbone.transformer_layers:
        if cls is not None:
            a = layer.attention
            layer.attention = cls(a.num_heads, a.head_size, a.kernel_initializer,
                                  a.attention_dropout, name="attention")
        if norm == "autodiff":
            layer.attention_norm = AutodiffRMSNorm(name="attention_norm")
            layer.feed_forward_norm = AutodiffRMSNorm(name="feed_forward_norm")
        if alpha == "activations":
            layer.call = types.MethodType(alpha_on_activations, layer)
        if matmul == "autodiff":
            layer.feed_forward.call = types.MethodType(feed_forward_plain_matmul,
                                                       layer.feed_forward)
    return backbone
