"""What a task spec YAML may contain (docs/task_specs.md), as plain tables.

The registry walks a spec against these tables; each checker returns None when
a value is fine, else a message saying what is wrong and how to fix it.
"""
import os
import re

from mtl_framework.config.yaml_io import yaml_number
from mtl_framework.families import FAMILIES, contrastive
from mtl_framework.scoring import metrics as metric_functions
from mtl_framework.scoring import scorers as scorer_modules

# Task type (family) -> whether its tasks need `labels` / `label_file`.
TASK_TYPES = {name: f.needs_labels for name, f in FAMILIES.items() if f.in_specs}

# Only a softmax-over-classes head can be switched to sigmoid-per-class.
MULTI_LABEL_TYPES = tuple(name for name, f in FAMILIES.items() if f.multi_label)
# type -> the fewest labels its head can choose among (None: it takes no labels)
MIN_LABELS = {name: f.min_labels for name, f in FAMILIES.items() if f.in_specs}

# The metric names a spec may give: metrics.py's table (NumPy only, no TensorFlow).
METRICS = tuple(metric_functions.METRICS)
# The metrics that score sentence embeddings, and the type whose tasks they score.
EMBEDDING_METRICS = tuple(metric_functions.EMBEDDING_METRICS)
EMBEDDING_TYPE = contrastive.FAMILY.name
# The publishers' scorers a spec's `scorer:` may name (no TensorFlow either).
SCORERS = tuple(scorer_modules.SCORERS)


def scorer_problem(name, task_type, task_format):
    """Why the publisher's scorer `name` cannot score a task of this type and format, as
    the end of a message, or None: each scorer reads its gold from its publisher's files
    (scorers.FORMATS) and scores one family's predictions (scorers.TASK_TYPES)."""
    module = scorer_modules.SCORERS[name]
    if task_type is not None and task_type not in module.TASK_TYPES:
        fitting = [n for n, m in scorer_modules.SCORERS.items() if task_type in m.TASK_TYPES]
        return (f"scorer {name!r} scores {' or '.join(module.TASK_TYPES)} tasks, not {task_type}: "
                f"drop `scorer:` (the task's `metric:` scores it)"
                + (f", or name one for {task_type}: {', '.join(fitting)}" if fitting else ""))
    if task_format is not None and task_format not in module.FORMATS:
        return (f"scorer {name!r} reads its gold from {' or '.join(module.FORMATS)} files (its "
                f"publisher's), not format {task_format!r}: drop `scorer:` (the task's `metric:` "
                "scores it)")
    return None


DATASET_ID = re.compile(r"^[a-z0-9_]+$")
# Task names end up in cache and run-directory paths: no slashes or spaces.
TASK_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def _yaml_hint(value):
    # YAML 1.1 reads yes/no/on/off as booleans and 0/1 as ints: the usual cause.
    if isinstance(value, bool):
        return " (quote it: YAML read it as true/false)"
    if isinstance(value, (int, float)):
        return " (quote it: YAML read it as a number)"
    return ""


def text(value):
    if not isinstance(value, str) or not value.strip():
        return "must be a non-empty string, got %r%s" % (value, _yaml_hint(value))


def positive_int(value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        hint = " (write it without quotes)" if isinstance(value, str) else ""
        return "must be a whole number > 0, got %r%s" % (value, hint)


def length_int(value):
    """max_length: room for [CLS], [SEP] and at least one token of each of two texts."""
    problem = positive_int(value)
    if problem is None and value < 4:
        return "must be a whole number >= 4 ([CLS] text [SEP] takes 3), got %r" % (value,)
    return problem


def non_negative_number(value):
    number = yaml_number(value)
    if number is None or number < 0:
        return "must be a number >= 0, got %r" % (value,)


def positive_number(value):
    number = yaml_number(value)
    if number is None or number <= 0:
        return "must be a number > 0, got %r" % (value,)


# Checkers of numbers: a spec's numbers follow the experiment's rule (yaml_io.yaml_number,
# `1e-3` is a number), and the registry keeps the number, not the string YAML read.
NUMBER_CHECKERS = (non_negative_number, positive_number)


def boolean(value):
    if not isinstance(value, bool):
        return "must be true or false, got %r" % (value,)


def mapping(value):
    if not isinstance(value, dict):
        return "must be a mapping (key: value lines), got %s" % type(value).__name__


def _file_entry(entry):
    # A path, or a mapping: `optional: true` for a file publishers ship apart (atec's
    # train_add, a dataset's later parts): absent, it is reported, not fatal;
    # `aliases: [...]` for the names mirrors give the same file, tried when `path`
    # (the publisher's name) is not there.
    if isinstance(entry, str):
        return bool(entry.strip())
    aliases = entry.get("aliases", []) if isinstance(entry, dict) else None
    return (isinstance(entry, dict) and set(entry) <= {"path", "optional", "aliases"}
            and isinstance(entry.get("path"), str) and bool(entry["path"].strip())
            and isinstance(entry.get("optional", False), bool)
            and isinstance(aliases, list) and all(isinstance(a, str) and a.strip() for a in aliases))


def files(value):
    if not isinstance(value, dict) or not value:
        return "must map each split to a path, e.g. `train: mydata/train.json`"
    for split, paths in value.items():
        if not isinstance(split, str):
            return "split name %r must be a string" % (split,)
        if paths is None or _file_entry(paths) or \
                isinstance(paths, list) and paths and all(_file_entry(p) for p in paths):
            escaping = next((p for p in _paths(paths) if _escapes(p)), None)
            if escaping:
                return ("split %r: %r leads out of the data root (`..`): give an absolute path "
                        "for a file kept elsewhere" % (split, escaping))
            continue
        return ("split %r must be a path, `{path: ..., optional: true, aliases: [...]}` or a "
                "non-empty list of those, got %r" % (split, paths))


def _paths(paths):
    """Every path of a split's entry: the paths and their aliases."""
    for entry in paths if isinstance(paths, list) else [paths] if paths else []:
        if isinstance(entry, dict):
            yield entry["path"]
            yield from entry.get("aliases") or ()
        else:
            yield entry


def _escapes(path):
    """A relative path that climbs above the folder it is relative to (`../../etc/x`)."""
    normal = os.path.normpath(path)
    return not os.path.isabs(path) and (normal == ".." or normal.startswith("../"))


def split_files(paths):
    """(paths, optional paths, {path: aliases}) of one split's `files:` entry."""
    entries = paths if isinstance(paths, list) else [paths]
    plain = [e["path"] if isinstance(e, dict) else e for e in entries]
    optional = [e["path"] for e in entries if isinstance(e, dict) and e.get("optional")]
    aliases = {e["path"]: tuple(e["aliases"]) for e in entries if isinstance(e, dict) and e.get("aliases")}
    return (plain if isinstance(paths, list) else plain[0]), optional, aliases


# Where the spec's layout was checked against real files: `data` (../shared/data,
# whole releases or large parts), `real_formats` (../shared/real_formats, excerpts
# of the published files) or `documentation` (only the publisher's documentation).
VERIFIED = ("data", "real_formats", "documentation")


def verified(value):
    if value not in VERIFIED:
        return "must be one of %s, got %r" % (", ".join(VERIFIED), value)


def fields(value):
    # Source fields are keys, dotted keys or column indexes; a list joins several.
    error = mapping(value)
    if error:
        return error
    for key, source in value.items():
        if source is None:
            continue
        sources = source if isinstance(source, list) and source else [source]
        for item in sources:
            if isinstance(item, bool) or not isinstance(item, (str, int)):
                return ("field %r must name a source key, dotted key or column index "
                        "(or a list of them), got %r" % (key, source))
            if isinstance(item, int) and item < 0:  # Python would count it from the end
                return ("%r is column %d: columns count from 0 at the left (no index "
                        "from the end); give an index >= 0" % (key, item))
    # text, text_b and label read from one source is never meant: the label would be
    # the text (every row skipped), or a pair of one text twice
    read = [(key, value[key]) for key in ("text", "text_b", "label")
            if isinstance(value.get(key), (str, int))]
    for number, (key, source) in enumerate(read):
        twin = next((other for other, same in read[:number] if same == source), None)
        if twin:
            return "%r and %r both read %r; give each its own source" % (twin, key, source)


def label_list(value):
    if not isinstance(value, list) or not value:
        return "must be a non-empty list of label names, e.g. [\"0\", \"1\"]"
    for item in value:
        if not isinstance(item, str) or not item:
            return "must be a list of strings; %r is not%s" % (item, _yaml_hint(item))
    seen = set()
    for item in value:
        if item in seen:
            return "lists %r twice; each label once" % item
        seen.add(item)


# key -> (checker, required). Order is the order the docs present them.
# In `files`, `options` and `fields`, a null value unsets the key: a task
# override `text_b: null` drops the dataset's text_b mapping for that task.
DATASET_KEYS = {
    "dataset": (text, True),
    "description": (text, False),
    "source": (text, False),
    "license": (text, False),
    "citation": (text, False),
    "verified": (verified, False),
    "format": (text, True),
    "files": (files, True),
    "options": (mapping, False),
    "fields": (fields, False),
    "tasks": (None, True),  # a list of task mappings, checked one by one
}

TASK_KEYS = {
    "name": (text, True),
    "type": (text, True),
    "description": (text, False),
    "labels": (label_list, False),
    "label_file": (text, False),
    "multi_label": (boolean, False),
    "max_length": (length_int, True),
    "metric": (text, True),
    # the publisher's scorer (mtl_framework.scoring.scorers.SCORERS): the task's primary score
    "scorer": (text, False),
    "rate": (non_negative_number, False),
    "loss_weight": (positive_number, False),
    # a contrastive task's settings (families/contrastive.py EMBEDDING_SETTINGS), each checked
    # by the registry with its own line
    "embedding": (mapping, False),
    # Per-task overrides of the dataset's keys (merged key by key). A task
    # whose data needs another adapter (SanWen: tags for NER, TSV for
    # relations) overrides `format`; it then keeps none of the dataset's
    # options and fields, which belong to the dataset's format.
    "format": (text, False),
    "files": (files, False),
    "options": (mapping, False),
    "fields": (fields, False),
}
