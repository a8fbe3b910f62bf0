"""Our keras preset, for every architecture: config.json ({"format":
"mtl_framework.<backbone class>", "backbone": config, ...}) + model.weights.h5
(+ vocab.txt), what `<backbone class>.from_preset` and `load_preset` load; the
config's "architecture" names the architecture (absent: RoFormerV2, as every export
made before there were others). `mtl export --with-heads` adds the task heads beside
it (saving/writer.py)."""
import json
import os
import shutil
import zipfile

import numpy as np

from mtl_framework.errors import UserError
from mtl_framework.formats import VOCAB_FILE
from mtl_framework.formats.checks import FRACTIONS, INTEGERS, POSITIVE, check_values, finite
from mtl_framework.formats.json_file import read_json

CONFIG_FILE = "config.json"
WEIGHTS = "model.weights.h5"
KERAS_FORMAT = "mtl_framework.RoFormerV2Backbone"  # RoFormerV2's tag (every older export)
TAG_PREFIX = "mtl_framework."  # + the backbone's class name
# `--with-heads`: the task heads' metadata and weights beside the backbone
HEADS_CONFIG = "heads.json"
HEADS_WEIGHTS = "heads.weights.npz"


CARD_USE = [
    "```python", "from mtl_framework import RoFormerV2Backbone",
    "backbone = RoFormerV2Backbone.from_preset(DIR)  # vocab: DIR/vocab.txt", "```", "",
    "Fine-tune one task from it: `mtl finetune DIR TASK`, or an experiment with "
    "`backbone: {init: DIR}`."]


def _config(directory):
    return read_json(os.path.join(directory, CONFIG_FILE))


def detect(directory):
    if not os.path.exists(os.path.join(directory, CONFIG_FILE)):
        return None
    config = _config(directory)
    if not (isinstance(config, dict) and str(config.get("format")).startswith(TAG_PREFIX)):
        return None
    if not os.path.exists(os.path.join(directory, WEIGHTS)):
        return (f"{CONFIG_FILE} without {WEIGHTS}; export the run again with "
                "`mtl export --format keras`")
    return ""


def read_config(directory):
    path = os.path.join(directory, CONFIG_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found: a preset folder is what `mtl export RUN_DIR "
                                "--format keras --output DIR` writes (or give a size name: "
                                "small, base, large, for a new backbone)")
    config = _config(directory).get("backbone")
    check_values(config, {key: key for key in (*INTEGERS, *FRACTIONS, *POSITIVE)},
                 f"{path}: backbone")
    return dict(config)


def trained_length(directory):
    """rope_scaling.original_max_length, else the run's max_length the export records."""
    config = _config(directory)
    scaling = config.get("backbone", {}).get("rope_scaling") or {}
    return scaling.get("original_max_length") or config.get("run", {}).get("max_length")


def load_weights(backbone, directory):
    """The weights, each finite (a NaN in one would train a NaN model)."""
    path = os.path.join(directory, WEIGHTS)
    backbone.load_weights(path)
    for variable in backbone.weights:  # named without the model's own (numbered) name
        finite(variable.path.split("/", 1)[-1], variable.numpy(), path)


def check(config, source):
    """Our preset holds every config."""


def save(backbone, directory, vocab_path=None, trained_length=None, extra=None):
    """config.json + model.weights.h5 (+ vocab.txt); `extra`: more config.json keys (the
    run, with the length it was trained at)."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, CONFIG_FILE), "w", encoding="utf-8") as f:
        json.dump({"format": TAG_PREFIX + type(backbone).__name__, "backbone": backbone.config,
                   **(extra or {})}, f, indent=2, ensure_ascii=False)
    backbone.save_weights(os.path.join(directory, WEIGHTS))
    if vocab_path is not None:
        shutil.copyfile(vocab_path, os.path.join(directory, VOCAB_FILE))


def save_heads(directory, heads, weights):
    """heads.json (each head's metadata) and heads.weights.npz (its variables)."""
    with open(os.path.join(directory, HEADS_CONFIG), "w", encoding="utf-8") as f:
        json.dump(heads, f, indent=2, ensure_ascii=False)
    np.savez(os.path.join(directory, HEADS_WEIGHTS), **weights)


def load_heads(directory):
    """(heads metadata, {variable path: array}) of a keras export, or (None, None)."""
    path = os.path.join(directory, HEADS_CONFIG)
    if not os.path.exists(path):
        return None, None
    try:
        with open(path, encoding="utf-8") as f:
            heads = json.load(f)
        with np.load(os.path.join(directory, HEADS_WEIGHTS)) as values:
            weights = {name: values[name] for name in values.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:  # cut heads files
        raise UserError(f"{directory}: its heads cannot be read ({error}); export again with "
                        "`mtl export RUN_DIR --format keras --with-heads`") from None
    return heads, weights
