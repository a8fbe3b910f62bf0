"""A trained model read back: from a run directory (its checkpoint, through run_dir.py)
or a keras export with `--with-heads` (heads.json + heads.weights.npz).

The one place heads are rebuilt from their metadata and given saved weights, with one
set of checks (`assign_heads`: type, label count, variable count, shapes), for
`mtl evaluate`, `mtl predict`, a run started from a folder (`backbone: {init: DIR}`:
`init_backbone`, `init_heads`) and `mtl export` (which reads the run here and writes
the export itself).
"""
import json
import os
import zipfile

import numpy as np

from mtl_framework import architectures
from mtl_framework import rope_scaling as rope
from mtl_framework import run_dir as files
from mtl_framework.errors import UserError
from mtl_framework.experiment import ExperimentError

HEADS_CONFIG = "heads.json"
HEADS_WEIGHTS = "heads.weights.npz"


# --- a run directory --------------------------------------------------------------------

def checkpoint_backbone(checkpoint, **overrides):
    """The backbone of a run_dir.Checkpoint, built from its config (`overrides`
    replace keys that are not shapes: rope_scaling), weights by name."""
    backbone = architectures.build_backbone({**checkpoint.trainer["backbone"], **overrides})
    backbone.build()
    named = files.layer_variable_names(backbone, "backbone")
    for name, value in checkpoint.backbone_arrays(list(named)).items():
        named[name].assign(value)
    return backbone


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


def load_run_backbone(run_dir, log=print):
    """(backbone, trainer state + "checkpoint": its folder) of the run's newest readable
    checkpoint."""
    checkpoint = read_run(run_dir, log)
    return checkpoint_backbone(checkpoint), {**checkpoint.trainer, "checkpoint": checkpoint.path}


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


# --- heads: rebuilt and given their weights ---------------------------------------------

def build_heads(saved, weights, backbone, source, scored_only=False):
    """{task: head} built from heads metadata (trainer.json's or heads.json's) with its
    saved weights; `scored_only` leaves out heads with no task outputs (mlm)."""
    from mtl_framework.families import family
    from mtl_framework.heads import build_head

    heads = {}
    for task, meta in saved.items():
        if scored_only and not family(meta["type"]).scored:
            continue
        tied = {"embeddings": backbone.token_embedding} \
            if family(meta["type"]).tied_embedding else {}
        heads[task] = build_head(meta["type"], meta["num_labels"], backbone.config["hidden_size"],
                                 name=task, **meta["config"], **tied)
    assign_heads(heads, saved, weights, backbone, source)
    return heads


def assign_heads(heads, saved, weights, backbone, source, remedy=""):
    """Give each head of `heads` whose task is in `saved` its saved weights; the tasks
    given. A head of another type or label count, another number of variables or
    another shape is a UserError naming what differs (and `remedy`)."""
    shared = {id(v) for v in backbone.variables}  # the tied MLM embedding is the backbone's
    loaded = []
    for task, head in heads.items():
        if task not in saved:
            continue
        theirs = saved[task]
        for key, ours in (("type", head.family), ("num_labels", head.num_labels)):
            if theirs.get(key) != ours:
                raise UserError(f"{source}: head {task!r} has {key} {theirs.get(key)!r}, this "
                                f"model's {task!r} has {ours!r}{remedy}")
        variables = [v for v in files.layer_variable_names(head, task).values()
                     if id(v) not in shared]
        if len(variables) != len(theirs["variables"]):
            raise UserError(f"{source}: head {task!r} has {len(theirs['variables'])} variables, "
                            f"a {theirs['type']} head built from this config has "
                            f"{len(variables)}: its head config differs "
                            f"({theirs.get('config')} vs {config_of(head)})")
        for variable, name in zip(variables, theirs["variables"]):
            if name not in weights:
                raise UserError(f"{source}: head {task!r} lists variable {name!r}, which its "
                                "weights do not hold")
            value = weights[name]
            if tuple(value.shape) != tuple(variable.shape):
                raise UserError(f"{source}: head {task!r} variable {name} has shape "
                                f"{tuple(value.shape)}, this model's {variable.path} "
                                f"{tuple(variable.shape)}: its head config differs "
                                f"({theirs.get('config')} vs {config_of(head)})")
            variable.assign(value)
        loaded.append(task)
    return loaded


def config_of(head):
    return {k: v for k, v in head.get_config().items()
            if k not in ("name", "trainable", "dtype", "num_labels", "family")}


# --- a run started from a backbone folder (experiment `backbone: {init: DIR}`) ----------

# Experiment backbone keys that may differ from the export's config.json (not shapes).
INIT_OVERRIDES = ("dropout", "attention_dropout", "alpha_warmup_steps", "exact_padding",
                  "rope_scaling")
SHAPE_KEYS = ("num_layers", "hidden_size", "num_heads", "intermediate_size", "head_size",
              "embedding_size", "segment_vocab_size")


def init_backbone(directory, spec, source="experiment"):
    """The backbone of a folder `architectures.layout` knows (`formats.loadable()`) for a new run:
    dims and weights from the folder; dropout and
    attention_dropout from `spec` (the experiment's backbone mapping) where it gives them;
    alpha_warmup_steps 0 unless given (the export's residual scale is kept, not warmed up
    again). preflight.plan_run has checked the experiment's dims and vocab against it."""
    overrides = {k: spec[k] for k in INIT_OVERRIDES if spec.get(k) is not None}
    overrides["alpha_warmup_steps"] = spec.get("alpha_warmup_steps") or 0
    kind = architectures.layout(directory, source)
    if "rope_scaling" in overrides:  # stretched from the length the folder was trained at
        overrides["rope_scaling"] = checked_rope_scaling(
            overrides["rope_scaling"], architectures.trained_length(directory, kind), source)
    return architectures.load_backbone(directory, kind, **overrides)


def checked_rope_scaling(value, trained_length, source):
    """rope_scaling.normalise with the trained length filled in, as an ExperimentError."""
    try:
        return rope.normalise(value, trained_length, f"{source}: backbone.rope_scaling")
    except ValueError as error:
        raise ExperimentError(str(error)) from None


def init_heads(directory, heads, types, backbone, log=print):
    """Give the run's heads the export's head weights of the same task name. A task
    absent from the export starts fresh (logged); one present with another type, label
    count or variable shape is an error naming what differs."""
    saved, weights = load_heads(directory)
    if saved is None:
        return []
    loaded = assign_heads(heads, saved, weights, backbone, os.path.join(directory, HEADS_CONFIG),
                          remedy=": export without --with-heads (or rename the task) to start "
                                 "it fresh")
    if log:
        fresh = [t for t in heads if t not in loaded]
        log(f"heads from {directory}: {', '.join(loaded) or 'none'}"
            + (f"; new: {', '.join(fresh)}" if fresh else ""))
    return loaded
