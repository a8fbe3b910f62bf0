"""The head of families/mlm.py: the backbone's tied token embedding.

Keras: mtl_framework.families.heads imports this module, families/__init__.py never does (the
family records load before Keras)."""
import keras
import numpy as np
from keras import ops

from data_adapters.task_types import MLM
from mtl_framework import losses
from mtl_framework.families.heads import TaskHead, _np, head_for


@head_for(MLM.name)
class MLMHead(TaskHead):
    """Tied token embedding, as RoFormerV2: logits = h @ E^T, no bias, no
    transform. `embeddings` is the backbone's token embedding matrix (a
    variable [V, H]) or its Embedding layer; the backbone owns it, so it is
    not tracked here (the head has no weights of its own)."""


    def __init__(self, embeddings, num_labels=None, **kwargs):
        super().__init__(num_labels, **kwargs)
        # object.__setattr__: bypass Keras tracking, or the embedding would
        # also count as a head weight (twice in optimizer and gradient norms)
        object.__setattr__(self, "_tied", embeddings)

    @property
    def embeddings(self):
        e = self._tied
        return e.embeddings if isinstance(e, keras.layers.Embedding) else e

    def call(self, hidden, batch, training=False):
        return ops.einsum("blh,vh->blv", hidden, ops.cast(self.embeddings, hidden.dtype))

    read_count_varies = True  # the batch's most masked tokens in a row

    def read_positions(self, batch):
        """Each row's masked positions, in order, padded with 0 ([CLS], never masked: its
        label 0 keeps the slot out of the loss)."""
        masked = np.asarray(batch["mlm_labels"]) > 0
        count = masked.sum(1)
        slots = max(1, int(count.max(initial=0)))
        order = np.argsort(~masked, axis=1, kind="stable")[:, :slots]  # masked first, in order
        return np.where(np.arange(slots) < count[:, None], order, 0).astype("int32")

    def compute_task_loss(self, logits, batch):
        labels = batch["mlm_labels"]
        if "read_positions" in batch:  # logits [B, R, V] at the read positions
            labels = ops.take_along_axis(labels, ops.cast(batch["read_positions"], "int32"), axis=1)
        return losses.masked_lm_crossentropy(labels, logits)

    def decode(self, logits, batch):
        """Per row the predicted ids at the masked positions (in order)."""
        logits, labels = _np(logits), np.asarray(batch["mlm_labels"])
        return [row.argmax(-1)[lab > 0] for row, lab in zip(logits, labels)]

    def targets(self, batch):
        return [lab[lab > 0] for lab in np.asarray(batch["mlm_labels"])]
