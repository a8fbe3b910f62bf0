"""keras-hub 0.32's `RoformerV2Backbone` with our weights (its RMS scales set to 1).

keras-hub differs from bert4keras in one way that matters: on the TF/JAX path
its attention mask masks padded query rows instead of padded keys, so outputs
at real tokens move when only the padding changes (see the README). So an export
goes out in this format, but a keras-hub preset is not loaded back (`detect` says
what to start from instead).
"""
import importlib.util
import json
import os
import shutil

import numpy as np

from mtl_framework.errors import UserError
from mtl_framework.formats.json_file import read_json

CONFIG_FILE = "config.json"
CARD_USE = [
    "```python", "import keras_hub",
    "backbone = keras_hub.models.RoformerV2Backbone.from_preset(DIR)", "```", "",
    "The tokenizer (`tokenizer.json`, a `RoformerV2Tokenizer`) needs `tensorflow-text`."]
REFUSAL = ("a keras-hub preset (its RoFormerV2 differs from ours); start from the run's "
           "`mtl export --format keras` folder")


def keras_hub_available():
    return importlib.util.find_spec("keras_hub") is not None


def to_keras_hub(backbone):
    """A keras_hub RoformerV2Backbone holding `backbone`'s weights."""
    import keras_hub

    config = backbone.config
    if config["embedding_size"] != config["hidden_size"]:
        raise ValueError("keras-hub's RoformerV2Backbone has no embedding mapping: "
                         "export needs embedding_size == hidden_size")
    hub = keras_hub.models.RoformerV2Backbone(
        vocabulary_size=config["vocab_size"], num_layers=config["num_layers"],
        num_heads=config["num_heads"], hidden_dim=config["hidden_size"],
        intermediate_dim=config["intermediate_size"], head_size=config["head_size"],
        dropout=config["dropout"], num_segments=config["segment_vocab_size"])
    copy_weights_to_keras_hub(backbone, hub)
    return hub


def copy_weights_to_keras_hub(backbone, hub):
    hub.token_embedding.embeddings.assign(backbone.token_embedding.embeddings)
    hub.segment_embedding.embeddings.assign(backbone.segment_embedding.embeddings)
    hub.embeddings_layer_norm.scale.assign(np.ones(hub.embeddings_layer_norm.scale.shape))
    for ours, theirs in zip(backbone.transformer_layers, hub.transformer_layers):
        q, k, v = np.split(ours.attention.qkv_kernel.numpy(), 3, axis=1)
        attention = theirs.attention_layer
        attention.q_dense.kernel.assign(q)
        attention.k_dense.kernel.assign(k)
        attention.v_dense.kernel.assign(v)
        attention.o_dense.kernel.assign(ours.attention.output_kernel)
        theirs.feedforward_intermediate_dense.kernel.assign(ours.feed_forward.inner_kernel)
        theirs.feedforward_output_dense.kernel.assign(ours.feed_forward.output_kernel)
        for norm in (theirs.attention_norm, theirs.feedforward_norm):
            norm.scale.assign(np.ones(norm.scale.shape))


def detect(directory):
    path = os.path.join(directory, CONFIG_FILE)
    if not os.path.exists(path):
        return None
    config = read_json(path)
    if isinstance(config, dict) and config.get("registered_name") == "keras_hub>RoformerV2Backbone":
        return REFUSAL
    return None


def read_config(directory):
    raise UserError(f"{directory}: {REFUSAL}")


def trained_length(directory):
    return None


def load_weights(backbone, directory):
    raise UserError(f"{directory}: {REFUSAL}")


def check(config, source):
    if config["embedding_size"] != config["hidden_size"]:
        raise UserError(f"{source}: embedding_size {config['embedding_size']} != hidden_size "
                        f"{config['hidden_size']}; keras-hub's RoformerV2Backbone has no "
                        "embedding mapping: export --format keras or bert4keras instead")


def save(backbone, directory, vocab_path=None, trained_length=None):
    """keras-hub's preset layout (config.json, model.weights.h5, metadata.json) + vocab.txt,
    tokenizer.json and assets/tokenizer/vocabulary.txt."""
    to_keras_hub(backbone).save_to_preset(directory)
    if vocab_path is not None:
        shutil.copyfile(vocab_path, os.path.join(directory, "vocab.txt"))
        save_tokenizer(directory, vocab_path)


def save_tokenizer(directory, vocab_path):
    """tokenizer.json (a RoformerV2Tokenizer config: lower-cased, accents stripped, as
    ours) + assets/tokenizer/vocabulary.txt, written without instantiating it: its
    WordPiece needs tensorflow-text, which loading the backbone does not."""
    config = {
        "module": "keras_hub.src.models.roformer_v2.roformer_v2_tokenizer",
        "class_name": "RoformerV2Tokenizer",
        "config": {"name": "roformer_v2_tokenizer", "trainable": True,
                   "dtype": {"module": "keras", "class_name": "DTypePolicy",
                             "config": {"name": "int32"}, "registered_name": None},
                   "config_file": "tokenizer.json", "vocabulary": None, "sequence_length": None,
                   "lowercase": True, "strip_accents": True, "split": True,
                   "suffix_indicator": "##", "oov_token": "[UNK]", "special_tokens": None,
                   "special_tokens_in_strings": False},
        "registered_name": "keras_hub>RoformerV2Tokenizer",
    }
    with open(os.path.join(directory, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=4)
    assets = os.path.join(directory, "assets", "tokenizer")
    os.makedirs(assets, exist_ok=True)
    shutil.copyfile(vocab_path, os.path.join(assets, "vocabulary.txt"))
