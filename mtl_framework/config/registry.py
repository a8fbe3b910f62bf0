"""Task registry: task_specs/*.yaml -> validated TaskSpec objects.

    registry = load_registry()                 # the built-in task_specs/
    registry = load_registry(["my_specs"])     # built-in plus my own
    registry.select(["afqmc", "c3"])           # task names or dataset ids

Loading checks everything it can without reading the data and reports every
problem at once (SpecValidationError; each one `file:line: message`). Data
files that are absent are fine here: the adapters check them when they read.

Label files (`label_file: x.txt`) are looked up first in `labels/` beside
the spec file (lists shipped with the specs), then under the data root
(lists shipped with the data). A file found in neither place is an error
when a data root is given; without one it is taken to ship with the data and
is checked when the task is read or validated with a data root.

Nothing here imports TensorFlow or Keras: `mtl tasks list` stays fast.
"""
import dataclasses
import difflib
import json
from pathlib import Path

from mtl_framework.config import spec_schema as schema
from mtl_framework.config.yaml_io import parse_yaml, yaml_number
from mtl_framework.errors import UserError
from mtl_framework.families import contrastive

# Installed from a wheel the specs are package data (mtl_framework/task_specs);
# in a source checkout (and the editable install) they are the repository's task_specs/.
_PACKAGED_SPECS = Path(__file__).resolve().parents[1] / "task_specs"
BUILTIN_SPECS = (_PACKAGED_SPECS if _PACKAGED_SPECS.is_dir()
                 else Path(__file__).resolve().parents[2] / "task_specs")
LABELS_DIR = "labels"
SPEC_SUFFIXES = (".yaml", ".yml")


@dataclasses.dataclass(frozen=True)
class SpecError:
    path: str
    line: int
    message: str

    def __str__(self):
        return f"{self.path}:{self.line}: {self.message}"


class SpecValidationError(UserError, ValueError):
    """All the problems found in a set of spec files, sorted by file and line:
    one `file:line: message` line each."""

    def __init__(self, errors):
        self.errors = sorted(errors, key=lambda e: (e.path, e.line, e.message))
        super().__init__("\n".join(str(e) for e in self.errors))


class UnknownTaskError(UserError, KeyError):
    def __str__(self):
        return self.args[0]


class LabelFileError(UserError, ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """One task, with the dataset's files/options/fields merged under its own."""
    name: str
    dataset: str
    type: str
    format: str
    files: dict
    options: dict
    fields: dict
    labels: list | None
    label_file: str | None
    multi_label: bool
    max_length: int
    metric: str
    rate: float | None = None
    # the publisher's scorer (mtl_framework.scoring.scorers), None where the task has none
    scorer: str | None = None
    loss_weight: float = 1.0
    description: str = ""
    spec_path: str = ""
    line: int = 0
    # Paths (as listed in `files`) marked `optional: true`: read when present,
    # reported as absent otherwise; `file_aliases`: path -> the names mirrors give
    # it, tried in order when the path is not there (data_adapters.split_paths).
    optional_files: tuple = ()
    file_aliases: dict = dataclasses.field(default_factory=dict)
    # a contrastive task's `embedding:` settings as written (families.contrastive fills defaults)
    embedding: dict | None = None

    @property
    def family(self):
        return self.type

    def label_file_places(self, data_root=None):
        """Where `label_file` may be, in the order they are tried."""
        places = [Path(self.spec_path).parent / LABELS_DIR / self.label_file]
        if data_root is not None:
            places.append(Path(data_root) / self.label_file)
        return places

    def resolve_labels(self, data_root=None):
        """The label names (None for types without labels), reading `label_file` if needed."""
        if self.labels is not None:
            return list(self.labels)
        if self.label_file is None:
            return None
        places = self.label_file_places(data_root)
        for place in places:
            if place.is_file():
                return read_label_file(place)
        tried = " or ".join(str(p) for p in places)
        hint = "" if data_root is not None else " (pass the data root if it ships with the data)"
        raise FileNotFoundError(f"{self.spec_path}:{self.line}: label file "
                                f"{self.label_file!r} of task {self.name!r} not found in {tried}{hint}"
                                f"{folder_note(places)}")


def folder_note(places):
    """What a label file's "not found" adds when one of its places is a folder: the
    name exists, so "not found" alone would send the user looking for a missing file."""
    folder = next((p for p in places if p.is_dir()), None)
    return f" ({folder} is a folder, not a file of labels one a line)" if folder else ""


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    id: str
    format: str
    files: dict
    options: dict
    fields: dict
    tasks: tuple  # task names, in file order
    description: str = ""
    source: str = ""
    license: str = ""
    citation: str = ""
    spec_path: str = ""
    line: int = 0
    optional_files: tuple = ()
    file_aliases: dict = dataclasses.field(default_factory=dict)
    # a contrastive task's `embedding:` settings as written (families.contrastive fills defaults)
    embedding: dict | None = None
    # data | real_formats | documentation (spec_schema.VERIFIED); "" when the spec does not say
    verified: str = ""


class Registry:
    def __init__(self, datasets, tasks, data_root=None, spec_paths=()):
        self.datasets = datasets  # id -> DatasetSpec
        self.tasks = tasks  # name -> TaskSpec, in file order
        self.data_root = data_root
        self.spec_paths = [str(p) for p in spec_paths]  # the folders/files read, in order

    def searched(self):
        """Where task names were looked for, for an unknown name's error: the spec
        folders beyond the built-in ones, or how to add one."""
        builtin = [p for p in self.spec_paths if Path(p).resolve() == BUILTIN_SPECS.resolve()]
        extra = [p for p in self.spec_paths if p not in builtin]
        if not extra:
            return ("searched the built-in specs only: for a task of your own, pass its spec "
                    "folder (--specs DIR, or task_specs: in an experiment)")
        return f"searched {'the built-in specs and ' if builtin else ''}{', '.join(extra)}"

    def __len__(self):
        return len(self.tasks)

    def select(self, names):
        """TaskSpecs for task names and/or dataset ids (a dataset means all its tasks)."""
        if isinstance(names, str):
            names = [names]
        chosen, unknown = {}, []
        for name in names:
            if name in self.tasks:
                chosen.setdefault(name, self.tasks[name])
            elif name in self.datasets:
                for task in self.datasets[name].tasks:
                    chosen.setdefault(task, self.tasks[task])
            else:
                unknown.append(name)
        if unknown:
            known = list(self.tasks) + list(self.datasets)
            problems = [f"unknown task or dataset {n!r}{did_you_mean(n, known)}" for n in unknown]
            raise UnknownTaskError("; ".join(problems) + f"; {self.searched()} (`mtl tasks list "
                                   "[--specs DIR]` shows them all)")
        return list(chosen.values())


def load_registry(spec_dirs=None, data_root=None):
    """The built-in task_specs/ plus `spec_dirs` (directories or files), validated."""
    return load_paths([BUILTIN_SPECS] + [Path(p) for p in (spec_dirs or [])], data_root)


def load_paths(paths, data_root=None):
    """A Registry of exactly these spec files/directories, or SpecValidationError."""
    loader = _SpecLoader(data_root)
    loader.load([Path(p) for p in paths])
    if loader.errors:
        raise SpecValidationError(loader.errors)
    return Registry(loader.datasets, loader.tasks, data_root, paths)


def validate_paths(paths, data_root=None):
    """Every problem in these spec files/directories, sorted (empty list: all valid)."""
    loader = _SpecLoader(data_root)
    loader.load([Path(p) for p in paths])
    return sorted(loader.errors, key=lambda e: (e.path, e.line, e.message))


def spec_files(paths):
    """(yaml files, errors): directories give their *.yaml/*.yml, sorted, not recursive.

    A folder that does not exist but is named like one inside the built-in specs
    (`hub_clue`, `task_specs/hub_clue`) is that one, so it works from a wheel too."""
    found, errors, seen = [], [], set()
    for path in paths:
        if not path.exists() and (BUILTIN_SPECS / path.name).is_dir():
            path = BUILTIN_SPECS / path.name  # `hub_clue`: a spec set shipped with the package
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.suffix in SPEC_SUFFIXES and p.is_file())
            if not files:
                errors.append(SpecError(str(path), 0, "no *.yaml spec files in this directory"))
        elif path.is_file():
            files = [path]
        else:
            errors.append(SpecError(str(path), 0, "no such spec file or directory"))
            files = []
        for file in files:
            # The same directory given twice (e.g. the built-in one again) is read once.
            if file.resolve() not in seen:
                seen.add(file.resolve())
                found.append(file)
    return found, errors


def did_you_mean(word, choices):
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def read_label_file(path):
    """Labels from a JSON list, JSON lines with a `label` key, or one label per line."""
    text = Path(path).read_text(encoding="utf-8-sig")
    if text.lstrip().startswith("["):
        try:
            entries = json.loads(text)
        except json.JSONDecodeError as error:
            raise LabelFileError(f"{path} is not a valid JSON list: {error}") from None
        labels = [e["label"] if isinstance(e, dict) and "label" in e else e for e in entries]
    else:
        labels = []
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line:
                continue
            if line.startswith("{"):
                try:
                    labels.append(json.loads(line)["label"])
                except (json.JSONDecodeError, KeyError, TypeError):
                    raise LabelFileError(f"{path} line {number}: expected a JSON object "
                                         f"with a \"label\" key") from None
            else:
                labels.append(line)
    if not labels:
        raise LabelFileError(f"{path} has no labels")
    for label in labels:
        if not isinstance(label, str) or not label:
            raise LabelFileError(f"{path}: label {label!r} is not a non-empty string; "
                                 "write labels as strings (\"1\", not 1)")
    seen = {}
    for index, label in enumerate(labels):  # one pass: 200,000 labels stay instant
        if label in seen:
            raise LabelFileError(f"{path} lists {label!r} twice (entries {seen[label] + 1} and "
                                 f"{index + 1}); each label once")
        seen[label] = index
    return labels


def _adapters():
    # The format registry lives in the sibling package `data_adapters`.
    import data_adapters
    return data_adapters


class _SpecFile:
    """One YAML file: its data plus the line of every key and list item (yaml_io)."""

    def __init__(self, path, errors):
        self.path, self.errors = path, errors
        self.lines = {}
        self.data = self._read()

    def error(self, where, message):
        while where and where not in self.lines:
            where = where[:-1]  # the nearest enclosing key that has a line
        self.errors.append(SpecError(str(self.path), self.lines.get(where, 1), message))

    def _read(self):
        try:
            text = self.path.read_text(encoding="utf-8")
        except UnicodeDecodeError as error:
            self.errors.append(SpecError(str(self.path), 1,
                                         f"not UTF-8 text ({error.reason}); save it as UTF-8"))
            return None
        doc = parse_yaml(text, self.path)
        self.lines = doc.lines
        self.errors.extend(SpecError(str(self.path), line, message) for line, message in doc.problems)
        if doc.data is None and not doc.problems:
            self.errors.append(SpecError(str(self.path), 1, "empty spec file; expected "
                                         "`dataset:`, `format:`, `files:` and `tasks:`"))
        return doc.data


class _SpecLoader:
    """Reads spec files one by one, then checks names across them."""

    def __init__(self, data_root=None):
        self.data_root = data_root
        self.errors = []
        self.datasets, self.tasks = {}, {}
        # name -> [(file, line, dataset id)] for every occurrence, valid file or not
        self.dataset_places, self.task_places = {}, {}
        adapters = _adapters()
        self.formats = list(adapters.available_formats())
        self.get_adapter = adapters.get_adapter

    def load(self, paths):
        files, errors = spec_files(paths)
        self.errors.extend(errors)
        for path in files:
            self.read(path)
        self.check_names()

    def read(self, path):
        before = len(self.errors)
        spec = _SpecFile(path, self.errors)
        if spec.data is None:
            return
        if not isinstance(spec.data, dict):
            spec.error((), "a spec file is a mapping with `dataset:`, `format:`, `files:` "
                            f"and `tasks:`, not a {type(spec.data).__name__}")
            return
        data = self.check_keys(spec, (), spec.data, schema.DATASET_KEYS, "the top level")
        dataset_id = data.get("dataset")
        if isinstance(dataset_id, str):
            if not schema.DATASET_ID.match(dataset_id):
                spec.error(("dataset",), f"dataset id {dataset_id!r} may use only a-z, 0-9 and _; "
                                         f"e.g. {_suggest_id(dataset_id)!r}")
            self.dataset_places.setdefault(dataset_id, []).append(
                (str(path), spec.lines.get(("dataset",), 1)))
        adapter = self.check_format(spec, ("format",), data.get("format"))
        self.check_adapter_keys(spec, (), adapter, data.get("format"), data, "")
        tasks = self.read_tasks(spec, data, adapter)
        if len(self.errors) == before and isinstance(dataset_id, str):
            files, optional, aliases = _plain_files(_merge(data["files"]))
            self.datasets[dataset_id] = DatasetSpec(
                id=dataset_id, format=data["format"], files=files, optional_files=optional,
                file_aliases=aliases,
                verified=data.get("verified", ""),
                options=_merge(data.get("options")), fields=_merge(data.get("fields")),
                tasks=tuple(t.name for t in tasks), description=data.get("description", ""),
                source=data.get("source", ""), license=data.get("license", ""),
                citation=data.get("citation", ""), spec_path=str(path),
                line=spec.lines.get(("dataset",), 1))
            for task in tasks:
                self.tasks[task.name] = task

    def read_tasks(self, spec, data, adapter):
        entries = data.get("tasks")
        if entries is None:
            return []
        if not isinstance(entries, list) or not entries:
            spec.error(("tasks",), "`tasks` must be a non-empty list of tasks, each starting "
                                   "with `- name: ...`")
            return []
        tasks = []
        for index, entry in enumerate(entries):
            where = ("tasks", index)
            if not isinstance(entry, dict):
                spec.error(where, f"task {index + 1} must be a mapping (`- name: ...` then its keys)")
                continue
            task = self.read_task(spec, where, entry, data, adapter)
            if task is not None:
                tasks.append(task)
        return tasks

    def read_task(self, spec, where, entry, data, dataset_adapter):
        name = entry.get("name")
        label = f"task {name!r}" if isinstance(name, str) else f"task {where[1] + 1}"
        given, entry = entry, self.check_keys(spec, where, entry, schema.TASK_KEYS, label)
        name = entry.get("name")
        if isinstance(name, str):
            if not schema.TASK_NAME.match(name):
                spec.error(where + ("name",), f"{label}: names may use only letters, digits, "
                                              "'_', '.' and '-' (they become file names)")
            self.task_places.setdefault(name, []).append(
                (str(spec.path), spec.lines[where + ("name",)], data.get("dataset")))

        task_type = entry.get("type")
        if isinstance(task_type, str) and task_type not in schema.TASK_TYPES:
            spec.error(where + ("type",), f"{label}: unknown type {task_type!r}"
                       f"{did_you_mean(task_type, schema.TASK_TYPES)}; types: {', '.join(schema.TASK_TYPES)}")
            task_type = None
        metric = entry.get("metric")
        if isinstance(metric, str) and metric not in schema.METRICS:
            spec.error(where + ("metric",), f"{label}: unknown metric {metric!r}"
                       f"{did_you_mean(metric, schema.METRICS)}; metrics: {', '.join(schema.METRICS)}")
        scorer = entry.get("scorer")
        if isinstance(scorer, str) and scorer not in schema.SCORERS:
            spec.error(where + ("scorer",), f"{label}: unknown scorer {scorer!r}"
                       f"{did_you_mean(scorer, schema.SCORERS)}; scorers: {', '.join(schema.SCORERS)}")
        self.check_labels(spec, where, given, entry, task_type, label)
        self.check_embedding(spec, where, entry, task_type, metric, label)

        # A task reading another format keeps none of the dataset's options/fields.
        dataset_format = data.get("format")
        task_format = entry.get("format", dataset_format)
        adapter = dataset_adapter
        if "format" in entry and entry["format"] != dataset_format:
            adapter = self.check_format(spec, where + ("format",), entry["format"])
            inherited = {"files": data.get("files")}
        else:
            inherited = {key: data.get(key) for key in ("files", "options", "fields")}
        self.check_adapter_keys(spec, where, adapter, task_format, entry, f"{label}: ")
        if adapter is not None and task_type is not None:
            supported = getattr(adapter, "task_types", None)
            if supported and task_type not in supported:
                spec.error(where + ("type",), f"{label}: format {task_format!r} reads examples for "
                           f"{', '.join(supported)} tasks, not {task_type}; change the type or the format")
        if isinstance(scorer, str) and scorer in schema.SCORERS and adapter is not None:
            problem = schema.scorer_problem(scorer, task_type, task_format)
            if problem:
                spec.error(where + ("scorer",), f"{label}: {problem}")

        merged = {key: _merge(inherited.get(key), entry.get(key)) for key in ("files", "options", "fields")}
        if not merged["files"]:
            spec.error(where, f"{label}: no files left to read (every split is null); "
                              "give at least one split under `files:`")
        required_fields = getattr(adapter, "required_fields", ()) if adapter is not None else ()
        missing = [key for key in required_fields if key not in merged["fields"]]
        fields_refused = ("fields" in spec.data and "fields" not in data) or \
            ("fields" in given and "fields" not in entry)  # its own line says why
        if missing and not fields_refused:
            spec.error(where, f"{label}: format {task_format!r} needs `fields:` for "
                              f"{', '.join(missing)} (the source key or column of each)")
        if task_type == schema.EMBEDDING_TYPE and adapter is not None:
            self.check_embedding_data(spec, where, entry, adapter, merged["fields"], label)
        if any(key not in entry for key, (_, required) in schema.TASK_KEYS.items() if required):
            return None
        files, optional, aliases = _plain_files(merged["files"])
        return TaskSpec(
            name=name, dataset=data.get("dataset"), type=entry["type"], format=task_format,
            files=files, optional_files=optional, file_aliases=aliases,
            options=merged["options"], fields=merged["fields"],
            labels=entry.get("labels"), label_file=entry.get("label_file"),
            multi_label=entry.get("multi_label", False), max_length=entry["max_length"],
            metric=entry["metric"], scorer=entry.get("scorer"), rate=entry.get("rate"),
            loss_weight=entry.get("loss_weight", 1.0),
            embedding=contrastive.written_settings(entry.get("embedding")),
            description=entry.get("description", data.get("description", "")),
            spec_path=str(spec.path), line=spec.lines[where])

    def check_embedding(self, spec, where, entry, task_type, metric, label):
        """`embedding:` settings (contrastive tasks only) and an embedding metric for them."""
        embedded = task_type == schema.EMBEDDING_TYPE
        if "embedding" in entry:
            if task_type is not None and not embedded:
                spec.error(where + ("embedding",), f"{label}: `embedding:` settings apply to "
                           f"type {schema.EMBEDDING_TYPE} only, not {task_type}; remove them")
            for key, message in contrastive.settings_problems(entry["embedding"]):
                at = where + ("embedding",) + ((str(key),) if key is not None else ())
                spec.error(at, f"{label}: {message}")
        if task_type is None or not isinstance(metric, str) or metric not in schema.METRICS:
            return
        if embedded and metric not in schema.EMBEDDING_METRICS:
            spec.error(where + ("metric",), f"{label}: a {task_type} task is scored on its "
                       f"embeddings: metric {' / '.join(schema.EMBEDDING_METRICS)}, not {metric}")
        if not embedded and metric in schema.EMBEDDING_METRICS:
            spec.error(where + ("metric",), f"{label}: metric {metric} scores the embeddings of "
                       f"{schema.EMBEDDING_TYPE} tasks, not a {task_type} task's outputs: give it "
                       f"another metric, or make it type {schema.EMBEDDING_TYPE}")

    def check_embedding_data(self, spec, where, entry, adapter, fields, label):
        """Valid `embedding:` settings the task's format cannot feed (contrastive.data_problems)."""
        settings = entry.get("embedding") or {}
        if contrastive.settings_problems(settings):
            return  # each reported at its own line already
        for key, message in contrastive.data_problems(settings, adapter, fields):
            at = where + ("embedding", key)
            if key == "fields":  # the task's own fields:, else the dataset's, else the task
                at = where + ("fields",) if "fields" in entry else \
                    ("fields",) if "fields" in spec.data else where
            spec.error(at, f"{label}: {message}")

    def check_keys(self, spec, where, data, keys, place):
        """Unknown, missing and mistyped keys; returns the entries that passed."""
        good = {}
        for key, value in data.items():
            if key not in keys:
                spec.error(where + (str(key),), f"{place}: unknown key {key!r}"
                           f"{did_you_mean(key, keys)}; allowed: {', '.join(keys)}")
                continue
            checker = keys[key][0]
            problem = checker(value) if checker else None
            if problem:
                spec.error(where + (str(key),), f"{place}: {key} {problem}")
                continue
            good[key] = yaml_number(value) if checker in schema.NUMBER_CHECKERS else value
        for key, (_, required) in keys.items():
            if required and key not in data:
                spec.error(where, f"{place}: missing required key {key!r}")
        return good

    def check_format(self, spec, where, name):
        """The adapter class for a format name, or None if unknown."""
        if not isinstance(name, str):
            return None
        if name not in self.formats:
            spec.error(where, f"unknown format {name!r}{did_you_mean(name, self.formats)}; "
                              f"formats: {', '.join(sorted(self.formats))} (or register your "
                              "own with data_adapters.register_adapter)")
            return None
        return self.get_adapter(name)

    def check_adapter_keys(self, spec, where, adapter, format_name, data, prefix):
        """Option and field keys the format does not declare."""
        if adapter is None:
            return
        for group, declared in (("options", getattr(adapter, "option_keys", None)),
                                ("fields", getattr(adapter, "field_keys", None))):
            given = data.get(group)
            if declared is None or not isinstance(given, dict):
                continue
            for key, value in given.items():
                at = where + (group, str(key))
                if key not in declared:
                    allowed = (", ".join(declared) if declared
                               else f"none (format {format_name!r} takes no {group})")
                    spec.error(at, f"{prefix}unknown {group[:-1]} {key!r} for format {format_name!r}"
                                   f"{did_you_mean(key, declared)}; allowed: {allowed}")
                elif group == "options":
                    expected = declared[key][0] if isinstance(declared[key], tuple) else None
                    if not _fits(value, expected):
                        spec.error(at, f"{prefix}option {key!r} of format {format_name!r} must be "
                                       f"{_type_name(expected)}, got {value!r}")
                    else:
                        from data_adapters.base import option_value_problem

                        default = declared[key][1] if isinstance(declared[key], tuple) else None
                        problem = option_value_problem(key, value, default)
                        if problem:
                            spec.error(at, f"{prefix}option {key!r} of format {format_name!r} "
                                           f"{problem}")

    def check_labels(self, spec, where, given, entry, task_type, label):
        # Presence comes from what was written (`given`), values from what passed (`entry`).
        labels, label_file = entry.get("labels"), entry.get("label_file")
        if labels is not None and label_file is not None:
            spec.error(where + ("label_file",), f"{label}: give `labels` or `label_file`, not both")
        if task_type is not None:
            needs_labels = schema.TASK_TYPES[task_type]
            has_labels = "labels" in given or "label_file" in given
            if needs_labels and not has_labels:
                spec.error(where, f"{label}: type {task_type} needs `labels: [...]` or "
                                  "`label_file: ...` (class, entity, predicate or event type names)")
            if not needs_labels and has_labels:
                key = "labels" if "labels" in given else "label_file"
                spec.error(where + (key,), f"{label}: type {task_type} takes no labels; remove `{key}`")
            least = schema.MIN_LABELS.get(task_type)
            if least and least > 1 and not given.get("multi_label") \
                    and isinstance(labels, list) and len(labels) == 1:
                # a softmax over one class: loss 0 from the first update, the same label always
                spec.error(where + ("labels",), f"{label}: type {task_type} needs at least "
                           f"{least} labels to choose from, got {labels!r}; list every class")
            if given.get("multi_label") and task_type not in schema.MULTI_LABEL_TYPES:
                spec.error(where + ("multi_label",), f"{label}: multi_label applies to "
                           f"{', '.join(schema.MULTI_LABEL_TYPES)} only, not {task_type}; remove it")
        if isinstance(label_file, str):
            self.check_label_file(spec, where + ("label_file",), label_file, label)

    def check_label_file(self, spec, where, label_file, label):
        places = [spec.path.parent / LABELS_DIR / label_file]
        if self.data_root is not None:
            places.append(Path(self.data_root) / label_file)
        found = next((p for p in places if p.is_file()), None)
        if found is None:
            if self.data_root is not None:
                spec.error(where, f"{label}: label file {label_file!r} not found in "
                                  f"{' or '.join(str(p) for p in places)}{folder_note(places)}; "
                                  "fix the path or add the file")
            return
        try:
            read_label_file(found)
        except (LabelFileError, UnicodeDecodeError) as error:
            spec.error(where, f"{label}: bad label file: {error}")

    def check_names(self):
        """Duplicate dataset ids and task names across all files, at each place."""
        for kind, places in (("dataset id", self.dataset_places), ("task name", self.task_places)):
            for name, where in places.items():
                for index, (path, line, *_) in enumerate(where):
                    others = [f"{p}:{n}" for i, (p, n, *_) in enumerate(where) if i != index]
                    if others:
                        self.errors.append(SpecError(path, line, f"duplicate {kind} {name!r} (also at "
                                                     f"{', '.join(others)}); rename one"))
        # `select` takes both kinds of name: one may not mean two things.
        for name, where in self.task_places.items():
            if name in self.dataset_places:
                for path, line, dataset in where:
                    if dataset != name:
                        other_path, other_line = self.dataset_places[name][0]
                        self.errors.append(SpecError(path, line, f"task name {name!r} is also the id of "
                                                     f"dataset {name!r} ({other_path}:{other_line}); "
                                                     "rename the task"))


def _merge(base, override=None):
    """Dataset keys under task overrides, key by key; a null value unsets the key."""
    merged = {**(base or {}), **(override or {})}
    return {key: value for key, value in merged.items() if value is not None}


def _plain_files(files):
    """(split -> path or [paths], optional paths, {path: aliases}): `files:` with its
    `{path, optional, aliases}` entries as plain paths."""
    plain, optional, aliases = {}, [], {}
    for split, paths in files.items():
        plain[split], marked, named = schema.split_files(paths)
        optional += [p for p in marked if p not in optional]
        aliases.update(named)
    return plain, tuple(optional), aliases


def _fits(value, expected):
    if value is None or expected is None:
        return True
    if expected is float:
        expected = (int, float)
    if not isinstance(expected, (type, tuple)):
        return True
    if isinstance(value, bool) and expected is int:
        return False
    return isinstance(value, expected)


def _type_name(expected):
    if isinstance(expected, tuple):
        return " or ".join(t.__name__ for t in expected)
    return {str: "a string", bool: "true or false", int: "a whole number", float: "a number",
            dict: "a mapping", list: "a list"}.get(expected, getattr(expected, "__name__", str(expected)))


def _suggest_id(name):
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name.lower())
