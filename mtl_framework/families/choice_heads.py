"""The head of families/choice.py: a score per choice, softmax over the choices.

Keras: mtl_framework.families.heads imports this module, families/__init__.py never does (the
family records load before Keras)."""
import numpy as np
from keras import ops

from data_adapters.task_types import CLOZE, MULTIPLE_CHOICE
from mtl_framework import losses
from mtl_framework.families.heads import ScoreHead, _np, head_for
from mtl_framework.layers import NEG_INF


@head_for(MULTIPLE_CHOICE.name, CLOZE.name)
class ChoiceHead(ScoreHead):
    """[CLS] of each (context, question, choice) -> Dense(1), softmax over the
    choices, as bert4keras's CLUE c3. The backbone runs on the choices folded
    into the batch axis ([B * C, L], see backbone_inputs); choice_mask [B, C]
    keeps padded choices out of the softmax."""

    def call(self, hidden, batch, training=False):
        cls = hidden[:, :, 0] if len(hidden.shape) == 4 else hidden[:, 0]
        n_choices = ops.shape(batch["choice_mask"])[1]
        return ops.reshape(self.dense(cls), (-1, n_choices))

    def compute_task_loss(self, logits, batch):
        return ops.mean(losses.choice_crossentropy(
            batch["label"], logits, batch["choice_mask"]))

    def decode(self, logits, batch):
        logits = np.where(np.asarray(batch["choice_mask"]) > 0, _np(logits), NEG_INF)
        return [int(i) for i in logits.argmax(-1)]

    def targets(self, batch):
        return [int(i) for i in np.asarray(batch["label"])]
