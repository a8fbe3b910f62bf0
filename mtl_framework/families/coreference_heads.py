"""The head of families/coreference.py: the two spans' token vectors -> Dense.

Keras: mtl_framework.families.heads imports this module, families/__init__.py never does (the
family records load before Keras)."""
import keras
import numpy as np
from keras import ops

from data_adapters.task_types import COREFERENCE
from mtl_framework import losses
from mtl_framework.families.heads import TaskHead, _np, head_for


@head_for(COREFERENCE.name)
class CorefHead(TaskHead):
    """Token vectors at span1 start/end and span2 start/end, concatenated
    [4H] -> Dense(n labels) with bias; softmax CE."""


    def __init__(self, num_labels=2, **kwargs):
        super().__init__(num_labels, **kwargs)
        self.dense = keras.layers.Dense(
            num_labels, kernel_initializer=self.initializer, name="dense")

    def build(self, hidden_shape):
        self.dense.build((None, 4 * hidden_shape[-1]))

    def call(self, hidden, batch, training=False):
        if "read_positions" in batch:  # hidden holds the four read_positions' rows already
            vectors = hidden
        else:
            vectors = ops.take_along_axis(hidden, self.span_ends(batch)[:, :, None], axis=1)
        return self.dense(ops.reshape(vectors, (-1, 4 * hidden.shape[-1])))  # [B, 4, H] -> [B, 4H]

    @staticmethod
    def span_ends(batch):
        """[B, 4]: span 1's start and end, span 2's start and end."""
        return ops.concatenate([ops.cast(batch["span1"], "int32"),
                                ops.cast(batch["span2"], "int32")], axis=1)

    def read_positions(self, batch):
        return np.concatenate([batch["span1"], batch["span2"]], axis=1).astype("int32")

    def compute_task_loss(self, logits, batch):
        return ops.mean(losses.sparse_categorical_crossentropy(batch["label"], logits))

    def decode(self, logits, batch=None):
        return [int(i) for i in _np(logits).argmax(-1)]

    def targets(self, batch):
        return [int(i) for i in np.asarray(batch["label"])]
