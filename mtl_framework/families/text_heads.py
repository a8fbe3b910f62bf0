"""The heads of families/text.py: [CLS] -> Dense, as bert4keras's CLUE classifiers.

Keras: mtl_framework.families.heads imports this module, families/__init__.py never does (the
family records load before Keras)."""
import keras
import numpy as np
from keras import ops

from data_adapters.task_types import CLASSIFICATION, MATCHING, REGRESSION
from mtl_framework import losses
from mtl_framework.families.heads import ScoreHead, TaskHead, _np, first_positions, head_for


@head_for(CLASSIFICATION.name, MATCHING.name)
class ClassificationHead(TaskHead):
    """[CLS] -> Dense(n) with bias, as bert4keras's CLUE classifiers. Softmax
    CE; multi_label uses Su's multi-label CE and predicts scores > 0."""


    def __init__(self, num_labels, multi_label=False, **kwargs):
        super().__init__(num_labels, **kwargs)
        self.multi_label = multi_label
        self.dense = keras.layers.Dense(
            num_labels, kernel_initializer=self.initializer, name="dense")

    def build(self, hidden_shape):
        self.dense.build((None, hidden_shape[-1]))

    def call(self, hidden, batch, training=False):
        return self.dense(hidden[:, 0])

    def read_positions(self, batch):
        return first_positions(batch)

    def compute_task_loss(self, logits, batch):
        if self.multi_label:
            loss = losses.multilabel_categorical_crossentropy(batch["label"], logits)
        else:
            loss = losses.sparse_categorical_crossentropy(batch["label"], logits)
        return ops.mean(loss)

    def decode(self, logits, batch=None):
        logits = _np(logits)
        if self.multi_label:
            return [[int(i) for i in np.flatnonzero(row > 0)] for row in logits]
        return [int(i) for i in logits.argmax(-1)]

    def targets(self, batch):
        label = np.asarray(batch["label"])
        if self.multi_label:
            return [[int(i) for i in np.flatnonzero(row > 0.5)] for row in label]
        return [int(i) for i in label]

    def get_config(self):
        return {**super().get_config(), "multi_label": self.multi_label}


@head_for(REGRESSION.name)
class RegressionHead(ScoreHead):
    """[CLS] -> Dense(1) with bias; MSE."""

    def call(self, hidden, batch, training=False):
        return self.dense(hidden[:, 0])[:, 0]

    def compute_task_loss(self, scores, batch):
        return ops.mean(losses.mean_squared_error(batch["label"], scores))

    def decode(self, scores, batch=None):
        return [float(s) for s in _np(scores)]

    def targets(self, batch):
        return [float(s) for s in np.asarray(batch["label"])]
