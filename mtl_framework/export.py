"""Export a run's trained backbone in a format of `mtl_framework.formats` (each format's
module writes its files); our own preset with `with_heads` adds heads.json +
heads.weights.npz (task heads for a continued run: experiment `backbone.init`).

Every format also gets README.md (a Hugging Face model card) and provenance.json
(model_card.py); no file of an export holds an absolute path.

The other formats have no residual scale `a`: a run exported before its
warm-up ended (a < 1) has `a` folded into the attention and FFN output kernels,
which is exact because both blocks end in a bias-free linear map.

The run is read through run_dir.py: the newest readable checkpoint (a damaged newer
one is named in a warning), its backbone and head arrays only. An export is written
into a temporary folder beside `output` and renamed into place; `output` must be new
or empty, or (--force) wholly an earlier export: its `export-manifest.json` lists every
file the export wrote, and a folder holding anything else (or no manifest) is refused,
so --force never deletes a file of the user's.
"""
import json
import os
import shutil
import uuid

import numpy as np

from mtl_framework import rope_scaling as rope
from mtl_framework import run_dir as files
from mtl_framework.model_card import relative_checkpoint, write_card
from mtl_framework import formats
from mtl_framework.backbone import RoFormerV2Backbone
from mtl_framework.errors import UserError
from mtl_framework.experiment import DEFAULTS, ExperimentError

FORMATS = formats.NAMES
HEADS_CONFIG = "heads.json"
HEADS_WEIGHTS = "heads.weights.npz"
# Every file an export wrote (relative path -> size); --force replaces only a folder
# holding exactly these (plus the manifest itself).
MANIFEST = "export-manifest.json"


def checkpoint_backbone(checkpoint, **overrides):
    """The backbone of a run_dir.Checkpoint, built from its config (`overrides`
    replace keys that are not shapes: rope_scaling), weights by name."""
    backbone = RoFormerV2Backbone(**{**checkpoint.trainer["backbone"], **overrides})
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


def fold_residual_alpha(backbone):
    """Fold the residual scale `a` into the output kernels (in place) and set a = 1.
    norm(x + a*F(x)) with F ending in a bias-free kernel W equals norm(x + F_{aW}(x))."""
    alpha = float(backbone.residual_alpha.numpy())
    if alpha != 1.0:
        for layer in backbone.transformer_layers:
            for kernel in (layer.attention.output_kernel, layer.feed_forward.output_kernel):
                kernel.assign(kernel.numpy() * alpha)
        backbone.residual_alpha.assign(1.0)
    return alpha


def save_heads(directory, heads, weights):
    with open(os.path.join(directory, HEADS_CONFIG), "w", encoding="utf-8") as f:
        json.dump(heads, f, indent=2, ensure_ascii=False)
    np.savez(os.path.join(directory, HEADS_WEIGHTS), **weights)


def load_heads(directory):
    """(heads metadata, {variable path: array}) of a keras export, or (None, None)."""
    path = os.path.join(directory, HEADS_CONFIG)
    if not os.path.exists(path):
        return None, None
    with open(path, encoding="utf-8") as f:
        heads = json.load(f)
    with np.load(os.path.join(directory, HEADS_WEIGHTS)) as values:
        weights = {name: values[name] for name in values.files}
    return heads, weights


def export(run_dir, fmt, output, with_heads=False, force=False, log=print, checkpoint=None):
    """Write the run's backbone to `output` in format `fmt`: of its newest readable
    checkpoint, or `checkpoint` "best" (keep_best's) or a step number.

    The export is written into a temporary sibling folder and renamed into place: a
    failed export leaves nothing, and --force leaves nothing of the export it replaces."""
    if fmt not in FORMATS:
        raise UserError(f"--format {fmt!r}: choose one of {FORMATS}")
    if with_heads and not formats.FORMATS[fmt].ours:
        holding = [name for name, row in formats.FORMATS.items() if row.ours]
        raise UserError(f"--with-heads is for --format {' or '.join(holding)}; a {fmt} export "
                        "holds the backbone only")
    check_output(run_dir, output, force)
    which = checkpoint
    checkpoint = read_run(run_dir, log, which)
    check_run_vocab(run_dir, checkpoint)  # every export holds it
    backbone = checkpoint_backbone(checkpoint)
    source = os.path.join(checkpoint.path, "trainer.json")
    if not formats.FORMATS[fmt].ours and backbone.config.get("rope_scaling"):
        raise UserError(f"{source}: backbone.rope_scaling "  # never dropped silently
                        f"{rope.describe(backbone.config['rope_scaling'])}: --format {fmt} has no "
                        f"way to hold it; export --format {FORMATS[0]}, or train without "
                        "rope_scaling")
    formats.module(fmt).check(backbone.config, source)  # refused before writing anything
    heads = run_heads(checkpoint) if with_heads else None
    output = os.path.normpath(output)
    parent = os.path.dirname(os.path.abspath(output))
    stem = os.path.basename(os.path.abspath(output)) + files.TEMPORARY
    try:
        os.makedirs(parent, exist_ok=True)
        for leftover in os.listdir(parent):  # from an export that was killed
            if leftover.startswith(stem):
                shutil.rmtree(os.path.join(parent, leftover), ignore_errors=True)
        temporary = os.path.join(parent, stem + uuid.uuid4().hex)
        os.makedirs(temporary)
    except OSError as error:
        raise UserError(f"{output}: cannot write beside it in {parent} ({error.strerror}): give "
                        "--output a folder you can write") from None
    try:
        write_export(run_dir, fmt, temporary, backbone, checkpoint, heads, log)
        write_manifest(temporary)
        if os.path.isdir(output) and os.listdir(output):  # checked above: --force, an export
            check_output(run_dir, output, force)  # again: it may have changed meanwhile
            shutil.rmtree(output)
        os.replace(temporary, output)
    except OSError as error:  # disk full, a read-only folder: nothing of it is left
        raise UserError(f"{output}: the export could not be written ({error.strerror or error}); "
                        "nothing was written (an earlier export there is intact): free space "
                        "or give --output a folder you can write") from None
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return output


def export_files(directory):
    """{relative path: size} of every file under `directory`, the manifest left out."""
    found = {}
    for root, folders, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            relative = os.path.relpath(path, directory)
            if relative != MANIFEST:
                found[relative] = os.path.getsize(path)
    return found


def write_manifest(directory):
    """export-manifest.json: every file the export wrote, so that --force can tell an
    export of ours from a folder that merely holds a config.json."""
    with open(os.path.join(directory, MANIFEST), "w", encoding="utf-8") as f:
        json.dump({"written_by": "mtl export", "files": export_files(directory)}, f, indent=1,
                  sort_keys=True)
        f.write("\n")


def foreign_files(directory):
    """What in `directory` is not part of the export its manifest lists (a list of
    reasons; empty when the folder is wholly that export)."""
    try:
        with open(os.path.join(directory, MANIFEST), encoding="utf-8") as f:
            listed = json.load(f)["files"]
    except FileNotFoundError:
        return [f"no {MANIFEST}, so not an export of `mtl export`"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        return [f"{MANIFEST} unreadable ({error})"]
    found = export_files(directory)
    extra = sorted(set(found) - set(listed))
    changed = sorted(name for name in set(found) & set(listed) if found[name] != listed[name])
    return [f"{name} is not part of the export" for name in extra] + \
        [f"{name} changed since the export" for name in changed]


def check_output(run_dir, output, force):
    """An export goes into a new or empty folder, or with --force over an earlier export."""
    if not os.path.exists(output):
        return
    if os.path.islink(output):
        raise UserError(f"{output}: a symbolic link (to {os.path.realpath(output)}): give "
                        "--output the folder itself, or a new one")
    if not os.path.isdir(output):
        raise UserError(f"{output}: exists and is not a folder: give --output a new folder")
    entries = sorted(os.listdir(output))
    if not entries:
        return
    if not force:
        raise UserError(f"{output}: not empty ({len(entries)} entries, e.g. {entries[0]}): pass "
                        "--force to replace it with this export, or give --output a new folder")
    run, out = os.path.realpath(run_dir), os.path.realpath(output)
    if run == out or run.startswith(out + os.sep):
        raise UserError(f"{output}: holds the run directory {run_dir}, which --force would "
                        "delete: give --output a folder outside the run")
    foreign = foreign_files(output)
    if foreign:
        raise UserError(f"{output}: not wholly an earlier export ({foreign[0]}"
                        + (f", and {len(foreign) - 1} more" if len(foreign) > 1 else "")
                        + "), and --force replaces only that: give --output a new or empty folder")


def trained_length(run_dir):
    """The longest input the run saw: its experiment's max_length (task lengths are capped
    by it)."""
    return int(files.read_experiment(run_dir).get("max_length") or DEFAULTS["max_length"])


def write_export(run_dir, fmt, output, backbone, checkpoint, heads, log):
    state = {**checkpoint.trainer, "checkpoint": checkpoint.path}
    vocab = os.path.join(run_dir, files.VOCAB)
    writer = formats.module(fmt)
    if formats.FORMATS[fmt].ours:  # our preset: the run and its heads beside the backbone
        if heads:
            save_heads(output, *heads)
            heads = heads[0]
        writer.save(backbone, output, vocab, extra={
            "run": {"step": state["step"], "tasks": list(state["mixture"]["streams"]),
                    "checkpoint": relative_checkpoint(state["checkpoint"]),
                    "max_length": trained_length(run_dir)},
            "heads": list(heads) if heads else []})
        write_card(output, run_dir, state, fmt, heads)
        return
    alpha = fold_residual_alpha(backbone)
    if alpha != 1.0 and log:
        log(f"residual scale a = {alpha:.4g} (warm-up not finished): folded into the "
            "attention and FFN output kernels")
    writer.save(backbone, output, vocab, trained_length(run_dir))
    write_card(output, run_dir, state, fmt)


# --- starting a run from a backbone folder (experiment `backbone: {init: DIR}`) ---------

# Experiment backbone keys that may differ from the export's config.json (not shapes).
INIT_OVERRIDES = ("dropout", "attention_dropout", "alpha_warmup_steps", "exact_padding",
                  "rope_scaling")
SHAPE_KEYS = ("num_layers", "hidden_size", "num_heads", "intermediate_size", "head_size",
              "embedding_size", "segment_vocab_size")


head_metadata = files.head_metadata  # its home is run_dir.py; kept importable here


def init_backbone(directory, spec, source="experiment"):
    """The backbone of a folder `formats.layout` knows (`formats.loadable()`) for a new run: dims and weights from the folder; dropout and
    attention_dropout from `spec` (the experiment's backbone mapping) where it gives them;
    alpha_warmup_steps 0 unless given (the export's residual scale is kept, not warmed up
    again). preflight.plan_run has checked the experiment's dims and vocab against it."""
    overrides = {k: spec[k] for k in INIT_OVERRIDES if spec.get(k) is not None}
    overrides["alpha_warmup_steps"] = spec.get("alpha_warmup_steps") or 0
    kind = formats.layout(directory, source)
    if "rope_scaling" in overrides:  # stretched from the length the folder was trained at
        overrides["rope_scaling"] = checked_rope_scaling(
            overrides["rope_scaling"], formats.trained_length(directory, kind), source)
    return formats.load_backbone(directory, kind, **overrides)


def checked_rope_scaling(value, trained_length, source):
    """rope_scaling.normalise with the trained length filled in, as an ExperimentError."""
    try:
        return rope.normalise(value, trained_length, f"{source}: backbone.rope_scaling")
    except ValueError as error:
        raise ExperimentError(str(error)) from None


def init_heads(directory, heads, types, backbone, log=print):
    """Assign the export's head weights to the run's heads of the same task name.

    A task absent from the export starts fresh (logged); a task present with another
    type, label count or variable shape is an error naming what differs."""
    saved, weights = load_heads(directory)
    if saved is None:
        return []
    source = os.path.join(directory, HEADS_CONFIG)
    ours = head_metadata(heads, types, backbone)
    loaded = []
    for task, meta in ours.items():
        if task not in saved:
            continue
        theirs = saved[task]
        for key in ("type", "num_labels"):
            if theirs.get(key) != meta[key]:
                raise ExperimentError(f"{source}: head {task!r} has {key} {theirs.get(key)!r}, this "
                                 f"experiment's {task!r} has {meta[key]!r}: export without "
                                 "--with-heads (or rename the task) to start it fresh")
        named = files.layer_variable_names(heads[task], task)
        variables = [named[name] for name in meta["variables"]]
        if len(variables) != len(theirs["variables"]):
            raise ExperimentError(f"{source}: head {task!r} has {len(theirs['variables'])} variables, "
                             f"this experiment's {len(variables)}: its head config differs "
                             f"({theirs.get('config')} vs {meta['config']})")
        for variable, name in zip(variables, theirs["variables"]):
            value = weights[name]
            if tuple(value.shape) != tuple(variable.shape):
                raise ExperimentError(f"{source}: head {task!r} variable {name} has shape "
                                 f"{tuple(value.shape)}, this experiment's {variable.path} "
                                 f"{tuple(variable.shape)}: its head config differs "
                                 f"({theirs.get('config')} vs {meta['config']})")
            variable.assign(value)
        loaded.append(task)
    if log:
        fresh = [t for t in heads if t not in loaded]
        log(f"heads from {directory}: {', '.join(loaded) or 'none'}"
            + (f"; new: {', '.join(fresh)}" if fresh else ""))
    return loaded
