"""What a task head is: `TaskHead`, the base of every family's head class, `head_for`
(a class names the families it serves), and the helpers heads share (pointer scores,
masks, backbone inputs), and the builders of a task's head (`build_head`, `task_head`).
Each family's head classes sit beside the family, in `families/<module>_heads.py`, and
register themselves with `head_for` when imported; `build_head` imports them (keras is
imported only when a head is built, so the data tools never pay for it). Nothing here
names a family.

Every head sits on the backbone's sequence output `hidden` [B, L, H] and reads
the batch keys of docs/batches.md:

    outputs = head(hidden, batch, training=False)
    loss = head.compute_task_loss(outputs, batch)   # scalar, mean over B

The pointer heads of NER, relations and events return their scores in parts when
training (EfficientGlobalPointer's shared [B, L, L] plus per-type start and end
biases): the loss is computed from those, never from [B, types, L, L]; evaluation
(training=False) gets the whole scores and decodes them as before.
    head.decode(outputs, batch)    # NumPy predictions, one entry per row
    head.targets(batch)            # the gold answers in decode's format
    head.trace_key()               # equal keys: one traced training step serves both heads
    head.read_positions(batch)     # the positions its training loss reads ([B, R]), or None

Build a head before using it in a tf.function (build_head does): all variables
are created in build(), none at call time. call() and compute_task_loss() must
read sizes from tensors, not from num_labels or static batch shapes (or list the
attribute out of `untraced_config`): training runs a group's first head with
another task's weights, whose label axis may differ, in a step traced with every
batch axis unknown.

The pointer layers the span heads use (GlobalPointer, EfficientGlobalPointer) are in
layers.py; they follow bert4keras 0.11.5 (its layers.py) formula for formula: interleaved
q/k, rotary positions on adjacent pairs, scores / sqrt(head_size), padding and start > end set to -inf.
"""
import importlib

import keras
import numpy as np
from keras import ops

from mtl_framework import losses
from mtl_framework.families import FAMILIES
from mtl_framework.families.pointers import EfficientGlobalPointer, GlobalPointer
from mtl_framework.layers import NEG_INF, RoFormerV2Initializer, rotary_lengths


def backbone_inputs(batch):
    """token_ids / segment_ids (and read_positions, where the step gave the batch them)
    with a choice axis [B, C, L] folded to [B * C, L], the shape the backbone takes
    (ChoiceHead unfolds it)."""
    out = {}
    for key in ("token_ids", "segment_ids", "read_positions"):
        if key == "read_positions" and key not in batch:
            continue
        x = batch[key]
        out[key] = ops.reshape(x, (-1, ops.shape(x)[-1])) if len(x.shape) == 3 else x
    return out


def first_positions(batch):
    """read_positions of a head that reads [CLS] alone: position 0 of each text, [B, 1]
    ([B, C, 1] with a choice axis)."""
    return np.zeros((*np.shape(batch["token_ids"])[:-1], 1), "int32")


# ---------------------------------------------------------------- pointers


def use_backbone_rotary(heads, backbone):
    """Give every rotary pointer of `heads` the backbone's rope_scaling: the positions
    they rotate are the backbone's, so is their scaling (one setting, in the backbone
    config; not part of a head's own config)."""
    scaling = backbone.config.get("rope_scaling")
    for head in heads:
        for layer in head._flatten_layers():
            if isinstance(layer, (GlobalPointer, EfficientGlobalPointer)):
                layer.rope_scaling = scaling


def pointer_loss(labels, scores):
    """GPLinker's loss from dense scores [B, heads, L, L] or their factored parts."""
    if isinstance(scores, dict):
        return losses.factored_globalpointer_crossentropy(labels, **scores)
    return losses.globalpointer_crossentropy(labels, scores)


# ------------------------------------------------------------------- heads


def _np(x):
    return keras.ops.convert_to_numpy(x) if not isinstance(x, np.ndarray) else x


def _padding_mask(batch):
    return ops.not_equal(batch["token_ids"], 0)


def _real_lengths(batch):
    return rotary_lengths(batch["token_ids"])


def spans_from_scores(scores, length, threshold=0.0, max_spans=None):
    """{(head, start, end)} with score > threshold; positions 0 ([CLS]) and
    length - 1 ([SEP]) excluded, as bert4keras's extraction examples. Only
    the max_spans best are kept: an untrained pointer scores half of all
    L * L pairs above 0, which would stall evaluation."""
    scores = np.array(scores, dtype=np.float64)
    for pos in (0, length - 1):
        scores[:, pos] = NEG_INF
        scores[:, :, pos] = NEG_INF
    found = np.argwhere(scores > threshold)
    if max_spans is not None and len(found) > max_spans:
        best = np.argsort(-scores[tuple(found.T)], kind="stable")[:max_spans]
        found = found[best]
    return {(int(h), int(s), int(e)) for h, s, e in found}


def _label_scores(labels, length):
    """Scores +1 at the labelled pairs of [B, heads, S, 2] ((0, 0) is
    padding), -1 elsewhere: decoding them gives the gold structures."""
    labels = np.asarray(labels)
    scores = -np.ones(labels.shape[:2] + (length, length))
    b, h, k = np.nonzero((labels != 0).any(-1))
    scores[b, h, labels[b, h, k, 0], labels[b, h, k, 1]] = 1.0
    return scores


# family name -> its head class; each class registers itself with `head_for` when its
# family's heads module is imported (mtl_framework.families.heads imports them all; the family
# records import no Keras, so a record cannot name its class itself).
HEAD_CLASSES = {}


def head_for(*families):
    """Class decorator: the head class of these task families (the first is its default)."""
    def register(cls):
        cls.families = families
        for name in families:
            HEAD_CLASSES[name] = cls
        return cls
    return register


class TaskHead(keras.layers.Layer):
    """Base class: see the module docstring for the interface. `family`: the task family
    (mtl_framework.families) it serves, one of its class's `families` (default the
    first); part of its config, since training and the loss denominator read it."""

    families = ()

    def __init__(self, num_labels=None, num_layers=1, family=None, **kwargs):
        super().__init__(**kwargs)
        family = family or (self.families[0] if self.families else None)
        if family not in self.families:
            raise ValueError(f"{type(self).__name__} is the head of "
                             f"{', '.join(self.families) or 'no family'}, not {family!r}")
        self.family = family
        self.num_labels = num_labels
        # bert4keras's heads use the model's initializer: its std has the backbone's L^(-1/2)
        self.num_layers = num_layers
        self.initializer = RoFormerV2Initializer(num_layers)

    def build(self, hidden_shape):
        pass

    def call(self, hidden, batch, training=False):
        raise NotImplementedError

    def compute_task_loss(self, outputs, batch):
        raise NotImplementedError

    # Names of the scalars compute_task_loss_and_signs gives beside the loss, signs of
    # whether the task learns (the contrastive head's in-batch accuracy); the step logs
    # them per micro-batch (metrics.jsonl, the console). Most heads have none.
    signs = ()

    def compute_task_loss_and_signs(self, outputs, batch):
        """(the loss, {name: scalar tensor} of `signs`): what the training step calls, so a
        head computes its signs from the tensors its loss has (no second pass)."""
        return self.compute_task_loss(outputs, batch), {}

    # How the step runs the backbone for this head. True: each text of a row is encoded
    # alone (the contrastive head: queries and passages apart, MultiTaskModel._side_vectors);
    # False: one backbone pass over the batch's token_ids, the head on its output.
    texts_alone = False
    # > 0: the step computes the head's gradient by GradCache, this many texts through the
    # backbone at a time (_cached_gradients in step/tensorflow.py, step/jax.py); 0: one tape.
    cached_chunk = 0
    # True: how many positions read_positions gives varies by batch (MLM's masked tokens), so
    # a backend that compiles per shape pads them to a few counts (BackendStep._read_slots).
    read_count_varies = False

    def read_positions(self, batch):
        """The positions of the backbone's output this head's training loss reads, [B, R]
        int32 of the NumPy `batch` (a choice axis kept: [B, C, R]; any position for a slot a
        row does not need, its loss ignoring it), or None: it reads them all. Where the step
        gives them (MultiTaskModel._with_read_positions: the batch's `read_positions`), the
        backbone's last layer runs at those rows alone and `call` gets [B, R, H] of them."""
        return None

    def text_encoder(self, backbone):
        """The keras.Model a `texts_alone` head's texts run through, alone: token ids ->
        the head's outputs, one per text (the contrastive head: its SentenceEncoder of
        `backbone`, sentence_encoder/model.py). Heads read one pass over the batch."""
        raise TypeError(f"{type(self).__name__} reads one backbone pass over its batch "
                        "(texts_alone is False): it has no text encoder")

    def decode(self, outputs, batch):
        raise NotImplementedError

    def targets(self, batch):
        raise NotImplementedError

    def get_config(self):
        return {**super().get_config(), "num_labels": self.num_labels,
                "num_layers": self.num_layers, "family": self.family}

    # Config keys the training computation (call + compute_task_loss) does not read:
    # sizes that come with the weights' shapes, decoding options, the initializer, the
    # family (the families of one head class compute alike; what differs between them
    # is read outside the head's traced step).
    untraced_config = ("name", "num_labels", "threshold", "max_spans", "role_groups",
                       "num_layers", "family")

    def trace_key(self):
        """Heads with equal keys compute alike given their own weights, so the step
        traces one micro-step for all of them and passes each task's weights in.
        A head with state beyond its trainable weights keeps a step of its own."""
        if self.non_trainable_variables:
            return ("own", id(self))
        config = self.get_config()
        return (type(self).__name__,) + tuple(
            (k, repr(config[k])) for k in sorted(config) if k not in self.untraced_config)


class ScoreHead(TaskHead):
    """A head scoring [CLS] by one Dense(1) with bias (a value, or one choice's score):
    the layer and its build, which families/text_heads.py's RegressionHead and
    families/choice_heads.py's ChoiceHead share."""

    def __init__(self, num_labels=None, **kwargs):
        super().__init__(num_labels, **kwargs)
        self.dense = keras.layers.Dense(
            1, kernel_initializer=self.initializer, name="dense")

    def build(self, hidden_shape):
        self.dense.build((None, hidden_shape[-1]))

    def read_positions(self, batch):
        return first_positions(batch)


def head_classes():
    """{family: head class} of every family: each family's `<module>_heads` module imported
    (importing registers its classes with `head_for`)."""
    for record in FAMILIES.values():
        importlib.import_module(record.featurizer.__module__ + "_heads")
    return HEAD_CLASSES


def build_head(task_type, num_labels, hidden_size, **kwargs):
    """A built head for a task family (the `type` of a task spec; families.FAMILIES).

    kwargs go to the head: name, head_size, multi_label (classification),
    role_groups (extraction_event), embeddings (mlm, required), threshold,
    num_layers (the backbone's: the initializer's L^(-1/2), as bert4keras's heads
    share the model's initializer; 1 when not given).
    """
    if task_type not in FAMILIES:
        raise ValueError(f"unknown task type {task_type!r}; "
                         f"expected one of: {', '.join(FAMILIES)}")
    family = FAMILIES[task_type]
    least = 1 if kwargs.get("multi_label") else family.min_labels
    if least is not None and (num_labels is None or num_labels < least):
        raise ValueError(f"task type {task_type!r} needs at least {least} "
                         f"label(s), got {num_labels}{family.too_few_labels_hint}")
    if family.tied_embedding:
        if kwargs.get("embeddings") is None:
            raise ValueError(f"the {task_type} head is tied to the token embedding: pass "
                             "embeddings=<the backbone's token embedding matrix>")
        vocab = kwargs["embeddings"]
        vocab = vocab.embeddings if isinstance(vocab, keras.layers.Embedding) else vocab
        if num_labels is not None and vocab.shape[0] != num_labels:
            raise ValueError(f"{task_type}: num_labels {num_labels} differs from the "
                             f"embedding's vocabulary size {vocab.shape[0]}")
    if kwargs.pop("family", family.name) != family.name:
        raise ValueError(f"build_head({task_type!r}): family must be the task type")
    head = head_classes()[family.name](num_labels=num_labels, family=family.name, **kwargs)
    head.build((None, None, hidden_size))
    return head


def task_head(task, labels, hidden_size, **kwargs):
    """The head of a registry TaskSpec whose labels are `labels` (resolved), with the
    settings its family takes from the task (multi_label, an event task's role groups)."""
    if task.multi_label:
        kwargs["multi_label"] = True
    kwargs.update(FAMILIES[task.type].head_settings(task, labels))
    return build_head(task.type, len(labels) if labels else None, hidden_size, name=task.name,
                      **kwargs)
