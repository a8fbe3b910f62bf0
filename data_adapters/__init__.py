"""Adapters: one module per file-format family, each turning real files into typed examples.

    from data_adapters import read_task, ReadReport
    report = ReadReport()
    for example in read_task(task, "train", data_root, report):
        ...
    print(report.summary())

Formats are looked up by name (`format:` in a task spec): `get_adapter`,
`available_formats`, and `register_adapter` for your own (see base.py).
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from data_adapters.base import (
    Adapter,
    Labels,
    TaskSource,
    UnknownFormatError,
    available_formats,
    get_adapter,
    register_adapter,
)
from data_adapters.examples import (
    ChoiceExample,
    CorefExample,
    Entity,
    Event,
    EventExample,
    Example,
    NERExample,
    PairExample,
    RelationExample,
    Span,
    SpanQAExample,
    TextExample,
    Triple,
)
from data_adapters.report import NO_LABEL, UNLABELLED_SPLITS, ReadReport
from data_adapters.task_types import LABELLED_TYPES, TASK_TYPES, TaskType

# isort: split
# The built-in formats register themselves on import, after the public names above are bound.
from data_adapters import (  # noqa: E402,F401
    choice,
    coref,
    delimited,
    doc_folder,
    events,
    jsonl,
    mentions,
    ner_spans,
    ner_tags,
    pairs,
    parquet,
    qa,
    relations,
    text_lines,
)

__all__ = [
    "Adapter", "ReadReport", "UnknownFormatError", "available_formats", "get_adapter",
    "register_adapter", "read_files", "read_task", "split_paths", "MissingDataFile",
    "ChoiceExample", "CorefExample", "Entity", "Event", "EventExample", "NERExample",
    "PairExample", "RelationExample", "Span", "SpanQAExample", "TextExample", "Triple", "Example",
    "TaskSource",
    "TaskType", "TASK_TYPES", "LABELLED_TYPES",
]


def read_files(format_name: str, paths: str | os.PathLike | Iterable[str | os.PathLike],
               options: Mapping[str, Any] | None = None, fields: Mapping[str, Any] | None = None,
               task_type: str | None = None, labels: Labels = None, report: ReadReport | None = None,
               where: str | None = None, labels_required: bool = False) -> Iterator[Example]:
    """Typed examples from files in a named format (what read_task does for a spec).
    With `labels_required`, records without a label are skipped with their place."""
    adapter = get_adapter(format_name)
    where = where or f"format {format_name!r}"
    options, fields = adapter.settings(options, fields, where)
    if task_type is None and adapter.task_types:
        task_type = adapter.task_types[0]
    if adapter.task_types and task_type not in adapter.task_types:
        raise ValueError(f"{where}: format {format_name!r} reads examples for "
                         f"{', '.join(adapter.task_types)} tasks, not {task_type}")
    names = [str(p) for p in ([paths] if isinstance(paths, (str, os.PathLike)) else paths)]
    report = report if report is not None else ReadReport()
    report.labels_required = labels_required
    examples = adapter().read(names, options, fields, task_type, labels, report)
    return _counted(examples, report, names)


def read_task(task: TaskSource, split: str, data_root: str | os.PathLike,
              report: ReadReport | None = None) -> Iterator[Example]:
    """Typed examples of one split of a task (a registry TaskSpec or anything with
    .name .format .files .options .fields .type .labels).

    Labels are required in every split but a test split (UNLABELLED_SPLITS) of a
    labelled task type: an unlabelled train or dev record is skipped and counted with
    its place.

    A missing file raises FileNotFoundError here, before any example is read; a
    missing `optional` one is noted in the report (`absent`) and the others are read."""
    where = _spec_place(task)
    report = report if report is not None else ReadReport()
    paths, absent = split_paths(task, split, data_root)
    for path in absent:
        report.absent_file(path)
    resolve = getattr(task, "resolve_labels", None)
    labels = resolve(data_root) if callable(resolve) else getattr(task, "labels", None)
    return read_files(task.format, paths, task.options, task.fields, task.type, labels,
                      report, where=f"{where}: task {task.name!r}",
                      labels_required=split not in UNLABELLED_SPLITS
                      and task.type in LABELLED_TYPES)


def split_paths(task: TaskSource, split: str, data_root: str | os.PathLike) -> tuple[list[Path], list[Path]]:
    """([paths to read], [absent optional paths]) of one split of a task.

    KeyError when the task has no such split; FileNotFoundError (one line naming the
    file and the split) when a file not marked `optional` is missing, or none is there."""
    where = _spec_place(task)
    files = task.files or {}
    if split not in files:
        raise KeyError(f"{where}: task {task.name!r} has no {split!r} split; "
                       f"its files list {', '.join(files) or 'none'}")
    relative = files[split] if isinstance(files[split], list) else [files[split]]
    optional = set(getattr(task, "optional_files", ()) or ())
    aliases = getattr(task, "file_aliases", None) or {}
    present, absent = [], []
    for rel in relative:
        path = Path(data_root) / rel  # an absolute rel stays as it is
        # The publisher's name first, then the names mirrors give the same file.
        path = next((p for p in [path] + [Path(data_root) / a for a in aliases.get(rel, ())]
                     if p.exists()), path)
        if path.is_dir() and (path / path.name).is_file():
            path = path / path.name  # DuEE-Fin's zips unpack each file into a folder of its name
        if path.is_dir() and task.format not in FOLDER_FORMATS:
            raise FolderNotFile(f"{where}: {split} file of task {task.name!r} is a folder: "
                                f"{path.resolve()}; name the file in it (format "
                                f"{task.format!r} reads files)", rel)
        if path.is_file() and not os.access(path, os.R_OK):
            raise FolderNotFile(f"{where}: {split} file of task {task.name!r} is not readable "
                                f"(permissions): {path.resolve()}; `chmod +r` it", rel)
        if path.exists():
            present.append(path)
        elif path.is_symlink():  # exists() is False for a link to nowhere (or a loop)
            raise FolderNotFile(f"{where}: {split} file of task {task.name!r} is a symbolic "
                                f"link that leads to no file: {os.path.abspath(path)} -> "
                                f"{os.readlink(path)} (a missing target or a loop of links); "
                                "point it at the file, or put the file there", rel)
        elif rel in optional:
            absent.append(path)
        else:
            also = f" (or {' / '.join(aliases[rel])})" if aliases.get(rel) else ""
            if "\\" in str(path):  # C:\data, lf\train.tsv: written on Windows
                also += " (a backslash in the path: on Linux and macOS a folder is /, not \\)"
            raise MissingDataFile(
                f"{where}: {split} file of task {task.name!r} not found: {path.resolve()}{also}",
                rel)
    if not present:
        raise MissingDataFile(
            f"{where}: none of the {split} files of task {task.name!r} is there "
            f"({', '.join(str(p.resolve()) for p in absent)})", relative[0])
    return present, absent


class MissingDataFile(FileNotFoundError):
    """A data file a split needs is not there: `where` names the spec, the split and the
    file; `str()` adds the fix (`with_fix` another one, e.g. a command's own flag)."""

    def __init__(self, where: str, relative: str) -> None:
        super().__init__(where)
        self.where, self.relative = where, relative

    def with_fix(self, fix: str) -> str:
        return f"{self.where}; {fix} (the folder that holds {self.relative})"

    def __str__(self) -> str:
        return (f"{self.where}; pass --data-root DIR (or set MTL_DATA_ROOT) to the folder "
                f"that holds {self.relative}")


# Formats whose split may be a folder (read file by file); every other reads files.
FOLDER_FORMATS = ("text_lines", "doc_folder")


class FolderNotFile(MissingDataFile):
    """A split's file that is a folder: `str()` is the message, which names the fix."""

    def with_fix(self, fix: str) -> str:
        return self.where

    def __str__(self) -> str:
        return self.where


def _counted(examples, report, paths):
    for example in examples:
        # The built-in adapters skip unlabelled records themselves, with their line;
        # this catches a registered adapter that does not (placed by example id).
        if report.labels_required and hasattr(example, "label") and example.label is None:
            report.skip(NO_LABEL, ", ".join(map(str, paths)), f"id {example.id}")
            continue
        report.add(example)
        yield example


def _spec_place(task):
    path = getattr(task, "spec_path", "")
    if path:
        line = getattr(task, "line", 0)
        return f"{path}:{line}" if line else str(path)
    return f"task spec {getattr(task, 'name', '?')!r}"
