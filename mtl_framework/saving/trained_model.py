"""A trained model's files read back: which checkpoint of a run directory (its newest
readable one, keep_best's or step N's, through run_dir.py), the run's vocab checked
against it, and the heads' metadata and weights of a checkpoint or of a keras export
written with `--with-heads` (heads.json + heads.weights.npz). Nothing is built here:
assemble.py builds the backbone and heads from what these return.
"""
import json
import os
import zipfile

import numpy as np

from mtl_framework.errors import UserError
from mtl_framework.saving import run_dir as files

HEADS_CONFIG = "heads.json"
HEADS_WEIGHTS = "heads.weights.npz"


# --- a run directory --------------------------------------------------------------------

def read_run(run_dir, log=print, which=None):
    """The run's checkpoint (backbone and head arrays, not the optimizer's): the newest
    readable one, falling back past damaged ones (`which` None or "latest"), keep_best's
    ("best") or step N's (an int or digits); a UserError when there is none."""
    wanted = lambda name: not name.startswith("optimizer/")  # noqa: E731
    if which not in (None, "latest"):
        return chosen_checkpoint(run_dir, which, wanted)
    checkpoint = files.latest_checkpoint(run_dir, wanted, log=log)
    if checkpoint is None:
        if not os.path.isdir(run_dir):
            raise UserError(f"{run_dir}: no such run directory")
        raise UserError(f"{run_dir}: no checkpoints/step-* folder; is this a run directory "
                        "written by `mtl train`?")
    return checkpoint


def chosen_checkpoint(run_dir, which, wanted=None):
    """keep_best's checkpoint ("best") or step N's, read whole (no fallback: the user named it)."""
    root = os.path.join(run_dir, files.CHECKPOINTS)
    steps = ", ".join(str(files.checkpoint_step(d)) for d in files.checkpoint_dirs(run_dir)) or "none"
    if str(which) == "best":
        path = files.best_checkpoint(run_dir)
        if path is None:
            raise UserError(f"{run_dir}: no best checkpoint ({root}/best-step-N): the run has "
                            "no `keep_best` in its experiment, or no evaluation yet; give "
                            f"--checkpoint latest or a step ({steps})")
    elif str(which).isdigit():
        path = os.path.join(root, f"step-{int(which):08d}")
        if not os.path.isdir(path):
            raise UserError(f"{run_dir}: no checkpoint of step {int(which)}; its steps: {steps} "
                            "(and best, with keep_best)")
    else:
        raise UserError(f"--checkpoint {which!r}: give best, latest or a step number")
    try:
        return files.read_checkpoint(path, wanted)
    except files.CheckpointError as error:
        raise UserError(f"{error}: this checkpoint cannot be read; export another "
                        "(--checkpoint latest or a step)") from None
def check_run_vocab(run_dir, checkpoint):
    """RUN/vocab.txt must exist and have one token per row of the checkpoint's embedding
    table: a cut or replaced vocab would tokenize into wrong ids, silently."""
    from mtl_framework.tokenizer import load_vocab

    path = os.path.join(run_dir, files.VOCAB)
    if not os.path.isfile(path):
        raise UserError(f"{path}: not found (the vocab the run trained with): copy it back "
                        "from where the run was written")
    size, rows = len(load_vocab(path)), checkpoint.trainer["backbone"]["vocab_size"]
    if size != rows:
        raise UserError(f"{path}: {size} tokens, but the checkpoint {checkpoint.path} has "
                        f"{rows} embedding rows: the vocab was cut or replaced; restore the "
                        "run's own vocab.txt")
    return path


def run_heads(checkpoint):
    """(heads metadata, {variable name: array}) of the task heads in a checkpoint."""
    heads = checkpoint.trainer.get("heads")
    if heads is None:
        raise UserError(f"{checkpoint.path}/trainer.json has no 'heads' entry (written by an "
                        "older mtl_framework): continue the run one step with `mtl train "
                        "--resume` to write a checkpoint that has it, or export without "
                        "--with-heads")
    weights = {}
    for task, meta in heads.items():
        for name in meta["variables"]:
            if name not in checkpoint.arrays:
                raise UserError(f"{checkpoint.path}/trainer.json: head {task!r} lists variable "
                                f"{name!r}, which is not among the checkpoint's variables")
            weights[name] = checkpoint.arrays[name]
    return heads, weights


# --- a keras export with --with-heads ---------------------------------------------------

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
