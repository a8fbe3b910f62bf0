"""The assembler: a backbone, its task heads and, to train, the optimizer, put together
in one place for train, resume, evaluate, predict, export and finetune.

    backbone = experiment_backbone(experiment, vocab_size)   # new, or from init:/checkpoint:
    heads = task_heads(experiment, tasks, backbone, data_root, mlm=True)
    model = training_model(experiment, backbone, heads, loss_weights, log)
    load_state(model, checkpoint)                 # resume: model, optimizer and balancing state

A backbone comes from one of three places: the experiment's `backbone:` mapping (new), a
backbone folder the experiment names (`init:` / `checkpoint:`, any format
`architectures.layout` knows), or a checkpoint's own config (a trained run). Heads are
built new from task specs, or rebuilt from saved metadata and given their weights with
one set of checks (`assign_heads`). Nothing here reads a run's files: a trained model
is opened by `mtl_framework.saving` (which builds it with these functions).
"""
import os

from mtl_framework import architectures
from mtl_framework.architectures import rope_scaling as rope
from mtl_framework.config.experiment import STEP_BACKBONE_KEYS, ExperimentError
from mtl_framework.errors import UserError
from mtl_framework.families import MLM, family
from mtl_framework.families.heads import build_head, task_head
from mtl_framework.formats import keras as preset
from mtl_framework.mixing.balancing import Balancing, BalancingError
from mtl_framework.mixing.balancing import describe as describe_balancing
from mtl_framework.plan import INIT_OVERRIDES, MLM_TASK
from mtl_framework.step.distributed import precision_policy
from mtl_framework.step.model import TEXTS_ALONE, MultiTaskModel
from mtl_framework.step.optimizers import build_optimizer
from mtl_framework.step.variable_names import head_config, layer_variable_names

# --- backbones --------------------------------------------------------------------------

def experiment_backbone(experiment, vocab_size):
    """The experiment's backbone, built at its precision: from a backbone folder (`init`
    or `checkpoint`: dims and weights from it, dropout from the experiment), or new with
    `vocab_size` rows. plan.py has checked the vocab fits the folder's embedding."""
    spec = dict(experiment.backbone)
    folder = spec.get("init") or spec.get("checkpoint")
    with precision_policy(experiment.precision):
        if folder:
            backbone = folder_backbone(experiment.resolve_path(folder), spec, experiment.path)
        else:
            backbone = new_backbone(spec, vocab_size, experiment.max_length,
                                    experiment.where("backbone", "rope_scaling"))
    backbone.build()
    return backbone


def new_backbone(spec, vocab_size, max_length, where):
    """A new backbone of the experiment's `backbone:` mapping (architecture, size, dims);
    rope_scaling stretches from the length it is trained at, the experiment's max_length."""
    spec = {k: v for k, v in spec.items()
            if k not in ("vocab", "init", "checkpoint", *STEP_BACKBONE_KEYS)}
    size = spec.pop("size", None)
    spec["vocab_size"] = vocab_size
    if spec.get("rope_scaling"):
        spec["rope_scaling"] = checked_rope_scaling(spec["rope_scaling"], max_length, where)
    return architectures.build_backbone(
        architectures.backbone_config(spec.pop("architecture", None), size, **spec))


def folder_backbone(directory, spec, source="experiment"):
    """The backbone of a folder `architectures.layout` knows (`formats.loadable()`) for a
    new run: dims and weights from the folder; dropout and attention_dropout from `spec`
    (the experiment's backbone mapping) where it gives them; alpha_warmup_steps 0 unless
    given (the folder's residual scale is kept, not warmed up again)."""
    overrides = {k: spec[k] for k in INIT_OVERRIDES if spec.get(k) is not None}
    overrides["alpha_warmup_steps"] = spec.get("alpha_warmup_steps") or 0
    return architectures.load_folder(directory, source, **overrides)


def checkpoint_backbone(checkpoint, **overrides):
    """The backbone of a run_dir.Checkpoint, built from its config (`overrides` replace
    keys that are not shapes: rope_scaling), weights by name."""
    backbone = architectures.build_backbone({**checkpoint.trainer["backbone"], **overrides})
    backbone.build()
    named = layer_variable_names(backbone, "backbone")
    for name, value in checkpoint.backbone_arrays(list(named)).items():
        named[name].assign(value)
    return backbone


def checked_rope_scaling(value, trained_length, source):
    """rope_scaling.normalise with the trained length filled in, as an ExperimentError."""
    try:
        return rope.normalise(value, trained_length, f"{source}: backbone.rope_scaling")
    except ValueError as error:
        raise ExperimentError(str(error)) from None


# --- heads ------------------------------------------------------------------------------

def task_heads(experiment, tasks, backbone, data_root, mlm=False, log=print):
    """{task: new head} for the run's TaskSpecs (labels resolved from `data_root`), and
    the reserved mlm task's head, tied to the token embedding, when `mlm`; built at the
    experiment's precision. A backbone folder's `--with-heads` heads of the same task
    names are given their weights (`init_heads`)."""
    hidden, layers = backbone.config["hidden_size"], backbone.config["num_layers"]
    heads = {}
    with precision_policy(experiment.precision):
        for task in tasks:
            labels = task.resolve_labels(data_root) if task.labels or task.label_file else None
            heads[task.name] = task_head(task, labels, hidden, num_layers=layers)
        if mlm:
            heads[MLM_TASK] = build_head(MLM, backbone.config["vocab_size"], hidden,
                                         name=MLM_TASK, embeddings=backbone.token_embedding)
    folder = experiment.backbone.get("init")
    if folder:  # heads of same-named tasks from a --with-heads export
        init_heads(experiment.resolve_path(folder), heads, backbone, log)
    return heads


def saved_heads(saved, weights, backbone, source, scored_only=False):
    """{task: head} built from heads metadata (trainer.json's or heads.json's) with its
    saved weights; `scored_only` leaves out heads with no task outputs (mlm)."""
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
        variables = [v for v in layer_variable_names(head, task).values()
                     if id(v) not in shared]
        if len(variables) != len(theirs["variables"]):
            raise UserError(f"{source}: head {task!r} has {len(theirs['variables'])} variables, "
                            f"a {theirs['type']} head built from this config has "
                            f"{len(variables)}: its head config differs "
                            f"({theirs.get('config')} vs {head_config(head)})")
        for variable, name in zip(variables, theirs["variables"]):
            if name not in weights:
                raise UserError(f"{source}: head {task!r} lists variable {name!r}, which its "
                                "weights do not hold")
            value = weights[name]
            if tuple(value.shape) != tuple(variable.shape):
                raise UserError(f"{source}: head {task!r} variable {name} has shape "
                                f"{tuple(value.shape)}, this model's {variable.path} "
                                f"{tuple(variable.shape)}: its head config differs "
                                f"({theirs.get('config')} vs {head_config(head)})")
            variable.assign(value)
        loaded.append(task)
    return loaded


def init_heads(directory, heads, backbone, log=print):
    """Give the run's heads the export's head weights of the same task name. A task
    absent from the export starts fresh (logged); one present with another type, label
    count or variable shape is an error naming what differs."""
    saved, weights = preset.load_heads(directory)
    if saved is None:
        return []
    loaded = assign_heads(heads, saved, weights, backbone,
                          os.path.join(directory, preset.HEADS_CONFIG),
                          remedy=": export without --with-heads (or rename the task) to start "
                                 "it fresh")
    if log:
        fresh = [t for t in heads if t not in loaded]
        log(f"heads from {directory}: {', '.join(loaded) or 'none'}"
            + (f"; new: {', '.join(fresh)}" if fresh else ""))
    return loaded


# --- models -----------------------------------------------------------------------------

def check_balancing_memory(experiment, backbone, task_names):
    """pcgrad keeps one gradient per task of an update: refused before any feature is
    built when that exceeds its budget (docs/balancing.md)."""
    try:
        Balancing(experiment.balancing, task_names, experiment.seed).check_memory(
            backbone.trainable_variables, experiment.tasks_per_update)
    except BalancingError as error:
        raise UserError(f"{experiment.where('balancing')}: {error}") from None


def training_model(experiment, backbone, heads, loss_weights, log=print):
    """The MultiTaskModel a run trains: the experiment's balancing, loss scaling
    (mixed_float16: dynamic), packing (backbone.packed, on unless false) and optimizer,
    every variable built (nothing is created inside a traced step)."""
    model = MultiTaskModel(backbone, heads, experiment.tasks_per_update, experiment.balancing,
                           loss_weights, loss_scale="dynamic"
                           if experiment.precision == "mixed_float16" else None,
                           seed=experiment.seed, packed=experiment.backbone.get("packed", True))
    model.compile(optimizer=build_optimizer(experiment.raw.get("optimizer"), experiment.steps))
    if log:
        log(describe_balancing(experiment.balancing))
    try:
        model.build_all()
    except BalancingError as error:  # pcgrad over its memory budget: before any write
        raise UserError(f"{experiment.where('balancing')}: {error}") from None
    return model


def resumed_packing(experiment, trainer):
    """MultiTaskModel's `packed` for a run resuming from a checkpoint whose trainer record is
    `trainer`: the experiment's backbone.packed where it says; else what the checkpoint
    recorded; a checkpoint written before the option recorded nothing and resumes with the
    step of its time, the contrastive passes packed and every other family padded (bit for
    bit: tests/test_run_dir.py's format-1 run)."""
    if "packed" in experiment.backbone:
        return experiment.backbone["packed"]
    return trainer.get("packed", TEXTS_ALONE)


def prediction_model(backbone, heads, tasks_per_update=8):
    """A MultiTaskModel that predicts (traced forward passes) and is never trained: no
    balancing state, and an SGD optimizer, which holds no variables (build_all builds the
    optimizer it is compiled with)."""
    model = MultiTaskModel(backbone, heads, tasks_per_update, "none")
    model.compile(optimizer="sgd")
    model.build_all()
    return model


def load_state(model, checkpoint):
    """Every variable of a training model (backbone, heads, optimizer, balancing and
    loss-scale state) from a checkpoint, by name: an exact resume. A checkpoint of
    another model is a UserError naming the first difference."""
    named = model.named_state_variables
    values, mismatch = checkpoint.in_order(list(named))
    if mismatch:
        raise UserError(f"{checkpoint.path}: {mismatch}: was the experiment changed since? "
                        "Resume with the run's own experiment.yaml, or train into a new "
                        "--output")
    for name, variable in named.items():
        variable.assign(values[name])
