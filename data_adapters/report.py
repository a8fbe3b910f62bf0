"""ReadReport: what reading one split did, so that nothing is dropped unseen.

Adapters call `skip` for a record they cannot use (bad JSON, wrong column
count, a label not in the task's list) and `lose_span` for an annotation they
cannot place in the text (a mention not found, offsets that do not match the
mention). `read_task`/`read_files` count the examples that come out (`add`).

Units such as "questions" (QA and choice formats: every question met, kept
or skipped) and "texts"/"entities"/"triples" (what came out) sit beside the
example count. "spans" are the annotations that need a place in the text: entities, answers,
triples (placed when both mentions are), event triggers and arguments, and the
two spans of a coreference example. `spans` in `as_dict()` is placed + lost.

Labels: in a labelled family (classification, matching, regression, choice,
cloze, coreference) a record without a label is only usable where labels are
optional, i.e. a released test split. Everywhere else (`labels_required`, set by
`read_task` for every split but `test`) adapters skip it with its place
(`missing_label`), so it is never trained as a class.
"""
from __future__ import annotations

import os
from collections import Counter
from typing import Any

from data_adapters import examples as ex

# A record's place: its line number, or a label such as a question id; None: the file alone.
Line = int | str | None

# How many file:line places to keep per reason: enough to find the pattern.
KEEP_PLACES = 5
# Splits whose rows may come without labels (the released test files).
UNLABELLED_SPLITS = ("test",)
NO_LABEL = "no label (only a test split may leave labels out)"


def place(file: str | os.PathLike, line: Line = None) -> str:
    if line is None:
        return str(file)
    if isinstance(line, int):
        return f"{file}:{line}"
    return f"{file} ({line})"  # e.g. a question id where JSON has no useful line


class ReadReport:
    def __init__(self, keep: int = KEEP_PLACES, labels_required: bool = False) -> None:
        self.keep, self.labels_required = keep, labels_required
        self.examples = 0
        self.units: Counter[str] = Counter()  # texts, questions, entities, triples, events, ...
        self.spans_placed = 0
        self.skipped: Counter[str] = Counter()
        self.spans_lost: Counter[str] = Counter()
        self.filtered: Counter[str] = Counter()
        self.repaired: Counter[str] = Counter()  # release quirks read as the publisher means them
        self.places: dict[tuple[str, str], list[str]] = {}  # (kind, reason) -> first few places
        self.absent: list[str] = []  # optional files of the split that were not there

    def absent_file(self, path: str | os.PathLike) -> None:
        """An `optional` file of the split that is not there: the others are read."""
        self.absent.append(str(path))

    def _note(self, kind, reason, file, line):
        places = self.places.setdefault((kind, reason), [])
        if len(places) < self.keep:
            places.append(place(file, line))

    def skip(self, reason: str, file: str | os.PathLike, line: Line = None) -> None:
        """A whole record left out."""
        self.skipped[reason] += 1
        self._note("skipped", reason, file, line)

    def lose_span(self, reason: str, file: str | os.PathLike, line: Line = None, count: int = 1) -> None:
        """An annotation that cannot be placed; its record is kept without it."""
        self.spans_lost[reason] += count
        self._note("spans_lost", reason, file, line)

    def missing_label(self, file: str | os.PathLike, line: Line = None) -> bool:
        """A record without a label: True (and skipped with its place) where labels
        are required; False where it may stay (counted as unlabelled by `add`)."""
        if self.labels_required:
            self.skip(NO_LABEL, file, line)
        return self.labels_required

    def filter(self, reason: str, count: int = 1, file: str | os.PathLike | None = None,
               line: Line = None) -> None:
        """Annotations removed on purpose by an option (e.g. weibo's keep_suffix), or
        not in the task's labels; `file`/`line`: the first few places are kept."""
        self.filtered[reason] += count
        if file is not None:
            self._note("filtered", reason, file, line)

    def repair(self, reason: str, count: int = 1) -> None:
        """A documented quirk of the release read as its publisher means it (BosonNLP's
        nested marks, CAIL2018's bracketed charges): kept, and counted here."""
        self.repaired[reason] += count

    def count(self, unit: str, n: int = 1) -> None:
        self.units[unit] += n

    def add(self, example: ex.Example) -> None:
        """Count one example that came out, by its kind."""
        self.examples += 1
        # "questions" are counted by the adapters as they meet them, kept or not.
        if isinstance(example, ex.SpanQAExample):
            self.spans_placed += len(example.answers)
            if example.unlocated and not example.answers:
                self.units["scored without a span"] += 1
            elif not example.answers:
                self.units["unanswerable"] += 1
        elif isinstance(example, ex.NERExample):
            self.units["texts"] += 1
            self.units["entities"] += len(example.entities)
            self.spans_placed += len(example.entities)
        elif isinstance(example, ex.RelationExample):
            self.units["texts"] += 1
            self.units["triples"] += len(example.triples)
            self.spans_placed += len(example.triples)
        elif isinstance(example, ex.EventExample):
            self.units["texts"] += 1
            self.units["events"] += len(example.events)
            for event in example.events:
                self.units["arguments"] += len(event.arguments)
                self.spans_placed += len(event.arguments) + (event.trigger is not None)
        elif isinstance(example, ex.CorefExample):
            self.spans_placed += 2
        labelled = getattr(example, "label", 0)
        if labelled is None:
            self.units["unlabelled"] += 1

    @property
    def total_skipped(self) -> int:
        return sum(self.skipped.values())

    @property
    def total_lost(self) -> int:
        return sum(self.spans_lost.values())

    def _with_places(self, kind, counter):
        return {reason: {"count": n, "first": self.places.get((kind, reason), [])}
                for reason, n in counter.most_common()}

    def as_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {"examples": self.examples}
        result.update(sorted(self.units.items()))
        result["skipped"] = self._with_places("skipped", self.skipped)
        result["skipped_total"] = self.total_skipped
        result["spans"] = self.spans_placed + self.total_lost
        result["spans_lost"] = self._with_places("spans_lost", self.spans_lost)
        result["spans_lost_total"] = self.total_lost
        if self.filtered:
            result["filtered"] = dict(self.filtered.most_common())
            result["filtered_places"] = {reason: self.places.get(("filtered", reason), [])
                                         for reason in self.filtered}
        if self.repaired:
            result["repaired"] = dict(self.repaired.most_common())
        if self.absent:
            result["absent"] = list(self.absent)
        return result

    def summary(self) -> str:
        """One line for logs: `12000 examples, 49 skipped (label '-' in skip_labels: 49), ...`."""
        parts = [f"{self.examples} examples"]
        for name, counter in (("skipped", self.skipped), ("spans lost", self.spans_lost),
                              ("filtered", self.filtered), ("repaired", self.repaired)):
            if counter:
                reasons = ", ".join(f"{r}: {n}" for r, n in counter.most_common())
                parts.append(f"{sum(counter.values())} {name} ({reasons})")
        if self.absent:
            parts.append(f"optional file(s) absent, not read: {', '.join(self.absent)}")
        return ", ".join(parts)
