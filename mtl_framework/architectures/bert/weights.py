"""Weight names of BERT and ALBERT in the formats that hold them, and copying arrays
in with every mismatch named.

A `Names` table says how a format names the embeddings, block i's parts
(bert/layers.py `BertLayer.parts`) and a Dense's / LayerNorm's variables; `variables`
turns it into {their name: (our variable, transposed?)} for a built backbone, both
ways: readers assign from it, writers read from it.
"""
from dataclasses import dataclass
from typing import Callable

import keras
import numpy as np

from mtl_framework.errors import UserError
from mtl_framework.formats.checks import check_unused, finite


@dataclass(frozen=True)
class Names:
    embeddings: dict            # backbone attribute -> name (token/segment/position/norm/projection)
    layer: Callable[[int], str]  # block i's name prefix
    parts: dict                 # BertLayer part -> name under the prefix
    separator: str              # "." (transformers) or "/" (TF checkpoints)
    table: str                  # an embedding table's suffix ("weight" or none)
    kernel: str                 # Dense kernel suffix ("weight" or "kernel")
    gamma: str                  # LayerNorm scale ("weight" or "gamma")
    beta: str                   # LayerNorm offset ("bias" or "beta")
    transposed: bool            # Dense kernels stored [out, in] (torch Linear)


def join(names, *parts):
    return names.separator.join(p for p in parts if p)


def layer_variables(layer, name, names):
    if isinstance(layer, keras.layers.Embedding):
        return {join(names, name, names.table): (layer.embeddings, False)}
    if isinstance(layer, keras.layers.LayerNormalization):
        return {join(names, name, names.gamma): (layer.gamma, False),
                join(names, name, names.beta): (layer.beta, False)}
    return {join(names, name, names.kernel): (layer.kernel, names.transposed),
            join(names, name, "bias"): (layer.bias, False)}


def variables(backbone, names):
    """{their name: (our variable, stored transposed?)} of every backbone weight."""
    found = {}
    for attribute, name in names.embeddings.items():
        layer = getattr(backbone, attribute, None)
        if layer is not None:
            found.update(layer_variables(layer, name, names))
    for i, block in enumerate(backbone.transformer_layers):
        for part, layer in block.parts().items():
            found.update(layer_variables(layer, names.layer(i) + names.parts[part], names))
    return found


def arrays(backbone, names):
    """{their name: float32 array} of the backbone's weights, in the format's layout."""
    return {name: np.ascontiguousarray(v.numpy().T if t else v.numpy()).astype("float32")
            for name, (v, t) in variables(backbone, names).items()}


def assign(backbone, names, stored, source, config_file, fill=None):
    """Copy `stored` ({their name: array}) into the backbone. `fill`: {name: array} used
    where a name is absent (ALBERT's identity projection). Every absent name and wrong
    shape is a UserError naming `source`, the key and what `config_file` implies; so is a
    NaN or infinity in a tensor, and a tensor of the encoder (embeddings, encoder) that
    the config does not declare (a second layer when it says one)."""
    problems, values = [], []
    ours = variables(backbone, names)
    for name, (variable, transposed) in ours.items():
        value = stored.get(name)
        if value is None and fill and name in fill:
            value = fill[name]
        if value is None:
            problems.append(f"weight {name} is missing")
            continue
        value = np.asarray(finite(name, value, source), dtype="float32")
        value = value.T if transposed else value
        if value.shape != tuple(variable.shape):
            shape = tuple(variable.shape)[::-1] if transposed else tuple(variable.shape)
            problems.append(f"weight {name} has shape {tuple(stored[name].shape)}, "
                            f"{config_file} implies {shape}")
            continue
        values.append((variable, value))
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise UserError(f"{source}: {problems[0]}{more}: is this the model {config_file} "
                        "describes?")
    scopes = tuple({name.rsplit(names.separator, 1)[0] + names.separator
                    for name in names.embeddings.values()})  # embeddings., encoder.
    check_unused([name for name in stored if name.startswith(scopes)
                  and not name.endswith("position_ids")],  # a buffer older transformers saved
                 set(ours), source, config_file, names.separator)
    for variable, value in values:
        variable.assign(value)


# --- the name tables ----------------------------------------------------------------

BERT_PARTS_TRANSFORMERS = {
    "query": "attention.self.query", "key": "attention.self.key", "value": "attention.self.value",
    "attention_output": "attention.output.dense", "attention_norm": "attention.output.LayerNorm",
    "intermediate": "intermediate.dense", "output": "output.dense",
    "output_norm": "output.LayerNorm"}
ALBERT_PARTS_TRANSFORMERS = {
    "query": "attention.query", "key": "attention.key", "value": "attention.value",
    "attention_output": "attention.dense", "attention_norm": "attention.LayerNorm",
    "intermediate": "ffn", "output": "ffn_output", "output_norm": "full_layer_layer_norm"}
EMBEDDINGS_TRANSFORMERS = {
    "token_embedding": "embeddings.word_embeddings",
    "segment_embedding": "embeddings.token_type_embeddings",
    "position_embedding": "embeddings.position_embeddings",
    "embedding_norm": "embeddings.LayerNorm",
    "embedding_projection": "encoder.embedding_hidden_mapping_in"}
TRANSFORMERS = dict(separator=".", table="weight", kernel="weight", gamma="weight", beta="bias",
                    transposed=True)

# transformers' BertModel / AlbertModel state dicts (without the bert. / albert. prefix)
BERT_TRANSFORMERS = Names(EMBEDDINGS_TRANSFORMERS, lambda i: f"encoder.layer.{i}.",
                          BERT_PARTS_TRANSFORMERS, **TRANSFORMERS)
ALBERT_TRANSFORMERS = Names(EMBEDDINGS_TRANSFORMERS,
                            lambda i: "encoder.albert_layer_groups.0.albert_layers.0.",
                            ALBERT_PARTS_TRANSFORMERS, **TRANSFORMERS)

# the same names under bert/, with / between their parts (bert/embeddings/word_embeddings)
EMBEDDINGS_CHECKPOINT = {part: "bert/" + name.replace(".", "/")
                         for part, name in EMBEDDINGS_TRANSFORMERS.items()}
CHECKPOINT = dict(separator="/", table="", kernel="kernel", gamma="gamma", beta="beta",
                  transposed=False)

# Google's TF checkpoints (google-research/bert, google-research/albert; HFL, albert_zh),
# as bert4keras's BERT / ALBERT `variable_mapping` name them
BERT_CHECKPOINT = Names(
    EMBEDDINGS_CHECKPOINT, lambda i: f"bert/encoder/layer_{i}/",
    {part: name.replace(".", "/") for part, name in BERT_PARTS_TRANSFORMERS.items()},
    **CHECKPOINT)
ALBERT_CHECKPOINT = Names(
    EMBEDDINGS_CHECKPOINT, lambda i: "bert/encoder/transformer/group_0/inner_group_0/",
    {"query": "attention_1/self/query", "key": "attention_1/self/key",
     "value": "attention_1/self/value", "attention_output": "attention_1/output/dense",
     "attention_norm": "LayerNorm", "intermediate": "ffn_1/intermediate/dense",
     "output": "ffn_1/intermediate/output/dense", "output_norm": "LayerNorm_1"},
    **CHECKPOINT)


def transformers_names(backbone):
    """The table of transformers' BertModel or AlbertModel for this backbone."""
    return ALBERT_TRANSFORMERS if backbone.config["architecture"] == "albert" else BERT_TRANSFORMERS


def identity_projection(backbone, names):
    """{projection names: identity kernel, zero bias}: Google's ALBERT has no projection
    when embedding_size == hidden_size (it adds the embedding as it is)."""
    if backbone.config["embedding_size"] != backbone.config["hidden_size"]:
        return {}
    name = names.embeddings["embedding_projection"]
    hidden = backbone.config["hidden_size"]
    return {join(names, name, names.kernel): np.eye(hidden, dtype="float32"),
            join(names, name, "bias"): np.zeros(hidden, "float32")}
