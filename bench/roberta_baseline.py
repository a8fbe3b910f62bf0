"""A RoBERTa/BERT-like encoder of the same size as our RoFormerV2, for benchmarks only.

What RoFormerV2 removed, put back: learned absolute position embeddings,
LayerNorm with gamma and beta, a bias on every Dense, a GELU (erf) FFN.
Post-norm as in BERT: x = LN(x + Attention(x)); x = LN(x + FFN(x)).
Built from stock Keras 3 layers (Embedding, MultiHeadAttention,
LayerNormalization, Dense), as such a model is usually written; padded keys
(token id 0) are masked. Same inputs and output as RoFormerV2Backbone:
{"token_ids", "segment_ids"} -> [batch, length, hidden].
"""
import keras
from keras import ops


class PostNormEncoderLayer(keras.layers.Layer):
    """BERT's block: MHA (with biases) -> dropout -> add -> LN; GELU FFN -> dropout -> add -> LN."""

    def __init__(self, hidden_size, num_heads, head_size, intermediate_size, dropout=0.1,
                 attention_dropout=0.1, kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.attention = keras.layers.MultiHeadAttention(
            num_heads, head_size, dropout=attention_dropout, use_bias=True,
            kernel_initializer=kernel_initializer, name="attention")
        self.attention_norm = keras.layers.LayerNormalization(epsilon=1e-12, name="attention_norm")
        self.inner = keras.layers.Dense(intermediate_size, activation="gelu",
                                        kernel_initializer=kernel_initializer, name="inner")
        self.outer = keras.layers.Dense(hidden_size, kernel_initializer=kernel_initializer,
                                        name="outer")
        self.feed_forward_norm = keras.layers.LayerNormalization(epsilon=1e-12,
                                                                 name="feed_forward_norm")
        self.dropout = keras.layers.Dropout(dropout)

    def build(self, input_shape):
        self.attention.build(input_shape, input_shape)
        self.attention_norm.build(input_shape)
        self.inner.build(input_shape)
        self.outer.build((*input_shape[:-1], self.inner.units))
        self.feed_forward_norm.build(input_shape)

    def call(self, x, attention_mask, training=False):
        residual = self.attention(x, x, attention_mask=attention_mask, training=training)
        x = self.attention_norm(x + self.dropout(residual, training=training))
        residual = self.outer(self.inner(x))
        return self.feed_forward_norm(x + self.dropout(residual, training=training))


class RobertaLikeBackbone(keras.Model):
    """Token + segment + learned position embeddings -> LN -> L post-norm BERT blocks."""

    def __init__(self, vocab_size, num_layers, hidden_size, num_heads, intermediate_size=None,
                 head_size=None, segment_vocab_size=2, max_length=512, dropout=0.1,
                 attention_dropout=0.1, **kwargs):
        super().__init__(**kwargs)
        intermediate_size = intermediate_size or 4 * hidden_size
        head_size = head_size or hidden_size // num_heads
        self.config = dict(vocab_size=vocab_size, num_layers=num_layers, hidden_size=hidden_size,
                           num_heads=num_heads, intermediate_size=intermediate_size,
                           head_size=head_size, segment_vocab_size=segment_vocab_size,
                           max_length=max_length, dropout=dropout,
                           attention_dropout=attention_dropout)
        init = keras.initializers.TruncatedNormal(stddev=0.02)  # BERT's initializer
        self.token_embedding = keras.layers.Embedding(vocab_size, hidden_size,
                                                      embeddings_initializer=init,
                                                      name="token_embedding")
        self.segment_embedding = keras.layers.Embedding(segment_vocab_size, hidden_size,
                                                        embeddings_initializer=init,
                                                        name="segment_embedding")
        self.position_embedding = keras.layers.Embedding(max_length, hidden_size,
                                                         embeddings_initializer=init,
                                                         name="position_embedding")
        self.embedding_norm = keras.layers.LayerNormalization(epsilon=1e-12, name="embedding_norm")
        self.embedding_dropout = keras.layers.Dropout(dropout)
        self.transformer_layers = [
            PostNormEncoderLayer(hidden_size, num_heads, head_size, intermediate_size, dropout,
                                 attention_dropout, init, name=f"transformer_layer_{i}")
            for i in range(num_layers)
        ]

    def call(self, inputs, training=False):
        token_ids = inputs["token_ids"]
        length = ops.shape(token_ids)[1]
        positions = ops.arange(length)[None, :]
        x = (self.token_embedding(token_ids) + self.segment_embedding(inputs["segment_ids"])
             + self.position_embedding(positions))
        x = self.embedding_dropout(self.embedding_norm(x), training=training)
        # [batch, query, key] boolean: every query may attend to every real (non-pad) key.
        key_is_real = ops.not_equal(token_ids, 0)
        attention_mask = ops.broadcast_to(key_is_real[:, None, :], (ops.shape(token_ids)[0],
                                                                    length, length))
        for layer in self.transformer_layers:
            x = layer(x, attention_mask, training=training)
        return x

    def count_params_exact(self):
        return int(sum(ops.size(w) for w in self.trainable_weights))
