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
import re

from data_adapters.base import Adapter, register_adapter
from data_adapters.examples import Entity, NERExample
from data_adapters.reading import MISSING, lookup, records, text_lines

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
    task_types = ("extraction_ner",)

    def read(self, paths, options, fields, task_type, labels, report):
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
                        report.filter(f"entity type {type_!r} is not in the task's labels",
                                      file=path, line=line)
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


INLINE_MARK = re.compile(r"\{\{([^{}:]+):(.*?)\}\}")


@register_adapter("inline_ner")
class InlineNerAdapter(Adapter):
    option_keys = {"encoding": (str, "utf-8")}
    task_types = ("extraction_ner",)

    def read(self, paths, options, fields, task_type, labels, report):
        for path in paths:
            for number, line in text_lines(path, report, options["encoding"]):
                line = line.rstrip("\r\n")
                if not line.strip():
                    continue
                pieces, entities, size, position = [], [], 0, 0
                for mark in INLINE_MARK.finditer(line):
                    pieces.append(line[position:mark.start()])
                    size += mark.start() - position
                    type_, mention = mark.group(1).strip(), mark.group(2)
                    pieces.append(mention)
                    if not mention:
                        report.lose_span("empty {{type:}} mark", path, number)
                    elif labels is not None and type_ not in labels:
                        report.filter(f"entity type {type_!r} is not in the task's labels",
                                      file=path, line=number)
                    else:
                        entities.append(Entity(size, size + len(mention), type_))
                    size += len(mention)
                    position = mark.end()
                pieces.append(line[position:])
                text = "".join(pieces)
                if "{{" in text:
                    report.lose_span("unclosed or malformed {{type:mention}} mark", path, number)
                yield NERExample(text, entities)
