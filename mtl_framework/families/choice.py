"""Multiple choice and cloze: per choice [CLS] context [SEP] question [SEP] choice [SEP].

A batch is [B, C, L]: the backbone runs on the choices folded into the batch
axis (`choice_axis`), ChoiceHead unfolds them and softmaxes over the choices.
"""
import numpy as np

from data_adapters.task_types import CLOZE, MULTIPLE_CHOICE
from mtl_framework.families.base import Family, negative_label
from mtl_framework.families.features import (
    CHOICES,
    Featurizer,
    batch_length,
    pad_rows,
    truncate_longest_first,
)


class ChoiceFeaturizer(Featurizer):
    """multiple_choice / cloze, as bert4keras's CLUE C3: per choice
    [CLS] context [SEP] question [SEP] choice [SEP] (question left out when
    empty); context and question are segment 0, the choice segment 1.
    Too long: tokens come off the longest part first (bert4keras truncate_sequences)."""

    example_types = MULTIPLE_CHOICE.examples  # cloze reads the same
    family = MULTIPLE_CHOICE.name

    def start(self, writer):
        super().start(writer)
        writer.add(CHOICES, np.zeros(1, np.int64))
        writer.add("label", np.zeros(0, np.int32))
        self.choice_rows = 0

    def encode_chunk(self, chunk, writer, report):
        tok = self.tokenizer
        contexts = list(dict.fromkeys(e.context for e in chunk))
        questions = list(dict.fromkeys(e.question for e in chunk if e.question.strip()))
        choices = list(dict.fromkeys(c for e in chunk for c in e.choices))
        encoded = {}
        for texts in (contexts, questions, choices):
            encoded.update((t, e.token_ids) for t, e in zip(texts, tok.encode_batch(texts)))
        rows, labels, splits = [], [], []
        for example in chunk:
            if not example.choices:
                report.dropped["no choices"] += 1
                continue
            label = example.label
            if label is None:
                report.unlabelled += 1
                label = -1
            elif not 0 <= label < len(example.choices):
                report.dropped["label index out of range of the choices"] += 1
                continue
            truncated = False
            for choice in example.choices:
                context_ids = list(encoded[example.context])
                question_ids = list(encoded[example.question][1:]) if example.question.strip() else []
                choice_ids = list(encoded[choice][1:])
                before = len(context_ids) + len(question_ids) + len(choice_ids)
                truncate_longest_first(self.max_length, choice_ids, question_ids, context_ids)
                truncated |= len(context_ids) + len(question_ids) + len(choice_ids) < before
                first = len(context_ids) + len(question_ids)
                rows.append((context_ids + question_ids + choice_ids,
                             [0] * first + [1] * len(choice_ids)))
            if truncated:
                report.truncated["context+question+choice over max_length"] += 1
            self.choice_rows += len(example.choices)
            splits.append(self.choice_rows)
            labels.append(label)
        writer.add_ragged("token_ids", [r[0] for r in rows], self.id_dtype)
        writer.add_ragged("segment_ids", [r[1] for r in rows], np.int8)
        writer.add(CHOICES, np.array(splits, np.int64))
        writer.add("label", np.array(labels, np.int32))


class ClozeFeaturizer(ChoiceFeaturizer):
    family = CLOZE.name

def collate_choice(features, rows, rng, pad_to):
    choice_splits = features[CHOICES]
    counts = [int(choice_splits[r + 1] - choice_splits[r]) for r in rows]
    most = max(counts)
    length = batch_length(features, rows, pad_to)
    batch = {}
    for name in ("token_ids", "segment_ids"):
        out = np.zeros((len(rows), most, length), np.int32)
        for b, row in enumerate(rows):
            choice_rows = np.arange(choice_splits[row], choice_splits[row + 1])
            out[b, :len(choice_rows)] = pad_rows(features, name, choice_rows, length)
        batch[name] = out
    batch["choice_mask"] = (np.arange(most)[None] < np.array(counts)[:, None]).astype(np.float32)
    batch["label"] = features["label"][rows].astype(np.int32)
    return batch


def choice_output(prediction, example, labels, features, row):
    return {"index": int(prediction), "text": example.choices[prediction]}


CHOICE_BATCH = {"token_ids": ("int32", 3), "segment_ids": ("int32", 3),
                "choice_mask": ("float32", 2), "label": ("int32", 1)}
# cloze here picks one of the candidates (ChID): a multiple choice on the Hub too
FAMILIES = tuple(
    Family(name, featurizer, collate_choice, CHOICE_BATCH, choice_axis=True,
           unlabelled=negative_label, output=choice_output, hub_task="multiple-choice")
    for name, featurizer in ((MULTIPLE_CHOICE.name, ChoiceFeaturizer), (CLOZE.name, ClozeFeaturizer)))
