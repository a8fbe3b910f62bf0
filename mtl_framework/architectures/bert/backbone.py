"""The BERT encoder, numerically equal to transformers' BertModel, bert4keras's "bert"
and keras-hub's BertBackbone (with their activation) on the same weights.

token + segment + position embedding -> LayerNorm -> dropout -> L post-LN blocks
(bert/layers.py). Output: [batch, length, hidden] (the pooler is not part of it: the
task heads pool for themselves).
"""
import keras
from keras import ops

from mtl_framework.architectures.backbone import Backbone
from mtl_framework.architectures.bert.layers import BertLayer, initializer
from mtl_framework.architectures.bert.presets import backbone_config
from mtl_framework.layers import Dropout, Packing, resolve_exact_padding


@keras.saving.register_keras_serializable(package="mtl_framework")
class BertBackbone(Backbone):
    """Inputs {"token_ids", "segment_ids"} (int, [batch, length]); token id 0 is padding
    (masked as a key: outputs at real tokens do not depend on it). Inputs longer than
    `max_positions` have no position embedding: an error.

    exact_padding: as RoFormerV2Backbone's (`layers.resolve_exact_padding`).
    """

    def __init__(self, vocab_size, num_layers, hidden_size, num_heads, intermediate_size=None,
                 head_size=None, segment_vocab_size=2, max_positions=512, activation="gelu",
                 layer_norm_epsilon=1e-12, dropout=0.1, attention_dropout=0.1,
                 exact_padding=None, embedding_size=None, alpha_warmup_steps=0,
                 rope_scaling=None, **kwargs):
        super().__init__(**kwargs)
        config = self.make_config(
            vocab_size=vocab_size, num_layers=num_layers,
            hidden_size=hidden_size, num_heads=num_heads, intermediate_size=intermediate_size,
            head_size=head_size, segment_vocab_size=segment_vocab_size,
            max_positions=max_positions, activation=activation,
            layer_norm_epsilon=layer_norm_epsilon, dropout=dropout,
            attention_dropout=attention_dropout, alpha_warmup_steps=alpha_warmup_steps,
            rope_scaling=rope_scaling, embedding_size=embedding_size)
        config["exact_padding"] = exact_padding  # the option as given: None stays "auto"
        self.config = config
        self.exact_padding = resolve_exact_padding(exact_padding, self.dtype_policy.compute_dtype)
        width = config.get("embedding_size", config["hidden_size"])
        embedding = lambda rows, name: keras.layers.Embedding(  # noqa: E731
            rows, width, embeddings_initializer=initializer(), name=name)
        self.token_embedding = embedding(config["vocab_size"], "token_embedding")
        self.segment_embedding = embedding(config["segment_vocab_size"], "segment_embedding") \
            if config["segment_vocab_size"] > 0 else None
        self.position_embedding = embedding(config["max_positions"], "position_embedding")
        self.embedding_norm = keras.layers.LayerNormalization(
            epsilon=config["layer_norm_epsilon"], name="embedding_norm")
        self.embedding_dropout = Dropout(config["dropout"])
        self.transformer_layers = [self.block(f"transformer_layer_{i}")
                                   for i in range(self.distinct_layers())]

    # --- what ALBERT changes ---------------------------------------------------------

    make_config = staticmethod(backbone_config)  # its presets' full config

    @classmethod
    def from_size(cls, size, **overrides):
        """A new backbone of a size name (small, base, large), built, as RoFormerV2's."""
        backbone = cls.from_config(cls.make_config(size, **overrides))
        backbone.build()
        return backbone

    @classmethod
    def from_preset(cls, directory, **overrides):
        """A backbone folder of this architecture in any format we read (our keras preset,
        `mtl export --format transformers` and hub BERT folders, bert4keras, keras-hub:
        what saving.load_backbone reads), or a size name (no such folder): a new backbone
        of that size, built, as RoFormerV2Backbone.from_preset and keras-hub's from_preset
        return."""
        import os

        from mtl_framework import architectures
        from mtl_framework.architectures.bert.presets import PRESETS

        if str(directory) in PRESETS and not os.path.isdir(directory):
            return cls.from_size(str(directory), **overrides)
        backbone = architectures.load_folder(str(directory), **overrides)
        if not isinstance(backbone, cls):
            raise ValueError(f"{directory}: holds a {type(backbone).__name__}, not a "
                             f"{cls.__name__}: load it with {type(backbone).__name__}.from_preset")
        return backbone

    def distinct_layers(self):
        """BERT: a block of its own per layer."""
        return self.config["num_layers"]

    def project(self, x):
        """BERT: the embedding is already hidden_size wide."""
        return x

    def block(self, name):
        c = self.config
        return BertLayer(c["hidden_size"], c["num_heads"], c["head_size"], c["intermediate_size"],
                         c["activation"], c["layer_norm_epsilon"], c["dropout"],
                         c["attention_dropout"], self.exact_padding, name=name)

    def layer_sequence(self):
        """The block applied at each depth."""
        return self.transformer_layers

    # ---------------------------------------------------------------------------------

    def build(self, input_shape=None):
        # Build every weight eagerly so checkpoints and optimizers see them before any call.
        if self.built:
            return
        for embedding in (self.token_embedding, self.segment_embedding, self.position_embedding):
            if embedding is not None:
                embedding.build((None, None))
        self.embedding_norm.build((None, None, self.config.get("embedding_size",
                                                                self.config["hidden_size"])))
        self.build_projection()
        for layer in self.transformer_layers:
            layer.build((None, None, self.config["hidden_size"]))
        self.built = True

    def build_projection(self):
        """BERT has none."""

    def update_residual_alpha(self, step):
        """RoFormerV2's residual-scale warm-up; BERT has no residual scale."""

    def call(self, inputs, training=False, packed=False):
        """[B, L, H]; `packed` and inputs' `read_positions` as RoFormerV2Backbone.call
        takes them (layers.Packing; the last layer at those rows alone, [B, R, H])."""
        token_ids, reads = inputs["token_ids"], inputs.get("read_positions")
        packing = Packing(token_ids, None if packed is True else packed) if packed else None
        positions = ops.arange(ops.shape(token_ids)[1], dtype="int32")
        position_rows = self.position_embedding(positions)[None]  # [1, L, E]
        if packing is None:
            x = self.embed_tokens(inputs)
            x = x + ops.cast(position_rows, x.dtype)
        else:
            x = self.embed_tokens(packing.inputs(inputs))
            # each real token's row picked from the [B, L, E] broadcast, not gathered from the
            # table by position: the table's gradient is then the padded call's sum over the
            # batch axis, where a gather's would add T rows per position one by one (in
            # bfloat16 under mixed precision: 43% of the gradient's norm on a contrastive batch)
            shape = (packing.batch, packing.length, position_rows.shape[-1])
            x = x + ops.cast(packing.pack(ops.broadcast_to(position_rows, shape)), x.dtype)
        x = self.embedding_dropout(self.embedding_norm(x), training=training)
        x = self.project(x)
        # Padded keys (token id 0) get -1e9 (see RoFormerV2Backbone.call): exp gives 0.
        attention_bias = ops.where(ops.equal(token_ids, 0)[:, None, None, :], -1e9, 0.0)
        *first, last = self.layer_sequence()
        for layer in first:
            x = layer(x, attention_bias, training=training, packing=packing)
        x = last(x, attention_bias, training=training, packing=packing, reads=reads)
        return x if packing is None or reads is not None else packing.pad(x)
