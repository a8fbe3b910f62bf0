"""Experiment YAML: what to train, on which tasks, how (the keys: README "Commands", docs/architecture.md).

    Experiment.from_yaml("experiments/demo.yaml", overrides=["optimizer.lr=1e-4"])
    Experiment.from_dict({"tasks": ["tnews"], ...}, folder=".")

A file may start from another: `extends: base.yaml` (relative to the file;
chains allowed, a cycle is refused). Later values win; mappings are merged key
by key, anything else (a list, a string) is replaced whole; paths keep meaning
what they meant in the file that wrote them. `--set KEY.SUB=VALUE` overrides
(values read as YAML) are applied last, before validation; a problem in a value
names the `--set` it came from, or the `file:line` that wrote it.

Read with the one YAML loader (yaml_io: a key given twice is an error). Every
unknown key, wrong type and impossible value (`lr: fast`, `keep_checkpoints:
0`, hidden_size not divisible by num_heads) is reported at once, each problem
as `file:line: message`, before anything is built or written. Checks that need
other files (task specs, data, vocab, the run directory) are in plan.py.
Nothing here imports TensorFlow.
"""
from __future__ import annotations

import copy
import difflib
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mtl_framework import architectures
from mtl_framework.architectures import rope_scaling
from mtl_framework.config.yaml_io import load_yaml, parse_yaml, yaml_number
from mtl_framework.errors import UserError
from mtl_framework.mixing import balancing, mixture

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any

KEYS = {
    "backbone": dict, "task_specs": list, "data_root": str, "tasks": list, "sampling": (str, dict),
    "balancing": (str, dict), "tasks_per_update": int, "batch_size": int, "max_length": int,
    "optimizer": dict, "steps": int, "seed": int, "output_dir": str, "checkpoint_every": int,
    "keep_checkpoints": int, "eval_every": int, "vocab": str, "cache_dir": str,
    "eval_batches": int, "name": str, "distribution": str, "precision": str,
    "keep_best": dict, "patience": int,
}
# Smallest value of each integer key. max_length 4: [CLS] + one token each side + [SEP].
MINIMUM = {"tasks_per_update": 1, "batch_size": 1, "max_length": 4, "steps": 1, "seed": 0,
           "checkpoint_every": 0, "keep_checkpoints": 1, "eval_every": 0, "eval_batches": 1,
           "patience": 1}
# Largest value of an integer key: numpy's seeds are 32-bit (a larger one failed only
# after earlier seeds of a suite had run); past the others' values are typos that fail
# only deep in the work (an int64 overflow, memory for one batch).
MAXIMUM = {"seed": 2**32 - 1, "steps": 10**9, "batch_size": 65536, "max_length": 65536,
           "tasks_per_update": 1024}
# The longest `extends` chain read (a longer one is a generated mistake, not a design).
MAX_EXTENDS = 64
# keep_best: which dev score picks the best checkpoint (also the one `patience` watches).
KEEP_BEST_KEYS = {"metric": "aggregate", "mode": "max"}
KEEP_BEST_MODES = ("max", "min")
EXTENDS = "extends"
# Values that are paths relative to the file that wrote them: (key path), "*" = every item.
PATH_VALUES = (("data_root",), ("cache_dir",), ("vocab",), ("output_dir",), ("task_specs", "*"),
               ("backbone", "vocab"), ("backbone", "checkpoint"), ("backbone", "init"),
               ("tasks", "*", "corpus"))
BACKBONE_KEYS = {"size", "vocab_size", "num_layers", "hidden_size", "num_heads", "intermediate_size",
                 "head_size", "embedding_size", "dropout", "attention_dropout",
                 "alpha_warmup_steps", "exact_padding", "checkpoint", "vocab", "init",
                 "rope_scaling", "architecture", "max_positions", "activation", "packed"}
# backbone keys the training step reads, not the backbone's own config (never exported):
# packed, whether the step runs the backbone on the real tokens alone (docs/backbone.md).
STEP_BACKBONE_KEYS = ("packed",)
# backbone integers and their smallest values (a vocab needs room beside its 5 special tokens).
BACKBONE_MINIMUM = {"vocab_size": 6, "num_layers": 1, "hidden_size": 1, "num_heads": 1,
                    "intermediate_size": 1, "head_size": 2, "embedding_size": 1,
                    "alpha_warmup_steps": 0, "max_positions": 1}
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
PRECISION = ("float32", "mixed_bfloat16", "mixed_float16", "auto")
DEFAULTS = dict(sampling="proportional", balancing="gradient_norm", tasks_per_update=8,
                batch_size=16, max_length=128, steps=100, seed=0, checkpoint_every=50,
                keep_checkpoints=3, eval_every=0, eval_batches=20, task_specs=[],
                distribution="none", precision="auto")
# The precision of an experiment that names none, instead of DEFAULTS' (e.g. float32 on a
# cluster whose CPUs differ, or for a test suite that must give the same numbers on all).
PRECISION_ENV = "MTL_PRECISION"


def default_precision():
    """An experiment's precision when it names none: $MTL_PRECISION, else `auto`."""
    value = os.environ.get(PRECISION_ENV) or DEFAULTS["precision"]
    if value not in PRECISION:
        raise ExperimentError(f"{PRECISION_ENV}={value!r}: must be one of {', '.join(PRECISION)}; "
                              f"set one of those or unset {PRECISION_ENV}")
    return value


# Experiment keys holding paths relative to the experiment file; the run directory's
# copy stores them absolute so `mtl evaluate RUN_DIR` can rebuild the run from anywhere.
PATH_KEYS = ("data_root", "cache_dir", "vocab")
BACKBONE_PATH_KEYS = ("vocab", "checkpoint", "init")


class ExperimentError(UserError, ValueError):
    """A problem in an experiment file: each line `file:line: message`."""


@dataclass
class Experiment:
    path: str  # the file (or, from a dict, a label for messages)
    raw: dict
    backbone: dict = field(default_factory=dict)
    tasks: list = field(default_factory=list)  # [{name, rate?, loss_weight?}]
    doc: object = None  # Sources: where every key came from, for messages
    folder: str | None = None  # relative paths start here; default: the file's folder

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str], overrides: Iterable[str] = ()) -> Experiment:
        """The experiment in `path` (its `extends` chain merged, then `overrides`:
        "key.sub=value" strings), checked; ExperimentError lists every problem."""
        return load_experiment(path, overrides)

    @classmethod
    def from_dict(cls, config: Mapping[str, Any], folder: str | None = None,
                  overrides: Iterable[str] = (), label: str = "Experiment.from_dict") -> Experiment:
        """An experiment from a mapping (what the YAML would hold), checked exactly as a
        file is; messages name the key (`Experiment.from_dict optimizer.lr: ...`).
        Relative paths (and `extends`) start at `folder` (default: the working folder)."""
        if not isinstance(config, dict):
            raise ExperimentError(f"{label}: an experiment is a mapping of keys (backbone, "
                                  f"tasks, ...), got {type(config).__name__}")
        folder = os.path.abspath(folder or os.getcwd())
        sources = Sources(label)
        raw = copy.deepcopy(config)
        if EXTENDS in raw:
            raw = _extend(raw, os.path.join(folder, label), sources, (), _DictKeys(label))
        _apply_overrides(raw, overrides, sources)
        return _checked(raw, sources, label, folder)

    @property
    def stem(self):
        """The default run directory's name: the file's name, or the experiment's `name`."""
        if self.folder and not os.path.isfile(self.path):
            return self.raw.get("name") or "experiment"
        return os.path.splitext(os.path.basename(self.path))[0]

    def __getattr__(self, key):
        if key in ("raw", "path", "doc", "folder"):
            raise AttributeError(key)
        if key in self.raw:
            return self.raw[key]
        if key == "precision":
            return default_precision()
        if key in DEFAULTS:
            return DEFAULTS[key]
        raise AttributeError(key)

    def resolve_path(self, value):
        """Paths in an experiment are relative to the experiment file's folder."""
        if value is None or os.path.isabs(value):
            return value
        folder = self.folder or os.path.dirname(os.path.abspath(self.path))
        return os.path.normpath(os.path.join(folder, value))

    def where(self, *key):
        """`file:line` of a key path, e.g. where("optimizer", "lr"), to start a message
        (or the `--set` that gave it, or `Experiment.from_dict optimizer.lr`)."""
        return self.doc.where(*key) if self.doc else f"{self.path}:1"

    def data_root_path(self, data_root=None):
        """(the data root a run would read, what named it), unchecked."""
        if data_root:
            return data_root, "--data-root"
        if self.raw.get("data_root"):
            return self.resolve_path(self.raw["data_root"]), f"{self.where('data_root')}: data_root"
        if "MTL_DATA_ROOT" in os.environ:
            return os.environ["MTL_DATA_ROOT"], "$MTL_DATA_ROOT"
        return "data", f"{self.path}: no data_root given, and the default"

    def resolved(self, data_root):
        """The experiment as the run directory keeps it: every path absolute."""
        raw = {**self.raw, "data_root": os.path.abspath(data_root)}
        for key in PATH_KEYS:
            if raw.get(key):
                raw[key] = self.resolve_path(raw[key])
        raw["tasks"] = [{**t, "corpus": self.resolve_path(t["corpus"])}
                        if isinstance(t, dict) and t.get("corpus") else t for t in raw["tasks"]]
        if raw.get("task_specs"):
            raw["task_specs"] = [self.resolve_path(d) for d in raw["task_specs"]]
        if isinstance(raw.get("backbone"), dict):
            raw["backbone"] = dict(raw["backbone"])
            for key in BACKBONE_PATH_KEYS:
                if raw["backbone"].get(key):
                    raw["backbone"][key] = self.resolve_path(raw["backbone"][key])
        return raw


class Sources:
    """Where each key path of a resolved experiment was given: `file:line` (the file of
    the `extends` chain that gave it last) or `--set KEY=VALUE`; `label KEY` for a dict."""

    def __init__(self, label):
        self.label, self.marks = label, {}

    def take(self, path, marks):
        """Key `path` (and everything under it) now comes from `marks` {path: where}."""
        self.marks = {p: m for p, m in self.marks.items() if p[:len(path)] != path or not path}
        self.marks.update({p: m for p, m in marks.items() if p[:len(path)] == path})

    def where(self, *path):
        for end in range(len(path), -1, -1):
            if path[:end] in self.marks:
                return self.marks[path[:end]]
        return f"{self.label} " + ".".join(str(p) for p in path) if path else self.label


def load_experiment(path: str | os.PathLike[str], overrides: Iterable[str] = ()) -> Experiment:
    """The experiment in `path` (its `extends` chain merged, then the `--set` style
    `overrides`), or ExperimentError listing every problem found."""
    path = os.fspath(path)  # a pathlib.Path as a str: `extends` is resolved beside it
    sources = Sources(f"{path}:1")
    raw = _extend({EXTENDS: path}, path, sources, (), None)
    _apply_overrides(raw, overrides, sources)
    return _checked(raw, sources, path, None)


def _read_file(path):
    try:
        doc = load_yaml(path)
    except UserError as error:
        raise ExperimentError(str(error)) from None
    raw = doc.data if doc.data is not None else {}
    if not isinstance(raw, dict):
        raise ExperimentError(f"{path}:1: an experiment is a mapping of keys (backbone, tasks, ...)")
    return doc, raw


def _extend(raw, path, sources, chain, doc):
    """`raw` (read from `path`, lines in `doc`) merged over the file its `extends` names,
    recursively; `sources` learns where every key came from."""
    where = doc.where(EXTENDS) if doc else f"{path}:1"
    parent = raw.pop(EXTENDS, None)
    if parent is None:
        base = {}
    else:
        if not isinstance(parent, str) or not parent:
            raise ExperimentError(f"{where}: extends must be the path of another experiment "
                                  f"file (relative to this one), got {parent!r}")
        parent_path = os.path.normpath(os.path.join(os.path.dirname(path), parent)) \
            if doc else parent  # the top file itself: as the user named it
        seen = [os.path.abspath(p) for p in chain]
        if os.path.abspath(parent_path) in seen:
            cycle = " -> ".join(list(chain[seen.index(os.path.abspath(parent_path)):])
                                + [parent_path])
            raise ExperimentError(f"{where}: extends {parent}: a cycle ({cycle}); remove one "
                                  "of these `extends`")
        if len(chain) >= MAX_EXTENDS:
            raise ExperimentError(f"{where}: extends {parent}: the chain of `extends` is longer "
                                  f"than {MAX_EXTENDS} files: merge some of them")
        if doc and os.path.isdir(parent_path):
            raise ExperimentError(f"{where}: extends {parent}: {parent_path} is a folder; name "
                                  "the experiment file in it")
        if doc and not os.path.isfile(parent_path):
            raise ExperimentError(f"{where}: extends {parent}: no such file {parent_path} (the "
                                  f"path is relative to {path})")
        parent_doc, parent_raw = _read_file(parent_path)
        base = _extend(parent_raw, parent_path, sources, chain + (parent_path,), parent_doc)
        if doc and os.path.dirname(os.path.abspath(parent_path)) != \
                os.path.dirname(os.path.abspath(path)):
            _absolute_paths(base, os.path.dirname(os.path.abspath(parent_path)))
    if doc is None:
        return base
    marks = {p: f"{doc.path}:{line}" for p, line in doc.lines.items()}
    _merge(base, raw, sources, marks, ())
    sources.marks[()] = doc.where()
    return base


class _DictKeys:
    """The `doc` of a mapping given in Python: keys have no lines; messages name them."""
    lines: dict = {}

    def __init__(self, label):
        self.path = label

    def where(self, *path):
        return f"{self.path} " + ".".join(str(p) for p in path) if path else self.path


def _merge(base, override, sources, marks, path):
    """Later values win; mappings merge key by key; lists and scalars replace whole."""
    for key, value in override.items():
        here = path + (key,)
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            if here in marks:
                sources.marks[here] = marks[here]
            _merge(base[key], value, sources, marks, here)
        else:
            base[key] = copy.deepcopy(value)
            sources.take(here, marks)


def _absolute_paths(raw, folder):
    """Relative path values of a base file made absolute, so they keep pointing where
    they did from the base file's folder."""
    def visit(node, pattern):
        if not pattern:
            return
        key, rest = pattern[0], pattern[1:]
        items = (range(len(node)) if isinstance(node, list) else []) if key == "*" else \
            ([key] if isinstance(node, dict) and key in node else [])
        for item in items:
            value = node[item]
            if not rest:
                if isinstance(value, str) and value and not os.path.isabs(value):
                    node[item] = os.path.normpath(os.path.join(folder, value))
            elif isinstance(value, (dict, list)):
                visit(value, rest)
    for pattern in PATH_VALUES:
        visit(raw, pattern)


def _apply_overrides(raw, overrides, sources):
    """`--set a.b=value` strings into `raw` (values read as YAML: `1e-4`, `true`, `[a, b]`);
    intermediate mappings are created; a list item is addressed by its index."""
    for text in overrides or ():
        where = f"--set {text}"
        key, sep, value_text = text.partition("=")
        parts = key.strip().split(".") if key.strip() else []
        if not sep or not parts or not all(parts):
            raise ExperimentError(f"{where}: expected KEY=VALUE with a dotted KEY, e.g. "
                                  "--set optimizer.lr=1e-4")
        doc = parse_yaml(value_text, where)
        if doc.problems:
            raise ExperimentError(f"{where}: the value is not YAML ({doc.problems[0][1]})")
        node, path = raw, ()
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if isinstance(node, list):
                if not (part.isascii() and part.isdigit()) or int(part) >= len(node):
                    raise ExperimentError(f"{where}: {'.'.join(parts[:i]) or 'the experiment'} "
                                          f"is a list of {len(node)}: address an item by its "
                                          f"index 0..{len(node) - 1}")
                part = int(part)
            elif not isinstance(node, dict):
                raise ExperimentError(f"{where}: {'.'.join(parts[:i])} is {node!r}, not a mapping "
                                      "whose keys could be set")
            path += (part,)
            if last:
                node[part] = _typed_path(path, doc.data)
            else:
                if isinstance(node, dict) and part not in node:
                    node[part] = {}
                node = node[part]
        sources.take(path, {path: where})


def _typed_path(path, value):
    """A path value given on the command line (`--set data_root=data`) is relative to the
    folder the command runs in, as anything typed there is, not to the experiment file; a
    list item too (`--set task_specs.0=specs`, `--set tasks.1.corpus=more.txt`)."""
    probe = value
    for part in reversed(path):  # a list item as a list of one: PATH_VALUES' `*` matches it
        probe = [probe] if isinstance(part, int) else {part: probe}
    _absolute_paths(probe, os.getcwd())
    for part in path:
        probe = probe[0] if isinstance(part, int) else probe[part]
    return probe


def _checked(raw, sources, path, folder):
    """The Experiment of a merged mapping, or ExperimentError with every problem."""
    doc = sources
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
        elif key in MAXIMUM and value > MAXIMUM[key]:
            error(key, f"{key} must be <= {MAXIMUM[key]}"
                       f"{' (2^32 - 1)' if key == 'seed' else ''}, got {value}")
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
    if isinstance(raw.get("backbone", {}), dict):  # a backbone of another type: said above
        _check_backbone(backbone, error, raw.get("max_length", DEFAULTS["max_length"]))
    _check_sampling(raw.get("sampling", DEFAULTS["sampling"]), error)
    if isinstance(raw.get("optimizer"), dict):
        _check_optimizer(raw["optimizer"], error)
    tasks = _check_tasks(raw.get("tasks") if isinstance(raw.get("tasks"), list) else [], error)
    _check_keep_best(raw, tasks, error)
    if errors:
        raise ExperimentError("\n".join(errors))
    return Experiment(path=path, raw=raw, backbone=dict(backbone), tasks=tasks, doc=doc,
                      folder=folder)


def _check_keep_best(raw, tasks, error):
    """keep_best {metric: aggregate | TASK, mode: max | min} and patience N both watch
    dev evaluations: they need eval_every > 0."""
    keep = raw.get("keep_best")
    if isinstance(keep, dict):
        for key, value in keep.items():
            if key not in KEEP_BEST_KEYS:
                error(("keep_best", key), f"unknown keep_best key {key!r}; known: metric, mode")
        metric, mode = keep.get("metric", "aggregate"), keep.get("mode", "max")
        names = [t["name"] for t in tasks if t["name"] != MLM_TASK]
        if metric != "aggregate" and metric not in names:
            error(("keep_best", "metric"), f"keep_best.metric must be aggregate or one of the "
                                           f"tasks ({', '.join(names)}), got {metric!r}")
        if mode not in KEEP_BEST_MODES:
            error(("keep_best", "mode"), f"keep_best.mode must be max or min, got {mode!r}")
    for key in ("keep_best", "patience"):
        if key in raw and isinstance(raw.get("eval_every", 0), int) and \
                not raw.get("eval_every", DEFAULTS["eval_every"]):
            error(key, f"{key} watches dev evaluations: set eval_every > 0 (updates between "
                       "evaluations)")


def keep_best_settings(experiment):
    """{metric, mode} the best checkpoint and `patience` go by (dev aggregate, max, when
    keep_best is not given), or None when neither keep_best nor patience is set."""
    raw = experiment.raw
    if "keep_best" not in raw and "patience" not in raw:
        return None
    return {**KEEP_BEST_KEYS, **(raw.get("keep_best") or {})}


def _check_backbone(backbone, error, max_length):
    architecture = backbone.get("architecture") or architectures.DEFAULT
    if architecture not in architectures.ARCHITECTURES:
        error(("backbone", "architecture"), f"backbone.architecture must be one of "
              f"{', '.join(architectures.ARCHITECTURES)}, got {architecture!r}")
        return
    presets = architectures.presets(architecture).PRESETS
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
            number = yaml_number(value)
            if number is None or not 0 <= number < 1:
                error(where, f"backbone.{key} must be a number in [0, 1), got {value!r}")
            else:
                backbone[key] = number
        elif key == "packed":
            if value not in (True, False):
                error(where, f"backbone.packed must be true or false, got {value!r}")
        elif key == "exact_padding":
            if value not in (None, True, False):
                error(where, f"backbone.exact_padding must be true, false or null (auto), "
                             f"got {value!r}")
        elif key == "rope_scaling":
            try:
                # the trained length is filled in when the backbone is built (assemble.py):
                # any length will do to check the rest here
                rope_scaling.normalise(value, DEFAULTS["max_length"], "backbone.rope_scaling")
            except ValueError as problem:
                error(where, str(problem))
        elif key in BACKBONE_PATHS or key in ("size", "activation"):
            if not isinstance(value, str) or not value:
                error(where, f"backbone.{key} must be a " + ("size name" if key == "size" else "path")
                      + f", got {value!r}")
        if key == "size" and isinstance(value, str) and value not in presets:
            error(where, f"backbone.size of {architecture} must be one of {', '.join(presets)} "
                         f"(or give num_layers, hidden_size and num_heads), got {value!r}")
    if backbone.get("checkpoint") and backbone.get("init"):
        error(("backbone", "init"), "backbone has both checkpoint and init: keep one")
    if backbone.get("checkpoint") or backbone.get("init"):
        return  # the dims come from the checkpoint's config (compared in plan.py)
    dims = {k: v for k, v in backbone.items() if k in BACKBONE_MINIMUM}
    if any(not _is_int(v) or v < BACKBONE_MINIMUM[k] for k, v in dims.items()) or \
            backbone.get("size") not in (None, *presets) or set(backbone) - BACKBONE_KEYS:
        return  # already reported
    other = {k: backbone[k] for k in ("activation", "rope_scaling") if backbone.get(k) is not None}
    try:
        config = architectures.backbone_config(architecture, backbone.get("size"), **dims, **other)
    except ValueError as problem:
        key = next((k for k in ("activation", "rope_scaling", "alpha_warmup_steps", "num_heads",
                                "head_size", "hidden_size") if k in backbone), None)
        error(("backbone", key) if key else ("backbone",), f"backbone: {problem}")
        return
    if _is_int(max_length) and max_length > config.get("max_positions", max_length):
        error(("backbone", "max_positions") if "max_positions" in backbone else ("max_length",),
              f"max_length {max_length} > backbone.max_positions {config['max_positions']} "
              f"(the {architecture} position table): raise max_positions or lower max_length")


def _check_balancing(raw, error):
    value = raw.get("balancing")
    if not isinstance(value, (str, dict)):
        return  # absent (the default), or a wrong type already reported
    if isinstance(value, dict):  # its numbers by the one YAML rule (`temperature: 2e-1`)
        value = raw["balancing"] = {key: _as_number(setting) for key, setting in value.items()}
    try:
        balancing.resolve(value)
    except balancing.BalancingError as problem:
        error(("balancing", problem.key) if problem.key else ("balancing",), str(problem))


def _as_number(value):
    """A string YAML 1.1 left unread that is a number (`2e-1`) as that number; else as is."""
    number = yaml_number(value) if isinstance(value, str) else None
    return value if number is None else number


def _check_sampling(sampling, error):
    if isinstance(sampling, dict):
        for key, value in sampling.items():
            if key not in SAMPLING_KEYS:
                error(("sampling", key), f"unknown sampling key {key!r}; known: "
                                         f"{', '.join(SAMPLING_KEYS)}")
            elif key in mixture.OPTIONS:
                number = yaml_number(value)
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
            number = yaml_number(value)
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
                number = yaml_number(entry[key])
                if number is None or not test(number):
                    error(where + (key,), f"task {name!r}: {key} must be {wanted}, "
                                          f"got {entry[key]!r}")
                else:
                    entry[key] = number
        tasks.append(entry)
    return tasks


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _type_name(kind):
    names = {dict: "a mapping", list: "a list", str: "a string", int: "an integer"}
    if isinstance(kind, tuple):
        return " or ".join(names[k] for k in kind)
    return names[kind]
