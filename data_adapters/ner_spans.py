"""`span_json`: NER records with character offsets, in two styles.

`cluener` (default): `{"text": ..., "label": {type: {mention: [[start, end], ...]}}}`,
ends inclusive.
`list`: `{"text": ..., "entities": [{"start_idx", "end_idx", "type", "entity"}]}`
(CMeEE, ends inclusive); key names are fields, so Yidu-S4K reads as

    fields: {text: originalText, start: start_pos, end: end_pos, type: label_type}
    options: {style: list, end_inclusive: false}

Every span must round-trip: `text[start:end]` equals the mention where the
record gives one, and lies inside the text; otherwise it is a lost span.
Records may be JSON lines, pretty-printed objects, or one JSON array.

`inline_ner`: one text per line with entities marked in place as
`{{type:mention}}` (BosonNLP); the markers are removed from the text.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from data_adapters.base import Adapter, register_adapter
from data_adapters.examples import Entity, NERExample
from data_adapters.ner_tags import not_in_labels
from data_adapters.reading import MISSING, lookup, records, text_lines
from data_adapters.task_types import EXTRACTION_NER, type_names

if TYPE_CHECKING:
    from collections.abc import Iterator

    from data_adapters.base import Fields, Labels, Options
    from data_adapters.examples import Example
    from data_adapters.report import ReadReport

STYLE_FIELDS = {
    "cluener": {"text": "text", "entities": "label"},
    "list": {"text": "text", "entities": "entities", "start": "start_idx", "end": "end_idx",
             "type": "type", "mention": "entity"},
}


@register_adapter("span_json")
class SpanJsonAdapter(Adapter):
    option_keys = {
        "style": (str, "cluener"),  # cluener | list
        "end_inclusive": (bool, True),  # CLUENER and CMeEE: yes; Yidu-S4K: no
    }
    field_keys = ("text", "entities", "start", "end", "type", "mention")
    task_types = type_names(EXTRACTION_NER)

    def read(self, paths: list[str], options: Options, fields: Fields, task_type: str | None,
             labels: Labels, report: ReadReport) -> Iterator[Example]:
        style = options["style"]
        if style not in STYLE_FIELDS:
            raise ValueError(f"option style must be cluener or list, got {style!r}")
        fields = {**STYLE_FIELDS[style], **fields}
        shift = 1 if options["end_inclusive"] else 0
        for path in paths:
            for line, record in records(path, report):
                text = lookup(record, fields["text"])
                if not isinstance(text, str):
                    report.skip(f"record without a {fields['text']!r} text", path, line)
                    continue
                annotations = lookup(record, fields["entities"])
                if annotations is MISSING or annotations is None:
                    report.count("unlabelled")  # test splits
                    yield NERExample(text, [], record.get("id"))
                    continue
                spans = (self.cluener_spans(annotations) if style == "cluener"
                         else self.list_spans(annotations, fields))
                if spans is None:
                    report.skip(f"{fields['entities']!r} is not in the {style} style", path, line)
                    continue
                entities = []
                for start, end, type_, mention in spans:
                    if labels is not None and type_ not in labels:
                        report.filter(not_in_labels(type_), file=path, line=line)
                        continue
                    reason = self.check(text, start, end, shift, mention)
                    if reason:
                        report.lose_span(reason, path, line)
                        continue
                    entities.append(Entity(start, end + shift, type_))
                yield NERExample(text, entities, record.get("id"))

    @staticmethod
    def cluener_spans(label):
        if not isinstance(label, dict):
            return None
        spans = []
        for type_, mentions in label.items():
            if not isinstance(mentions, dict):
                return None
            for mention, places in mentions.items():
                for place in places if isinstance(places, list) else [None]:
                    if isinstance(place, list) and len(place) == 2:
                        spans.append((place[0], place[1], type_, mention))
                    else:
                        spans.append((None, None, type_, mention))
        return spans

    @staticmethod
    def list_spans(entities, fields):
        if not isinstance(entities, list):
            return None
        spans = []
        for entity in entities:
            get = (lambda key: lookup(entity, fields[key]) if fields.get(key) else MISSING)
            mention = get("mention")
            spans.append((get("start"), get("end"), str(get("type")),
                          None if mention is MISSING else mention))
        return spans

    @staticmethod
    def check(text, start, end, shift, mention):
        """None when text[start:end + shift] is a fine span, else the reason."""
        if not (isinstance(start, int) and isinstance(end, int)) or isinstance(start, bool):
            return "offsets are not [start, end] numbers"
        if not 0 <= start < end + shift <= len(text):
            return "offsets outside the text (or end before start)"
        if mention is not None and text[start:end + shift] != mention:
            return "offsets do not match the mention"
        return None


PADDING = ("space (or NBSP) padding at an edge of a {{type:mention}} mark (each edge counted), "
           "left out of the entity")
OPEN_MARK = re.compile(r"\{\{([^{}:\s]+):")


@register_adapter("inline_ner")
class InlineNerAdapter(Adapter):
    """BosonNLP's marks as its readme means them: `{{type:mention}}` around a mention.

    The release also holds, and this reads as meant: marks nested in a mark
    (`{{product_name:{{product_name:腾讯汽车}}}}`: one entity, counted under
    `repaired`; nested marks of two types are two entities), marks padded with spaces
    (`{{person_name: 施宇翔}}`: the padding belongs to the mark, not to the text) and literal `\\n` escapes in
    the text (`unescape_newlines`: read as line breaks). A mark that never closes
    or a `}}` that closes nothing is a lost span at its line; its text stays
    as written.
    """
    option_keys = {"encoding": (str, "utf-8"), "unescape_newlines": (bool, True)}
    task_types = type_names(EXTRACTION_NER)

    def read(self, paths: list[str], options: Options, fields: Fields, task_type: str | None,
             labels: Labels, report: ReadReport) -> Iterator[Example]:
        for path in paths:
            for number, line in text_lines(path, report, options["encoding"]):
                line = line.rstrip("\r\n")
                if not line.strip():
                    continue
                if options["unescape_newlines"] and "\\n" in line:
                    report.repair("literal \\n escapes read as line breaks", line.count("\\n"))
                    line = line.replace("\\n", "\n")
                text, marks = self.parse(line, path, number, report)
                entities = []
                for start, end, type_ in marks:
                    if labels is not None and type_ not in labels:
                        report.filter(not_in_labels(type_), file=path, line=number)
                    else:
                        entities.append(Entity(start, end, type_))
                yield NERExample(text, entities)

    @staticmethod
    def parse(line, path, number, report):
        """(text without marks, [(start, end, type)]) of one marked line."""
        pieces, size, position = [], 0, 0
        stack, marks = [], []  # stack: [type, start in text, the opening as written]
        while position < len(line):
            opening = OPEN_MARK.match(line, position) if line.startswith("{{", position) else None
            if opening:
                stack.append([opening.group(1), size, opening.group(0)])
                position = opening.end()
                padded = position
                while position < len(line) and line[position].isspace():  # padding after `:`
                    position += 1
                if position > padded:
                    report.repair(PADDING)
                    stack[-1][2] = line[opening.start():position]
                continue
            if line.startswith("}}", position) and stack:
                type_, start, _ = stack.pop()
                if pieces and pieces[-1].isspace() and size > start:
                    report.repair(PADDING)
                while pieces and pieces[-1].isspace() and size > start:  # padding before `}}`
                    pieces.pop()
                    size -= 1
                if (stack and stack[-1][:2] == [type_, start]
                        and line.startswith("}}", position + 2)):
                    # {{t:{{t:x}}}}: the outer mark, same type, closes right after the inner one
                    report.repair("nested {{type:{{type:mention}}}} marks read as one entity")
                    position += 2
                    continue
                if size == start:
                    report.lose_span("empty {{type:}} mark", path, number)
                else:
                    marks.append((start, size, type_))
                position += 2
                continue
            if line.startswith("}}", position):
                report.lose_span("a }} that closes no mark (kept as text)", path, number)
            pieces.append(line[position])
            size += 1
            position += 1
        for type_, at, raw in reversed(stack):  # a mark that never closes stays as text
            report.lose_span("unclosed or malformed {{type:mention}} mark", path, number)
            pieces.insert(at, raw)
            marks = [(a + len(raw) if a >= at else a, b + len(raw) if b > at else b, t)
                     for a, b, t in marks]
        return "".join(pieces), marks
