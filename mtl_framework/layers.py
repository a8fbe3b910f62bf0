"""Building blocks every architecture may share, one idea per function or layer:
rotary tables (RoFormerV2's attention and the pointer heads), the bias-free matmul,
the attention softmax (exact under padding), packing, and the initializer RoFormerV2 and
the task heads draw from. The pointer heads' span scores are in families/pointers.py.
An architecture's own blocks are in architectures/<name>/layers.py."""
import math
import random

import keras
import numpy as np
from keras import ops


@keras.saving.register_keras_serializable(package="mtl_framework")
class RoFormerV2Initializer(keras.initializers.Initializer):
    """bert4keras 0.11.5's `RoFormerV2.initializer`, a fresh draw on every call.

    Truncated normal (cut at 2 std) with std = 1.13684723 / sqrt(fan) * L^(-1/2),
    fan = shape[0] unless shape[0] > 10000 or < 10 (then shape[1]): each weight's
    scale comes from its own shape (a token embedding [V, H] uses V unless
    V > 10000). 1.13684723 undoes the variance lost to the truncation, so the
    effective std is 1/sqrt(fan); L^(-1/2) keeps deep post-norm stacks stable.

    One instance serves every weight: each call draws its own seed, from Python's
    `random` (seeded by `keras.utils.set_random_seed`) or, given `seed`, from a
    stream of its own. A Keras initializer fixes its seed once, so sharing one gives
    every weight the same numbers (two layers started identical).
    """

    def __init__(self, num_layers, seed=None):
        self.num_layers = num_layers
        self.seed = seed
        self._seeds = random.Random(seed) if seed is not None else random

    def stddev(self, shape):
        fan = shape[0] if len(shape) == 1 or 10 <= shape[0] <= 10000 else shape[1]
        return 1.13684723 / math.sqrt(fan) * self.num_layers ** -0.5

    def __call__(self, shape, dtype=None):
        return keras.random.truncated_normal(shape, stddev=self.stddev(shape), dtype=dtype,
                                             seed=self._seeds.randint(1, 10**9))

    def get_config(self):
        return {"num_layers": self.num_layers, "seed": self.seed}


def resolve_exact_padding(option, compute_dtype):
    """The softmax the backbone uses: `option` when given (True/False), else (None,
    "auto") exact on a float32 CPU run, float32 on a GPU or under mixed precision,
    where the float64 copy of the scores is slow and 16-bit outputs are not exact anyway."""
    if option not in (None, True, False):
        raise ValueError(f"exact_padding must be true, false or null (auto), got {option!r}")
    if option is not None:
        return option
    if keras.backend.standardize_dtype(compute_dtype) != "float32":
        return False
    if keras.backend.backend() == "jax":  # float64 only with x64 on; a CPU only
        import jax

        return bool(jax.config.jax_enable_x64) and jax.default_backend() == "cpu"
    import tensorflow as tf

    return not tf.config.list_logical_devices("GPU")


def rotary_inverse_frequency(head_size, base=10000.0, scaling=None, lengths=None):
    """The rotary frequencies theta_i = base^(-2i/d), i < d/2, under `scaling`
    (`rope_scaling.normalise`'s dict, None for none), as Hugging Face transformers'
    `rope_scaling` types (modeling_rope_utils) compute them:

    linear       theta_i / factor: positions divided by the factor, so L * factor
                 positions span the angles L did ("position interpolation", Chen et al.
                 2023, arXiv:2306.15595; HF `linear`).
    ntk          base' = base * factor^(d / (d - 2)), at every length: the slowest pair
                 turns factor times slower while the fastest is unchanged ("NTK-aware
                 scaled RoPE", bloc97, r/LocalLLaMA, June 2023; Code Llama's "adjusted
                 base frequency", Roziere et al. 2023, arXiv:2308.12950, raises the base
                 the same way, to 1e6). HF has it as `default` with rope_theta = base'.
    dynamic_ntk  base' = base * (factor * n / N - (factor - 1))^(d / (d - 2)) for a row
                 of n tokens longer than the trained N (`original_max_length`); base for
                 n <= N, so short inputs see the trained tables exactly (HF `dynamic`).
                 n is each row's own count of real tokens (`lengths` [B]), where HF takes
                 the batch's padded length: padding and batch neighbours then never change
                 a row's output. Without `lengths` every row counts the full length.

    Returns [d/2] float32, or [B, d/2] for dynamic_ntk given `lengths`.
    """
    exponent = ops.arange(0, head_size // 2, dtype="float32") * 2.0 / head_size
    trained = base ** -exponent  # bert4keras's order of operations: the trained tables
    kind = scaling["type"] if scaling else None
    factor = scaling["factor"] if scaling else 1.0
    if kind is None:
        return trained
    if kind == "linear":
        return trained / factor
    exponent = ops.arange(0, head_size // 2, dtype="float64") * 2.0 / head_size  # raised bases
    if kind == "ntk":
        return ops.cast(ntk_base(base, factor, head_size) ** -exponent, "float32")
    if lengths is None:
        raise ValueError("dynamic_ntk tables need the sequence lengths")
    n = ops.cast(lengths, "float64")
    original = float(scaling["original_max_length"])
    grown = base * (factor * n / original - (factor - 1.0)) ** (head_size / (head_size - 2.0))
    scaled = ops.cast(grown[:, None] ** -exponent[None, :], "float32")
    return ops.where((n > original)[:, None], scaled, trained[None, :])


def ntk_base(base, factor, head_size):
    """NTK-aware / ABF base: base * factor^(d / (d - 2)) (`rotary_inverse_frequency`)."""
    return base * factor ** (head_size / (head_size - 2.0))


def rotary_lengths(token_ids):
    """Each row's count of real (non-padding, id != 0) tokens: dynamic_ntk's n."""
    return ops.sum(ops.cast(ops.not_equal(token_ids, 0), "int32"), axis=-1)


def rotary_angles(length, head_size, base=10000.0, scaling=None, lengths=None):
    """m * theta_i for positions m < length: [length, d/2], or [B, length, d/2]
    for dynamic_ntk (`rotary_inverse_frequency`), in float32."""
    inverse_frequency = rotary_inverse_frequency(head_size, base, scaling, lengths)
    positions = ops.arange(0, length, dtype="float32")
    return positions[:, None] * inverse_frequency[..., None, :]


def rotary_tables(length, head_size, base=10000.0, dtype="float32", scaling=None, lengths=None):
    """Rotary tables for positions m < length, pair-interleaved:

    cos: (c_0, c_0, c_1, c_1, ...) and sin: (-s_0, s_0, -s_1, s_1, ...) with
    c_i, s_i = cos, sin of m * theta_i (`rotary_inverse_frequency`, which applies
    `scaling`), so that `apply_rotary` is two multiplies and an add (no strided
    slicing, whose gradient is slow on CPU). Shape [length, d], or [B, length, d]
    for dynamic_ntk (one base per row, from `lengths`).
    """
    angles = rotary_angles(length, head_size, base, scaling, lengths)
    cos, sin = ops.cos(angles), ops.sin(angles)
    shape = (-1, head_size) if len(angles.shape) == 2 else (ops.shape(angles)[0], -1, head_size)
    cos = ops.reshape(ops.stack([cos, cos], axis=-1), shape)
    sin = ops.reshape(ops.stack([-sin, sin], axis=-1), shape)
    return ops.cast(cos, dtype), ops.cast(sin, dtype)


def swap_pairs(x):
    """(x0, x1, x2, x3, ...) -> (x1, x0, x3, x2, ...) along the last axis, as a reverse of
    a [..., d/2, 2] view (bench/variants.py's earlier rotary; `apply_rotary` multiplies
    by `pair_swap_matrix` instead)."""
    shape = ops.shape(x)
    pairs = ops.reshape(x, (*shape[:-1], shape[-1] // 2, 2))
    return ops.reshape(ops.flip(pairs, axis=-1), shape)


def pair_swap_matrix(d, dtype="float32"):
    """The [d, d] permutation P with x @ P = `swap_pairs(x)`. Exact in any float dtype:
    each output is one input times 1 plus zeros."""
    return ops.cast(np.eye(d, dtype="float32")[np.arange(d) ^ 1], dtype)


def apply_rotary(x, cos, sin):
    """Rotate adjacent pairs (2i, 2i+1) of x [..., length, d] by the `rotary_tables`:

    (x_2i, x_2i+1) -> (x_2i c_i - x_2i+1 s_i, x_2i+1 c_i + x_2i s_i), bit for bit
    the products and sums of the textbook form.
    - TensorFlow, float32: each pair is a complex number and the rotation one complex
      multiply (`rotate_as_complex`), one pass each way; rotary cost ~4x less than the
      float form's below (bench/results/speed_ab.md).
    - TensorFlow, 16-bit: the pair swap is one [N, d] x [d, d] matmul by a permutation
      (`pair_swap_matrix`), faster on TF's CPU kernels than a reverse of a [..., d/2, 2]
      view and its gradient (the ablation of bench/backbone.py's run of 2026-11-21, commit
      41d839a: `git show 41d839a:bench/results/backbone.md`).
    - JAX: the reverse (`swap_pairs`). With the matmul, XLA's two-device DataParallel
      drifted 3.3e-5 (relative, 10 updates) from one device against 5e-7 with the reverse
      (tests/test_jax.py); inside a jitted step XLA fuses the elementwise work anyway.
    """
    if keras.backend.backend() == "jax":
        return x * cos + swap_pairs(x) * sin
    if keras.backend.standardize_dtype(x.dtype) == "float32":
        return rotate_as_complex(x, cos, sin)
    return rotate_by_swap_matmul(x, cos, sin)


def rotate_by_swap_matmul(x, cos, sin):
    """`apply_rotary` as x * cos + (x P) * sin, P the [d, d] `pair_swap_matrix`."""
    d = x.shape[-1]
    swapped = ops.matmul(ops.reshape(x, (-1, d)), pair_swap_matrix(d, x.dtype))
    return x * cos + ops.reshape(swapped, ops.shape(x)) * sin


def rotate_as_complex(x, cos, sin):
    """`apply_rotary` on TensorFlow in float32: x [..., d] viewed as complex64 [..., d/2]
    (a bitcast of the [..., d/2, 2] pairs, no copy) times e^(i m theta) = c + i s, read off
    the tables. A complex product (a + ib)(c + is) is (ac - bs) + i(bc + as): the textbook
    form's products and sums. TF has no gradient for a bitcast, so the gradient is written
    out: the inverse rotation, times the conjugate. TensorFlow only (tf.bitcast)."""
    import tensorflow as tf

    turn = tf.complex(cos[..., 0::2], sin[..., 1::2])  # cos holds c_i twice, sin (-s_i, s_i)
    pairs_shape = tf.concat([tf.shape(x)[:-1], [x.shape[-1] // 2, 2]], axis=0)

    def turned(values, by):
        complex_values = tf.bitcast(tf.reshape(values, pairs_shape), tf.complex64)
        return tf.reshape(tf.bitcast(complex_values * by, tf.float32), tf.shape(values))

    @tf.custom_gradient
    def rotate(x):
        return turned(x, turn), lambda upstream: turned(upstream, tf.math.conj(turn))

    return rotate(x)


def transposed(kernel):
    """kernel^T [out, in] as a new array. Spelled as a 3-D transpose because TF's graph
    optimizer folds a plain 2-D one back into MatMul(transpose_b=True), which oneDNN
    runs 10-30% slower than a matmul with the transposed copy (measured on CPU)."""
    rows, cols = kernel.shape
    return ops.reshape(ops.transpose(ops.reshape(kernel, (rows, cols, 1)), (1, 0, 2)), (cols, rows))


def dense(x, kernel):
    """x @ kernel for x [..., in] and kernel [in, out] (no bias). Same product and
    gradients as autodiff; the input gradient multiplies by `transposed(kernel)`."""
    # ops.cast reads a variable into a tensor (of the compute dtype): the custom gradient
    # must see an input, not a captured variable (TF rejects those in eager mode)
    return _dense(x, ops.cast(kernel, x.dtype))


def dense_product(transpose_inputs):
    """`dense`'s product and its gradients, the kernel's gradient X^T dY taking X^T by
    `transpose_inputs` (ops.transpose here; bench/variants.py times a transposed copy)."""

    @ops.custom_gradient
    def product(x, kernel):
        y = ops.matmul(x, kernel)

        def grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            inputs = ops.reshape(x, (-1, kernel.shape[0]))
            outputs = ops.reshape(upstream, (-1, kernel.shape[1]))
            return (ops.matmul(upstream, transposed(kernel)),
                    ops.matmul(transpose_inputs(inputs), outputs))

        return y, grad

    return product


_dense = dense_product(ops.transpose)


@ops.custom_gradient
def softmax_with_exact_sum(scores):
    """Softmax over the last axis whose denominator is summed in float64.

    A float32 sum's rounding depends on how many (masked, zero) terms the
    kernel's vector loop sees, so real-token outputs moved by ~1e-6 when only
    the padding changed (TF switches reduction paths at 64 keys); a float64
    sum rounds back to the same float32 whatever the padding. The gradient is
    the usual y * (g - sum(g * y)) in float32 (one fused formula instead of
    differentiating through the casts: padding exactness is a forward property).
    """
    exp = ops.exp(scores - ops.max(scores, axis=-1, keepdims=True))
    total = ops.sum(ops.cast(exp, "float64"), axis=-1, keepdims=True)
    weights = exp / ops.cast(total, exp.dtype)

    def grad(*args, upstream=None):
        if upstream is None:
            (upstream,) = args
        return weights * (upstream - ops.sum(upstream * weights, axis=-1, keepdims=True))

    return weights, grad


def attention_softmax(scores, exact=True):
    """Attention weights from masked scores, computed in at least float32.

    exact=True sums the denominator in float64 (`softmax_with_exact_sum`): real-token
    outputs are bit-identical whatever the padding, at the cost of a float64 copy of
    the [batch, heads, L, L] exponentials (cheap on CPU, slow on most GPUs). exact=False
    is the plain float32 softmax: outputs move by ~1e-6 with the padding (docs/backbone.md).
    Scores in 16 bits (mixed precision) are cast up first, the weights back down.
    """
    dtype = keras.backend.standardize_dtype(scores.dtype)
    scores = ops.cast(scores, "float32") if dtype in ("float16", "bfloat16") else scores
    weights = softmax_with_exact_sum(scores) if exact else ops.softmax(scores, axis=-1)
    return ops.cast(weights, dtype)


def attend(q, k, v, attention_bias, exact, dropout, training=False):
    """Multi-head attention of heads-major q, k, v [batch, heads, length, d] (q already
    scaled by 1/sqrt(d)): scores plus `attention_bias` (float32: [batch, 1, 1, length], 0
    or -1e9 at padded keys), `attention_softmax`, `dropout` (a Dropout layer) on the
    weights; the context [batch, length, heads * d], as BERT's and RoFormerV2's layers
    take it. q may hold fewer positions than k and v (a last layer's `read_positions`
    alone): the context has q's."""
    batch, heads, _, size = ops.shape(v)
    length = ops.shape(q)[2]
    scores = ops.einsum("bhjd,bhkd->bhjk", q, k)
    scores = ops.cast(scores, attention_bias.dtype) + attention_bias  # float32 bias
    weights = ops.cast(attention_softmax(scores, exact), v.dtype)
    weights = dropout(weights, training=training)
    return ops.reshape(attention_context(weights, v), (batch, length, heads * size))


def attention_context(weights, v):
    """weights [b, h, j, k] times v [b, h, k, d], token-major: [b, j, h, d]. On TensorFlow
    a batched matmul and one explicit transpose, whose backward is two batched matmuls and
    one transpose; einsum("bhjk,bhkd->bjhd") transposes inside its forward and backward
    (bench/results/speed_ab.md). JAX keeps the einsum: the speed was measured on
    TensorFlow only, and the JAX tests' drift bounds were measured with the einsum."""
    if keras.backend.backend() == "jax":
        return ops.einsum("bhjk,bhkd->bjhd", weights, v)
    return ops.transpose(ops.matmul(weights, v), (0, 2, 1, 3))


class Packing:
    """The real tokens of a padded batch of texts (token id 0 is padding) packed into one
    list of T tokens: what a backbone's token-wise work (embeddings, dense layers, norms,
    activations, dropout) runs on in its packed call, where padding would be B x L - T
    rows of wasted work (55% of a contrastive batch of AFQMC pairs each side cut to its
    longest text). Attention needs the padded [B, L] layout: `pad` and `pack` move
    between the two. Without `capacity`, T is a data-dependent shape, which TensorFlow
    traces and jax.jit does not; with it (a Python int >= T, JAX's step: T rounded up, so
    the shapes stay static), the list has `capacity` rows, rows T.. read position 0 and
    compute what no slot points at.

    indices [T or capacity]: each real token's flat position (b * L + l); slots [B * L]:
    each position's row in the packed list, a zero row (the list's length) at padding."""

    def __init__(self, token_ids, capacity=None):
        self.batch, self.length = ops.shape(token_ids)[0], ops.shape(token_ids)[1]
        real = ops.reshape(ops.not_equal(token_ids, 0), (-1,))
        rows = ops.cumsum(ops.cast(real, "int32")) - 1  # each real token's row in the list
        if capacity is None:
            self.indices = ops.cast(ops.reshape(ops.nonzero(real)[0], (-1,)), "int32")
            self.slots = ops.where(real, rows, ops.shape(self.indices)[0])
        else:
            self.slots = ops.where(real, rows, capacity)
            # each real position written to its row (padding's zeros to row `capacity`, cut)
            flat = ops.where(real, ops.arange(ops.shape(real)[0], dtype="int32"), 0)
            self.indices = ops.scatter(self.slots[:, None], flat, (capacity + 1,))[:capacity]
        self.positions = self.indices % self.length  # each real token's position in its text

    def inputs(self, inputs):
        """A backbone's {token_ids, segment_ids} [B, L] -> the real tokens' ids [T]."""
        return {k: self.pack(v) for k, v in inputs.items() if k in ("token_ids", "segment_ids")}

    def pack(self, x):
        """[B, L, ...] -> [T, ...]: the real tokens' rows."""
        return ops.take(ops.reshape(x, (-1, *x.shape[2:])), self.indices, axis=0)

    def pad(self, x):
        """[T, C] -> [B, L, C], zeros at padding."""
        rows = ops.concatenate([x, ops.zeros((1, x.shape[-1]), x.dtype)], axis=0)
        return ops.reshape(ops.take(rows, self.slots, axis=0), (self.batch, self.length, x.shape[-1]))


def rows_at(x, positions):
    """x [B, L, C] at positions [B, R] (int32, each row's own): [B, R, C]. The last layer's
    rows where a head reads the backbone (MultiTaskModel._with_read_positions): one flat
    gather, whose gradient adds those rows back."""
    batch, length = ops.shape(x)[0], ops.shape(x)[1]
    flat = positions + ops.arange(batch, dtype=positions.dtype)[:, None] * length
    return ops.take(ops.reshape(x, (-1, x.shape[-1])), flat, axis=0)


def table_rows_at(table, positions):
    """A rotary table [L, d] (or [B, L, d], dynamic_ntk) at positions [B, R]: [B, R, d]."""
    return ops.take(table, positions, axis=0) if len(table.shape) == 2 else rows_at(table, positions)


class Dropout(keras.layers.Dropout):
    """keras.layers.Dropout (same seed stream) spelled as x * mask, mask =
    where(uniform >= rate, 1 / (1 - rate), 0): its gradient is one multiply by the mask
    where TensorFlow's dropout differentiates a select and a multiply
    (bench/results/speed_ab.md). The uniform is drawn in float32 whatever x's dtype, so
    float32 outputs equal Keras's bit for bit; on 16-bit inputs Keras draws in x's dtype,
    which TensorFlow's CPU does 1.6x slower and with an 8-bit mantissa. Other backends:
    Keras's own dropout."""

    def call(self, inputs, training=False):
        if (not (training and self.rate > 0) or self.noise_shape is not None
                or keras.backend.backend() != "tensorflow"):
            return super().call(inputs, training=training)
        keep = keras.random.uniform(ops.shape(inputs), dtype="float32",
                                    seed=self.seed_generator) >= self.rate
        scale = ops.cast(1.0 / (1.0 - self.rate), inputs.dtype)
        return inputs * ops.where(keep, scale, ops.cast(0.0, inputs.dtype))


# A masked score: what softmax and argmax never pick (the pointer, choice and MRC heads).
NEG_INF = float("-inf")
