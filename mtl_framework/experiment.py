"""Experiment YAML: what to train, on which tasks, how (DESIGN.md "Public contract").

Read with yaml.safe_load; every unknown key or bad value is an error naming
the file, the key's line and the fix.
"""
import difflib
import os
from dataclasses import dataclass, field

import yaml

KEYS = {
    "backbone": dict, "task_specs": list, "data_root": str, "tasks": list, "sampling": (str, dict),
    "balancing": str, "tasks_per_update": int, "batch_size": int, "max_length": int,
    "optimizer": dict, "steps": int, "seed": int, "output_dir": str, "checkpoint_every": int,
    "keep_checkpoints": int, "eval_every": int, "vocab": str, "cache_dir": str,
    "eval_batches": int, "name": str, "distribution": str, "precision": str,
}
BACKBONE_KEYS = {"size", "vocab_size", "num_layers", "hidden_size", "num_heads", "intermediate_size",
                 "head_size", "embedding_size", "dropout", "attention_dropout",
                 "alpha_warmup_steps", "exact_padding", "checkpoint", "vocab", "init"}
SAMPLING = ("proportional", "temperature", "uniform", "fixed")
BALANCING = ("gradient_norm", "none", "loss_norm", "initial_loss")
OPTIMIZERS = ("adamw", "lamb", "adam", "sgd")
DISTRIBUTION = ("none", "mirrored", "multi_worker")
PRECISION = ("float32", "mixed_bfloat16", "mixed_float16")
DEFAULTS = dict(sampling="proportional", balancing="gradient_norm", tasks_per_update=8,
                batch_size=16, max_length=128, steps=100, seed=0, checkpoint_every=50,
                keep_checkpoints=3, eval_every=0, eval_batches=20, task_specs=[],
                distribution="none", precision="float32")


class ExperimentError(ValueError):
    pass


@dataclass
class Experiment:
    path: str
    raw: dict
    backbone: dict = field(default_factory=dict)
    tasks: list = field(default_factory=list)  # [{name, rate?, loss_weight?}]

    def __getattr__(self, key):
        if key in ("raw", "path"):
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


def _lines(path, text):
    """key -> line number (1-based) for top-level and backbone keys."""
    lines = {}
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return lines
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            lines[key.value] = key.start_mark.line + 1
            if isinstance(value, yaml.MappingNode):
                for sub, _ in value.value:
                    lines[f"{key.value}.{sub.value}"] = sub.start_mark.line + 1
    return lines


def load_experiment(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        raise ExperimentError(f"{path}:{line}: invalid YAML: {error}") from None
    if not isinstance(raw, dict):
        raise ExperimentError(f"{path}:1: an experiment is a mapping of keys (backbone, tasks, ...)")
    lines = _lines(path, text)
    errors = []

    def error(key, message):
        errors.append(f"{path}:{lines.get(key, 1)}: {message}")

    for key, value in raw.items():
        if key not in KEYS:
            hint = difflib.get_close_matches(key, KEYS, n=1)
            error(key, f"unknown key {key!r}" + (f" (did you mean {hint[0]!r}?)" if hint else
                                                 f"; known keys: {', '.join(sorted(KEYS))}"))
        elif not isinstance(value, KEYS[key]) or (KEYS[key] is int and isinstance(value, bool)):
            error(key, f"{key} must be {_type_name(KEYS[key])}, got {value!r}")
    if "tasks" not in raw or not raw.get("tasks"):
        error("tasks", "tasks: list the task names to train (see `mtl tasks list`)")
    backbone = raw.get("backbone") or {}
    if isinstance(backbone, dict):
        for key in backbone:
            if key not in BACKBONE_KEYS:
                hint = difflib.get_close_matches(key, BACKBONE_KEYS, n=1)
                error(f"backbone.{key}", f"unknown backbone key {key!r}"
                      + (f" (did you mean {hint[0]!r}?)" if hint else ""))
    for key, choices in (("balancing", BALANCING), ("distribution", DISTRIBUTION),
                         ("precision", PRECISION)):
        if key in raw and raw[key] not in choices:
            error(key, f"{key} must be one of {choices}, got {raw[key]!r}")
    sampling = raw.get("sampling", DEFAULTS["sampling"])
    method = sampling.get("method") if isinstance(sampling, dict) else sampling
    if method not in SAMPLING:
        error("sampling", f"sampling must be one of {SAMPLING} (or {{method: ..., temperature: ..., "
                          f"cap: ...}}), got {method!r}")
    optimizer = raw.get("optimizer", {"name": "adamw"})
    if isinstance(optimizer, dict) and optimizer.get("name", "adamw") not in OPTIMIZERS:
        error("optimizer", f"optimizer.name must be one of {OPTIMIZERS}, got {optimizer.get('name')!r}")
    for key in ("tasks_per_update", "batch_size", "max_length", "steps"):
        if isinstance(raw.get(key), int) and raw[key] < 1:
            error(key, f"{key} must be >= 1, got {raw[key]}")
    tasks = []
    for i, entry in enumerate(raw.get("tasks") or []):
        if isinstance(entry, str):
            tasks.append({"name": entry})
        elif isinstance(entry, dict) and isinstance(entry.get("name"), str) and \
                set(entry) <= {"name", "rate", "loss_weight"}:
            tasks.append(dict(entry))
        else:
            error("tasks", f"tasks[{i}] must be a task name or {{name, rate, loss_weight}}, got {entry!r}")
    if errors:
        raise ExperimentError("\n".join(errors))
    return Experiment(path=path, raw=raw, backbone=dict(backbone), tasks=tasks)


def _type_name(kind):
    names = {dict: "a mapping", list: "a list", str: "a string", int: "an integer"}
    if isinstance(kind, tuple):
        return " or ".join(names[k] for k in kind)
    return names[kind]
