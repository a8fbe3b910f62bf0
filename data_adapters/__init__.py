"""Adapters: one module per file-format family, each turning real files into typed examples.

    from data_adapters import read_task, ReadReport
    report = ReadReport()
    for example in read_task(task, "train", data_root, report):
        ...
    print(report.summary())

Formats are looked up by name (`format:` in a task spec): `get_adapter`,
`available_formats`, and `register_adapter` for your own (see base.py).
"""
from pathlib import Path

from data_adapters.base import (Adapter, UnknownFormatError, available_formats, get_adapter,
                                register_adapter)
from data_adapters.examples import (ChoiceExample, CorefExample, Entity, Event, EventExample,
                                    NERExample, RelationExample, Span, SpanQAExample, TextExample,
                                    Triple)
from data_adapters.report import NO_LABEL, UNLABELLED_SPLITS, ReadReport

# The built-in formats register themselves on import.
from data_adapters import (choice, coref, delimited, doc_folder, events, jsonl,  # noqa: E402,F401
                           mentions, ner_spans, ner_tags, parquet, qa, relations,
                           text_lines)

__all__ = [
    "Adapter", "ReadReport", "UnknownFormatError", "available_formats", "get_adapter",
    "register_adapter", "read_files", "read_task",
    "ChoiceExample", "CorefExample", "Entity", "Event", "EventExample", "NERExample",
    "RelationExample", "Span", "SpanQAExample", "TextExample", "Triple",
]


def read_files(format_name, paths, options=None, fields=None, task_type=None, labels=None,
               report=None, where=None, labels_required=False):
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
    paths = [str(p) for p in ([paths] if isinstance(paths, (str, Path)) else paths)]
    report = report if report is not None else ReadReport()
    report.labels_required = labels_required
    examples = adapter().read(paths, options, fields, task_type, labels, report)
    return _counted(examples, report, paths)


# Task types whose examples carry a label to learn (mlm and the span families do not).
LABELLED_TYPES = ("classification", "matching", "regression", "multiple_choice", "cloze",
                  "coreference")


def read_task(task, split, data_root, report=None):
    """Typed examples of one split of a task (a registry TaskSpec or anything with
    .name .format .files .options .fields .type .labels).

    Labels are required in every split but a test split (UNLABELLED_SPLITS) of a
    labelled task type: an unlabelled train or dev record is skipped and counted with
    its place.

    Missing files raise FileNotFoundError here, before any example is read."""
    where = _spec_place(task)
    files = task.files or {}
    if split not in files:
        raise KeyError(f"{where}: task {task.name!r} has no {split!r} split; "
                       f"its files list {', '.join(files) or 'none'}")
    relative = files[split] if isinstance(files[split], list) else [files[split]]
    paths = [Path(data_root) / p for p in relative]  # an absolute p stays as it is
    for rel, path in zip(relative, paths):
        if not path.exists():
            raise FileNotFoundError(
                f"{where}: {split} file of task {task.name!r} not found: {path.resolve()}; "
                f"pass --data-root DIR (or set MTL_DATA_ROOT) to the folder that holds {rel}")
    resolve = getattr(task, "resolve_labels", None)
    labels = resolve(data_root) if callable(resolve) else getattr(task, "labels", None)
    return read_files(task.format, paths, task.options, task.fields, task.type, labels,
                      report, where=f"{where}: task {task.name!r}",
                      labels_required=split not in UNLABELLED_SPLITS
                      and task.type in LABELLED_TYPES)


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
