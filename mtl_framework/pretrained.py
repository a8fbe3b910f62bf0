"""Backbone folders a run (`backbone: {init: DIR}` or `{checkpoint: DIR}`) or `mtl finetune`
starts from, told apart by their files:

keras             config.json ("format": mtl_framework.RoFormerV2Backbone) + model.weights.h5:
                  `mtl export --format keras`
bert4keras        bert_config.json + bert_model.ckpt.index (+ .data-*): Su's released
                  RoFormerV2 checkpoints, or `mtl export --format bert4keras`
roformer-pytorch  config.json (model_type roformer) + model.safetensors or pytorch_model.bin:
                  the hub's junnyu/roformer_v2_chinese_char_*, or `mtl export --format
                  roformer-pytorch`

Each may carry vocab.txt (all three as released do), which the run then uses.
"""
import json
import os

from mtl_framework.errors import UserError

LAYOUTS = ("keras", "bert4keras", "roformer-pytorch")
CONFIG_FILES = {"keras": "config.json", "bert4keras": "bert_config.json",
                "roformer-pytorch": "config.json"}
KERAS_FORMAT = "mtl_framework.RoFormerV2Backbone"
EXPECTED = ("config.json + model.weights.h5 (mtl export --format keras), bert_config.json + "
            "bert_model.ckpt.* (bert4keras), or config.json + model.safetensors / "
            "pytorch_model.bin (roformer-pytorch)")


def _json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except ValueError as error:
        raise UserError(f"{path}: not valid JSON ({error})") from None


def layout(directory, source=None):
    """'keras', 'bert4keras' or 'roformer-pytorch'; anything else is a UserError naming
    what a backbone folder holds."""
    from mtl_framework import roformer_pytorch

    where = f"{source}: " if source else ""
    if not os.path.isdir(directory):
        raise UserError(f"{where}{directory}: no such folder; give a backbone folder: {EXPECTED}")

    def has(name):
        return os.path.exists(os.path.join(directory, name))

    if has("bert_config.json") and has("bert_model.ckpt.index"):
        return "bert4keras"
    if roformer_pytorch.is_roformer_pytorch(directory):
        return "roformer-pytorch"
    if has("config.json"):
        config = _json(os.path.join(directory, "config.json"))
        if isinstance(config, dict) and config.get("format") == KERAS_FORMAT:
            if not has("model.weights.h5"):
                raise UserError(f"{where}{directory}: config.json without model.weights.h5; "
                                "export the run again with `mtl export --format keras`")
            return "keras"
        if isinstance(config, dict) and "keras_hub" in str(config.get("registered_name", "")):
            raise UserError(f"{where}{directory}: a keras-hub preset (its RoFormerV2 differs "
                            "from ours); start from the run's `mtl export --format keras` folder")
    if has("bert_config.json"):
        raise UserError(f"{where}{directory}: bert_config.json without bert_model.ckpt.index; "
                        "copy the whole released checkpoint folder")
    raise UserError(f"{where}{directory}: not a backbone folder; expected {EXPECTED}")


def read_config(directory, kind):
    """Our backbone config (dims, dropout) as the folder declares it."""
    if kind == "keras":
        return dict(_json(os.path.join(directory, "config.json"))["backbone"])
    if kind == "bert4keras":
        from mtl_framework.bert4keras_io import config_from_bert_config

        path = os.path.join(directory, "bert_config.json")
        try:
            return config_from_bert_config(_json(path), source=path)
        except ValueError as error:
            raise UserError(str(error)) from None
    from mtl_framework.roformer_pytorch import read_config as read_roformer

    return read_roformer(directory)


def trained_length(directory, kind):
    """The length a backbone folder was trained at, where it says: a keras export's
    rope_scaling.original_max_length, else the run's max_length it records; None for
    bert4keras and roformer-pytorch folders, which do not record it."""
    if kind != "keras":
        return None
    config = _json(os.path.join(directory, "config.json"))
    scaling = config.get("backbone", {}).get("rope_scaling") or {}
    return scaling.get("original_max_length") or config.get("run", {}).get("max_length")


def load_backbone(directory, kind, **overrides):
    """The folder's backbone with its weights; `overrides` (dropout, attention_dropout,
    alpha_warmup_steps) replace the folder's values, never its dims."""
    try:
        return _load(directory, kind, overrides)
    except unreadable_weights() as error:  # truncated or damaged weight files
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UserError(f"{directory}: its {kind} weights cannot be read ({reason[:200]}): "
                        "copy or export the folder again") from None


def _load(directory, kind, overrides):
    from mtl_framework.backbone import RoFormerV2Backbone

    if kind == "keras":
        backbone = RoFormerV2Backbone(**{**read_config(directory, kind), **overrides})
        backbone.build()
        backbone.load_weights(os.path.join(directory, "model.weights.h5"))
        return backbone
    if kind == "bert4keras":
        return RoFormerV2Backbone.from_bert4keras(os.path.join(directory, "bert_config.json"),
                                                  os.path.join(directory, "bert_model.ckpt"),
                                                  **overrides)
    return RoFormerV2Backbone.from_roformer_pytorch(directory, **overrides)


def unreadable_weights():
    """The exceptions a damaged weights file raises in h5py (OSError), TensorFlow's
    checkpoint reader (OpError: DataLossError and kin) and safetensors."""
    import tensorflow as tf

    kinds = [OSError, EOFError, tf.errors.OpError]
    try:
        from safetensors import SafetensorError
        kinds.append(SafetensorError)
    except ImportError:
        pass
    return tuple(kinds)


def vocab_path(directory):
    """The folder's vocab.txt, or None."""
    path = os.path.join(directory, "vocab.txt")
    return path if os.path.exists(path) else None
