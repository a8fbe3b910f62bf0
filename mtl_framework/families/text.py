"""Text classification, matching and regression: [CLS] text [SEP] (text_b [SEP]) -> a label.

One featurizer for the three (a class index, a multi-hot row, or a number), one
batch function, one head each from `ClassificationHead` / `RegressionHead`.
"""
import math

import numpy as np

from data_adapters.examples import TextExample
from data_adapters.task_types import CLASSIFICATION, MATCHING, REGRESSION, numeric_label
from mtl_framework.families.base import Family, label_output, negative_label
from mtl_framework.families.features import Featurizer, pad_tokens


class TextFeaturizer(Featurizer):
    """classification / matching / regression: [CLS] text [SEP] (text_b [SEP])."""

    example_types = CLASSIFICATION.examples  # the three read the same examples
    family = CLASSIFICATION.name

    def start(self, writer):
        super().start(writer)
        if numeric_label(self.family):
            writer.add("label", np.zeros(0, np.float32))
        elif self.multi_label:
            writer.add("label", np.zeros((0, len(self.labels)), np.uint8))
        else:
            writer.add("label", np.zeros(0, np.int32))

    def encode_chunk(self, chunk, writer, report):
        texts_b = [e.text_b for e in chunk]
        encoded = self.encode([e.text for e in chunk],
                              texts_b if any(b is not None for b in texts_b) else None)
        kept, labels = [], []
        for example, (encoding, truncated) in zip(chunk, encoded):
            label, reason = self.label_of(example.label, report)
            if reason:
                report.dropped[reason] += 1
                continue
            if truncated:
                report.truncated["text over max_length"] += 1
            kept.append(encoding)
            labels.append(label)
        self.write_tokens(writer, kept)
        if numeric_label(self.family):
            writer.add("label", np.array(labels, np.float32))
        elif self.multi_label:
            writer.add("label", np.array(labels, np.uint8).reshape(-1, len(self.labels)))
        else:
            writer.add("label", np.array(labels, np.int32))

    def label_of(self, label, report):
        if label is None:
            report.unlabelled += 1
            if numeric_label(self.family):
                return math.nan, None
            return ([0] * len(self.labels) if self.multi_label else -1), None
        if numeric_label(self.family):
            try:
                return float(label), None
            except (TypeError, ValueError):
                return None, f"label {label!r} is not a number"
        if self.multi_label:
            hot = [0] * len(self.labels)
            for name in ([label] if isinstance(label, str) else label):
                index, reason = self.index_label(name)
                if reason:
                    return None, reason
                hot[index] = 1
            return hot, None
        return self.index_label(label)


class ClassificationFeaturizer(TextFeaturizer):
    family = CLASSIFICATION.name
    needs_labels = True


class MatchingFeaturizer(TextFeaturizer):
    family = MATCHING.name
    needs_labels = True


class RegressionFeaturizer(TextFeaturizer):
    family = REGRESSION.name

def collate_text(features, rows, rng, pad_to):
    batch = pad_tokens(features, rows, pad_to)
    label = features["label"][rows]
    batch["label"] = label.astype(np.float32 if label.ndim == 2 or label.dtype.kind == "f" else np.int32)
    return batch


def no_number(reference):
    """Unlabelled regression targets are NaN."""
    return bool(np.isnan(reference))


def number_output(prediction, example, labels, features, row):
    return float(prediction)


def text_examples(texts):
    """Raw strings (or (text, text_b) pairs) as TextExamples."""
    return [TextExample(*t) if isinstance(t, (tuple, list)) else TextExample(t) for t in texts]


def question_groups(features, rows):
    """Rows grouped by their first text (the question of a question/candidate pair), in
    first-seen order: the same text gives the same segment-0 tokens. Unlabelled rows
    are left out."""
    groups, labels = {}, features["label"]
    for i, row in enumerate(rows):
        if labels[row] >= 0:
            tokens = features.ragged("token_ids", row)
            first = tokens[features.ragged("segment_ids", row) == 0]
            groups.setdefault(first.tobytes(), []).append(i)
    return list(groups.values())


def rank_groups(features, rows, scores=None):
    """mrr: (per question its candidates' scores, per question the positions of its right
    candidates, questions without a right candidate, left out). The right candidates are
    the rows labelled with the second label (`labels: ["0", "1"]`: "1")."""
    predictions, references, unanswered = [], [], 0
    for members in question_groups(features, rows):
        right = [k for k, i in enumerate(members) if features["label"][rows[i]] == 1]
        if not right:
            unanswered += 1
            continue
        predictions.append(None if scores is None else np.asarray(scores)[members])
        references.append(right)
    return predictions, references, unanswered


def rank_scores(logits):
    """A pair's score for ranking: how much more the head believes the second label."""
    logits = np.asarray(logits, dtype=np.float64)
    return logits[:, 1] - logits[:, 0]


CLASS_LABEL = {"label": ("int32", 1)}
MULTI_HOT = {"label": ("float32", 2)}  # multi-label: 0/1 per label
# Hub task types: regression is STS-style similarity of a pair (STS-B's own Hub task),
# not a classification.
FAMILIES = (
    Family(CLASSIFICATION.name, ClassificationFeaturizer, collate_text, CLASS_LABEL,
           needs_labels=True, min_labels=2,
           too_few_labels_hint="; for a real-valued score use type: regression",
           multi_label=True, multi_label_spec=MULTI_HOT, unlabelled=negative_label,
           output=label_output, from_texts=text_examples, hub_task="text-classification"),
    Family(MATCHING.name, MatchingFeaturizer, collate_text, CLASS_LABEL,
           needs_labels=True, min_labels=2,
           too_few_labels_hint="; for a real-valued score use type: regression",
           unlabelled=negative_label, output=label_output, rank_groups=rank_groups,
           rank_scores=rank_scores, from_texts=text_examples, two_texts=True,
           hub_task="text-classification"),
    Family(REGRESSION.name, RegressionFeaturizer, collate_text, {"label": ("float32", 1)},
           unlabelled=no_number, output=number_output, from_texts=text_examples,
           hub_task="sentence-similarity"),
)
