"""BERT as a keras-hub preset (`keras_hub.models.BertBackbone`: config.json with
registered_name keras_hub>BertBackbone + model.weights.h5), read through keras-hub
itself. Its blocks use the tanh GELU and its dropout for attention too; our config
says so (activation gelu_approximate), so the outputs are keras-hub's."""
import os

import numpy as np

from mtl_framework.architectures.bert.weights import assign, transformers_names
from mtl_framework.errors import UserError
from mtl_framework.formats.json_file import read_json

CONFIG_FILE = "config.json"
WEIGHTS = "model.weights.h5"
CARD_USE = ["keras-hub: `keras_hub.models.BertBackbone.from_preset(DIR)`."]


class KerasHubPreset:
    """A keras-hub preset of `architecture` (its class `class_name`, its config keys)."""

    def __init__(self, architecture, class_name, keys):
        self.architecture, self.class_name, self.keys = architecture, class_name, keys

    def detect(self, directory):
        path = os.path.join(directory, CONFIG_FILE)
        if not os.path.exists(path):
            return None
        raw = read_json(path)
        if not isinstance(raw, dict) or raw.get("registered_name") != f"keras_hub>{self.class_name}":
            return None
        if not os.path.exists(os.path.join(directory, WEIGHTS)):
            return f"{CONFIG_FILE} without {WEIGHTS}; copy the whole keras-hub preset"
        return ""

    def read_config(self, directory):
        path = os.path.join(directory, CONFIG_FILE)
        hub = read_json(path).get("config") or {}
        for key, value in hub.items():
            if key in ("name", "trainable", "dtype"):
                continue
            if key not in self.keys:
                raise UserError(f"{path}: config key {key!r} is not supported by "
                                f"mtl_framework's {self.architecture} reader")
            fixed = self.keys[key]
            if not isinstance(fixed, str) and value != fixed:
                raise UserError(f"{path}: {key} is {value!r}; mtl_framework's "
                                f"{self.architecture} supports {fixed!r} only")
        config = {ours: hub[key] for key, ours in self.keys.items()
                  if isinstance(ours, str) and key in hub}
        config.update(architecture=self.architecture, activation="gelu_approximate",
                      attention_dropout=config.get("dropout", 0.0))
        return config

    def load_weights(self, backbone, directory):
        try:
            import keras_hub
        except ImportError:
            raise UserError(f"{directory}: reading a keras-hub preset needs keras-hub "
                            "(pip install keras-hub)") from None
        hub = getattr(keras_hub.models, self.class_name).from_preset(directory)
        assign(backbone, transformers_names(backbone), transformers_arrays(hub),
               os.path.join(directory, WEIGHTS), CONFIG_FILE)


def transformers_arrays(hub):
    """{transformers name: array in transformers' layout} of a keras-hub BertBackbone or
    AlbertBackbone (its attention kernels [hidden, heads, head] flattened)."""
    albert = hasattr(hub, "embeddings_projection")
    names = {}

    def dense(name, layer, flat_in=False):
        kernel = np.asarray(layer.kernel)
        kernel = kernel.reshape(-1, kernel.shape[-1]) if flat_in else kernel.reshape(kernel.shape[0], -1)
        names[name + ".weight"] = kernel.T
        names[name + ".bias"] = np.asarray(layer.bias).reshape(-1)

    def norm(name, layer):
        names[name + ".weight"], names[name + ".bias"] = np.asarray(layer.gamma), np.asarray(layer.beta)

    names["embeddings.word_embeddings.weight"] = np.asarray(hub.token_embedding.embeddings)
    names["embeddings.token_type_embeddings.weight"] = np.asarray(hub.segment_embedding.embeddings)
    names["embeddings.position_embeddings.weight"] = np.asarray(
        hub.position_embedding.position_embeddings)
    norm("embeddings.LayerNorm", hub.embeddings_layer_norm)
    if albert:
        dense("encoder.embedding_hidden_mapping_in", hub.embeddings_projection)
        blocks = [("encoder.albert_layer_groups.0.albert_layers.0.", hub.transformer_layers[0][0],
                   {"query": "attention.query", "key": "attention.key", "value": "attention.value",
                    "output": "attention.dense", "attention_norm": "attention.LayerNorm",
                    "intermediate": "ffn", "ffn_output": "ffn_output",
                    "output_norm": "full_layer_layer_norm"})]
    else:
        blocks = [(f"encoder.layer.{i}.", block,
                   {"query": "attention.self.query", "key": "attention.self.key",
                    "value": "attention.self.value", "output": "attention.output.dense",
                    "attention_norm": "attention.output.LayerNorm",
                    "intermediate": "intermediate.dense", "ffn_output": "output.dense",
                    "output_norm": "output.LayerNorm"})
                  for i, block in enumerate(hub.transformer_layers)]
    for prefix, block, part in blocks:
        attention = block._self_attention_layer
        for which in ("query", "key", "value"):
            dense(prefix + part[which], getattr(attention, f"{which}_dense"))
        dense(prefix + part["output"], attention.output_dense, flat_in=True)
        norm(prefix + part["attention_norm"], block._self_attention_layer_norm)
        dense(prefix + part["intermediate"], block._feedforward_intermediate_dense)
        dense(prefix + part["ffn_output"], block._feedforward_output_dense)
        norm(prefix + part["output_norm"], block._feedforward_layer_norm)
    return names


def trained_length(directory):
    return None


def check(config, source):
    raise UserError(f"{source}: writing {config.get('architecture')} as a keras-hub preset is "
                    "not done yet; export --format keras")


def save(backbone, directory, vocab_path=None, trained_length=None):
    check(backbone.config, directory)


# keras-hub's BertBackbone config keys -> ours (a non-string: the one value supported)
PRESET = KerasHubPreset("bert", "BertBackbone", {
    "vocabulary_size": "vocab_size", "num_layers": "num_layers", "num_heads": "num_heads",
    "hidden_dim": "hidden_size", "intermediate_dim": "intermediate_size", "dropout": "dropout",
    "max_sequence_length": "max_positions", "num_segments": "segment_vocab_size"})
detect, read_config, load_weights = PRESET.detect, PRESET.read_config, PRESET.load_weights
