"""Span extraction: named entities, relation triples, events (GPLinker, as bert4keras).

The text is encoded once; each gold span is placed on tokens (TokenLocator),
a span lost to truncation is counted and its example kept. Batches carry the
spans as pointer labels [B, kinds, S, 2] for the EfficientGlobalPointer heads.
"""
import itertools

import numpy as np

from data_adapters.examples import NERExample
from data_adapters.task_types import EXTRACTION_EVENT, EXTRACTION_NER, EXTRACTION_RELATION
from mtl_framework.families.base import Family, char_span
from mtl_framework.families.features import Featurizer, TokenLocator, pad_tokens, segment_tokens, span_labels


class SpanFeaturizer(Featurizer):
    """Shared by the span families: encode the text, locate char spans on tokens.
    `spans` in the report counts entities, triples (both mentions placed) or
    event roles, as the adapters' ReadReport does."""

    offsets = True
    needs_labels = True
    span_field, span_width = None, None

    def ragged_fields(self):
        return super().ragged_fields() + [(self.span_field, np.int32, self.span_width)]

    def encode_chunk(self, chunk, writer, report):
        encoded = self.encode([e.text for e in chunk])
        kept, spans = [], []
        for example, (encoding, truncated) in zip(chunk, encoded):
            if truncated:
                report.truncated["text over max_length"] += 1
            offsets, positions = segment_tokens(encoding)
            locator = TokenLocator(offsets, positions, example.text, truncated)
            kept.append(encoding)  # kept even when its spans are lost: the rest still teaches
            spans.append(self.spans_of(example, locator, report))
        self.write_tokens(writer, kept, offsets=True)
        writer.add_ragged(self.span_field, spans, np.int32, self.span_width)

    def place(self, entity, locator, report, what):
        """(start, end) token positions of an Entity, or None (counted as lost)."""
        span, note = locator.locate(entity.start, entity.end)
        if span is None:
            report.spans_lost[f"{what} {note}"] += 1
            return None
        report.spans_widened += note
        return span

    def labelled_spans(self, items, locator, report, label_name):
        """(label index, *token spans) per (label, [(Entity, what it is)]) of `items`: an
        item whose label the task lacks (`label_name` says what the label is) or one of
        whose mentions cannot be placed is lost (counted); the others count as spans."""
        row = []
        for label, mentions in items:
            index = self.label_index.get(label)
            if index is None:
                report.spans_lost[f"{label_name} not in the task's labels"] += 1
                continue
            spans = []
            for entity, what in mentions:
                span = self.place(entity, locator, report, what)
                if span is None:
                    break  # the mentions after it are not placed (nor counted)
                spans.extend(span)
            else:
                report.spans += 1
                row.append((index, *spans))
        return row


class NERFeaturizer(SpanFeaturizer):
    example_types = EXTRACTION_NER.examples
    family = EXTRACTION_NER.name
    span_field, span_width = "entities", 3

    def spans_of(self, example, locator, report):
        return self.labelled_spans(((entity.type, [(entity, "entity")])
                                    for entity in example.entities), locator, report, "entity type")


class RelationFeaturizer(SpanFeaturizer):
    """GPLinker (bert4keras's DuIE example): per triple the subject and object
    token spans; `batch` turns them into entity/head/tail pointer labels."""

    example_types = EXTRACTION_RELATION.examples
    family = EXTRACTION_RELATION.name
    span_field, span_width = "triples", 5

    def spans_of(self, example, locator, report):
        return self.labelled_spans(
            ((triple.predicate, [(triple.subject, "triple's subject"), (triple.object, "triple's object")])
             for triple in example.triples), locator, report, "predicate")


def event_role_groups(labels):
    """Each event label's event type (`<event type>:<role>`, or a bare event type for
    its triggers): the EventHead's `role_groups`, so that decoding joins arguments
    into events only within one event type."""
    return [label.split(":", 1)[0] for label in labels]


class EventFeaturizer(SpanFeaturizer):
    """GPLinker for events (bert4keras's DuEE example). Roles are labels
    `<event type>:<role>` with the trigger as role `trigger`; a label that is a
    bare event type marks that type's triggers (its arguments have no role to
    go to and are counted as lost)."""

    example_types = EXTRACTION_EVENT.examples
    family = EXTRACTION_EVENT.name
    span_field, span_width = "arguments", 4

    def role(self, event_type, role):
        index = self.label_index.get(f"{event_type}:{role}")
        if index is None and role == "trigger":
            index = self.label_index.get(event_type)
        return index

    def ragged_fields(self):
        # the text and its gold in characters, for scoring: gold the tokens lost is still gold
        return super().ragged_fields() + [("text", np.uint8, None), ("gold_arguments", np.int32, 4)]

    def encode_chunk(self, chunk, writer, report):
        super().encode_chunk(chunk, writer, report)
        writer.add_bytes("text", [example.text.encode("utf-8") for example in chunk])
        writer.add_ragged("gold_arguments", [self.gold_of(example) for example in chunk], np.int32, 4)

    def parts(self, example):
        """(event number, role name, Entity, role label index or None) of the trigger (when
        there is one) and each argument of every event of `example`."""
        for number, event in enumerate(example.events):
            parts = ([("trigger", event.trigger)] if event.trigger is not None else [])
            parts += [(argument.type, argument) for argument in event.arguments]
            for role_name, entity in parts:
                yield number, role_name, entity, self.role(event.type, role_name)

    def gold_of(self, example):
        """(event number, role, char start, char end) of every part of an event the task's
        labels keep, placed on tokens or not."""
        return [(number, role, entity.start, entity.end)
                for number, _, entity, role in self.parts(example) if role is not None]

    def spans_of(self, example, locator, report):
        row = []
        for number, role_name, entity, role in self.parts(example):
            if role is None:
                report.spans_lost["event role not in the task's labels"] += 1
                continue
            span = self.place(entity, locator, report, "trigger" if role_name == "trigger"
                              else "argument")
            if span is not None:
                report.spans += 1
                row.append((number, role, *span))
        return row


def collate_ner(features, rows, rng, pad_to):
    batch = pad_tokens(features, rows, pad_to)
    groups = []
    for row in rows:
        spans = {}
        for type_, start, end in features.ragged("entities", row):
            spans.setdefault(int(type_), set()).add((int(start), int(end)))
        groups.append(spans)
    batch["entity_labels"] = span_labels(groups, len(features.meta["labels"]))
    return batch


def collate_relation(features, rows, rng, pad_to):
    batch = pad_tokens(features, rows, pad_to)
    entities, heads, tails = [], [], []
    for row in rows:
        entity, head, tail = {0: set(), 1: set()}, {}, {}
        for p, sh, st, oh, ot in features.ragged("triples", row).tolist():
            entity[0].add((sh, st))
            entity[1].add((oh, ot))
            head.setdefault(p, set()).add((sh, oh))
            tail.setdefault(p, set()).add((st, ot))
        entities.append(entity)
        heads.append(head)
        tails.append(tail)
    predicates = len(features.meta["labels"])
    batch["entity_labels"] = span_labels(entities, 2)
    batch["head_labels"] = span_labels(heads, predicates)
    batch["tail_labels"] = span_labels(tails, predicates)
    return batch


def collate_event(features, rows, rng, pad_to):
    batch = pad_tokens(features, rows, pad_to)
    arguments, heads, tails = [], [], []
    for row in rows:
        argument, events = {}, {}
        for number, role, start, end in features.ragged("arguments", row).tolist():
            argument.setdefault(role, set()).add((start, end))
            events.setdefault(number, []).append((start, end))
        head, tail = set(), set()
        # Link every two arguments of one event by starts and by ends (min, max).
        for spans in events.values():
            for (h1, t1), (h2, t2) in itertools.combinations(spans, 2):
                head.add((min(h1, h2), max(h1, h2)))
                tail.add((min(t1, t2), max(t1, t2)))
        arguments.append(argument)
        heads.append({0: head})
        tails.append({0: tail})
    batch["argument_labels"] = span_labels(arguments, len(features.meta["labels"]))
    batch["head_labels"] = span_labels(heads, 1)
    batch["tail_labels"] = span_labels(tails, 1)
    return batch


def entities_output(prediction, example, labels, features, row):
    offsets = features.ragged("offsets", row)
    found = [{"type": labels[t], **char_span(example.text, offsets, s, e)} for t, s, e in prediction]
    return sorted(found, key=lambda x: (x["start"], x["end"], x["type"]))


def triples_output(prediction, example, labels, features, row):
    offsets = features.ragged("offsets", row)
    return [{"subject": char_span(example.text, offsets, ss, se), "predicate": labels[p],
             "object": char_span(example.text, offsets, os_, oe)}
            for ss, se, p, os_, oe in sorted(prediction)]


def event_role(label):
    """(event type, role) of an event label: `type:role`, or a bare type (its trigger);
    the type as event_role_groups reads it (the EventHead's role_groups)."""
    type_, _, role = label.partition(":")
    return type_, role or "trigger"


def events_output(prediction, example, labels, features, row):
    """EventHead's events (cliques of linked arguments) split by event type: one event
    per trigger of that type (or one without a trigger), with the type's arguments."""
    offsets = features.ragged("offsets", row)
    out = []
    for event in prediction:
        parts = {}
        for role, first, last in event:
            type_, name = event_role(labels[role])
            parts.setdefault(type_, []).append((name, char_span(example.text, offsets, first, last)))
        for type_, spans in parts.items():
            arguments = [{"role": name, **span} for name, span in spans if name != "trigger"]
            for trigger in [span for name, span in spans if name == "trigger"] or [None]:
                out.append({"event_type": type_, "trigger": trigger, "arguments": arguments})
    return out


def scored_events(parts, labels, text):
    """Events for metrics.event_f1 from (event key, role, char start, char end) parts: one
    event per key and event type, one per trigger of that type (or one without a trigger),
    with the type's arguments."""
    grouped = {}
    for key, role, start, end in parts:
        type_, name = event_role(labels[role])
        grouped.setdefault((key, type_), []).append((name, text[start:end]))
    out = []
    for (_, type_), spans in grouped.items():
        arguments = [(name, mention) for name, mention in spans if name != "trigger"]
        for trigger in [m for name, m in spans if name == "trigger"] or [None]:
            out.append({"event_type": type_, "trigger": trigger, "arguments": arguments})
    return out


def event_answers(features, rows, predictions):
    """(predictions, references) in characters for metrics.event_f1: the decoded events'
    token spans as text, and the gold events as read (spans the featurizer lost included)."""
    labels = features.meta["labels"]
    predicted, gold = [], []
    for row, events in zip(rows, predictions):
        text = bytes(features.ragged("text", row)).decode("utf-8")
        offsets = features.ragged("offsets", row)
        parts = [(number, role, int(offsets[first][0]), int(offsets[last][1]))
                 for number, event in enumerate(events) for role, first, last in event]
        predicted.append(scored_events(parts, labels, text))
        gold.append(scored_events(features.ragged("gold_arguments", row).tolist(), labels, text))
    return predicted, gold


def ner_examples(texts):
    """Raw strings as NERExamples (one string per text)."""
    pair = next((t for t in texts if not isinstance(t, str)), None)
    if pair is not None:
        raise ValueError(f"one string per text, not {pair!r}")
    return [NERExample(t) for t in texts]


def event_head_settings(task, labels):
    """Arguments join into events only within one event type."""
    return {"role_groups": event_role_groups(labels)}


POINTERS = ("int32", 4)
FAMILIES = (
    Family(EXTRACTION_NER.name, NERFeaturizer, collate_ner, {"entity_labels": POINTERS},
           needs_labels=True, min_labels=1, counts_lost_gold=True,
           output=entities_output, from_texts=ner_examples, hub_task="token-classification"),
    Family(EXTRACTION_RELATION.name, RelationFeaturizer, collate_relation,
           {"entity_labels": POINTERS, "head_labels": POINTERS, "tail_labels": POINTERS},
           needs_labels=True, min_labels=1, counts_lost_gold=True,
           output=triples_output, hub_task="token-classification"),
    Family(EXTRACTION_EVENT.name, EventFeaturizer, collate_event,
           {"argument_labels": POINTERS, "head_labels": POINTERS, "tail_labels": POINTERS},
           needs_labels=True, min_labels=1, head_settings=event_head_settings,
           text_answers=event_answers, output=events_output, hub_task="token-classification"),
)
