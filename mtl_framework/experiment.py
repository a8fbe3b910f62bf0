"""Experiment YAML: what to train, on which tasks, how (the keys: README "Commands", docs/architecture.md).

Read with the one YAML loader (yaml_io: a key given twice is an error). Every
unknown key, wrong type and impossible value (`lr: fast`, `keep_checkpoints:
0`, hidden_size not divisible by num_heads) is reported at once, each problem
as `file:line: message`, before anything is built or written. Checks that need
other files (task specs, data, vocab, the run directory) are in preflight.py.
Nothing here imports TensorFlow.
"""
import difflib
import os
from dataclasses import dataclass, field

from mtl_framework.errors import UserError
from mtl_framework import balancing, mixture
from mtl_framework.presets import PRESETS, backbone_config
from mtl_framework.yaml_io import YamlDocument, load_yaml

KEYS = {
    "backbone": dict, "task_specs": list, "data_root": str, "tasks": list, "sampling": (str, dict),
    "balancing": (str, dict), "tasks_per_update": int, "batch_size": int, "max_length": int,
    "optimizer": dict, "steps": int, "seed": int, "output_dir": str, "checkpoint_every": int,
    "keep_checkpoints": int, "eval_every": int, "vocab": str, "cache_dir": str,
    "eval_batches": int, "name": str, "distribution": str, "precision": str,
}
# Smallest value of each integer key. max_length 4: [CLS] + one token each side + [SEP].
MINIMUM = {"tasks_per_update": 1, "batch_size": 1, "max_length": 4, "steps": 1, "seed": 0,
           "checkpoint_every": 0, "keep_checkpoints": 1, "eval_every": 0, "eval_batches": 1}
BACKBONE_KEYS = {"size", "vocab_size", "num_layers", "hidden_size", "num_heads", "intermediate_size",
                 "head_size", "embedding_size", "dropout", "attention_dropout",
                 "alpha_warmup_steps", "exact_padding", "checkpoint", "vocab", "init"}
# backbone integers and their smallest values (a vocab needs room beside its 5 special tokens).
BACKBONE_MINIMUM = {"vocab_size": 6, "num_layers": 1, "hidden_size": 1, "num_heads": 1,
                    "intermediate_size": 1, "head_size": 2, "embedding_size": 1,
                    "alpha_warmup_steps": 0}
BACKBONE_PATHS = ("checkpoint", "init", "vocab")
SAMPLING = mixture.METHODS + (mixture.ANNEAL,)
SAMPLING_KEYS = ("method",) + mixture.OPTIONS + mixture.ANNEAL_KEYS
# Loss balancing: names and keys come from the one table, balancing.METHODS.
BALANCING = tuple(balancing.NAMES)
OPTIMIZERS = ("adamw", "lamb", "adam", "sgd")
# What build_optimizer reads (schedule) plus each Keras optimizer's own arguments.
OPTIMIZER_KEYS = {
    "adamw": ("weight_decay", "beta_1", "beta_2", "epsilon", "amsgrad"),
    "adam": ("beta_1", "beta_2", "epsilon", "amsgrad"),
    "lamb": ("beta_1", "beta_2", "epsilon"),
    "sgd": ("momentum", "nesterov"),
}
SCHEDULE_KEYS = ("name", "lr", "warmup_steps", "final_lr_fraction", "clipnorm", "global_clipnorm",
                 "clipvalue")
DISTRIBUTION = ("none", "mirrored", "multi_worker")
PRECISION = ("float32", "mixed_bfloat16", "mixed_float16")
DEFAULTS = dict(sampling="proportional", balancing="gradient_norm", tasks_per_update=8,
                batch_size=16, max_length=128, steps=100, seed=0, checkpoint_every=50,
                keep_checkpoints=3, eval_every=0, eval_batches=20, task_specs=[],
                distribution="none", precision="float32")


class ExperimentError(UserError, ValueError):
    """A problem in an experiment file: each line `file:line: message`."""


@dataclass
class Experiment:
    path: str
    raw: dict
    backbone: dict = field(default_factory=dict)
    tasks: list = field(default_factory=list)  # [{name, rate?, loss_weight?}]
    doc: YamlDocument = None  # the lines of every key, for messages

    def __getattr__(self, key):
        if key in ("raw", "path", "doc"):
            raise AttributeError(key)
        if key in self.raw:
            return self.raw[key]
        if key in DEFAULTS:
            return DEFAULTS[key]
        raise AttributeError(key)

    def resolve_path(self, value):
        """Paths in an experiment are relative to the experiment file's folder."""
        if value is None or os.path.isabs(value):
            return value
        return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(self.path)), value))

    def where(self, *key):
        """`file:line` of a key path, e.g. where("optimizer", "lr"), to start a message."""
        return self.doc.where(*key) if self.doc else f"{self.path}:1"


def load_experiment(path):
    """The experiment in `path`, or ExperimentError listing every problem found."""
    try:
        doc = load_yaml(path)
    except UserError as error:
        raise ExperimentError(str(error)) from None
    raw = doc.data if doc.data is not None else {}
    if not isinstance(raw, dict):
        raise ExperimentError(f"{path}:1: an experiment is a mapping of keys (backbone, tasks, ...)")
    errors = []

    def error(where, message):
        where = where if isinstance(where, tuple) else (where,)
        errors.append(f"{doc.where(*where)}: {message}")

    for key, value in raw.items():
        if key not in KEYS:
            hint = difflib.get_close_matches(str(key), KEYS, n=1)
            error(key, f"unknown key {key!r}" + (f" (did you mean {hint[0]!r}?)" if hint else
                                                 f"; known keys: {', '.join(sorted(KEYS))}"))
        elif not isinstance(value, KEYS[key]) or (KEYS[key] is int and isinstance(value, bool)):
            error(key, f"{key} must be {_type_name(KEYS[key])}, got {value!r}")
        elif key in MINIMUM and value < MINIMUM[key]:
            error(key, f"{key} must be >= {MINIMUM[key]}, got {value}")
    if not raw.get("tasks"):
        error("tasks", "tasks: list the task names to train (see `mtl tasks list`)")
    _check_balancing(raw, error)
    for key, choices in (("distribution", DISTRIBUTION),
                         ("precision", PRECISION)):
        if isinstance(raw.get(key), str) and raw[key] not in choices:
            error(key, f"{key} must be one of {', '.join(choices)}, got {raw[key]!r}")
    for key in ("task_specs",):
        if isinstance(raw.get(key), list) and not all(isinstance(p, str) for p in raw[key]):
            error(key, f"{key} must be a list of folder paths")
    backbone = raw.get("backbone") if isinstance(raw.get("backbone"), dict) else {}
    _check_backbone(backbone, error)
    _check_sampling(raw.get("sampling", DEFAULTS["sampling"]), error)
    if isinstance(raw.get("optimizer"), dict):
        _check_optimizer(raw["optimizer"], error)
    tasks = _check_tasks(raw.get("tasks") if isinstance(raw.get("tasks"), list) else [], error)
    if errors:
        raise ExperimentError("\n".join(errors))
    return Experiment(path=path, raw=raw, backbone=dict(backbone), tasks=tasks, doc=doc)


def _check_backbone(backbone, error):
    for key, value in backbone.items():
        where = ("backbone", key)
        if key not in BACKBONE_KEYS:
            hint = difflib.get_close_matches(str(key), BACKBONE_KEYS, n=1)
            known = f" (did you mean {hint[0]!r}?)" if hint else \
                f"; known: {', '.join(sorted(BACKBONE_KEYS))}"
            error(where, f"unknown backbone key {key!r}{known}")
        elif key in BACKBONE_MINIMUM:
            if not _is_int(value) or value < BACKBONE_MINIMUM[key]:
                error(where, f"backbone.{key} must be an integer >= {BACKBONE_MINIMUM[key]}, "
                             f"got {value!r}")
        elif key in ("dropout", "attention_dropout"):
            number = _number(value)
            if number is None or not 0 <= number < 1:
                error(where, f"backbone.{key} must be a number in [0, 1), got {value!r}")
            else:
                backbone[key] = number
        elif key == "exact_padding":
            if value not in (None, True, False):
                error(where, f"backbone.exact_padding must be true, false or null (auto), "
                             f"got {value!r}")
        elif key in BACKBONE_PATHS or key == "size":
            if not isinstance(value, str) or not value:
                error(where, f"backbone.{key} must be a " + ("size name" if key == "size" else "path")
                      + f", got {value!r}")
        if key == "size" and isinstance(value, str) and value not in PRESETS:
            error(where, f"backbone.size must be one of {', '.join(PRESETS)} (or give num_layers, "
                         f"hidden_size and num_heads), got {value!r}")
    if backbone.get("checkpoint") and backbone.get("init"):
        error(("backbone", "init"), "backbone has both checkpoint and init: keep one")
    if backbone.get("checkpoint") or backbone.get("init"):
        return  # the dims come from the checkpoint's config (compared in preflight)
    dims = {k: v for k, v in backbone.items() if k in BACKBONE_MINIMUM}
    if any(not _is_int(v) or v < BACKBONE_MINIMUM[k] for k, v in dims.items()) or \
            backbone.get("size") not in (None, *PRESETS) or set(backbone) - BACKBONE_KEYS:
        return  # already reported
    try:
        backbone_config(backbone.get("size"), **dims)
    except ValueError as problem:
        key = next((k for k in ("num_heads", "head_size", "hidden_size") if k in backbone), None)
        error(("backbone", key) if key else ("backbone",), f"backbone: {problem}")


def _check_balancing(raw, error):
    value = raw.get("balancing")
    if not isinstance(value, (str, dict)):
        return  # absent (the default), or a wrong type already reported
    try:
        balancing.resolve(value)
    except balancing.BalancingError as problem:
        error(("balancing", problem.key) if problem.key else ("balancing",), str(problem))


def _check_sampling(sampling, error):
    if isinstance(sampling, dict):
        for key, value in sampling.items():
            if key not in SAMPLING_KEYS:
                error(("sampling", key), f"unknown sampling key {key!r}; known: "
                                         f"{', '.join(SAMPLING_KEYS)}")
            elif key in mixture.OPTIONS:
                number = _number(value)
                if number is None or number <= 0:
                    error(("sampling", key), f"sampling.{key} must be a number > 0, got {value!r}")
                else:
                    sampling[key] = number
            elif key in ("from", "to") and value not in mixture.METHODS:
                error(("sampling", key), f"sampling.{key} must be one of "
                                         f"{', '.join(mixture.METHODS)}, got {value!r}")
            elif key == "over" and (not _is_int(value) or value < 1):
                error(("sampling", key), f"sampling.over must be a number of updates >= 1, "
                                         f"got {value!r}")
        method = sampling.get("method", DEFAULTS["sampling"])
        stray = [k for k in mixture.ANNEAL_KEYS if k in sampling]
        if method != mixture.ANNEAL and stray and method in SAMPLING:
            error(("sampling", stray[0]), f"sampling.{stray[0]} is for method: anneal "
                                          f"(this sampling's method is {method!r})")
        if method == mixture.ANNEAL and "over" not in sampling:
            error(("sampling", "method"), "sampling method anneal needs `over: N` (updates)")
    else:
        method = sampling
        if method == mixture.ANNEAL:
            error(("sampling",), "sampling: anneal is a mapping: {method: anneal, from: "
                                 "proportional, to: uniform, over: N}")
    if isinstance(sampling, (str, dict)) and method not in SAMPLING:
        where = ("sampling", "method") if isinstance(sampling, dict) else ("sampling",)
        keys = ", ".join(f"{key}: ..." for key in SAMPLING_KEYS)
        error(where, f"sampling must be one of {', '.join(SAMPLING)} (or {{{keys}}}), "
                     f"got {method!r}")


def _check_optimizer(optimizer, error):
    name = optimizer.get("name", "adamw")
    if name not in OPTIMIZERS:
        error(("optimizer", "name"), f"optimizer.name must be one of {', '.join(OPTIMIZERS)}, "
                                     f"got {name!r}")
        return
    known = SCHEDULE_KEYS + OPTIMIZER_KEYS[name]
    # (key, test, what it must be); numbers written 1e-3 are strings in YAML 1.1: accepted.
    rules = {
        "lr": (lambda x: x >= 0, "a number >= 0"),  # 0: the weights stay as they start
        "final_lr_fraction": (lambda x: 0 <= x <= 1, "a number in [0, 1]"),
        "weight_decay": (lambda x: x >= 0, "a number >= 0"),
        "clipnorm": (lambda x: x > 0, "a number > 0"),
        "global_clipnorm": (lambda x: x > 0, "a number > 0"),
        "clipvalue": (lambda x: x > 0, "a number > 0"),
        "beta_1": (lambda x: 0 <= x < 1, "a number in [0, 1)"),
        "beta_2": (lambda x: 0 <= x < 1, "a number in [0, 1)"),
        "epsilon": (lambda x: x > 0, "a number > 0"),
        "momentum": (lambda x: 0 <= x < 1, "a number in [0, 1)"),
    }
    for key, value in optimizer.items():
        where = ("optimizer", key)
        if key not in known:
            error(where, f"optimizer {name} has no setting {key!r}; it takes: {', '.join(known)}")
        elif key == "warmup_steps":
            if not _is_int(value) or value < 0:
                error(where, f"optimizer.warmup_steps must be an integer >= 0, got {value!r}")
        elif key in ("amsgrad", "nesterov"):
            if not isinstance(value, bool):
                error(where, f"optimizer.{key} must be true or false, got {value!r}")
        elif key in rules:
            test, wanted = rules[key]
            number = _number(value)
            if number is None or not test(number):
                error(where, f"optimizer.{key} must be {wanted}, got {value!r}")
            else:
                optimizer[key] = number


TASK_ENTRY_KEYS = {"name", "rate", "loss_weight"}
MLM_TASK = "mlm"  # reserved task name: masked-LM over the mixture's own training texts
MLM_ENTRY_KEYS = TASK_ENTRY_KEYS | {"corpus", "whole_word", "mask_rate"}  # the mlm entry's own
MLM_CHECKS = {
    "corpus": (lambda v: isinstance(v, str) and bool(v),
               "a path: a text file or a folder of them, one document per line, relative to "
               "this file"),
    "whole_word": (lambda v: isinstance(v, bool), "true or false"),
    "mask_rate": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1,
                  "a number between 0 and 1"),
}


def _check_tasks(entries, error):
    tasks, seen = [], {}
    for i, entry in enumerate(entries):
        where = ("tasks", i)
        if isinstance(entry, str):
            entry = {"name": entry}
        elif not (isinstance(entry, dict) and isinstance(entry.get("name"), str)
                  and set(entry) <= (MLM_ENTRY_KEYS if entry["name"] == MLM_TASK
                                     else TASK_ENTRY_KEYS)):
            error(where, f"tasks[{i}] must be a task name or {{name, rate, loss_weight}} "
                         f"(mlm also: corpus, whole_word, mask_rate), got {entry!r}")
            continue
        entry = dict(entry)
        name = entry["name"]
        for key, (valid, expected) in MLM_CHECKS.items():
            if key in entry and not valid(entry[key]):
                error(where + (key,), f"tasks[{i}] (mlm): {key} must be {expected}, "
                                      f"got {entry[key]!r}")
        if name in seen:
            error(where, f"task {name!r} listed twice (also tasks[{seen[name]}]); keep one")
        seen.setdefault(name, i)
        for key, test, wanted in (("rate", lambda x: 0 < x <= 1, "a number in (0, 1]"),
                                  ("loss_weight", lambda x: x > 0, "a number > 0")):
            if key in entry:
                number = _number(entry[key])
                if number is None or not test(number):
                    error(where + (key,), f"task {name!r}: {key} must be {wanted}, "
                                          f"got {entry[key]!r}")
                else:
                    entry[key] = number
        tasks.append(entry)
    return tasks


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value):
    """A finite float from an int, a float or a numeric string (YAML 1.1 reads `1e-3`
    as a string), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, (int, float)) and value == value and abs(value) != float("inf"):
        return float(value) if isinstance(value, float) else value
    return None


def _type_name(kind):
    names = {dict: "a mapping", list: "a list", str: "a string", int: "an integer"}
    if isinstance(kind, tuple):
        return " or ".join(names[k] for k in kind)
    return names[kind]
