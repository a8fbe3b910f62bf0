"""`wsc`: CLUEWSC2020 (and FewCLUE cluewsc) coreference records,
`{target: {span1_index, span1_text, span2_index, span2_text}, idx, label, text}`.

Both spans must round-trip (`text[index:index + len(span_text)] == span_text`);
a record with a span that does not is skipped, its span counted as lost.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from data_adapters.base import Adapter, register_adapter
from data_adapters.examples import CorefExample, Entity
from data_adapters.reading import LabelRule, record_examples
from data_adapters.task_types import COREFERENCE, type_names

if TYPE_CHECKING:
    from collections.abc import Iterator

    from data_adapters.base import Fields, Labels, Options
    from data_adapters.examples import Example
    from data_adapters.report import ReadReport


@register_adapter("wsc")
class WscAdapter(Adapter):
    task_types = type_names(COREFERENCE)

    def read(self, paths: list[str], options: Options, fields: Fields, task_type: str | None,
             labels: Labels, report: ReadReport) -> Iterator[Example]:
        rule = LabelRule(task_type, labels)
        yield from record_examples(paths, report,
                               lambda record, path, line: self.example(record, rule, path, line, report))

    @staticmethod
    def example(record, rule, path, line, report):
        """A CorefExample from one `{text, target, label, idx}` record, or None after report.skip."""
        text = record.get("text") if isinstance(record, dict) else None
        target = record.get("target") if isinstance(record, dict) else None
        if not isinstance(text, str) or not isinstance(target, dict):
            report.skip("record without `text` and `target`", path, line)
            return None
        spans = [WscAdapter.span(text, target, n) for n in (1, 2)]
        lost = [s for s in spans if isinstance(s, str)]
        if lost:
            for reason in lost:
                report.lose_span(reason, path, line)
            report.skip("a span does not match the text at its index", path, line)
            return None
        label, reason = rule.check(record.get("label"))
        if reason:
            report.skip(reason, path, line)
            return None
        if label is None and report.missing_label(path, line):
            return None
        return CorefExample(text, spans[0], spans[1], label, record.get("idx"))

    @staticmethod
    def span(text, target, n):
        mention, start = target.get(f"span{n}_text"), target.get(f"span{n}_index")
        if not isinstance(mention, str) or not mention:
            return f"span{n}_text is missing"
        if not isinstance(start, int) or isinstance(start, bool):
            return f"span{n}_index is not a number"
        if start < 0 or text[start:start + len(mention)] != mention:
            return f"span{n}_index does not point at span{n}_text"
        return Entity(start, start + len(mention), f"span{n}")
