"""JunnYu's PyTorch `roformer` 0.4.x layout of RoFormerV2: read and write, without torch.

This is the layout of the hub's `junnyu/roformer_v2_chinese_char_{small,base,large}`:

config.json        `model_type: roformer` with the v2 switches `norm_type: rms_norm`
                   (weightless RMS norm), `use_bias: false`, `rotary_value: false`,
                   `hidden_act: relu`.
model.safetensors  (or pytorch_model.bin) torch names `roformer.embeddings.*`,
                   `roformer.encoder.layer.{i}.*`, Linear weights [out, in] (ours are
                   Keras kernels [in, out]: transposed).

Numerics (measured, docs/pytorch.md): equal to ours at real tokens when the consumer
passes `attention_mask = ids != 0`; `layer_norm_eps` 1e-7 is bert4keras's epsilon (the
package's default 1e-12 moves outputs by ~3e-6). Mainline `transformers`' RoFormer
(v1) loads these weights without complaint and computes something else.

Names go through bert4keras.py's checkpoint names, which already split our fused
qkv kernel: one table (`torch_names`) is the whole mapping, both ways.
"""
import json
import os
import shutil

import numpy as np

from mtl_framework.architectures.roformer_v2 import bert4keras as checkpoint_names
from mtl_framework.errors import UserError
from mtl_framework.files import usual_mode
from mtl_framework.formats.checks import BERT_CONFIG_KEYS, check_keys, check_unused, check_values, finite
from mtl_framework.formats.torch_files import SAFETENSORS, TORCH_BIN, has_weights, read_tensors

CONFIG_FILE = CONFIG = "config.json"
PREFIX = "roformer."  # RoFormerForMaskedLM's names; a bare RoFormerModel saves without it
POSITIONS = "roformer.encoder.embed_positions.weight"
MAPPING_BIAS = "roformer.embeddings_project.bias"  # torch's Linear has one; ours is 0
ENCODER_SCOPES = ("roformer.embeddings.", "roformer.embeddings_project.", "roformer.encoder.")
# bert4keras's epsilon, which our RMSNorm uses: the consumer must use it too.
LAYER_NORM_EPS = 1e-7
# The hub's value; rotary needs no table beyond the lengths used, but the package
# slices a table of this many rows, so it must cover the longest input.
MIN_POSITIONS = 512


def torch_names(config):
    """{bert4keras checkpoint name: (torch name, transposed?)} for a backbone config."""
    names = {
        checkpoint_names.EMBEDDING_NAMES["token"]: ("roformer.embeddings.word_embeddings.weight", False),
        checkpoint_names.EMBEDDING_NAMES["segment"]: (
            "roformer.embeddings.token_type_embeddings.weight", False),
    }
    if config["embedding_size"] != config["hidden_size"]:
        names[checkpoint_names.EMBEDDING_NAMES["mapping"]] = ("roformer.embeddings_project.weight", True)
    for i in range(config["num_layers"]):
        ours, prefix = checkpoint_names.layer_names(i), f"roformer.encoder.layer.{i}."
        for key, theirs in (("query", "attention.self.query"), ("key", "attention.self.key"),
                            ("value", "attention.self.value"),
                            ("attention_output", "attention.output.dense"),
                            ("inner", "intermediate.dense"), ("output", "output.dense")):
            names[ours[key]] = (prefix + theirs + ".weight", True)
    if config["segment_vocab_size"] == 0:
        names.pop(checkpoint_names.EMBEDDING_NAMES["segment"])
    return names


def sinusoidal_table(positions, head_size):
    """`RoFormerSinusoidalPositionalEmbedding`'s table: sin in the first half, cos in the
    second, angle pos / 10000^(2i/d). Written to the file because transformers 4.51-4.52
    leave this (non-saved) buffer uninitialised: NaN outputs."""
    angles = np.arange(positions)[:, None] / np.power(10000.0, 2 * np.arange(head_size // 2) / head_size)
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1).astype("float32")


# --- write --------------------------------------------------------------------

CARD_USE = [
    "PyTorch, with JunnYu's `roformer==0.4.3` and `transformers<=4.50.3` (4.51-4.52 need "
    "this file's position table, which it has; 4.53+ fail at import):", "",
    "```python",
    "import torch",
    "from roformer import RoFormerModel",
    "from transformers import BertTokenizer",
    "tokenizer = BertTokenizer.from_pretrained(DIR)",
    "model = RoFormerModel.from_pretrained(DIR).eval()",
    "ids = tokenizer([\"今天天气不错\", \"你好\"], padding=True, return_tensors=\"pt\")",
    "hidden = model(input_ids=ids.input_ids, token_type_ids=ids.token_type_ids,",
    "               attention_mask=ids.input_ids != 0).last_hidden_state",
    "```", "",
    "Always pass `attention_mask` (ids != 0): without it padded rows attend to the padding "
    "and change. Never load it with mainline `transformers.RoFormerModel`: that is RoFormer "
    "v1 (LayerNorm, biases), which loads these weights silently and computes something "
    "else. Back into mtl_framework: `RoFormerV2Backbone.from_roformer_pytorch(DIR)`, "
    "`mtl finetune DIR TASK`, or `backbone: {init: DIR}`.",
]


def check_expressible(config, source="backbone"):
    """What roformer's model cannot hold: a head size other than hidden / heads, no token
    type embedding. (The residual scale `a` it lacks is folded by the export.)"""
    if config["head_size"] * config["num_heads"] != config["hidden_size"]:
        raise UserError(
            f"{source}: head_size {config['head_size']} x num_heads {config['num_heads']} != "
            f"hidden_size {config['hidden_size']}; roformer (PyTorch) fixes head size = "
            "hidden / heads: export --format keras or bert4keras instead")
    if config["segment_vocab_size"] == 0:
        raise UserError(f"{source}: segment_vocab_size 0; roformer (PyTorch) always has a "
                        "token type embedding: export --format keras or bert4keras instead")


def hf_config(config, max_positions=MIN_POSITIONS):
    """config.json for `roformer.RoFormerForMaskedLM` / `RoFormerModel` (RoFormerV2)."""
    return {
        "architectures": ["RoFormerForMaskedLM"],
        "model_type": "roformer",
        "vocab_size": config["vocab_size"],
        "embedding_size": config["embedding_size"],
        "hidden_size": config["hidden_size"],
        "num_hidden_layers": config["num_layers"],
        "num_attention_heads": config["num_heads"],
        "intermediate_size": config["intermediate_size"],
        "hidden_act": "relu",
        "hidden_dropout_prob": config["dropout"],
        "attention_probs_dropout_prob": config["attention_dropout"],
        "max_position_embeddings": max(MIN_POSITIONS, max_positions),
        "type_vocab_size": config["segment_vocab_size"],
        "initializer_range": 0.02,
        "layer_norm_eps": LAYER_NORM_EPS,
        "pad_token_id": 0,
        "norm_type": "rms_norm",
        "use_bias": False,
        "rotary_value": False,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
    }


def to_torch_weights(backbone, max_positions):
    """{torch name: float32 array} of `backbone` (a = 1) in RoFormerForMaskedLM's names.

    The MLM decoder (`cls.predictions.decoder.weight`) is left out: it is tied to the
    word embedding and the tie is restored on load (save_pretrained itself fails on
    the tie with safetensors in transformers 4.40-4.52)."""
    config = backbone.config
    ours = checkpoint_names.backbone_to_checkpoint_weights(backbone)
    weights = {}
    for name, (theirs, transposed) in torch_names(config).items():
        value = np.asarray(ours[name], dtype="float32")
        weights[theirs] = np.ascontiguousarray(value.T if transposed else value)
    if config["embedding_size"] != config["hidden_size"]:
        weights[MAPPING_BIAS] = np.zeros(config["hidden_size"], "float32")
    weights[POSITIONS] = sinusoidal_table(max_positions, config["head_size"])
    return weights


def save_roformer_pytorch(backbone, directory, vocab_path=None, max_positions=MIN_POSITIONS):
    """config.json + model.safetensors (+ vocab.txt, tokenizer_config.json) in `directory`."""
    from safetensors.numpy import save_file

    check_expressible(backbone.config)
    config = hf_config(backbone.config, max_positions)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, CONFIG), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
    # metadata format=pt: transformers refuses a safetensors file without it
    save_file(to_torch_weights(backbone, config["max_position_embeddings"]),
              os.path.join(directory, SAFETENSORS), metadata={"format": "pt"})
    usual_mode(os.path.join(directory, SAFETENSORS))  # safetensors writes it 0600
    if vocab_path is not None:
        shutil.copyfile(vocab_path, os.path.join(directory, "vocab.txt"))
        # Our tokenizer gives BertTokenizer's ids (lower-cased, one token per CJK char)
        with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump({"tokenizer_class": "BertTokenizer", "do_lower_case": True,
                       "model_max_length": config["max_position_embeddings"]}, f, indent=2)
    return directory


# --- read ---------------------------------------------------------------------

def detect(directory):
    return "" if is_roformer_pytorch(directory) else None


def check(config, source):
    check_expressible(config, source)


def trained_length(directory):
    """Not recorded (max_position_embeddings is a table size, not a trained length)."""
    return None


def save(backbone, directory, vocab_path=None, trained_length=None):
    save_roformer_pytorch(backbone, directory, vocab_path, trained_length or MIN_POSITIONS)


def load_weights(backbone, directory):
    tensors, source = read_tensors(directory, "a roformer (PyTorch)")
    weights = from_torch_weights(tensors, backbone.config, source)
    checkpoint_names.assign_weights(backbone, weights, source=directory)


def is_roformer_pytorch(directory):
    """config.json with model_type roformer next to model.safetensors or pytorch_model.bin."""
    path = os.path.join(directory, CONFIG)
    if not os.path.exists(path) or not has_weights(directory):
        return False
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f).get("model_type") == "roformer"
    except (ValueError, AttributeError):
        return False


# config.json keys -> ours, for the checks of formats/checks.py (layer_norm_eps is
# checked, not used: our RMS norm has bert4keras's 1e-7; max_position_embeddings sizes
# the sinusoidal table the export writes)
NAMES = BERT_CONFIG_KEYS
V2 = {"norm_type": "rms_norm", "use_bias": False, "rotary_value": False, "hidden_act": "relu"}
KNOWN = {*NAMES, *V2, "pooler_activation"}  # the pooler is not the encoder's


def config_from_hf(hf, source=CONFIG):
    """Our backbone config from a roformer config.json dict; RoFormer v1 and other
    variants (LayerNorm, biases, rotary values, gelu) are refused by name, and so is a
    key that may change the model, or a value of the wrong type or range, as the BERT
    reader does (formats/checks.py)."""
    if not isinstance(hf, dict):
        raise UserError(f"{source}: not a JSON object")
    wrong = {k: hf.get(k) for k, v in V2.items() if hf.get(k) != v}
    if wrong:
        raise UserError(f"{source}: {', '.join(f'{k} is {v!r}' for k, v in wrong.items())}; a "
                        f"RoFormerV2 config has {V2} (this looks like RoFormer v1 or "
                        "another variant, which mtl_framework does not load)")
    check_keys(hf, KNOWN, source, "roformer (PyTorch)")
    check_values(hf, NAMES, source)
    required = ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads"]
    missing = [k for k in required if hf.get(k) is None]
    if missing:
        raise UserError(f"{source}: missing {missing}; a roformer config.json has {required}")
    hidden, heads = hf["hidden_size"], hf["num_attention_heads"]
    return dict(
        vocab_size=hf["vocab_size"], num_layers=hf["num_hidden_layers"], hidden_size=hidden,
        num_heads=heads, intermediate_size=hf.get("intermediate_size", 4 * hidden),
        head_size=hidden // heads, embedding_size=hf.get("embedding_size") or hidden,
        segment_vocab_size=hf.get("type_vocab_size", 2),
        dropout=hf.get("hidden_dropout_prob", 0.1),
        attention_dropout=hf.get("attention_probs_dropout_prob", 0.0))


def read_config(directory):
    path = os.path.join(directory, CONFIG)
    if not os.path.exists(path):
        raise UserError(f"{path} not found: a roformer (PyTorch) folder has config.json and "
                        f"{SAFETENSORS} or {TORCH_BIN}")
    try:
        with open(path, encoding="utf-8") as f:
            return config_from_hf(json.load(f), source=path)
    except ValueError as error:
        raise UserError(f"{path}: not valid JSON ({error})") from None


def from_torch_weights(tensors, config, source):
    """{bert4keras checkpoint name: array} from {torch name: array}: names with or
    without the `roformer.` prefix; every missing name and wrong shape reported at once."""
    tensors = {(k if k.startswith(PREFIX) or k.startswith("cls.") else PREFIX + k): v
               for k, v in tensors.items()}
    shapes = expected_shapes(config)
    weights, problems = {}, []
    for name, (theirs, transposed) in torch_names(config).items():
        if theirs not in tensors:
            problems.append(f"{theirs} missing")
            continue
        value = np.asarray(finite(theirs, tensors[theirs], source), dtype="float32")
        value = value.T if transposed else value
        if value.shape != shapes[name]:
            problems.append(f"{theirs} has shape {tensors[theirs].shape}, config.json implies "
                            f"{shapes[name][::-1] if transposed else shapes[name]}")
        weights[name] = value
    bias = tensors.get(MAPPING_BIAS)
    if bias is not None and np.any(bias):
        problems.append(f"{MAPPING_BIAS} is not zero (RoFormerV2 has no biases)")
    if problems:
        raise UserError(f"{source}: {'; '.join(problems[:5])}"
                        + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else "")
                        + ": is this the RoFormerV2 checkpoint config.json describes?")
    # the encoder's tensors this config does not use (a second layer when it says one);
    # the sinusoidal table and the mapping's zero bias are written, not read
    used = {theirs for theirs, _ in torch_names(config).values()} | {POSITIONS, MAPPING_BIAS}
    check_unused([name for name in tensors if name.startswith(ENCODER_SCOPES)
                  and not name.endswith("position_ids")], used, source, CONFIG)
    return weights


def expected_shapes(config):
    """{bert4keras checkpoint name: shape of our kernel/embedding} from a config."""
    vocab, emb, hidden = config["vocab_size"], config["embedding_size"], config["hidden_size"]
    inner, width = config["intermediate_size"], config["num_heads"] * config["head_size"]
    shapes = {checkpoint_names.EMBEDDING_NAMES["token"]: (vocab, emb),
              checkpoint_names.EMBEDDING_NAMES["segment"]: (config["segment_vocab_size"], emb),
              checkpoint_names.EMBEDDING_NAMES["mapping"]: (emb, hidden)}
    for i in range(config["num_layers"]):
        names = checkpoint_names.layer_names(i)
        shapes.update({names["query"]: (hidden, width), names["key"]: (hidden, width),
                       names["value"]: (hidden, width), names["attention_output"]: (width, hidden),
                       names["inner"]: (hidden, inner), names["output"]: (inner, hidden)})
    return shapes
