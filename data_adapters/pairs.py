"""`pairs`: sentence-embedding training pairs, one JSON object per line.

FlagEmbedding's fine-tuning files read as they are, with no `fields:` at all:

    {"query": "...", "pos": ["..."], "neg": ["...", "..."]}

`pos` may be one string or a list (each positive gives its own pair, with the same
negatives); `neg` is optional (hard negatives, `embedding.hard_negatives` of the task
says how many a pair uses). A `score` field (CoSENT's target) is read when mapped:

    fields: {query: sentence1, positive: sentence2, score: similarity}

A record without a query or a positive is skipped with its line; a negative equal to one of
the record's positives is dropped and counted with its line; nothing is dropped silently.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from data_adapters.base import Adapter, register_adapter
from data_adapters.examples import PairExample
from data_adapters.reading import MISSING, LabelRule, json_records, lookup
from data_adapters.task_types import CONTRASTIVE, type_names

if TYPE_CHECKING:
    from collections.abc import Iterator

    from data_adapters.base import Fields, Labels, Options
    from data_adapters.examples import Example
    from data_adapters.report import ReadReport


def _texts(value):
    """(its texts that are not blank, how many blank ones it had) of a string or a list of
    strings; (None, 0) when it is neither."""
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        kept = [v for v in value if v.strip()]
        return kept, len(value) - len(kept)
    return None, 0


def _count_blanks(blanks, report, path, line):
    """A blank positive or negative beside real ones is left out; the row stays, and the
    blanks are counted with its line (nothing is dropped silently)."""
    for side, count in blanks.items():
        if count:
            report.filter(f"blank text in the row's {side} (left out)", count, path, line)


# A negative that is one of its record's own positives (a mining or export slip) would train
# the query away from its answer: it is dropped, and counted with its line.
NEGATIVE_IS_POSITIVE = "hard negative equal to a positive of its row (dropped)"


def _not_positives(negatives, positives, report, path, line):
    kept = [negative for negative in negatives if negative not in positives]
    if len(kept) < len(negatives):
        report.filter(NEGATIVE_IS_POSITIVE, len(negatives) - len(kept), path, line)
    return kept


@register_adapter("pairs")
class PairsAdapter(Adapter):
    field_keys = ("query", "positive", "negatives", "score", "id")
    field_defaults = {"query": "query", "positive": "pos", "negatives": "neg", "score": None,
                      "id": None}
    task_types = type_names(CONTRASTIVE)

    def read(self, paths: list[str], options: Options, fields: Fields, task_type: str | None,
             labels: Labels, report: ReadReport) -> Iterator[Example]:
        rule = LabelRule(CONTRASTIVE.name)
        for path in paths:
            for line, record in json_records(path, report):
                if not isinstance(record, dict):
                    report.skip(f"not a JSON object (a {type(record).__name__})", path, line)
                    continue
                query = lookup(record, fields["query"])
                if not isinstance(query, str) or not query.strip():
                    report.skip(f"query ({fields['query']!r}) missing or not a non-empty string",
                                path, line)
                    continue
                positives, blanks = _texts(lookup(record, fields["positive"]))
                if not positives:
                    report.skip(f"positive ({fields['positive']!r}) " + (
                        "missing or not a string or list of strings" if positives is None
                        else "empty (no text that is not blank)"), path, line)
                    continue
                blanks, negatives = {"positives": blanks}, []
                if fields.get("negatives") is not None:
                    raw = lookup(record, fields["negatives"])
                    negatives, blanks["negatives"] = ([], 0) if raw is MISSING or raw is None \
                        else _texts(raw)
                    if negatives is None:
                        report.skip(f"negatives ({fields['negatives']!r}) not a list of strings",
                                    path, line)
                        continue
                score = None
                if fields.get("score") is not None:
                    raw = lookup(record, fields["score"])
                    score, reason = rule.check(raw)
                    if reason:  # the rule's words are a label's; this is the score field
                        report.skip(f"score ({fields['score']!r}) not a finite number: {raw!r}",
                                    path, line)
                        continue
                _count_blanks(blanks, report, path, line)
                negatives = _not_positives(negatives, positives, report, path, line)
                id_ = lookup(record, fields["id"]) if fields.get("id") is not None else None
                for positive in positives:
                    yield PairExample(query, positive, tuple(negatives), score,
                                      None if id_ is MISSING else id_)
