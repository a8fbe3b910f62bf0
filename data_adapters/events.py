"""`event_json`: DuEE-style events, `{text, id, event_list: [{event_type, trigger,
trigger_start_index, arguments: [{role, argument, argument_start_index}]}]}`.

Offsets given (DuEE 1.0) must round-trip (`text[i:i + len(mention)] == mention`),
else the span is lost. Without offsets (DuEE-Fin, whose events also have no
trigger) a mention is placed at its first occurrence, as for relations.

Labels (`extraction_event`) are event types, which keep whole events, or roles
`<event type>:<role>` with the trigger as role `trigger`, which keep just the
listed parts: `财经/交易-涨价:trigger` for a trigger task, `财经/交易-涨价:时间`
for an argument task. What a task does not list is filtered and counted.

A `classification` task reads one label per document: the argument value that
is one of the labels (DuEE-Fin's 环节 enum: 筹备上市, 正式上市, ...); documents
with none, or with two different ones, are skipped with that reason.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from data_adapters.base import Adapter, register_adapter
from data_adapters.examples import Entity, Event, EventExample, TextExample
from data_adapters.reading import text_records
from data_adapters.task_types import CLASSIFICATION, EXTRACTION_EVENT, type_names

if TYPE_CHECKING:
    from collections.abc import Iterator

    from data_adapters.base import Fields, Labels, Options
    from data_adapters.examples import Example
    from data_adapters.report import ReadReport

TRIGGER = "trigger"


def place(text, mention, start, type_, what):
    """Entity for mention at `start` (or at its first occurrence if None), or a reason."""
    if not isinstance(mention, str) or not mention:
        return f"{what} is empty"
    if start is None:
        start = text.find(mention)
        if start < 0:
            return f"{what} not found in the text"
    elif not isinstance(start, int) or isinstance(start, bool):
        return f"{what} start index is not a number"
    elif start < 0 or text[start:start + len(mention)] != mention:
        return f"{what} start index does not point at the {what}"
    return Entity(start, start + len(mention), type_)


class Wanted:
    """Which events, triggers and roles a task's labels keep."""

    def __init__(self, labels):
        self.labels = set(labels) if labels is not None else None

    def event(self, type_):
        return self.labels is None or type_ in self.labels

    def role(self, type_, role):
        return self.event(type_) or f"{type_}:{role}" in self.labels


@register_adapter("event_json")
class EventJsonAdapter(Adapter):
    task_types = type_names(EXTRACTION_EVENT, CLASSIFICATION)

    def read(self, paths: list[str], options: Options, fields: Fields, task_type: str | None,
             labels: Labels, report: ReadReport) -> Iterator[Example]:
        wanted = Wanted(labels)
        for path in paths:
            for line, record, text in text_records(path, report):
                event_list = record.get("event_list")
                if event_list is not None and (not isinstance(event_list, list) or
                                               not all(isinstance(e, dict) for e in event_list)):
                    report.skip("`event_list` is not a list of objects", path, line)
                    continue
                if task_type == CLASSIFICATION.name:
                    example = self.document_label(text, event_list, labels, path, line, report)
                    if example is not None:
                        yield example
                    continue
                if event_list is None:
                    report.count("unlabelled")
                    yield EventExample(text, [], record.get("id"))
                    continue
                events = [event for event in (self.event(text, e, wanted, path, line, report)
                                              for e in event_list) if event is not None]
                yield EventExample(text, events, record.get("id"))

    @staticmethod
    def event(text, entry, wanted, path, line, report):
        type_ = str(entry.get("event_type"))
        trigger = None
        if "trigger" in entry:
            if wanted.role(type_, TRIGGER):
                trigger = place(text, entry["trigger"], entry.get("trigger_start_index"), TRIGGER, "trigger")
                if isinstance(trigger, str):
                    report.lose_span(trigger, path, line)
                    trigger = None
            else:
                report.filter("trigger of an event type/role not in the task's labels")
        arguments = []
        for argument in entry.get("arguments") or []:
            role = str(argument.get("role")) if isinstance(argument, dict) else None
            if role is None:
                report.lose_span("argument is not an object", path, line)
                continue
            if not wanted.role(type_, role):
                report.filter("argument of an event type/role not in the task's labels")
                continue
            entity = place(text, argument.get("argument"), argument.get("argument_start_index"),
                           role, "argument")
            if isinstance(entity, str):
                report.lose_span(entity, path, line)
            else:
                arguments.append(entity)
        if trigger is None and not arguments:
            return None
        return Event(type_, trigger, arguments)

    @staticmethod
    def document_label(text, event_list, labels, path, line, report):
        values = []
        for entry in event_list or []:
            for argument in entry.get("arguments") or []:
                value = argument.get("argument") if isinstance(argument, dict) else None
                if labels is not None and value in labels and value not in values:
                    values.append(value)
        if len(values) != 1:
            reason = ("no event argument is one of the labels" if not values
                      else "several different labels among the event arguments")
            report.skip(reason, path, line)
            return None
        return TextExample(text, None, values[0])
