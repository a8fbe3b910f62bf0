"""BERT's block (ALBERT's too): post-LN, biases, LayerNorm with gamma and beta.

x = LN(x + Dropout(Attention(x))); x = LN(x + Dropout(W2 act(W1 x + b1) + b2)),
as google-research/bert's `transformer_model`, transformers' BertLayer and keras-hub's
TransformerEncoder compute it. The attention softmax is the shared one
(`layers.attention_softmax`: exact under padding when asked).
"""
import math

import keras
from keras import ops

from mtl_framework.layers import Dropout, attend, rows_at


# Our `activation` names -> the function. "gelu" is the exact erf form (transformers'
# "gelu", bert4keras's default); "gelu_approximate" the tanh form (transformers'
# "gelu_new" / "gelu_pytorch_tanh", keras-hub's BERT and ALBERT).
def in_float32(activation):
    """`activation` computed in float32 on 16-bit inputs, the result cast back: TensorFlow's
    CPU kernels for erfc, tanh and their multiplies are ~10x slower in bfloat16 than in
    float32 (GELU took as long as all the bfloat16 matmuls: bench/results/embedding_speed.md),
    and float32 is the more exact of the two."""
    def computed(x):
        if keras.backend.standardize_dtype(x.dtype) in ("bfloat16", "float16"):
            return ops.cast(activation(ops.cast(x, "float32")), x.dtype)
        return activation(x)
    return computed


ACTIVATIONS = {
    "gelu": in_float32(lambda x: keras.activations.gelu(x, approximate=False)),
    "gelu_approximate": in_float32(lambda x: keras.activations.gelu(x, approximate=True)),
    "relu": keras.activations.relu,
}


def initializer():
    """BERT's truncated normal (std = initializer_range 0.02), a new one per weight."""
    return keras.initializers.TruncatedNormal(stddev=0.02)


class BertLayer(keras.layers.Layer):
    """One post-LN block. Its parts (`parts()`) are named as the converters name them:
    query, key, value, attention_output, attention_norm, intermediate, output, output_norm."""

    def __init__(self, hidden_size, num_heads, head_size, intermediate_size, activation="gelu",
                 layer_norm_epsilon=1e-12, dropout=0.0, attention_dropout=0.0,
                 exact_padding=True, **kwargs):
        super().__init__(**kwargs)
        self.num_heads, self.head_size = num_heads, head_size
        self.exact_padding = exact_padding
        self.activation = ACTIVATIONS[activation]
        inner = num_heads * head_size
        dense = lambda units, name: keras.layers.Dense(  # noqa: E731
            units, kernel_initializer=initializer(), name=name)
        norm = lambda name: keras.layers.LayerNormalization(  # noqa: E731
            epsilon=layer_norm_epsilon, name=name)
        self.query, self.key, self.value = (dense(inner, n) for n in ("query", "key", "value"))
        self.attention_output = dense(hidden_size, "attention_output")
        self.intermediate = dense(intermediate_size, "intermediate")
        self.output_dense = dense(hidden_size, "output")
        self.attention_norm, self.output_norm = norm("attention_norm"), norm("output_norm")
        self.attention_dropout = Dropout(attention_dropout)
        self.dropout = Dropout(dropout)
        self.config = dict(hidden_size=hidden_size, num_heads=num_heads, head_size=head_size,
                           intermediate_size=intermediate_size, activation=activation,
                           layer_norm_epsilon=layer_norm_epsilon, dropout=dropout,
                           attention_dropout=attention_dropout, exact_padding=exact_padding)

    def build(self, input_shape):
        for layer in (self.query, self.key, self.value, self.intermediate):
            layer.build(input_shape)
        self.attention_output.build((*input_shape[:-1], self.num_heads * self.head_size))
        self.output_dense.build((*input_shape[:-1], self.config["intermediate_size"]))
        self.attention_norm.build(input_shape)
        self.output_norm.build(input_shape)

    def parts(self):
        """{part: its Dense or LayerNormalization}, in the converters' order."""
        return {"query": self.query, "key": self.key, "value": self.value,
                "attention_output": self.attention_output, "attention_norm": self.attention_norm,
                "intermediate": self.intermediate, "output": self.output_dense,
                "output_norm": self.output_norm}

    def heads(self, x):
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        return ops.transpose(ops.reshape(x, (batch, length, self.num_heads, self.head_size)),
                             (0, 2, 1, 3))

    def call(self, x, attention_bias, training=False, packing=None, reads=None):
        """x [batch, length, hidden], or with `packing` (layers.Packing) the real tokens
        [T, hidden], padded for attention alone; attention_bias [batch, 1, 1, length] (0,
        or -1e9 at padded keys). reads [batch, R]: queries, output and feed-forward at
        those positions alone (a last layer where a head reads a few), [batch, R, hidden]."""
        k, v = self.key(x), self.value(x)
        if packing is not None:
            k, v = packing.pad(k), packing.pad(v)
        if reads is not None:  # the rows the block goes on with: queries at the reads alone
            x = rows_at(x if packing is None else packing.pad(x), reads)
        q = self.query(x)
        if packing is not None and reads is None:
            q = packing.pad(q)
        q = self.heads(q) * (1.0 / math.sqrt(self.head_size))
        context = attend(q, self.heads(k), self.heads(v), attention_bias, self.exact_padding,
                         self.attention_dropout, training)
        if packing is not None and reads is None:
            context = packing.pack(context)
        attended = self.dropout(self.attention_output(context), training=training)
        x = self.attention_norm(x + attended)
        hidden = self.activation(self.intermediate(x))
        return self.output_norm(x + self.dropout(self.output_dense(hidden), training=training))

    def get_config(self):
        return {**super().get_config(), **self.config}
