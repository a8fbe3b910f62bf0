"""`jsonl` and `json_array`: one JSON object per text (pair) with its label.

CLUE/FewCLUE, CBLUE, QBQTC, CAIL... Fields name source keys (dotted keys reach
into nested objects: `meta.accusation`); a list of keys, or a list value such
as CSL's keywords, is joined with `join`:

    fields: {text: abst, text_b: keyword, label: label}
    options: {join: "，", skip_labels: ["-"]}

`text_b_optional: true` reads a record without the text_b key as one text (`mtl
predict` sets it for classification and regression tasks: TNEWS titles without
keywords). `strip_label_chars: "[]"` removes those characters from raw labels before they
are checked (CAIL2018's bracketed charges, as its judger reads them).

A record without the label key is read as unlabelled in a test split (and
counted as such in the report); in any other split it is skipped with its line.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from data_adapters.base import Adapter, register_adapter
from data_adapters.examples import TextExample
from data_adapters.reading import (
    MISSING,
    LabelRule,
    field_text,
    json_array_records,
    json_records,
    lookup,
    records,
)
from data_adapters.task_types import CLASSIFICATION, TEXT_TASKS, type_names

if TYPE_CHECKING:
    from collections.abc import Iterator

    from data_adapters.base import Fields, Labels, Options
    from data_adapters.examples import Example
    from data_adapters.report import ReadReport


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
        if text_b is MISSING and options.get("text_b_optional"):
            text_b = None
        elif text_b is MISSING:
            report.skip(f"missing field {missing!r} (fields.text_b)", path, line)
            return None
    raw = lookup(record, fields["label"]) if fields.get("label") is not None else MISSING
    if options.get("strip_label_chars") and raw is not MISSING and raw is not None:
        raw = strip_chars(raw, options["strip_label_chars"], report)
    label, reason = rule.check(raw)
    if reason:
        report.skip(reason, path, line)
        return None
    if label is None and report.missing_label(path, line):
        return None
    id_ = lookup(record, fields["id"]) if fields.get("id") is not None else None
    return TextExample(text, text_b, label, None if id_ is MISSING else id_)


def strip_chars(raw, chars, report):
    """A raw label (or list of them) without `chars`, as CAIL2018's judger reads
    charges (`[生产、销售]假药` is accu.txt's `生产、销售假药`); counted when it changes."""
    if isinstance(raw, list):
        return [strip_chars(item, chars, report) for item in raw]
    if not isinstance(raw, str):
        return raw
    clean = raw.translate({ord(c): None for c in chars})
    if clean != raw:
        report.repair(f"label characters {chars!r} removed (the publisher's scorer removes them)")
    return clean


@register_adapter("jsonl")
class JsonLinesAdapter(Adapter):
    option_keys = {
        "skip_labels": (list, []),  # raw labels whose records are left out, e.g. OCNLI's "-"
        "label_map": (dict, {}),  # raw label -> label name
        "join": (str, "，"),  # between joined keys / list items
        "strip_label_chars": (str, ""),  # removed from raw labels first, e.g. "[]"
        "text_b_optional": (bool, False),  # a record without text_b: one text (mtl predict sets it)
    }
    field_keys = ("text", "text_b", "label", "id")
    required_fields = ("text", "label")
    task_types = TEXT_TASKS

    def records(self, path, report):
        return json_records(path, report)

    def read(self, paths: list[str], options: Options, fields: Fields, task_type: str | None,
             labels: Labels, report: ReadReport) -> Iterator[Example]:
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


@register_adapter("cdn_json")
class CdnCountAdapter(Adapter):
    """CHIP-CDN as CBLUE publishes it, a JSON array of `{"text", "normalized_result":
    "term##term"}`, read as the CBLUE baseline's `cdn_num` stage reads it
    (cblue/data/data_process.py, CDNDataProcessor._get_num_samples): a mention ->
    how many standard terms it normalises to, label min(count, `max_count`) - 1,
    so with 3 labels "0" = one term, "1" = two, "2" = three or more. A record
    whose result holds no term is skipped with its line (the release has none).
    """
    option_keys = {"separator": (str, "##"), "max_count": (int, 3)}
    field_keys = ("text", "terms", "id")
    field_defaults = {"text": "text", "terms": "normalized_result"}
    task_types = type_names(CLASSIFICATION)

    def read(self, paths: list[str], options: Options, fields: Fields, task_type: str | None,
             labels: Labels, report: ReadReport) -> Iterator[Example]:
        rule = LabelRule(task_type, labels)
        for path in paths:
            for line, record in records(path, report):
                text = lookup(record, fields["text"])
                if not isinstance(text, str) or not text.strip():
                    report.skip(f"missing or empty {fields['text']!r}", path, line)
                    continue
                terms = lookup(record, fields["terms"])
                if terms is MISSING or terms is None:
                    if report.missing_label(path, line):
                        continue
                    yield TextExample(text, id=self.id_of(record, fields))
                    continue
                count = len([t for t in str(terms).split(options["separator"]) if t.strip()])
                if count == 0:
                    report.skip(f"{fields['terms']!r} holds no term", path, line)
                    continue
                label, reason = rule.check(str(min(count, options["max_count"]) - 1))
                if reason:
                    report.skip(reason, path, line)
                    continue
                yield TextExample(text, label=label, id=self.id_of(record, fields))

    @staticmethod
    def id_of(record, fields):
        value = lookup(record, fields["id"]) if fields.get("id") is not None else MISSING
        return None if value is MISSING else value
