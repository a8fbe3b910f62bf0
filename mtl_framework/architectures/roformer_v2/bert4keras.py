"""bert4keras RoFormerV2 checkpoints: bert_config.json + TF1 name-based checkpoint.

Variable names are the BERT ones bert4keras maps RoFormerV2 to (biases,
LayerNorm and position tables are absent in RoFormerV2). Kernels are (in, out).
Su's released RoFormerV2 checkpoints are in this format (with vocab.txt).
"""
import importlib.util
import json
import os
import shutil

import numpy as np

from mtl_framework.errors import UserError
from mtl_framework.formats.checks import BERT_CONFIG_KEYS, check_unused, check_values, finite
from mtl_framework.formats.json_file import read_json

CONFIG_FILE = "bert_config.json"
CHECKPOINT = "bert_model.ckpt"
CARD_USE = [
    "```python", "from bert4keras.models import build_transformer_model",
    "model = build_transformer_model(\"DIR/bert_config.json\", \"DIR/bert_model.ckpt\", "
    "model=\"roformer_v2\")", "```", "",
    "bert4keras 0.11.5 on tf-keras (`TF_KERAS=1`); vocab: DIR/vocab.txt."]

EMBEDDING_NAMES = {
    "token": "bert/embeddings/word_embeddings",
    "segment": "bert/embeddings/token_type_embeddings",
    "mapping": "bert/encoder/embedding_hidden_mapping_in/kernel",
}


def layer_names(i):
    prefix = f"bert/encoder/layer_{i}/"
    return {
        "query": prefix + "attention/self/query/kernel",
        "key": prefix + "attention/self/key/kernel",
        "value": prefix + "attention/self/value/kernel",
        "attention_output": prefix + "attention/output/dense/kernel",
        "inner": prefix + "intermediate/dense/kernel",
        "output": prefix + "output/dense/kernel",
    }


# bert_config.json keys -> ours, for the checks of formats/checks.py
NAMES = {**BERT_CONFIG_KEYS, "attention_head_size": "head_size"}


def config_from_bert_config(bert_config, source="bert_config.json"):
    """Our backbone config from a bert4keras/BERT `bert_config.json` dict."""
    check_values(bert_config, NAMES, source)
    required = ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads"]
    missing = [k for k in required if bert_config.get(k) is None]
    if missing:
        raise ValueError(f"{source}: missing {missing}; a RoFormerV2 bert_config.json needs {required}")
    act = bert_config.get("hidden_act", "relu")
    if act != "relu":
        raise ValueError(f"{source}: hidden_act is {act!r}; RoFormerV2 uses 'relu'")
    hidden = bert_config["hidden_size"]
    return dict(
        vocab_size=bert_config["vocab_size"],
        hidden_size=hidden,
        num_layers=bert_config["num_hidden_layers"],
        num_heads=bert_config["num_attention_heads"],
        intermediate_size=bert_config.get("intermediate_size", 4 * hidden),
        head_size=bert_config.get("attention_head_size") or hidden // bert_config["num_attention_heads"],
        embedding_size=bert_config.get("embedding_size") or hidden,
        segment_vocab_size=bert_config.get("type_vocab_size", 2),
        dropout=bert_config.get("hidden_dropout_prob") or 0.0,
        attention_dropout=bert_config.get("attention_probs_dropout_prob") or 0.0,
    )


def bert_config_from_config(config):
    """The `bert_config.json` dict bert4keras's `build_transformer_model` reads."""
    return {
        "vocab_size": config["vocab_size"],
        "hidden_size": config["hidden_size"],
        "num_hidden_layers": config["num_layers"],
        "num_attention_heads": config["num_heads"],
        "attention_head_size": config["head_size"],
        "intermediate_size": config["intermediate_size"],
        "embedding_size": config["embedding_size"],
        "hidden_act": "relu",
        "hidden_dropout_prob": config["dropout"],
        "attention_probs_dropout_prob": config["attention_dropout"],
        "type_vocab_size": config["segment_vocab_size"],
        "max_position_embeddings": 512,
    }


def read_checkpoint(config_path, checkpoint_path):
    """(our config, {checkpoint name: array}) from a bert4keras RoFormerV2 checkpoint."""
    import tensorflow as tf

    if not os.path.exists(config_path):
        raise FileNotFoundError(f"{config_path} not found: pass the checkpoint's bert_config.json")
    with open(config_path, encoding="utf-8") as f:
        config = config_from_bert_config(json.load(f), source=config_path)
    try:
        reader = tf.train.load_checkpoint(checkpoint_path)
    except (tf.errors.NotFoundError, ValueError) as error:
        raise FileNotFoundError(
            f"{checkpoint_path}: no TF checkpoint there ({error}); pass the prefix, "
            "e.g. .../bert_model.ckpt") from None
    weights = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
    return config, weights


def assign_weights(backbone, weights, source="checkpoint", config_file=CONFIG_FILE):
    """Copy checkpoint arrays into the backbone; shape or name mismatches say which variable,
    and so do a NaN or infinity in one and a variable of the encoder that `config_file`
    does not declare (optimizer slots aside)."""

    if "bert/embeddings/LayerNorm/gamma" in weights:
        raise UserError(f"{source}: has bert/embeddings/LayerNorm/gamma, which RoFormerV2 has "
                        "not: a BERT checkpoint whose bert_config.json says hidden_act relu; "
                        "set its hidden_act (BERT's is gelu) to read it as BERT")

    taken = set()

    def take(name, expected_shape):
        if name not in weights:
            raise KeyError(f"{source}: variable {name} not found (is this a RoFormerV2 checkpoint "
                           "with the config given?)")
        value = finite(name, weights[name], source)
        taken.add(name)
        if tuple(value.shape) != tuple(expected_shape):
            raise ValueError(f"{source}: {name} has shape {value.shape}, the config implies "
                             f"{tuple(expected_shape)}: check bert_config.json")
        return value

    backbone.token_embedding.embeddings.assign(
        take(EMBEDDING_NAMES["token"], backbone.token_embedding.embeddings.shape))
    if backbone.segment_embedding is not None:
        backbone.segment_embedding.embeddings.assign(
            take(EMBEDDING_NAMES["segment"], backbone.segment_embedding.embeddings.shape))
    if backbone.embedding_mapping is not None:
        backbone.embedding_mapping.kernel.assign(
            take(EMBEDDING_NAMES["mapping"], backbone.embedding_mapping.kernel.shape))
    for i, layer in enumerate(backbone.transformer_layers):
        names = layer_names(i)
        attention, ffn = layer.attention, layer.feed_forward
        third = attention.qkv_kernel.shape[1] // 3
        hidden = attention.qkv_kernel.shape[0]
        qkv = [take(names[k], (hidden, third)) for k in ("query", "key", "value")]
        attention.qkv_kernel.assign(np.concatenate(qkv, axis=1))
        attention.output_kernel.assign(take(names["attention_output"], attention.output_kernel.shape))
        ffn.inner_kernel.assign(take(names["inner"], ffn.inner_kernel.shape))
        ffn.output_kernel.assign(take(names["output"], ffn.output_kernel.shape))
    check_unused([name for name in weights if name.startswith(("bert/embeddings/", "bert/encoder/"))],
                 taken, source, config_file, separator="/")


def backbone_to_checkpoint_weights(backbone):
    """{checkpoint name: array} for every backbone weight (the inverse of assign_weights)."""
    weights = {EMBEDDING_NAMES["token"]: backbone.token_embedding.embeddings.numpy()}
    if backbone.segment_embedding is not None:
        weights[EMBEDDING_NAMES["segment"]] = backbone.segment_embedding.embeddings.numpy()
    if backbone.embedding_mapping is not None:
        weights[EMBEDDING_NAMES["mapping"]] = backbone.embedding_mapping.kernel.numpy()
    for i, layer in enumerate(backbone.transformer_layers):
        names = layer_names(i)
        q, k, v = np.split(layer.attention.qkv_kernel.numpy(), 3, axis=1)
        weights.update({
            names["query"]: q, names["key"]: k, names["value"]: v,
            names["attention_output"]: layer.attention.output_kernel.numpy(),
            names["inner"]: layer.feed_forward.inner_kernel.numpy(),
            names["output"]: layer.feed_forward.output_kernel.numpy(),
        })
    return weights


def write_checkpoint(weights, checkpoint_path):
    """Save {name: array} as a TF1 name-based checkpoint (what bert4keras loads).

    Graph mode in a fresh tf.Graph: TF 2's object-based checkpoints use other names.
    """
    import tensorflow as tf

    os.makedirs(os.path.dirname(os.path.abspath(checkpoint_path)), exist_ok=True)
    with tf.Graph().as_default():
        variables = [tf.compat.v1.Variable(value, name=name) for name, value in weights.items()]
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.variables_initializer(variables))
            # No `checkpoint` state file: it would hold the absolute path written to
            # (an export's temporary folder); bert4keras reads the bert_model.ckpt prefix.
            saver.save(session, checkpoint_path, write_meta_graph=False, write_state=False)


def check(config, source):
    """A bert4keras checkpoint holds every config of ours (rope_scaling aside: saving/writer.py);
    writing it takes TensorFlow (KERAS_BACKEND=jax may run without it)."""
    needs_tensorflow(source, "write")


def needs_tensorflow(source, what):
    """A TensorFlow checkpoint is read and written by TensorFlow: a one-line refusal where it
    is not installed (a JAX-only environment), before anything is written."""
    if importlib.util.find_spec("tensorflow") is None:
        raise UserError(f"{source}: a bert4keras checkpoint is a TensorFlow checkpoint and "
                        f"TensorFlow is not installed here, so this cannot {what} one: use "
                        "an environment with TensorFlow (any KERAS_BACKEND; run directories "
                        "and exports are backend-neutral), or another format")


def save(backbone, directory, vocab_path=None, trained_length=None):
    save_bert4keras(backbone, directory, vocab_path)


def save_bert4keras(backbone, directory, vocab_path=None):
    """bert_config.json + bert_model.ckpt.* (+ vocab.txt) in `directory`."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "bert_config.json"), "w", encoding="utf-8") as f:
        json.dump(bert_config_from_config(backbone.config), f, indent=2)
    write_checkpoint(backbone_to_checkpoint_weights(backbone), os.path.join(directory, "bert_model.ckpt"))
    if vocab_path is not None:
        shutil.copyfile(vocab_path, os.path.join(directory, "vocab.txt"))


# --- a folder of it ---------------------------------------------------------------

def detect(directory):
    has = lambda name: os.path.exists(os.path.join(directory, name))  # noqa: E731
    if not has(CONFIG_FILE):
        return None
    config = read_json(os.path.join(directory, CONFIG_FILE))
    if not isinstance(config, dict) or config.get("hidden_act", "relu") != "relu":
        return None  # BERT's bert_config.json (architectures/bert/checkpoint.py)
    if not has(CHECKPOINT + ".index"):
        return (f"{CONFIG_FILE} without {CHECKPOINT}.index; copy the whole released "
                "checkpoint folder")
    return ""


def read_config(directory):
    path = os.path.join(directory, CONFIG_FILE)
    try:
        return config_from_bert_config(read_json(path), source=path)
    except ValueError as error:
        raise UserError(str(error)) from None


def trained_length(directory):
    """Not recorded (max_position_embeddings is BERT's, unused by RoFormerV2)."""
    return None


def load_weights(backbone, directory):
    needs_tensorflow(os.path.join(directory, CHECKPOINT), "read")
    _, weights = read_checkpoint(os.path.join(directory, CONFIG_FILE),
                                 os.path.join(directory, CHECKPOINT))
    assign_weights(backbone, weights, source=os.path.join(directory, CHECKPOINT))
