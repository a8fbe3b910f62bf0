"""The pointer layers: span scores [B, heads, L, L] of the NER, relation, event and MRC
heads, as bert4keras's layers.py computes them (GlobalPointer, EfficientGlobalPointer),
with positions rotated by the backbone's own rotary tables."""
import keras
from keras import ops

from mtl_framework.layers import NEG_INF, apply_rotary, rotary_tables


def rotate_positions(xs, rope_scaling=None, lengths=None):
    """Each x [B, n, ..., d] of `xs` (q and k) with pairs (2i, 2i+1) rotated by
    position (axis 1): the backbone's own tables (`layers.rotary_tables`, bert4keras's
    sinusoidal positions) under the backbone's rope_scaling; lengths [B]: dynamic_ntk's n."""
    x = xs[0]
    n, d = ops.shape(x)[1], x.shape[-1]
    dynamic = rope_scaling is not None and rope_scaling["type"] == "dynamic_ntk"
    if dynamic and lengths is None:
        lengths = ops.full((ops.shape(x)[0],), n, dtype="int32")
    # positions exact in float32 whatever x's dtype
    cos, sin = rotary_tables(n, d, scaling=rope_scaling, lengths=lengths if dynamic else None)
    extra = len(x.shape) - 3  # axes between n and d (GlobalPointer's heads)
    shape = (-1 if dynamic else 1, n) + (1,) * extra + (d,)
    cos, sin = (ops.cast(ops.reshape(t, shape), x.dtype) for t in (cos, sin))
    return [apply_rotary(x, cos, sin) for x in xs]


def pointer_masking(logits, mask=None, tril_mask=True):
    """-inf outside mask [B, L] (rows and columns) and, with tril_mask, where
    start > end. logits: [B, heads, L, L]."""
    valid = None
    if mask is not None:
        m = ops.cast(mask, "bool")
        valid = ops.logical_and(m[:, None, :, None], m[:, None, None, :])
    if tril_mask:
        i = ops.arange(ops.shape(logits)[-1])
        upper = ops.less_equal(i[:, None], i[None, :])[None, None]
        valid = upper if valid is None else ops.logical_and(valid, upper)
    return logits if valid is None else ops.where(valid, logits, NEG_INF)


class _Pointer(keras.layers.Layer):
    """Shared options and config of the two pointer layers."""

    def __init__(self, heads, head_size, RoPE=True, use_bias=True,
                 tril_mask=True, kernel_initializer="lecun_normal", **kwargs):
        super().__init__(**kwargs)
        self.heads, self.head_size = heads, head_size
        self.RoPE, self.use_bias, self.tril_mask = RoPE, use_bias, tril_mask
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        # takes an explicit token mask but emits none (as bert4keras)
        self.supports_masking = True
        self.rope_scaling = None  # the backbone's (`use_backbone_rotary`)

    def compute_mask(self, inputs, mask=None):
        return None

    def _dense(self, units, name):
        return keras.layers.Dense(units, use_bias=self.use_bias,
                                  kernel_initializer=self.kernel_initializer,
                                  name=name)

    def get_config(self):
        return {**super().get_config(), "heads": self.heads,
                "head_size": self.head_size, "RoPE": self.RoPE,
                "use_bias": self.use_bias, "tril_mask": self.tril_mask,
                "kernel_initializer":
                    keras.initializers.serialize(self.kernel_initializer)}


class GlobalPointer(_Pointer):
    """Scores every (start, end) pair per head (https://kexue.fm/archives/8373).
    Output [B, heads, L, L]."""

    def __init__(self, heads, head_size, **kwargs):
        super().__init__(heads, head_size, **kwargs)
        self.dense = self._dense(heads * head_size * 2, "dense")

    def build(self, input_shape):
        self.dense.build(input_shape)

    def call(self, inputs, mask=None, lengths=None):
        """lengths [B]: each row's real tokens (dynamic_ntk's n; default: the padded length)."""
        d = self.head_size
        x = self.dense(inputs)
        b, n = ops.shape(x)[0], ops.shape(x)[1]
        # head h owns columns [2dh, 2d(h+1)): bert4keras's split + stack
        x = ops.reshape(x, (b, n, self.heads, 2 * d))
        qw, kw = x[..., :d], x[..., d:]
        if self.RoPE:
            qw, kw = rotate_positions((qw, kw), self.rope_scaling, lengths)
        logits = ops.einsum("bmhd,bnhd->bhmn", qw, kw) / d**0.5
        return pointer_masking(logits, mask, self.tril_mask)


class EfficientGlobalPointer(_Pointer):
    """GlobalPointer sharing one q/k projection across heads; each head only
    adds a start and an end bias (https://kexue.fm/archives/8877)."""

    def __init__(self, heads, head_size, **kwargs):
        super().__init__(heads, head_size, **kwargs)
        self.p_dense = self._dense(head_size * 2, "p_dense")
        # as bert4keras: q_dense reads p_dense's output, not the hidden states
        self.q_dense = self._dense(heads * 2, "q_dense")

    def build(self, input_shape):
        self.p_dense.build(input_shape)
        self.q_dense.build(tuple(input_shape[:-1]) + (self.head_size * 2,))

    def call(self, inputs, mask=None, factored=False, lengths=None):
        """Scores [B, heads, L, L]; with `factored`, their three parts (training:
        losses.factored_globalpointer_crossentropy never needs them whole):
        {"pair": [B, L, L] (masked), "start": [B, heads, L], "end": [B, heads, L]}.
        lengths: as GlobalPointer's."""
        d = self.head_size
        x = self.p_dense(inputs)
        qw, kw = x[..., ::2], x[..., 1::2]
        if self.RoPE:
            qw, kw = rotate_positions((qw, kw), self.rope_scaling, lengths)
        pair = ops.einsum("bmd,bnd->bmn", qw, kw) / d**0.5
        bias = ops.transpose(self.q_dense(x), (0, 2, 1)) / 2  # [B, 2 heads, L]
        # masking the shared part masks every head alike (-inf + a bias is -inf)
        parts = {"pair": pointer_masking(pair[:, None], mask, self.tril_mask)[:, 0],
                 "start": bias[:, 1::2], "end": bias[:, ::2]}
        return parts if factored else combine_pointer_parts(parts)


def combine_pointer_parts(parts):
    """EfficientGlobalPointer's scores from its parts: pair + end bias + start bias
    (bert4keras's order of additions, so the sums round the same)."""
    return parts["pair"][:, None] + parts["end"][:, :, None, :] + parts["start"][..., None]
