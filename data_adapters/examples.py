"""Typed examples: what every adapter yields, whatever the file format.

Each type names its text fields in `TEXTS` (a field holding several texts, as `choices`
or `negatives`, gives each): what a vocab built from a task counts and the mlm task
reads (mtl_framework.tokenizer.example_texts). A field that is neither text nor in `NOT_TEXT` fails
tests/test_faults_round5_vocab.py, so a new field is declared one way or the other.

All character offsets are half-open `[start, end)` into the example's own text
(`context` for SpanQAExample), so `text[start:end]` is the mention. Frozen so
that a cached example cannot be changed behind the features stage's back.
"""
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar


@dataclass(frozen=True)
class TextExample:
    """classification / matching / regression: label is a str, a list of str
    (multi-label), a float (regression) or None (unlabelled)."""
    TEXTS: ClassVar[tuple[str, ...]] = ("text", "text_b")
    text: str
    text_b: str | None = None
    label: str | list[str] | float | None = None
    id: object = None


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    text: str


@dataclass(frozen=True)
class SpanQAExample:
    """mrc_span: answers empty (and nothing unlocated) means unanswerable. `unlocated`:
    gold answer texts no span of the context supports (a wrong answer_start, CJRC's
    YES / NO): nothing to learn, but gold when scoring (mtl_framework.scoring.scorers)."""
    TEXTS: ClassVar[tuple[str, ...]] = ("question", "context")
    question: str
    context: str
    answers: list[Span] = field(default_factory=list)
    id: object = None
    unlocated: tuple = ()


@dataclass(frozen=True)
class ChoiceExample:
    """multiple_choice / cloze: label is the index of the right choice (None if unknown)."""
    TEXTS: ClassVar[tuple[str, ...]] = ("question", "context", "choices")
    context: str
    question: str
    choices: list[str]
    label: int | None
    id: object = None


@dataclass(frozen=True)
class Entity:
    start: int
    end: int
    type: str


@dataclass(frozen=True)
class NERExample:
    TEXTS: ClassVar[tuple[str, ...]] = ("text",)
    text: str
    entities: list[Entity] = field(default_factory=list)
    id: object = None


@dataclass(frozen=True)
class Triple:
    subject: Entity
    predicate: str
    object: Entity


@dataclass(frozen=True)
class RelationExample:
    TEXTS: ClassVar[tuple[str, ...]] = ("text",)
    text: str
    triples: list[Triple] = field(default_factory=list)
    id: object = None


@dataclass(frozen=True)
class Event:
    """trigger is an Entity of type "trigger" (None where the data has none, e.g.
    DuEE-Fin); each argument's `type` is its role."""
    type: str
    trigger: Entity | None
    arguments: list[Entity] = field(default_factory=list)


@dataclass(frozen=True)
class EventExample:
    TEXTS: ClassVar[tuple[str, ...]] = ("text",)
    text: str
    events: list[Event] = field(default_factory=list)
    id: object = None


@dataclass(frozen=True)
class PairExample:
    """contrastive: a query, its positive text, hard negatives (texts that do not answer
    it) and an optional similarity score (CoSENT's target; None: a positive pair)."""
    TEXTS: ClassVar[tuple[str, ...]] = ("query", "positive", "negatives")
    query: str
    positive: str
    negatives: tuple = ()
    score: float | None = None
    id: object = None


@dataclass(frozen=True)
class CorefExample:
    TEXTS: ClassVar[tuple[str, ...]] = ("text",)
    text: str
    span1: Entity
    span2: Entity
    label: str | None
    id: object = None


# The gold fields of each example type, emptied: what `mtl predict` featurizes (it never
# reads gold, and test files have none). A new example type adds its row here.
GOLD: dict[type, dict[str, Any]] = {
        TextExample: {"label": None}, SpanQAExample: {"answers": [], "unlocated": ()},
        ChoiceExample: {"label": None}, NERExample: {"entities": []},
        RelationExample: {"triples": []}, EventExample: {"events": []},
        CorefExample: {"label": None}, PairExample: {"score": None}}
EXAMPLE_TYPES = tuple(GOLD)  # every example type (the MLM featurizer reads each one's text)
# Any of them: what an adapter yields.
Example = (TextExample | SpanQAExample | ChoiceExample | NERExample | RelationExample | EventExample
           | CorefExample | PairExample)


# The fields of the example types that hold no text to read: gold, ids, spans into the text.
NOT_TEXT = frozenset({"label", "id", "answers", "unlocated", "entities", "triples", "events",
                      "score", "span1", "span2"})


def without_gold(example: Example) -> Example:
    return replace(example, **GOLD[type(example)])
