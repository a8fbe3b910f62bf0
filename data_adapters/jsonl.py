"""`jsonl` and `json_array`: one JSON object per text (pair) with its label.

CLUE/FewCLUE, CBLUE, QBQTC, CAIL... Fields name source keys (dotted keys reach
into nested objects: `meta.accusation`); a list of keys, or a list value such
as CSL's keywords, is joined with `join`:

    fields: {text: abst, text_b: keyword, label: label}
    options: {join: "，", skip_labels: ["-"]}

A record without the label key is read as unlabelled in a test split (and
counted as such in the report); in any other split it is skipped with its line.
"""
from data_adapters.base import Adapter, register_adapter
from data_adapters.examples import TextExample
from data_adapters.reading import MISSING, LabelRule, field_text, json_array_records, json_records, lookup

TEXT_TASKS = ("classification", "matching", "regression")


def text_example(record, fields, options, rule, where, report):
    """A TextExample from a flat record (dict or row), or None after report.skip."""
    path, line = where
    text, missing = field_text(record, fields["text"], options["join"])
    if text is MISSING:
        report.skip(f"missing field {missing!r} (fields.text)", path, line)
        return None
    if not text.strip():
        report.skip("empty text", path, line)
        return None
    text_b = None
    if fields.get("text_b") is not None:
        text_b, missing = field_text(record, fields["text_b"], options["join"])
        if text_b is MISSING:
            report.skip(f"missing field {missing!r} (fields.text_b)", path, line)
            return None
    raw = lookup(record, fields["label"]) if fields.get("label") is not None else MISSING
    label, reason = rule.check(raw)
    if reason:
        report.skip(reason, path, line)
        return None
    if label is None and report.missing_label(path, line):
        return None
    id_ = lookup(record, fields["id"]) if fields.get("id") is not None else None
    return TextExample(text, text_b, label, None if id_ is MISSING else id_)


@register_adapter("jsonl")
class JsonLinesAdapter(Adapter):
    option_keys = {
        "skip_labels": (list, []),  # raw labels whose records are left out, e.g. OCNLI's "-"
        "label_map": (dict, {}),  # raw label -> label name
        "join": (str, "，"),  # between joined keys / list items
    }
    field_keys = ("text", "text_b", "label", "id")
    required_fields = ("text", "label")
    task_types = TEXT_TASKS

    def records(self, path, report):
        return json_records(path, report)

    def read(self, paths, options, fields, task_type, labels, report):
        rule = LabelRule(task_type, labels, options["skip_labels"], options["label_map"])
        for path in paths:
            for line, record in self.records(path, report):
                if not isinstance(record, dict):
                    report.skip(f"not a JSON object (a {type(record).__name__}); one object per "
                                "record expected (a file holding one array is format json_array)",
                                path, line)
                    continue
                example = text_example(record, fields, options, rule, (path, line), report)
                if example is not None:
                    yield example


@register_adapter("json_array")
class JsonArrayAdapter(JsonLinesAdapter):
    """One JSON array of objects (CBLUE): same fields and options as jsonl."""

    def records(self, path, report):
        return json_array_records(path, report)
