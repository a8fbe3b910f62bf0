"""Masked language modelling: the experiment's reserved `mlm` task, never a spec type.

Rows are pieces of max_length tokens of any task's texts (or a corpus);
masking is dynamic, drawn at batch time. The head is the backbone's tied token
embedding; its loss is a mean over the masked tokens, not over rows.
"""
import numpy as np

from data_adapters.task_types import MLM
from mtl_framework.families.base import Family
from mtl_framework.families.features import Featurizer, pad_tokens


class MLMFeaturizer(Featurizer):
    """mlm: raw text cut into rows of max_length tokens (nothing truncated: a
    long text gives several rows). Masking is dynamic, at batch time: `mask_rate`
    of the tokens (at least one), 80% [MASK] / 10% random / 10% kept; with
    `whole_word` the words jieba finds are masked as wholes."""

    example_types = MLM.examples  # raw corpus lines and every task's text
    family = MLM.name
    defaults = {"whole_word": False, "mask_rate": 0.15}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.settings["whole_word"]:
            self.jieba  # whole-word masking needs it (a pinned dependency): fail early

    @property
    def jieba(self):
        # Imported, not stored: a featurizer is pickled to worker processes (prepare/pipeline.py).
        import jieba
        jieba.setLogLevel(60)
        return jieba

    def ragged_fields(self):
        fields = super().ragged_fields()
        if self.settings["whole_word"]:
            fields.append(("word_starts", np.uint8, None))
        return fields

    def encode_chunk(self, chunk, writer, report):
        from mtl_framework.tokenizer import example_texts
        texts = []
        for example in chunk:
            found = [example] if isinstance(example, str) else list(example_texts(example))
            found = [t for t in found if t.strip()]
            if not found:
                report.dropped["no text"] += 1
            texts.extend(found)
        piece = self.max_length - 2
        rows, word_starts = [], []
        for text, encoding in zip(texts, self.tokenizer.encode_batch(texts)):
            ids, offsets = encoding.token_ids[1:-1], encoding.offsets[1:-1]
            if not ids:
                continue
            if self.settings["whole_word"]:
                boundaries, at = set(), 0
                for word in self.jieba.cut(text):
                    boundaries.add(at)
                    at += len(word)
                starts = [int(s in boundaries) for s, _ in offsets]
            for begin in range(0, len(ids), piece):
                rows.append([self.tokenizer.cls_id, *ids[begin:begin + piece], self.tokenizer.sep_id])
                if self.settings["whole_word"]:
                    word_starts.append([0, 1, *starts[begin + 1:begin + piece], 0])
        writer.add_ragged("token_ids", rows, self.id_dtype)
        writer.add_ragged("segment_ids", [[0] * len(r) for r in rows], np.int8)
        if self.settings["whole_word"]:
            writer.add_ragged("word_starts", word_starts, np.uint8)

def collate_mlm(features, rows, rng, pad_to):
    if rng is None:
        raise ValueError("mlm batches mask at random: pass rng (a np.random.Generator; "
                         "TaskStream passes one derived from its seed and position)")
    batch = pad_tokens(features, rows, pad_to)
    vocab, settings = features.meta["vocab"], features.meta["settings"]
    specials = [vocab[k] for k in ("pad", "unk", "cls", "sep", "mask")]
    normal_ids = np.setdiff1d(np.arange(vocab["size"]), specials)
    token_ids = batch["token_ids"]
    labels = np.zeros_like(token_ids)
    lengths = features.lengths()[rows]
    for b, row in enumerate(rows):
        n = int(lengths[b]) - 2  # content tokens between [CLS] and [SEP]
        if n <= 0:
            continue
        if settings["whole_word"]:
            word_of = np.cumsum(features.ragged("word_starts", row)[1:n + 1]) - 1
        else:
            word_of = np.arange(n)
        sizes = np.bincount(word_of)
        target = max(1, int(round(n * settings["mask_rate"])))
        order = rng.permutation(len(sizes))
        # Words in random order while they fit in the target (whole words, never split).
        chosen = order[np.cumsum(sizes[order]) <= target]
        if not len(chosen):
            chosen = order[:1]
        positions = 1 + np.flatnonzero(np.isin(word_of, chosen))
        labels[b, positions] = token_ids[b, positions]
        draw = rng.random(len(positions))
        token_ids[b, positions[draw < 0.8]] = vocab["mask"]
        random_positions = positions[(draw >= 0.8) & (draw < 0.9)]
        token_ids[b, random_positions] = rng.choice(normal_ids, len(random_positions))
    batch["mlm_labels"] = labels
    return batch


def masked_tokens(batch):
    """The mlm loss is a mean over the masked tokens of the batch."""
    import tensorflow as tf  # only a training step calls this

    return tf.reduce_sum(tf.cast(batch["mlm_labels"] > 0, tf.float32))


FAMILY = Family(MLM.name, MLMFeaturizer, collate_mlm, {"mlm_labels": ("int32", 2)},
                in_specs=False, tied_embedding=True, loss_denominator=masked_tokens,
                scored=False, hub_task="fill-mask")
FAMILIES = (FAMILY,)
