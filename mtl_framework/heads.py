"""Task heads, one layer per family (bert4keras practice per family; docs/architecture.md).

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
from itertools import groupby

import keras
import numpy as np
from keras import ops

from mtl_framework import losses
from mtl_framework.families import FAMILIES
from mtl_framework.layers import (
    NEG_INF,
    EfficientGlobalPointer,
    GlobalPointer,
    RoFormerV2Initializer,
    rotary_lengths,
)


def backbone_inputs(batch):
    """token_ids / segment_ids with a choice axis [B, C, L] folded to
    [B * C, L], the shape the backbone takes (ChoiceHead unfolds it)."""
    out = {}
    for key in ("token_ids", "segment_ids"):
        x = batch[key]
        out[key] = ops.reshape(x, (-1, ops.shape(x)[-1])) if len(x.shape) == 3 else x
    return out


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


# family name -> its head class; each class registers itself with `head_for` (families/
# imports no Keras, so a family cannot name the class itself).
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
        """Heads with equal keys compute alike given their own weights, so training.py
        traces one micro-step for all of them and passes each task's weights in.
        A head with state beyond its trainable weights keeps a step of its own."""
        if self.non_trainable_variables:
            return ("own", id(self))
        config = self.get_config()
        return (type(self).__name__,) + tuple(
            (k, repr(config[k])) for k in sorted(config) if k not in self.untraced_config)


@head_for("classification", "matching")
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


class ScoreHead(TaskHead):
    """A head scoring [CLS] by one Dense(1) with bias (regression; each choice of a
    multiple-choice task)."""

    def __init__(self, num_labels=None, **kwargs):
        super().__init__(num_labels, **kwargs)
        self.dense = keras.layers.Dense(
            1, kernel_initializer=self.initializer, name="dense")

    def build(self, hidden_shape):
        self.dense.build((None, hidden_shape[-1]))


@head_for("regression")
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


@head_for("mrc_span")
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


@head_for("multiple_choice", "cloze")
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


@head_for("extraction_ner")
class EntityHead(TaskHead):
    """EfficientGlobalPointer(n types), nested spans allowed; sparse
    multi-label CE (bert4keras GPLinker loss). decode: {(type, start, end)}
    with score > threshold (0, as bert4keras)."""


    def __init__(self, num_labels, head_size=64, threshold=0.0, max_spans=256,
                 **kwargs):
        super().__init__(num_labels, **kwargs)
        self.head_size, self.threshold, self.max_spans = head_size, threshold, max_spans
        self.pointer = EfficientGlobalPointer(num_labels, head_size, name="pointer",
                                              kernel_initializer=self.initializer)

    def build(self, hidden_shape):
        self.pointer.build(hidden_shape)

    def call(self, hidden, batch, training=False):
        # training: the scores' parts (the loss needs no [B, types, L, L]); else whole
        return self.pointer(hidden, mask=_padding_mask(batch), factored=training,
                            lengths=_real_lengths(batch))

    def compute_task_loss(self, logits, batch):
        return pointer_loss(batch["entity_labels"], logits)

    def decode(self, logits, batch, max_spans="default"):
        max_spans = self.max_spans if max_spans == "default" else max_spans
        lengths = (np.asarray(batch["token_ids"]) != 0).sum(-1)
        return [spans_from_scores(s, n, self.threshold, max_spans)
                for s, n in zip(_np(logits), lengths)]

    def targets(self, batch):
        length = np.asarray(batch["token_ids"]).shape[-1]
        return self.decode(_label_scores(batch["entity_labels"], length), batch, None)

    def get_config(self):
        return {**super().get_config(), "head_size": self.head_size,
                "threshold": self.threshold, "max_spans": self.max_spans}


class _GPLinkerHead(TaskHead):
    """Three EfficientGlobalPointers named by `keys` (spans, head links, tail
    links), each trained with the sparse multilabel CE on `<key>_labels`."""

    keys = ()

    def add_pointers(self, *pointers):
        for key, pointer in zip(self.keys, pointers):
            setattr(self, f"{key}_pointer", pointer)  # in key order: fixes variable order

    def build(self, hidden_shape):
        for key in self.keys:
            getattr(self, f"{key}_pointer").build(hidden_shape)

    def call(self, hidden, batch, training=False):
        # training: each pointer's scores as parts (no [B, predicates, L, L]); else whole
        mask = _padding_mask(batch)
        lengths = _real_lengths(batch)
        return {key: getattr(self, f"{key}_pointer")(hidden, mask=mask, factored=training,
                                                     lengths=lengths)
                for key in self.keys}

    def compute_task_loss(self, outputs, batch):
        return sum(pointer_loss(batch[k + "_labels"], outputs[k]) for k in self.keys)

    def targets(self, batch):
        length = np.asarray(batch["token_ids"]).shape[-1]
        scores = {k: _label_scores(batch[k + "_labels"], length) for k in self.keys}
        return self.decode(scores, batch, None)


@head_for("extraction_relation")
class RelationHead(_GPLinkerHead):
    """GPLinker for (s, p, o), as bert4keras's
    examples/task_relation_extraction_gplinker.py: entity pointer (2 heads:
    subjects, objects), head pointer (subject start, object start) and tail
    pointer (subject end, object end) per predicate, both without RoPE or
    start <= end mask. decode: {(s_start, s_end, predicate, o_start, o_end)}."""

    keys = ("entity", "head", "tail")

    def __init__(self, num_labels, head_size=64, threshold=0.0, max_spans=256,
                 **kwargs):
        super().__init__(num_labels, **kwargs)
        self.head_size, self.threshold, self.max_spans = head_size, threshold, max_spans
        link = dict(RoPE=False, tril_mask=False, kernel_initializer=self.initializer)
        self.add_pointers(EfficientGlobalPointer(2, head_size, name="entity",
                                                 kernel_initializer=self.initializer),
                          EfficientGlobalPointer(num_labels, head_size, name="head", **link),
                          EfficientGlobalPointer(num_labels, head_size, name="tail", **link))

    def decode(self, outputs, batch, max_spans="default"):
        max_spans = self.max_spans if max_spans == "default" else max_spans
        lengths = (np.asarray(batch["token_ids"]) != 0).sum(-1)
        entity, head, tail = (_np(outputs[k]) for k in self.keys)
        out = []
        for i, n in enumerate(lengths):
            spans = sorted(spans_from_scores(entity[i], n, self.threshold, max_spans))
            subj = np.array([(s, e) for k, s, e in spans if k == 0], int).reshape(-1, 2)
            obj = np.array([(s, e) for k, s, e in spans if k == 1], int).reshape(-1, 2)
            # a predicate holds when both its head and tail links fire
            ok = ((head[i][:, subj[:, None, 0], obj[None, :, 0]] > self.threshold)
                  & (tail[i][:, subj[:, None, 1], obj[None, :, 1]] > self.threshold))
            out.append({(int(subj[a, 0]), int(subj[a, 1]), int(p),
                         int(obj[b, 0]), int(obj[b, 1]))
                        for p, a, b in zip(*np.nonzero(ok))})
        return out

    def get_config(self):
        return {**super().get_config(), "head_size": self.head_size,
                "threshold": self.threshold, "max_spans": self.max_spans}


def clique_search(argus, links):
    """Split arguments [(role, start, end)] into events: the maximal cliques
    of the link graph (links hold (start, end, start, end) both ways).

    bert4keras's DuEE recursion yields exactly the maximal cliques too, but
    blows up on dense graphs (an untrained model links almost everything);
    Bron-Kerbosch with a pivot gives the same set without that.
    """
    nbrs = {a: {b for b in argus if b != a and a[1:] + b[1:] in links}
            for a in argus}
    out = []

    def expand(r, p, x):
        if not p and not x:
            out.append(sorted(r))
            return
        pivot = max(p | x, key=lambda u: len(nbrs[u] & p))
        for v in sorted(p - nbrs[pivot]):
            expand(r | {v}, p & nbrs[v], x & nbrs[v])
            p, x = p - {v}, x | {v}

    expand(set(), set(argus), set())
    return sorted(out)


@head_for("extraction_event")
class EventHead(_GPLinkerHead):
    """GPLinker for events, as bert4keras's DuEE example (bojone/GPLinker
    duee_v1.py): argument pointer over roles (event type + role, the trigger
    being a role), head and tail pointers (1 head, no RoPE, start <= end)
    linking two arguments of one event by their starts and by their ends,
    stored as (min, max). role_groups[r] is role r's event type: arguments
    are split into events within a type (one group for all roles when not
    given). decode: per row a list of events, each a sorted tuple of
    (role, start, end)."""

    keys = ("argument", "head", "tail")

    def __init__(self, num_labels, head_size=64, threshold=0.0,
                 role_groups=None, max_spans=64, **kwargs):
        super().__init__(num_labels, **kwargs)
        if role_groups is not None and len(role_groups) != num_labels:
            raise ValueError(
                f"role_groups has {len(role_groups)} entries for {num_labels} "
                "roles: give one event type per role, in label order")
        self.head_size, self.threshold, self.max_spans = head_size, threshold, max_spans
        self.role_groups = list(role_groups) if role_groups is not None else None
        init = dict(kernel_initializer=self.initializer)
        self.add_pointers(EfficientGlobalPointer(num_labels, head_size, name="argument", **init),
                          EfficientGlobalPointer(1, head_size, RoPE=False, name="head", **init),
                          EfficientGlobalPointer(1, head_size, RoPE=False, name="tail", **init))

    def events(self, argus, head, tail):
        """Events from arguments {(role, start, end)} and link scores
        head, tail [L, L] (a link needs both > threshold)."""
        argus = sorted(argus)
        links = set()
        for i1, (_, h1, t1) in enumerate(argus):
            for i2, (_, h2, t2) in enumerate(argus):
                if (i2 > i1 and head[min(h1, h2), max(h1, h2)] > self.threshold
                        and tail[min(t1, t2), max(t1, t2)] > self.threshold):
                    links.add((h1, t1, h2, t2))
                    links.add((h2, t2, h1, t1))
        groups = self.role_groups or [0] * self.num_labels
        out = []
        for _, sub in groupby(sorted(argus, key=lambda a: (str(groups[a[0]]), a)),
                              key=lambda a: groups[a[0]]):
            out.extend(tuple(e) for e in clique_search(list(sub), links))
        return out

    def decode(self, outputs, batch, max_spans="default"):
        max_spans = self.max_spans if max_spans == "default" else max_spans
        lengths = (np.asarray(batch["token_ids"]) != 0).sum(-1)
        argument, head, tail = (_np(outputs[k]) for k in self.keys)
        return [self.events(spans_from_scores(argument[i], n, self.threshold, max_spans),
                            head[i, 0], tail[i, 0])
                for i, n in enumerate(lengths)]

    def get_config(self):
        return {**super().get_config(), "head_size": self.head_size,
                "threshold": self.threshold, "role_groups": self.role_groups,
                "max_spans": self.max_spans}


@head_for("coreference")
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
        index = ops.concatenate([ops.cast(batch["span1"], "int32"),
                                 ops.cast(batch["span2"], "int32")], axis=1)
        vectors = ops.take_along_axis(hidden, index[:, :, None], axis=1)  # [B, 4, H]
        return self.dense(ops.reshape(vectors, (-1, 4 * hidden.shape[-1])))

    def compute_task_loss(self, logits, batch):
        return ops.mean(losses.sparse_categorical_crossentropy(batch["label"], logits))

    def decode(self, logits, batch=None):
        return [int(i) for i in _np(logits).argmax(-1)]

    def targets(self, batch):
        return [int(i) for i in np.asarray(batch["label"])]


@head_for("mlm")
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

    def compute_task_loss(self, logits, batch):
        return losses.masked_lm_crossentropy(batch["mlm_labels"], logits)

    def decode(self, logits, batch):
        """Per row the predicted ids at the masked positions (in order)."""
        logits, labels = _np(logits), np.asarray(batch["mlm_labels"])
        return [row.argmax(-1)[lab > 0] for row, lab in zip(logits, labels)]

    def targets(self, batch):
        return [lab[lab > 0] for lab in np.asarray(batch["mlm_labels"])]


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
    head = HEAD_CLASSES[family.name](num_labels=num_labels, family=family.name, **kwargs)
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
