"""Coreference (CLUEWSC style): does span2 refer to span1? A text and two token spans -> a label.

An example whose span is truncated away is dropped (counted): nothing is left to classify.
"""
import numpy as np

from data_adapters.task_types import COREFERENCE
from mtl_framework.families.base import Family, label_output, negative_label
from mtl_framework.families.features import Featurizer, TokenLocator, pad_tokens, segment_tokens
from mtl_framework.families.spans import SpanFeaturizer


class CorefFeaturizer(SpanFeaturizer):
    """coreference: the text, and both spans' token positions. An example whose
    span is lost (truncated away) is dropped: it has nothing left to classify."""

    example_types = COREFERENCE.examples
    family = COREFERENCE.name

    def ragged_fields(self):
        return Featurizer.ragged_fields(self)

    def start(self, writer):
        super().start(writer)
        for name in ("span1", "span2"):
            writer.add(name, np.zeros((0, 2), np.int32))
        writer.add("label", np.zeros(0, np.int32))

    def encode_chunk(self, chunk, writer, report):
        encoded = self.encode([e.text for e in chunk])
        kept, rows = [], []
        for example, (encoding, truncated) in zip(chunk, encoded):
            if example.label is None:
                label = -1
            else:
                label, reason = self.index_label(example.label)
                if reason:
                    report.dropped[reason] += 1
                    continue
            offsets, positions = segment_tokens(encoding)
            locator = TokenLocator(offsets, positions, example.text, truncated)
            spans = [locator.locate(s.start, s.end) for s in (example.span1, example.span2)]
            lost = [note for span, note in spans if span is None]
            if lost:
                report.dropped[f"span {lost[0]}"] += 1
                continue
            if truncated:
                report.truncated["text over max_length"] += 1
            report.unlabelled += example.label is None
            report.spans += 2
            report.spans_widened += sum(note for _, note in spans)
            kept.append(encoding)
            rows.append((spans[0][0], spans[1][0], label))
        self.write_tokens(writer, kept, offsets=True)
        writer.add("span1", np.array([r[0] for r in rows], np.int32).reshape(-1, 2))
        writer.add("span2", np.array([r[1] for r in rows], np.int32).reshape(-1, 2))
        writer.add("label", np.array([r[2] for r in rows], np.int32))

def collate_coref(features, rows, rng, pad_to):
    batch = pad_tokens(features, rows, pad_to)
    for name in ("span1", "span2", "label"):
        batch[name] = features[name][rows].astype(np.int32)
    return batch


FAMILIES = (
    Family(COREFERENCE.name, CorefFeaturizer, collate_coref,
           {"span1": ("int32", 2), "span2": ("int32", 2), "label": ("int32", 1)},
           needs_labels=True, min_labels=2, unlabelled=negative_label, output=label_output,
           hub_task="text-classification"),
)
