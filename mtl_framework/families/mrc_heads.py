"""The head of families/mrc.py: a GlobalPointer over the context window.

Keras: mtl_framework.families.heads imports this module, families/__init__.py never does (the
family records load before Keras)."""
import numpy as np
from keras import ops

from data_adapters.task_types import MRC_SPAN
from mtl_framework import losses
from mtl_framework.families.heads import TaskHead, _np, _real_lengths, head_for
from mtl_framework.families.pointers import GlobalPointer
from mtl_framework.layers import NEG_INF


@head_for(MRC_SPAN.name)
class SpanHead(TaskHead):
    """GlobalPointer(1 head) over the context, as bert4keras's CLUE cmrc2018
    (no bias, the model's initializer). Valid pairs: start <= end, both on
    context tokens, plus (0, 0) = [CLS] = "no answer in this window"; (0, j>0)
    is masked too. Loss: softmax CE over start * L + end."""


    def __init__(self, num_labels=None, head_size=64, **kwargs):
        super().__init__(num_labels, **kwargs)
        self.head_size = head_size
        self.pointer = GlobalPointer(
            1, head_size, use_bias=False,
            kernel_initializer=self.initializer, name="pointer")

    def build(self, hidden_shape):
        self.pointer.build(hidden_shape)

    def call(self, hidden, batch, training=False):
        pos = ops.arange(ops.shape(hidden)[1])
        allowed = ops.logical_or(
            ops.greater(batch["context_mask"], 0), ops.equal(pos, 0)[None])
        logits = self.pointer(hidden, mask=allowed, lengths=_real_lengths(batch))[:, 0]
        cls_row = ops.logical_and(ops.equal(pos, 0)[:, None],
                                  ops.greater(pos, 0)[None, :])
        return ops.where(cls_row[None], NEG_INF, logits)

    def compute_task_loss(self, logits, batch):
        shape = ops.shape(logits)
        target = (ops.cast(batch["start"], "int32") * shape[-1]
                  + ops.cast(batch["end"], "int32"))
        flat = ops.reshape(logits, (shape[0], -1))
        return ops.mean(losses.sparse_categorical_crossentropy(target, flat))

    def decode(self, logits, batch=None, max_answer_length=None):
        """Per row the best real span (as cmrc2018: [CLS] row/column
        excluded) with its score, plus null_score = score of (0, 0) and the
        row's window_id, so the evaluator can pick the best window."""
        logits = _np(logits)
        window = batch.get("window_id") if batch is not None else None
        out = []
        for i, scores in enumerate(logits):
            null_score = float(scores[0, 0])
            scores = np.array(scores, dtype=np.float64)
            scores[0, :] = NEG_INF
            scores[:, 0] = NEG_INF
            if max_answer_length:
                n = scores.shape[0]
                too_long = np.subtract.outer(np.arange(n), np.arange(n)) <= -max_answer_length
                scores[too_long] = NEG_INF
            k = int(scores.argmax())
            start, end = divmod(k, scores.shape[1])
            score = float(scores.flat[k])
            if score == NEG_INF:  # no context tokens at all
                start = end = 0
            out.append({"start": start, "end": end, "score": score,
                        "null_score": null_score,
                        "window_id": None if window is None else int(window[i])})
        return out

    def targets(self, batch):
        return [(int(s), int(e)) for s, e in
                zip(np.asarray(batch["start"]), np.asarray(batch["end"]))]

    def get_config(self):
        return {**super().get_config(), "head_size": self.head_size}
