"""`mention_table`: delimited rows that name a mention of the row's text
without offsets (COTE's opinion targets, CCKS2019's event subjects). The
mention is placed at its first occurrence; rows sharing a text become one
example.

    options: {delimiter: "\t", header: true, mention_type: target}     # COTE
    fields: {text: text_a, mention: label}

`extraction_ner`: entities of type `mention_type`. `extraction_event`:
`fields.event_type` names the event type column and each row is an event
whose one argument (role `mention_type`) is the mention; labels are event
types or `<event type>:<role>` roles, as for event_json. A row without the
mention column (an unlabelled test split) keeps its text with no mention.
"""
from data_adapters.base import Adapter, register_adapter
from data_adapters.delimited import DelimitedAdapter, rows
from data_adapters.events import Wanted
from data_adapters.examples import Event, EventExample, NERExample
from data_adapters.reading import MISSING, lookup
from data_adapters.relations import ByText, place


@register_adapter("mention_table")
class MentionTableAdapter(Adapter):
    option_keys = {
        "delimiter": (str, "\t"),
        "header": (bool, False),
        "quoting": (str, "auto"),
        "encoding": (str, "utf-8"),
        "mention_type": (str, "mention"),  # entity type, or the argument's role
    }
    field_keys = ("text", "mention", "event_type", "id")
    required_fields = ("text", "mention")
    task_types = ("extraction_ner", "extraction_event")

    def read(self, paths, options, fields, task_type, labels, report):
        events = task_type == "extraction_event"
        if events and fields.get("event_type") is None:
            raise ValueError("format mention_table needs fields.event_type for extraction_event tasks")
        wanted, kind = Wanted(labels), options["mention_type"]
        for path in paths:
            texts, columns, columns_of = ByText(), None, fields
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
                text, mention = lookup(row, columns_of["text"]), lookup(row, columns_of["mention"])
                if text is MISSING or not text.strip():
                    report.skip("empty text", path, line)
                    continue
                if mention is MISSING:
                    report.count("unlabelled")
                    texts.add(text, line)
                    continue
                type_ = lookup(row, columns_of["event_type"]) if events else None
                keep = wanted.role(type_, kind) if events else labels is None or kind in labels
                if not keep:
                    report.filter(f"{type_ or kind} mentions (not in the task's labels)")
                    texts.seen(text, line)
                    continue
                entity = place(text, mention.strip(), kind, "mention")
                if isinstance(entity, str):
                    report.lose_span(entity, path, line)
                    texts.seen(text, line)
                    continue
                texts.add(text, line, Event(type_, None, [entity]) if events else entity)
            make = EventExample if events else NERExample
            yield from texts.examples(make, path, report, what="mention")
