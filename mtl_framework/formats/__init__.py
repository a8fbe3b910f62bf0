"""Backbone formats: one module each, with the same functions, and `FORMATS`, the one table.

A format module (formats/<module>.py) has, as keras-hub's `convert_<model>.py`:

    CONFIG_FILE                 the file holding its config (messages name it)
    CARD_USE                    the model card's lines on loading an export of it
    detect(directory)           None: not this format; "": a whole folder of it; a
                                reason: its files, but it cannot be loaded (what to do)
    read_config(directory)      our backbone config (dims, dropout); UserError when bad
    trained_length(directory)   the input length it was trained at, where it records it
    load_weights(backbone, directory)   its weights into a built backbone of that config
    check(config, source)       UserError for what the format cannot hold (before writing)
    save(backbone, directory, vocab_path, trained_length)   the folder, with its vocab

and the weight-name mapping inside it. This module imports no TensorFlow (preflight and
the CLI's choices read it first); the format modules never import it (no cycle with backbone.py).
Adding a format: its module and one row below.
"""
import importlib
import os
import sys
from dataclasses import dataclass

from mtl_framework.errors import UserError


@dataclass(frozen=True)
class Format:
    name: str       # `mtl export --format`, the model card's tag
    module: str     # formats/<module>.py
    library: str    # which library loads it (the model card's `library_name`)
    files: str      # what a folder of it holds, for messages
    # Our own preset: it holds rope_scaling, the run's record and (`mtl export
    # --with-heads`) the task heads; the others hold the backbone alone (a folded).
    ours: bool = False
    loads: bool = True        # a run or `mtl finetune` can start from a folder of it


FORMATS = {row.name: row for row in (
    Format("keras", "keras", "mtl_framework",
           "config.json + model.weights.h5 (mtl export --format keras)", ours=True),
    Format("bert4keras", "bert4keras", "bert4keras", "bert_config.json + bert_model.ckpt.*"),
    Format("keras-hub", "keras_hub", "keras-hub", "keras-hub's preset (config.json with "
           "registered_name keras_hub>...)", loads=False),
    Format("roformer-pytorch", "roformer_pytorch", "roformer",
           "config.json (model_type roformer) + model.safetensors / pytorch_model.bin"),
)}
NAMES = tuple(FORMATS)
OURS = next(name for name, row in FORMATS.items() if row.ours)  # our own preset's name


def module(name):
    """The format module of format `name`."""
    return importlib.import_module(f"mtl_framework.formats.{FORMATS[name].module}")


def loadable():
    """The formats a run or `mtl finetune` starts from."""
    return tuple(name for name in NAMES if FORMATS[name].loads)


def expected():
    return ", or ".join(FORMATS[name].files + f" ({name})" for name in loadable())


def layout(directory, source=None):
    """The format of a backbone folder a run can start from; anything else is a
    UserError naming what a backbone folder holds."""
    where = f"{source}: " if source else ""
    if not os.path.isdir(directory):
        raise UserError(f"{where}{directory}: no such folder; give a backbone folder: {expected()}")
    reasons = []
    for name in NAMES:
        found = module(name).detect(directory)
        if found == "":
            return name
        if found:
            reasons.append(found)
    if reasons:
        raise UserError(f"{where}{directory}: {reasons[0]}")
    raise UserError(f"{where}{directory}: not a backbone folder; expected {expected()}")


def read_config(directory, name):
    """Our backbone config (dims, dropout) as the folder declares it."""
    return module(name).read_config(directory)


def config_path(directory, name):
    return os.path.join(directory, module(name).CONFIG_FILE)


def trained_length(directory, name):
    """The length a backbone folder was trained at, where its format records it, else None."""
    return module(name).trained_length(directory)


def load_backbone(directory, name, **overrides):
    """The folder's backbone with its weights; `overrides` (dropout, attention_dropout,
    alpha_warmup_steps, rope_scaling) replace the folder's values, never its dims."""
    from mtl_framework.backbone import RoFormerV2Backbone

    try:
        return RoFormerV2Backbone.from_folder(module(name), directory, **overrides)
    except unreadable_weights() as error:  # truncated or damaged weight files
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UserError(f"{directory}: its {name} weights cannot be read ({reason[:200]}): "
                        "copy or export the folder again") from None


def unreadable_weights():
    """The exceptions a damaged weights file raises in h5py (OSError), TensorFlow's
    checkpoint reader (OpError: DataLossError and kin; only once TensorFlow is imported:
    the JAX backend runs without it) and safetensors."""
    kinds = [OSError, EOFError]
    if "tensorflow" in sys.modules:
        kinds.append(sys.modules["tensorflow"].errors.OpError)
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
