"""The task types (the `type:` of a task spec), as data: the one place their names are spelled.

The formats say which types they can feed (`Adapter.task_types`) and read a task's facts
here; mtl_framework's `Family` records (mtl_framework/families/) take their names from
these, so a type's name and what its examples are live once. Adding a family adds its
TaskType here, in the order of mtl_framework.families.FAMILIES. Data only: this module
imports nothing but the example types, so both packages read it without a cycle.
"""
from __future__ import annotations

from dataclasses import dataclass

from data_adapters.examples import (
    EXAMPLE_TYPES,
    ChoiceExample,
    CorefExample,
    EventExample,
    NERExample,
    PairExample,
    RelationExample,
    SpanQAExample,
    TextExample,
)


@dataclass(frozen=True)
class TaskType:
    """name: the spec's `type`.  examples: what its featurizer reads.  numeric_label: its
    label is a number (read as a float, data stats report its range)."""

    name: str
    examples: tuple[type, ...]
    numeric_label: bool = False

    @property
    def labelled(self) -> bool:
        """Its examples carry a label to learn (an unlabelled train or dev record is skipped)."""
        return all("label" in getattr(t, "__dataclass_fields__", ()) for t in self.examples)


CLASSIFICATION = TaskType("classification", (TextExample,))
MATCHING = TaskType("matching", (TextExample,))
REGRESSION = TaskType("regression", (TextExample,), numeric_label=True)
MRC_SPAN = TaskType("mrc_span", (SpanQAExample,))
MULTIPLE_CHOICE = TaskType("multiple_choice", (ChoiceExample,))
CLOZE = TaskType("cloze", (ChoiceExample,))
EXTRACTION_NER = TaskType("extraction_ner", (NERExample,))
EXTRACTION_RELATION = TaskType("extraction_relation", (RelationExample,))
EXTRACTION_EVENT = TaskType("extraction_event", (EventExample,))
COREFERENCE = TaskType("coreference", (CorefExample,))
# Sentence embeddings: (query, positive[, negatives]) pairs or scored pairs, from a pairs
# file, a text-pair format (text, text_b, label as a score) or a reading-comprehension
# format (question -> its passage). The score is a number.
CONTRASTIVE = TaskType("contrastive", (PairExample, TextExample, SpanQAExample), numeric_label=True)
MLM = TaskType("mlm", (str, *EXAMPLE_TYPES))  # raw corpus lines and every task's text

TASK_TYPES = {t.name: t for t in (
    CLASSIFICATION, MATCHING, REGRESSION, MRC_SPAN, MULTIPLE_CHOICE, CLOZE, EXTRACTION_NER,
    EXTRACTION_RELATION, EXTRACTION_EVENT, COREFERENCE, CONTRASTIVE, MLM)}
# The types of one text (pair) and a label, which the text formats (jsonl, tsv, ...) feed
# (contrastive reads a text pair as a query and its positive, the label as their score).
TEXT_TASKS = tuple(name for name, t in TASK_TYPES.items() if TextExample in t.examples)
# Types whose examples carry a label to learn (mlm and the span families do not).
LABELLED_TYPES = tuple(name for name, t in TASK_TYPES.items() if t.labelled)


def type_names(*task_types: TaskType) -> tuple[str, ...]:
    """What a format's `task_types` lists: the names of the types it feeds."""
    return tuple(t.name for t in task_types)


def numeric_label(task_type: str | None) -> bool:
    """A task of this type (a name; None or unknown: no) labels its examples with numbers."""
    return task_type in TASK_TYPES and TASK_TYPES[task_type].numeric_label
