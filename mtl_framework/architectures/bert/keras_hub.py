"""BERT as a keras-hub preset (`keras_hub.models.BertBackbone`: config.json with
registered_name keras_hub>BertBackbone + model.weights.h5), read through keras-hub
itself. Its blocks use the tanh GELU and its dropout for attention too; our config
says so (activation gelu_approximate), so the outputs are keras-hub's."""
import os
import shutil

import numpy as np

from mtl_framework.architectures.bert.weights import assign, transformers_names
from mtl_framework.errors import UserError
from mtl_framework.formats.checks import check_values
from mtl_framework.formats.json_file import read_json

CONFIG_FILE = "config.json"
WEIGHTS = "model.weights.h5"
CARD_USE = ["```python", "import keras_hub",
            "backbone = keras_hub.models.BertBackbone.from_preset(DIR)", "```", "",
            "Its inputs: token_ids, segment_ids, padding_mask (token_ids != 0); "
            "`sequence_output` is this encoder's (`pooled_output` is zero: no pooler was "
            "trained). Tokenize with DIR/vocab.txt (BERT's WordPiece, lower-cased)."]


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
        hub = read_json(path).get("config") or {}  # detect found an object
        check_values(hub, {k: v for k, v in self.keys.items() if isinstance(v, str)}, path)
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


def hub_variables(hub):
    """{transformers name: (variable of a keras-hub BertBackbone or AlbertBackbone, kind)}:
    kind "kernel" ([in, ...] -> transformers' [out, in]), "kernel_in" ([..., out]: the
    attention output's [heads, head, hidden]) or None (as it is, flattened)."""
    albert = hasattr(hub, "embeddings_projection")
    names = {}

    def dense(name, layer, kind="kernel"):
        names[name + ".weight"] = (layer.kernel, kind)
        names[name + ".bias"] = (layer.bias, None)

    def norm(name, layer):
        names[name + ".weight"], names[name + ".bias"] = (layer.gamma, None), (layer.beta, None)

    names["embeddings.word_embeddings.weight"] = (hub.token_embedding.embeddings, None)
    names["embeddings.token_type_embeddings.weight"] = (hub.segment_embedding.embeddings, None)
    names["embeddings.position_embeddings.weight"] = (
        hub.position_embedding.position_embeddings, None)
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
        dense(prefix + part["output"], attention.output_dense, kind="kernel_in")
        norm(prefix + part["attention_norm"], block._self_attention_layer_norm)
        dense(prefix + part["intermediate"], block._feedforward_intermediate_dense)
        dense(prefix + part["ffn_output"], block._feedforward_output_dense)
        norm(prefix + part["output_norm"], block._feedforward_layer_norm)
    return names


def transformers_arrays(hub):
    """{transformers name: array in transformers' layout} of a keras-hub backbone."""
    names = {}
    for name, (variable, kind) in hub_variables(hub).items():
        value = np.asarray(variable)
        if kind == "kernel":
            value = value.reshape(value.shape[0], -1).T
        elif kind == "kernel_in":
            value = value.reshape(-1, value.shape[-1]).T
        names[name] = value if kind else value.reshape(value.shape if name.endswith(
            "embeddings.weight") else (-1,))
    return names


def trained_length(directory):
    return None


# what keras-hub's BertBackbone / AlbertBackbone fix (its TransformerEncoder blocks)
HUB_FIXED = {"activation": "gelu_approximate", "layer_norm_epsilon": 1e-12}


def check(config, source):
    """What keras-hub's backbone cannot hold is refused before anything is written."""
    for key, fixed in HUB_FIXED.items():
        if config[key] != fixed:
            raise UserError(f"{source}: backbone.{key} is {config[key]!r}; keras-hub's "
                            f"{CLASSES[config['architecture']]} has {fixed!r} only: export "
                            "--format transformers or bert4keras (or train with "
                            f"{key}: {fixed} for keras-hub)")
    if config["head_size"] * config["num_heads"] != config["hidden_size"]:
        raise UserError(f"{source}: head_size {config['head_size']} x num_heads "
                        f"{config['num_heads']} != hidden_size; keras-hub fixes head size = "
                        "hidden / heads: export --format keras")
    if config["segment_vocab_size"] < 1:
        raise UserError(f"{source}: segment_vocab_size 0; keras-hub's backbone always has a "
                        "segment embedding: export --format transformers")


def to_keras_hub(backbone):
    """A keras-hub BertBackbone / AlbertBackbone holding `backbone`'s weights (its pooler,
    which we do not train, zero)."""
    import keras_hub

    from mtl_framework.architectures.bert.weights import arrays

    c = backbone.config
    dims = dict(vocabulary_size=c["vocab_size"], num_layers=c["num_layers"],
                num_heads=c["num_heads"], hidden_dim=c["hidden_size"],
                intermediate_dim=c["intermediate_size"], dropout=c["dropout"],
                max_sequence_length=c["max_positions"], num_segments=c["segment_vocab_size"])
    if c["architecture"] == "albert":
        dims.update(embedding_dim=c["embedding_size"], num_groups=1, num_inner_repetitions=1)
    hub = getattr(keras_hub.models, CLASSES[c["architecture"]])(**dims)
    ours = arrays(backbone, transformers_names(backbone))
    for name, (variable, kind) in hub_variables(hub).items():
        value = ours[name].T if kind else ours[name]
        variable.assign(value.reshape(tuple(variable.shape)))
    for weight in hub.pooled_dense.weights:
        weight.assign(np.zeros(tuple(weight.shape), "float32"))
    return hub


def save(backbone, directory, vocab_path=None, trained_length=None):
    """keras-hub's preset layout (config.json, model.weights.h5, metadata.json) + vocab.txt."""
    try:
        import keras_hub  # noqa: F401
    except ImportError:
        raise UserError(f"{directory}: writing a keras-hub preset needs keras-hub "
                        "(make interop, or pip install --no-deps keras-hub)") from None
    check(backbone.config, directory)
    to_keras_hub(backbone).save_to_preset(directory)
    if vocab_path is not None:
        shutil.copyfile(vocab_path, os.path.join(directory, "vocab.txt"))


CLASSES = {"bert": "BertBackbone", "albert": "AlbertBackbone"}


# keras-hub's BertBackbone config keys -> ours (a non-string: the one value supported)
PRESET = KerasHubPreset("bert", "BertBackbone", {
    "vocabulary_size": "vocab_size", "num_layers": "num_layers", "num_heads": "num_heads",
    "hidden_dim": "hidden_size", "intermediate_dim": "intermediate_size", "dropout": "dropout",
    "max_sequence_length": "max_positions", "num_segments": "segment_vocab_size"})
detect, read_config, load_weights = PRESET.detect, PRESET.read_config, PRESET.load_weights
