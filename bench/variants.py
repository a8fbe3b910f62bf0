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

import keras
from keras import ops

from mtl_framework import RoFormerV2Backbone
from mtl_framework.architectures.roformer_v2.layers import (
    FeedForward,
    RMSNorm,
    SelfAttention,
    scaled,
)
from mtl_framework.layers import (
    dense,
    dense_product,
    rotate_by_swap_matmul,
    softmax_with_exact_sum,
    swap_pairs,
    transposed,
)


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


def backbone_variant(attention="ours", norm="ours", alpha="ours", matmul="ours", patches=(),
                     **config):
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
    for name in patches:  # SPEED_VARIANTS' changes (bench/speed_ab.py)
        PATCHES[name](backbone)
    return backbone


# --- issue 33's speed A/B (bench/speed_ab.py): each a change to ours as it is -------------

def exact_sum_cumsum(x):
    """The last axis summed left to right in float32: TF's cumsum scans each row in order,
    so zeros appended (padded keys) leave the total's rounding unchanged."""
    return ops.cumsum(x, axis=-1)[..., -1:]


def exact_sum_tree(x):
    """The last axis summed as a tree of pairwise adds (x[i] + x[i + w], w halving), after
    zero-padding to a power of two: a sum of two floats is exact in any order, and padding
    only adds levels whose partners are zero, so the rounding does not depend on it."""
    n = x.shape[-1]
    if n is None:  # symbolic build (shapes only)
        return ops.sum(x, axis=-1, keepdims=True)
    width = 1 << (n - 1).bit_length()
    if width != n:
        x = ops.pad(x, [(0, 0)] * (len(x.shape) - 1) + [(0, width - n)])
    while width > 1:
        width //= 2
        x = ops.sum(ops.reshape(x, (*ops.shape(x)[:-1], 2, width)), axis=-2)
    return x  # [..., 1]


def softmax_with_sum(total_fn):
    @ops.custom_gradient
    def softmax(scores):
        exp = ops.exp(scores - ops.max(scores, axis=-1, keepdims=True))
        weights = exp / total_fn(exp)

        def grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            return weights * (upstream - ops.sum(upstream * weights, axis=-1, keepdims=True))

        return weights, grad

    return softmax


def dense_weight_grad_copy(x, kernel):
    """`layers.dense` whose kernel gradient multiplies a transposed copy of the inputs
    (X^T as a new array) instead of MatMul(transpose_a=True)."""
    return _dense_dw_copy(x, ops.cast(kernel, x.dtype))


_dense_dw_copy = dense_product(transposed)


def scores_einsum(q, k):
    return ops.einsum("bhjd,bhkd->bhjk", q, k)


def context_einsum(weights, v):
    return ops.einsum("bhjk,bhkd->bjhd", weights, v)


def scores_matmul(q, k):
    """q k^T as a batched matmul (TF folds the swap into BatchMatMul's adj_y)."""
    return ops.matmul(q, ops.swapaxes(k, -1, -2))


def context_matmul(weights, v):
    """weights v as a batched matmul, then one transpose to [b, l, h, d]."""
    return ops.transpose(ops.matmul(weights, v), (0, 2, 1, 3))


class HookedAttention(SelfAttention):
    """Ours (mtl_framework SelfAttention.call) as it was before issue 33's speed work,
    with hooks for the A/B: the exact softmax, the bias-free matmul, the two attention
    products (the context by einsum, as before; ours now: `context_matmul`)."""

    exact_softmax = staticmethod(softmax_with_exact_sum)
    dense = staticmethod(dense)
    scores = staticmethod(scores_einsum)
    context = staticmethod(context_einsum)
    rotary = None  # None: mtl_framework.layers.apply_rotary as it is now

    def call(self, x, attention_bias, cos, sin, output_scale=None, training=False):
        import keras

        from mtl_framework.layers import apply_rotary, attention_softmax

        ours_rotary = self.rotary or apply_rotary

        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        qkv = ops.reshape(self.dense(x, self.qkv_kernel),
                          (batch, length, 3, self.num_heads, self.head_size))
        qk, v = ops.split(ops.transpose(qkv, (2, 0, 3, 1, 4)), [2], axis=0)
        scale = 1.0 / math.sqrt(self.head_size)
        if len(cos.shape) == 2:
            cos, sin = cos[None], sin[None]
        qk = ours_rotary(qk, ops.stack([cos * scale, cos])[:, :, None],
                         ops.stack([sin * scale, sin])[:, :, None])
        q, k = (ops.squeeze(t, 0) for t in ops.split(qk, 2))
        v = ops.squeeze(v, 0)
        scores = self.scores(q, k)
        scores = ops.cast(scores, attention_bias.dtype) + attention_bias
        dtype = keras.backend.standardize_dtype(scores.dtype)
        if self.exact_padding and dtype == "float32":
            weights = self.exact_softmax(scores)
        else:
            weights = attention_softmax(scores, self.exact_padding)
        weights = self.dropout(ops.cast(weights, v.dtype), training=training)
        context = self.context(weights, v)
        context = ops.reshape(context, (batch, length, self.num_heads * self.head_size))
        return self.dense(context, scaled(self.output_kernel, output_scale))


class HookedFeedForward(FeedForward):
    dense = staticmethod(dense)

    def call(self, x, output_scale=None):
        hidden = ops.relu(self.dense(x, self.inner_kernel))
        return self.dense(hidden, scaled(self.output_kernel, output_scale))


class DenseCopyAttention(HookedAttention):
    dense = staticmethod(dense_weight_grad_copy)


class DenseCopyFeedForward(HookedFeedForward):
    dense = staticmethod(dense_weight_grad_copy)


class MatmulAttention(HookedAttention):
    scores = staticmethod(scores_matmul)
    context = staticmethod(context_matmul)


class ContextMatmulAttention(HookedAttention):
    context = staticmethod(context_matmul)


class MatmulRotaryAttention(ContextMatmulAttention):
    """Rotary as before the complex multiply (float32 on TF): the pair-swap matmul."""
    rotary = staticmethod(rotate_by_swap_matmul)


class CumsumSoftmaxAttention(HookedAttention):
    exact_softmax = staticmethod(softmax_with_sum(exact_sum_cumsum))


class TreeSoftmaxAttention(HookedAttention):
    exact_softmax = staticmethod(softmax_with_sum(exact_sum_tree))


ATTENTION_VARIANTS.update({
    "hooked_ours": HookedAttention,
    "exact_sum_cumsum": CumsumSoftmaxAttention,
    "exact_sum_tree": TreeSoftmaxAttention,
})


def _replace_attention(backbone, cls):
    """Every layer's attention by `cls`; hooks of an earlier patch are kept (combined)."""
    for layer in backbone.transformer_layers:
        a = layer.attention
        if isinstance(a, HookedAttention) and not isinstance(a, cls):
            cls = type(cls.__name__ + type(a).__name__, (cls, type(a)), {})
        layer.attention = cls(a.num_heads, a.head_size, a.kernel_initializer,
                              a.attention_dropout, a.exact_padding, name="attention")


PATCHES = {}


def patch(name):
    def register(fn):
        PATCHES[name] = fn
        return fn
    return register


@patch("exact_sum_cumsum")
def _cumsum(backbone):
    _replace_attention(backbone, CumsumSoftmaxAttention)


@patch("exact_sum_tree")
def _tree(backbone):
    _replace_attention(backbone, TreeSoftmaxAttention)


def _replace_feed_forward(backbone, cls):
    for layer in backbone.transformer_layers:
        f = layer.feed_forward
        layer.feed_forward = cls(f.intermediate_size, f.kernel_initializer, name="feed_forward")


@patch("dense_weight_grad_copy")
def _dw_copy(backbone):
    _replace_attention(backbone, DenseCopyAttention)
    _replace_feed_forward(backbone, DenseCopyFeedForward)


@patch("attention_matmul")
def _attention_matmul(backbone):
    _replace_attention(backbone, MatmulAttention)


@patch("context_matmul")
def _context_matmul(backbone):
    _replace_attention(backbone, ContextMatmulAttention)


def _set_dropout(backbone, cls):
    backbone.embedding_dropout = cls(backbone.config["dropout"])
    for layer in backbone.transformer_layers:
        layer.dropout = cls(layer.config["dropout"])


@patch("mask_dropout")
def _mask_dropout(backbone):
    """layers.Dropout (ours since issue 33; measured as this variant before it was)."""
    from mtl_framework.layers import Dropout

    _set_dropout(backbone, Dropout)


class HalfwordDropout(keras.layers.Dropout):
    """Tried and reverted (issue 33): layers.Dropout's rule (drop with probability
    round(rate * 2^16) / 2^16, keep times 1/(1-rate)) from 16-bit random numbers, two per
    32-bit stateless Philox draw (a bitcast): half Keras's random-number work, other masks.
    Reverted because other masks change every run trained with dropout: a run resumed
    across the change no longer reaches the state its own code reached
    (tests/test_run_dir.py's format-1 run) and keep_best's fixture run moved."""

    def call(self, inputs, training=False):
        import tensorflow as tf

        if not (training and self.rate > 0) or self.noise_shape is not None:
            return super().call(inputs, training=training)
        shape = keras.ops.shape(inputs)
        seed = tf.cast(tf.math.floormod(self.seed_generator.next(), tf.int32.max - 1), "int32")
        size = tf.reduce_prod(shape)
        words = tf.random.stateless_uniform(((size + 1) // 2,), seed, dtype=tf.uint32,
                                            minval=None, maxval=None)
        halves = tf.reshape(tf.bitcast(words, tf.uint16), (-1,))
        keep = tf.reshape(halves[:size], shape) >= round(self.rate * 2**16)
        scale = keras.ops.cast(1.0 / (1.0 - self.rate), inputs.dtype)
        return inputs * keras.ops.where(keep, scale, keras.ops.cast(0.0, inputs.dtype))


@patch("halfword_dropout")
def _halfword_dropout(backbone):
    _set_dropout(backbone, HalfwordDropout)


@patch("keras_dropout_before")
def _keras_dropout(backbone):
    _set_dropout(backbone, keras.layers.Dropout)


@patch("matmul_rotary_before")
def _matmul_rotary(backbone):
    _replace_attention(backbone, MatmulRotaryAttention)


@patch("hooked_ours")
def _hooked(backbone):
    _replace_attention(backbone, HookedAttention)


# name: (bench.backbone variant dict, what it changes)
SPEED_VARIANTS = {
    "hooked_ours": ({"patches": ["hooked_ours"]},
                    "ours before issue 33's speed work, re-spelled in bench/variants.py (runs "
                    "before the context change: a control, ~1.00 by construction)"),
    "einsum_context_before": ({"patches": ["hooked_ours"]},
                              "ours before the context change: einsum('bhjk,bhkd->bjhd')"),
    "exact_sum_cumsum": ({"patches": ["exact_sum_cumsum"]},
                         "exact softmax denominator as a float32 left-to-right cumsum "
                         "(float32 runs only; mixed precision uses the float32 softmax)"),
    "exact_sum_tree": ({"patches": ["exact_sum_tree"]},
                       "exact softmax denominator as a float32 tree of pairwise adds"),
    "dense_weight_grad_copy": ({"patches": ["dense_weight_grad_copy"]},
                               "kernel gradient X^T dY with X^T as a transposed copy (as dX "
                               "uses W^T) instead of MatMul(transpose_a)"),
    "mask_dropout": ({"patches": ["mask_dropout"]},
                     "dropout as x * where(uniform >= rate, 1/(1-rate), 0) (same mask, one "
                     "multiply back) instead of Keras's select(x * scale)"),
    "context_matmul": ({"patches": ["context_matmul"]},
                       "context as a batched matmul [b,h,l,d] and one explicit transpose to "
                       "[b,l,h,d] instead of einsum('bhjk,bhkd->bjhd')"),
    "halfword_dropout": ({"patches": ["halfword_dropout"]},
                         "dropout from 16-bit random numbers, two per 32-bit Philox draw "
                         "(tried, reverted: other masks than Keras's)"),
    "matmul_rotary_before": ({"patches": ["matmul_rotary_before"]},
                             "ours before rotary by complex multiply (float32 on TF): the pair "
                             "swap as a [d, d] permutation matmul and three elementwise passes"),
    "keras_dropout_before": ({"patches": ["keras_dropout_before"]},
                             "ours before layers.Dropout: keras.layers.Dropout"),
    "before_issue33_speed": ({"patches": ["hooked_ours", "keras_dropout_before"]},
                             "ours before issue 33's speed commits: einsum context and "
                             "keras.layers.Dropout"),
    "context_matmul+mask_dropout": ({"patches": ["context_matmul", "mask_dropout"]},
                                    "both of the above"),
    "attention_matmul": ({"patches": ["attention_matmul"]},
                         "scores q k^T as a batched matmul too (k^T folded into adj_y; the "
                         "context is one in ours already) instead of einsum('bhjd,bhkd->bhjk')"),
}
