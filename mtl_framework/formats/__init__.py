"""Backbone folder formats: `FORMATS`, the one table (no reading: architectures/__init__.py).

A format is a folder layout (what files, which library loads it). How a format holds
an architecture is that architecture's converter, architectures/<name>/<format>.py
(named in its package's CONVERTERS); our own keras preset (formats/keras.py) holds
every architecture. A converter module has, as keras-hub's `convert_<model>.py`:

    CONFIG_FILE                 the file holding its config (messages name it)
    CARD_USE                    the model card's lines on loading an export of it
    detect(directory)           None: not this format/architecture; "": a whole folder
                                of it; a reason: its files, but it cannot be loaded
    read_config(directory)      our backbone config (dims, dropout); UserError when bad
    trained_length(directory)   the input length it was trained at, where it records it
    load_weights(backbone, directory)   its weights into a built backbone of that config
    check(config, source)       UserError for what the format cannot hold (before writing)
    save(backbone, directory, vocab_path, trained_length)   the folder, with its vocab

and the weight-name mapping inside it; what every reader checks before building (config
types and ranges, keys that change the model, finite and declared tensors) is one table,
formats/checks.py. This module imports no TensorFlow (plan.py and
the CLI's choices read it first), nor any architecture or backbone: converters are
given a built backbone. Which converter reads a folder (`layout`) and building the
backbone it holds (`load_backbone`) are in architectures/__init__.py, so the imports
run one way: architectures -> backbone -> its converters -> formats.
Adding a format: a row below and a converter in each architecture that has it.
"""
import os
import sys
from dataclasses import dataclass

from mtl_framework.formats.json_file import PROVENANCE_FILE  # noqa: F401 (read from here)


@dataclass(frozen=True)
class Format:
    name: str       # `mtl export --format`, the model card's tag
    library: str    # which library loads it (the model card's `library_name`)
    files: str      # what a folder of it holds, for messages
    # Our own preset: it holds rope_scaling, the run's record and (`mtl export
    # --with-heads`) the task heads; the others hold the backbone alone (a folded).
    ours: bool = False
    loads: bool = True        # a run or `mtl finetune` can start from a folder of it
    exports: bool = True      # `mtl export --format` writes it


VOCAB_FILE = "vocab.txt"  # every format's folder keeps its vocab under this name

FORMATS = {row.name: row for row in (
    Format("keras", "mtl_framework",
           "config.json + model.weights.h5 (mtl export --format keras)", ours=True),
    Format("bert4keras", "bert4keras", "bert_config.json (albert_config.json) + "
           "bert_model.ckpt.* (model.ckpt-*): bert4keras's and Google's TF checkpoint layout"),
    Format("keras-hub", "keras-hub", "keras-hub's preset (config.json with "
           "registered_name keras_hub>...)"),
    Format("roformer-pytorch", "roformer",
           "config.json (model_type roformer) + model.safetensors / pytorch_model.bin"),
    Format("transformers", "transformers", "config.json (model_type bert or albert) + "
           "model.safetensors / pytorch_model.bin (mtl export: + tokenizer files and a "
           "sentence-transformers pooling module)"),
)}
NAMES = tuple(name for name, row in FORMATS.items() if row.exports)  # `mtl export --format`
OURS = next(name for name, row in FORMATS.items() if row.ours)  # our own preset's name


def loadable():
    """The formats a run or `mtl finetune` starts from."""
    return tuple(name for name in FORMATS if FORMATS[name].loads)


def expected():
    return ", or ".join(FORMATS[name].files + f" ({name})" for name in loadable())


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
    """The file holding the folder's vocab, or None: its vocab.txt, else the tokenizer.json
    transformers 5 writes instead (tokenizer.py reads either; a run keeps the vocab.txt it
    stands for). Where both are there, they must hold the same tokens with the same ids;
    the one place every reader finds a folder's vocab. A sentence-transformers folder's
    is beside its Transformer module (the root, or 0_Transformer/)."""
    from mtl_framework.formats.sentence_transformers import transformer_folder
    from mtl_framework.tokenizer import (
        TOKENIZER_JSON,
        load_vocab,
        read_tokenizer_json,
        tokenizer_json_vocab,
    )

    directory = transformer_folder(directory)
    path = os.path.join(directory, VOCAB_FILE)
    tokenizer_json = os.path.join(directory, TOKENIZER_JSON)
    data = read_tokenizer_json(tokenizer_json) if os.path.isfile(tokenizer_json) else None
    if data is None:  # none, or keras-hub's tokenizer config: no vocab in it
        return path if os.path.exists(path) else None
    if not os.path.exists(path):
        tokenizer_json_vocab(tokenizer_json)  # refused here, before anything is built
        return tokenizer_json
    _check_agree(path, load_vocab(path), tokenizer_json, data)
    return path


def _check_agree(path, vocab, tokenizer_json, data):
    from mtl_framework.errors import UserError
    from mtl_framework.tokenizer import wordpiece_vocab

    other = wordpiece_vocab(tokenizer_json, data)
    if other == vocab:
        return
    ours, theirs = list(vocab), list(other)
    at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    first = f"id {at} is {_token(ours, at)} in vocab.txt, {_token(theirs, at)} in tokenizer.json"
    raise UserError(f"{path}: disagrees with {tokenizer_json} ({len(ours)} and {len(theirs)} "
                    f"tokens; {first}): keep the one the weights were trained with, delete the "
                    "other")


def _token(tokens, at):
    return repr(tokens[at]) if at < len(tokens) else "past the end"




def recorded_vocab(directory):
    """(the vocab record {"sha256", "tokens"} an export of ours keeps, the file holding it):
    our preset's config.json "run" entry, else provenance.json's (any format; no foreign
    reader reads that file); (None, None) for a folder without one (an older export, a
    release)."""
    from mtl_framework.errors import UserError
    from mtl_framework.formats.json_file import read_json

    for name, keys in (("config.json", ("run", "vocab")), (PROVENANCE_FILE, ("vocab",))):
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            continue
        try:
            value = read_json(path)
        except (OSError, UserError):  # a damaged file: its own reader says so
            continue
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, dict) and value.get("sha256"):
            return value, path
    return None, None
