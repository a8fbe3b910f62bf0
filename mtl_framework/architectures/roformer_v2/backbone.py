"""The RoFormerV2 encoder (Su et al., 2022), numerically equal to bert4keras's `roformer_v2`.

token + segment embedding -> RMS norm -> [embedding mapping] -> L post-norm
blocks with rotary self-attention and a ReLU FFN. No biases, no norm weights,
no absolute positions. Output: [batch, length, hidden].
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import keras
from keras import ops

from mtl_framework.architectures import rope_scaling as rope
from mtl_framework.architectures.backbone import Backbone
from mtl_framework.architectures.roformer_v2 import bert4keras, roformer_pytorch
from mtl_framework.architectures.roformer_v2.layers import RMSNorm, TransformerLayer
from mtl_framework.architectures.roformer_v2.presets import backbone_config
from mtl_framework.formats import keras as preset
from mtl_framework.layers import (
    Dropout,
    Packing,
    RoFormerV2Initializer,
    resolve_exact_padding,
    rotary_lengths,
    rotary_tables,
)

if TYPE_CHECKING:
    import os
    from collections.abc import Mapping
    from typing import Any


@keras.saving.register_keras_serializable(package="mtl_framework")
class RoFormerV2Backbone(Backbone):
    """Inputs {"token_ids", "segment_ids"} (int, [batch, length]); token id 0 is padding.

    exact_padding: True sums the attention softmax's denominator in float64, so the
    outputs at real tokens do not change at all when padding is added; False uses the
    float32 softmax (they move by ~1e-6); None (default) picks True on a float32 CPU
    run and False on a GPU or under mixed precision (`resolve_exact_padding`;
    costs and errors measured in docs/backbone.md). Configs without the key load as None.

    rope_scaling: None, or {type: linear | ntk | dynamic_ntk, factor, original_max_length}
    (`rope_scaling.normalise`): the rotary tables for inputs longer than the trained
    length (`layers.rotary_inverse_frequency`; docs/backbone.md "Longer than trained").
    """

    def __init__(self, vocab_size: int, num_layers: int, hidden_size: int, num_heads: int,
                 intermediate_size: int | None = None, head_size: int | None = None,
                 embedding_size: int | None = None, segment_vocab_size: int = 2,
                 dropout: float = 0.1, attention_dropout: float = 0.0, alpha_warmup_steps: int = 0,
                 exact_padding: bool | None = None, rope_scaling: dict[str, Any] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        config = backbone_config(
            vocab_size=vocab_size, num_layers=num_layers, hidden_size=hidden_size,
            num_heads=num_heads, intermediate_size=intermediate_size, head_size=head_size,
            embedding_size=embedding_size, segment_vocab_size=segment_vocab_size,
            dropout=dropout, attention_dropout=attention_dropout,
            alpha_warmup_steps=alpha_warmup_steps,
        )
        config["exact_padding"] = exact_padding  # the option as given: None stays "auto"
        config["rope_scaling"] = rope.normalise(rope_scaling, where="backbone.rope_scaling")
        self.config = config
        self.exact_padding = resolve_exact_padding(exact_padding, self.dtype_policy.compute_dtype)
        init = RoFormerV2Initializer(config["num_layers"])  # a fresh draw per weight
        self.token_embedding = keras.layers.Embedding(
            config["vocab_size"], config["embedding_size"], embeddings_initializer=init,
            name="token_embedding")
        self.segment_embedding = keras.layers.Embedding(
            config["segment_vocab_size"], config["embedding_size"], embeddings_initializer=init,
            name="segment_embedding") if config["segment_vocab_size"] > 0 else None
        self.embedding_dropout = Dropout(config["dropout"])
        self.embedding_norm = RMSNorm(name="embedding_norm")
        self.embedding_mapping = keras.layers.Dense(
            config["hidden_size"], use_bias=False, kernel_initializer=init,
            name="embedding_mapping") if config["embedding_size"] != config["hidden_size"] else None
        self.transformer_layers = [
            TransformerLayer(config["num_heads"], config["head_size"], config["intermediate_size"],
                             config["dropout"], config["attention_dropout"], init,
                             self.exact_padding, name=f"transformer_layer_{i}")
            for i in range(config["num_layers"])
        ]
        # Residual scale `a`: 1, or 0 -> 1 linearly over alpha_warmup_steps (from-scratch runs).
        self.residual_alpha = self.add_weight(
            name="residual_alpha", shape=(), trainable=False,
            initializer=keras.initializers.Constant(0.0 if config["alpha_warmup_steps"] else 1.0))

    @classmethod
    def from_size(cls, size, **overrides):
        """A new backbone of a size name, built: its weights exist (count_params, summary)
        before any call, as keras-hub's from_preset returns a built model."""
        backbone = cls(**backbone_config(size, **overrides))
        backbone.build()
        return backbone

    def build(self, input_shape=None):
        # Build every weight eagerly so checkpoints and optimizers see them before any call.
        if self.built:
            return
        self.token_embedding.build((None, None))
        if self.segment_embedding is not None:
            self.segment_embedding.build((None, None))
        if self.embedding_mapping is not None:
            self.embedding_mapping.build((None, None, self.config["embedding_size"]))
        for layer in self.transformer_layers:
            layer.build((None, None, self.config["hidden_size"]))
        self.built = True

    def update_residual_alpha(self, step):
        """Set `a` for optimizer step `step` (min(1, step / warm-up)); no-op without warm-up."""
        warmup = self.config["alpha_warmup_steps"]
        if warmup:
            step = ops.cast(step, "float32")
            self.residual_alpha.assign(ops.minimum(1.0, step / float(warmup)))

    def call(self, inputs, training=False, packed=False):
        """[B, L, H]. packed: everything but attention runs on the real tokens alone
        (layers.Packing; True: T found in the graph, TensorFlow; an int: that many rows, at
        least T, JAX); the same outputs at real tokens, zeros at padding. inputs'
        `read_positions` [B, R]: the output at those positions alone, [B, R, H], the last
        layer's queries, feed-forward and norms computed there only."""
        token_ids = inputs["token_ids"]
        reads = inputs.get("read_positions")
        packing = Packing(token_ids, None if packed is True else packed) if packed else None
        x = self.embed_tokens(inputs if packing is None else packing.inputs(inputs))
        x = self.embedding_norm(self.embedding_dropout(x, training=training))
        if self.embedding_mapping is not None:
            x = self.embedding_mapping(x)
        # Padded keys (token id 0) get -1e9 before the softmax (computed once for all
        # layers): exp underflows to exactly 0 as with -inf, but an all-padding row
        # (a padded choice of a multiple-choice batch) stays finite instead of NaN.
        key_is_pad = ops.equal(token_ids, 0)[:, None, None, :]
        attention_bias = ops.where(key_is_pad, -1e9, 0.0)  # float32 (scores are added in it)
        scaling = self.config["rope_scaling"]
        lengths = rotary_lengths(token_ids) if scaling and scaling["type"] == "dynamic_ntk" else None
        cos, sin = rotary_tables(ops.shape(token_ids)[1], self.config["head_size"], dtype=x.dtype,
                                 scaling=scaling, lengths=lengths)
        alpha = ops.cast(self.residual_alpha, x.dtype)
        for layer in self.transformer_layers[:-1]:
            x = layer(x, attention_bias, cos, sin, alpha, training=training, packing=packing)
        x = self.transformer_layers[-1](x, attention_bias, cos, sin, alpha, training=training,
                                        packing=packing, reads=reads)
        return x if packing is None or reads is not None else packing.pad(x)

    # --- weights in and out -------------------------------------------------

    @classmethod
    def from_folder(cls, format_module, directory, **overrides):
        """A backbone folder in a format of `mtl_framework.formats` (its module): config
        from the folder, `overrides` replacing keys that are not shapes, its weights."""
        backbone = cls(**{**format_module.read_config(directory), **overrides})
        backbone.build()
        format_module.load_weights(backbone, directory)
        return backbone

    @classmethod
    def from_bert4keras(cls, config_path: str | os.PathLike[str], checkpoint_path: str,
                        **overrides: Any) -> RoFormerV2Backbone:
        """Load a bert4keras RoFormerV2 checkpoint (bert_config.json + TF name-based checkpoint)."""
        config, weights = bert4keras.read_checkpoint(config_path, checkpoint_path)
        backbone = cls(**{**config, **overrides})
        backbone.build()
        bert4keras.assign_weights(backbone, weights, source=checkpoint_path)
        return backbone

    @classmethod
    def from_roformer_pytorch(cls, directory: str | os.PathLike[str],
                              **overrides: Any) -> RoFormerV2Backbone:
        """Load a PyTorch `roformer` 0.4.x RoFormerV2 folder (config.json +
        model.safetensors, read without torch; or pytorch_model.bin, read with torch):
        the hub's junnyu/roformer_v2_chinese_char_* or our export of that format."""
        return cls.from_folder(roformer_pytorch, directory, **overrides)

    @classmethod
    def from_preset(cls, directory: str | os.PathLike[str], **overrides: Any) -> RoFormerV2Backbone:
        """Load our exported keras preset folder (config.json + model.weights.h5);
        `overrides` replace config values that are not shapes (e.g. rope_scaling).
        A size name (`small`, `base`, `large`; no such folder) is a new, randomly
        initialised backbone of that size, as keras-hub's `from_preset` takes a name."""
        import os

        from mtl_framework.architectures.roformer_v2.presets import PRESETS

        if str(directory) in PRESETS and not os.path.isdir(directory):
            return cls.from_size(str(directory), **overrides)
        from mtl_framework import architectures

        held = architectures.architecture_of(preset.read_config(directory))
        if held != "roformer_v2":  # a BERT or ALBERT preset: its keys are not RoFormerV2's
            raise ValueError(f"{directory}: holds a {held} backbone, not a RoFormerV2Backbone: "
                             "load it with mtl_framework.saving.load_backbone(DIR), or that "
                             "architecture's Backbone.from_preset")
        return cls.from_folder(preset, directory, **overrides)

    def save_preset(self, directory: str | os.PathLike[str], vocab_path: str | None = None,
                    extra: Mapping[str, Any] | None = None) -> None:
        """Write config.json + model.weights.h5 (+ vocab.txt): what `from_preset` reads."""
        preset.save(self, directory, vocab_path, extra=extra)
