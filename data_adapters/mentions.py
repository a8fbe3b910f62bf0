"""`mention_table`: delimited rows that name a mention of the row's text
without offsets (COTE's opinion targets, CCKS2019's event subjects). The
mention is placed at its first occurrence; rows sharing a text become one
example.

    options: {delimiter: "\t", header: true, mention_type: target}     # COTE
    fields: {text: text_a, mention: label}

`mention_jsonl` reads the same from JSON lines (COTE as published: `{"s", "ot"}`).

`extraction_ner`: entities of type `mention_type`. `extraction_event`:
`fields.event_type` names the event type column and each row is an event
whose one argument (role `mention_type`) is the mention; labels are event
types or `<event type>:<role>` roles, as for event_json. A row without the
mention column (an unlabelled test split) keeps its text with no mention.
`no_event: 其他` reads rows of that event type as "no target event in this
text": the text is kept as a negative (CCKS2019's rows of type 其他, subject NaN).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from data_adapters.base import Adapter, register_adapter
from data_adapters.delimited import DelimitedAdapter, rows
from data_adapters.events import Wanted
from data_adapters.examples import Event, EventExample, NERExample
from data_adapters.reading import MISSING, json_records, lookup
from data_adapters.relations import ByText, place
from data_adapters.task_types import EXTRACTION_EVENT, EXTRACTION_NER, type_names

if TYPE_CHECKING:
    from collections.abc import Iterator

    from data_adapters.base import Fields, Labels, Options
    from data_adapters.examples import Example
    from data_adapters.report import ReadReport


@register_adapter("mention_table")
class MentionTableAdapter(Adapter):
    option_keys = {
        "delimiter": (str, "\t"),
        "header": (bool, False),
        "quoting": (str, "auto"),
        "encoding": (str, "utf-8"),
        "mention_type": (str, "mention"),  # entity type, or the argument's role
        # the event type that means "no target event here" (CCKS2019's 其他)
        "no_event": (str, None),
    }
    field_keys = ("text", "mention", "event_type", "id")
    required_fields = ("text", "mention")
    task_types = type_names(EXTRACTION_NER, EXTRACTION_EVENT)

    def read(self, paths: list[str], options: Options, fields: Fields, task_type: str | None,
             labels: Labels, report: ReadReport) -> Iterator[Example]:
        events = task_type == EXTRACTION_EVENT.name
        if events and fields.get("event_type") is None:
            raise ValueError(f"format {self.format_name} needs fields.event_type for "
                             f"{EXTRACTION_EVENT.name} tasks")
        wanted, kind = Wanted(labels), options["mention_type"]
        for path in paths:
            texts = ByText()
            for line, text, mention, type_ in self.mentions(path, options, fields, report):
                if not isinstance(text, str) or not text.strip():
                    report.skip("empty text", path, line)
                    continue
                if mention is MISSING:
                    report.count("unlabelled")
                    texts.add(text, line)
                    continue
                if events and options.get("no_event") is not None and type_ == options["no_event"]:
                    # The text has no event of the task's types: a negative to learn from.
                    report.filter(f"{type_} rows: the text kept with no event (a negative)")
                    texts.add(text, line)
                    continue
                keep = wanted.role(type_, kind) if events else labels is None or kind in labels
                if not keep:
                    report.filter(f"{type_ or kind} mentions (not in the task's labels)")
                    texts.seen(text, line)
                    continue
                entity = place(text, str(mention).strip(), kind, "mention")
                if isinstance(entity, str):
                    report.lose_span(entity, path, line)
                    texts.seen(text, line)
                    continue
                texts.add(text, line, Event(type_, None, [entity]) if events else entity,
                          report, path, "event" if events else "entity")
            make = EventExample if events else NERExample
            yield from texts.examples(make, path, report, what="mention")

    @staticmethod
    def mentions(path, options, fields, report):
        """(line, text, mention or MISSING, event type) for each usable row."""
        columns, columns_of = None, fields
        for line, row in rows(path, options, report):
            if columns is None:
                columns = len(row)
                if options["header"]:
                    columns_of = DelimitedAdapter.header_columns(fields, row, path,
                                                                optional=("mention", "id"))
                    continue
            if len(row) != columns:
                report.skip(f"row has {len(row)} columns, expected {columns}", path, line)
                continue
            type_ = lookup(row, columns_of["event_type"]) if fields.get("event_type") is not None else None
            yield line, lookup(row, columns_of["text"]), lookup(row, columns_of["mention"]), type_


@register_adapter("mention_jsonl")
class MentionJsonAdapter(MentionTableAdapter):
    """The same rows as JSON lines, a key per field: COTE as its authors publish it
    (github.com/lsvih/chinese-customer-review, the download LUGE links):
    `{"s": text, "ot": opinion target}` per line.

        fields: {text: s, mention: ot}
    """
    option_keys = {"mention_type": (str, "mention"), "no_event": (str, None)}

    @staticmethod
    def mentions(path, options, fields, report):
        for line, record in json_records(path, report):
            if not isinstance(record, dict):
                report.skip("not a JSON object", path, line)
                continue
            type_ = lookup(record, fields["event_type"]) if fields.get("event_type") is not None else None
            yield line, lookup(record, fields["text"]), lookup(record, fields["mention"]), type_
