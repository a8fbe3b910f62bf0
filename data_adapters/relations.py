"""Relations: `spo_json` (DuIE, SKE, CMeIE) and `entity_pair_tsv` (FinRE, SanWen).

Neither gives offsets, so each mention is placed at its first occurrence in
the text, the rule of bert4keras's GPLinker example (`search`); a mention that
does not occur is a lost span and its triple is dropped. In `entity_pair_tsv`,
an argument whose first occurrence lies inside the other's (`友达` in `友达光电`)
is moved to its first occurrence outside it when the text has one (counted as
repaired, and so are those that cannot move); a triple or entity a text repeats
(rows merged by text) is kept once and counted as a duplicate.

`spo_json`: `{text, spo_list: [{subject, subject_type, predicate, object, object_type}]}`
where object/object_type are strings (DuIE 1.0) or `{"@value": ..., slot: ...}`
(DuIE 2.0, CMeIE). For `extraction_relation` the triple is (subject, predicate,
object @value); a DuIE 2.0 slot such as `inWork` becomes a triple with
predicate `饰演_inWork` when the task lists that label (Baidu's convention),
else it is filtered and counted. For `extraction_ner` the entities are every
subject, object and slot mention, typed by subject_type / object_type.

`entity_pair_tsv`: `head<TAB>tail<TAB>relation<TAB>text` rows (FinRE, SanWen)
and `ipre` (CCKS2019 IPRE's sentence + relation-id files): rows sharing a text
become one example, so that the text's other pairs are not read as negatives.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from data_adapters.base import Adapter, register_adapter
from data_adapters.examples import Entity, NERExample, RelationExample, Triple
from data_adapters.reading import text_lines, text_records
from data_adapters.task_types import EXTRACTION_NER, EXTRACTION_RELATION, type_names

if TYPE_CHECKING:
    from collections.abc import Iterator

    from data_adapters.base import Fields, Labels, Options
    from data_adapters.examples import Example
    from data_adapters.report import ReadReport

VALUE = "@value"


def place(text, mention, type_, role):
    """Entity at the first occurrence of mention, or the reason it has none."""
    if not isinstance(mention, str) or not mention:
        return f"{role} is empty"
    start = text.find(mention)
    if start < 0:
        return f"{role} not found in the text"
    return Entity(start, start + len(mention), type_)


def value(item):
    return item.get(VALUE) if isinstance(item, dict) else item


def slots(item):
    """(slot, value) pairs of a DuIE 2.0 complex object besides @value."""
    return [(k, v) for k, v in item.items() if k != VALUE] if isinstance(item, dict) else []


@register_adapter("spo_json")
class SpoJsonAdapter(Adapter):
    task_types = type_names(EXTRACTION_RELATION, EXTRACTION_NER)

    def read(self, paths: list[str], options: Options, fields: Fields, task_type: str | None,
             labels: Labels, report: ReadReport) -> Iterator[Example]:
        read_example = self.entities if task_type == EXTRACTION_NER.name else self.triples
        empty = NERExample if task_type == EXTRACTION_NER.name else RelationExample
        for path in paths:
            for line, record, text in text_records(path, report):
                spo_list = record.get("spo_list")
                if spo_list is None:
                    report.count("unlabelled")
                    yield empty(text, [], record.get("id"))
                    continue
                if not isinstance(spo_list, list) or not all(isinstance(s, dict) for s in spo_list):
                    report.skip("`spo_list` is not a list of objects", path, line)
                    continue
                yield read_example(text, spo_list, labels, path, line, report, record.get("id"))

    @staticmethod
    def triples(text, spo_list, labels, path, line, report, id_):
        triples = []
        for spo in spo_list:
            predicate = str(spo.get("predicate"))
            if labels is not None and predicate not in labels:
                report.filter(f"predicate {predicate!r} is not in the task's labels")
                continue
            subject = place(text, spo.get("subject"), str(value(spo.get("subject_type"))), "subject")
            object_ = place(text, value(spo.get("object")), str(value(spo.get("object_type"))), "object")
            for entity in (subject, object_):
                if isinstance(entity, str):
                    report.lose_span(entity, path, line)
                    break
            else:
                triples.append(Triple(subject, predicate, object_))
                object_types = spo.get("object_type") if isinstance(spo.get("object_type"), dict) else {}
                for slot, mention in slots(spo.get("object")):
                    name = f"{predicate}_{slot}"
                    if labels is None or name not in labels:
                        report.filter(f"object slot {slot!r} "
                                      f"(list '<predicate>_{slot}' in labels to keep it)")
                        continue
                    entity = place(text, mention, str(object_types.get(slot, slot)), f"{slot} object")
                    if isinstance(entity, str):
                        report.lose_span(entity, path, line)
                    else:
                        triples.append(Triple(subject, name, entity))
        return RelationExample(text, triples, id_)

    @staticmethod
    def entities(text, spo_list, labels, path, line, report, id_):
        entities = []
        for spo in spo_list:
            object_types = spo.get("object_type")
            mentions = [(spo.get("subject"), value(spo.get("subject_type")), "subject"),
                        (value(spo.get("object")), value(object_types), "object")]
            for slot, mention in slots(spo.get("object")):
                slot_type = object_types.get(slot) if isinstance(object_types, dict) else None
                mentions.append((mention, slot_type, f"{slot} object"))
            for mention, type_, role in mentions:
                type_ = str(type_)
                if labels is not None and type_ not in labels:
                    report.filter(f"entity type {type_!r} is not in the task's labels")
                    continue
                entity = place(text, mention, type_, role)
                if isinstance(entity, str):
                    report.lose_span(entity, path, line)
                elif entity not in entities:  # one mention often serves several triples
                    entities.append(entity)
        return NERExample(text, entities, id_)


class ByText:
    """Rows that share a text, gathered into one example each, in first-seen order."""

    def __init__(self):
        self.texts = {}  # text -> [first line, items, whether any row made it]

    def add(self, text, line, item=None, report=None, path=None, what="triple"):
        """An item of `text`'s example; one equal to an item already there (a row given
        twice, as COTE and FinRE do) is kept once and counted as a duplicate."""
        entry = self.texts.setdefault(text, [line, [], False])
        if item is not None:
            if item in entry[1]:
                if report is not None:
                    report.filter(f"duplicate {what} of the same text (kept once)", 1, path, line)
            else:
                entry[1].append(item)
        entry[2] = True

    def seen(self, text, line):
        self.texts.setdefault(text, [line, [], False])

    def examples(self, make, path, report, what="pair"):
        for text, (line, items, kept) in self.texts.items():
            if kept:
                yield make(text, items)
            else:
                report.skip(f"no {what} of this text could be placed", path, line)


@register_adapter("entity_pair_tsv")
class EntityPairTsvAdapter(Adapter):
    """`no_relation: unknown` reads that relation as "no relation between the
    pair": the text is kept (a negative) without a triple for it."""
    option_keys = {"delimiter": (str, "\t"), "encoding": (str, "utf-8"),
                   "no_relation": (str, None)}
    field_keys = ("head", "tail", "label", "text")
    field_defaults = {"head": 0, "tail": 1, "label": 2, "text": 3}
    task_types = type_names(EXTRACTION_RELATION)

    def read(self, paths: list[str], options: Options, fields: Fields, task_type: str | None,
             labels: Labels, report: ReadReport) -> Iterator[Example]:
        if not all(isinstance(column, int) for column in fields.values()):
            raise ValueError(f"fields of format entity_pair_tsv are column indexes, got {fields}")
        needed = max(fields.values()) + 1
        for path in paths:
            texts = ByText()
            for number, line in text_lines(path, report, options["encoding"]):
                line = line.rstrip("\r\n")
                if not line.strip():
                    continue
                row = line.split(options["delimiter"])
                if len(row) < needed:
                    report.skip(f"row has {len(row)} columns, needs {needed} (head, tail, "
                                "relation, text)", path, number)
                    continue
                text, relation = row[fields["text"]], row[fields["label"]].strip()
                add_pair(texts, text, row[fields["head"]], row[fields["tail"]], relation,
                         options["no_relation"], labels, path, number, report)
            yield from texts.examples(RelationExample, path, report)


def add_pair(texts, text, head, tail, relation, no_relation, labels, path, line, report):
    """One (head, relation, tail) row into its text's group."""
    if relation == no_relation:
        texts.add(text, line)
        return
    if labels is not None and relation not in labels:
        report.skip(f"relation {relation!r} is not in the task's labels", path, line)
        texts.seen(text, line)
        return
    head, tail = place(text, head, "head", "head"), place(text, tail, "tail", "tail")
    if isinstance(head, str) or isinstance(tail, str):
        report.lose_span(head if isinstance(head, str) else tail, path, line)
        texts.seen(text, line)
        return
    head, tail = apart(text, head, tail, report)
    texts.add(text, line, Triple(head, relation, tail), report, path)


def inside(a, b):
    return b.start <= a.start and a.end <= b.end


def apart(text, head, tail, report):
    """(head, tail) with the one placed inside the other (`友达` in `友达光电`, both at
    their first occurrence) moved to its first occurrence outside the other's span,
    when the text has one; counted either way."""
    for inner, outer, role in ((head, tail, "head"), (tail, head, "tail")):
        if inner == outer or not inside(inner, outer):
            continue
        mention, start = text[inner.start:inner.end], text.find(text[inner.start:inner.end])
        while start >= 0:
            moved = Entity(start, start + len(mention), inner.type)
            if not (moved.start < outer.end and outer.start < moved.end):  # no overlap
                report.repair(f"{role} placed at a later occurrence, outside the "
                              f"{'tail' if role == 'head' else 'head'} that holds its first")
                return (moved, tail) if role == "head" else (head, moved)
            start = text.find(mention, start + 1)
        report.repair(f"{role} inside the {'tail' if role == 'head' else 'head'}: the text "
                      "has no occurrence outside it (kept nested)")
        break
    return head, tail


@register_adapter("ipre")
class IpreAdapter(Adapter):
    """CCKS2019 IPRE: `sent_<split>.txt` rows `sent_id<TAB>head<TAB>tail<TAB>segmented
    sentence` and, beside it, `sent_relation_<split>.txt` rows `sent_id<TAB>ids`,
    the ids (space separated) indexing the task's label list. The sentence's
    word spaces are removed (Chinese text). `no_relation: NA` as for entity_pair_tsv.

    A split may list its relation files itself (names starting `sent_relation_`):
    the release ships train as `sent_train_1.txt` + `sent_train_2.txt` with one
    `sent_relation_train.txt`. Listed, every relation file is read for every
    sentence file; otherwise each sentence file's own is looked up beside it."""
    option_keys = {"no_relation": (str, None)}
    task_types = type_names(EXTRACTION_RELATION)

    def read(self, paths: list[str], options: Options, fields: Fields, task_type: str | None,
             labels: Labels, report: ReadReport) -> Iterator[Example]:
        if not labels:
            raise ValueError("format ipre needs the task's labels: the relation files give "
                             "indexes into that list")
        listed = [p for p in paths if os.path.basename(p).startswith("sent_relation_")]
        shared = {}
        for path in listed:
            shared.update(self.read_relations(path, report))
        for path in (p for p in paths if p not in listed):
            relations = shared if listed else self.relations(path, report)
            texts = ByText()
            for number, line in text_lines(path, report):
                row = line.rstrip("\r\n").split("\t")
                if not line.strip():
                    continue
                if len(row) != 4:
                    report.skip(f"row has {len(row)} columns, expected 4 (sent_id, head, tail, "
                                "sentence)", path, number)
                    continue
                sent_id, head, tail, sentence = row
                text = sentence.replace(" ", "")
                if sent_id not in relations:
                    report.skip("sentence id missing from the relation file", path, number)
                    continue
                for index in relations[sent_id]:
                    if not 0 <= index < len(labels):
                        report.skip(f"relation id {index} is outside the label list", path, number)
                        continue
                    add_pair(texts, text, head, tail, labels[index], options["no_relation"],
                             labels, path, number, report)
            yield from texts.examples(RelationExample, path, report)

    @staticmethod
    def relations(path, report):
        folder, name = os.path.split(path)
        relation_path = os.path.join(folder, name.replace("sent_", "sent_relation_", 1))
        if relation_path == path or not os.path.exists(relation_path):
            raise FileNotFoundError(f"IPRE relation file not found: {relation_path} (expected "
                                    f"beside {path}, named sent_relation_<split>.txt; or list "
                                    "the split's sent_relation_ file in the spec)")
        return IpreAdapter.read_relations(relation_path, report)

    @staticmethod
    def read_relations(relation_path, report):
        relations = {}
        for number, line in text_lines(relation_path, report):
            parts = line.split("\t")
            if not line.strip():
                continue
            try:
                relations[parts[0].strip()] = [int(i) for i in parts[1].split()]
            except (IndexError, ValueError):
                report.skip("relation row is not `sent_id<TAB>ids`", relation_path, number)
        return relations
