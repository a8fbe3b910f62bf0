"""One check every task family goes through, as keras-hub's `TestCase.run_backbone_test`
runs every backbone through the same steps; a family's test supplies only its inputs.

    run_family_test(FamilyCase(...))

Steps: the batch has the family's declared keys, dtypes and ranks; the head built
through the family table (heads.build_head) runs with training True and False and
gives a finite loss; decoding scores made from the gold gives back the head's
targets (and the case's independently computed gold, when given); heads of two
label counts share a trace key; from_config(get_config()) gives an equal config
and, with the same weights, equal outputs.
"""
from dataclasses import dataclass, field
from typing import Callable, Optional

import keras
import numpy as np

if keras.backend.backend() == "tensorflow":  # JAX runs the parities alone (test_jax_packed)
    import tensorflow as tf

from mtl_framework.families import family
from mtl_framework.families.heads import build_head

HIDDEN = 16


@dataclass
class FamilyCase:
    name: str  # the family
    batch: dict  # a collated batch (NumPy arrays)
    num_labels: Optional[int]
    other_num_labels: Optional[int]  # a second label count for the trace-key check
    gold_outputs: Callable  # batch -> head outputs that score the gold highest
    head_kwargs: Callable = lambda num_labels: {}  # num_labels -> build_head kwargs
    expected: Optional[list] = None  # the gold in decode's format, computed from the features
    multi_label: bool = False
    project: Callable = lambda decoded: decoded  # one decoded row -> targets' format
    normalize: Callable = lambda row: row  # a row of targets in a comparable form (order)
    tied: dict = field(default_factory=dict)  # kwargs outside the config (mlm's embeddings)


def hidden_for(batch, seed=0):
    """Random backbone output for the batch: [B, L, H] ([B, C, L, H] with a choice axis)."""
    shape = tuple(np.asarray(batch["token_ids"]).shape) + (HIDDEN,)
    return tf.constant(np.random.default_rng(seed).normal(size=shape).astype("float32"))


def to_numpy(outputs):
    return tf.nest.map_structure(lambda t: np.asarray(t), outputs)


def build(case, num_labels):
    return build_head(case.name, num_labels, HIDDEN, **case.head_kwargs(num_labels), **case.tied)


def run_family_test(case):
    record = family(case.name)
    record.check_batch(case.batch, case.multi_label)
    batch = {k: tf.constant(v) for k, v in case.batch.items()}
    hidden = hidden_for(case.batch)

    head = build(case, case.num_labels)
    assert head.family == case.name
    assert head.built  # every variable made before the first call
    for training in (True, False):
        loss = float(head.compute_task_loss(head(hidden, batch, training=training), batch))
        assert np.isfinite(loss), (case.name, training, loss)

    targets = [case.normalize(row) for row in head.targets(case.batch)]
    decoded = [case.normalize(case.project(row))
               for row in head.decode(case.gold_outputs(case.batch), case.batch)]
    assert _same(decoded, targets), (case.name, decoded, targets)
    if case.expected is not None:
        assert _same(targets, case.expected), (case.name, targets, case.expected)

    other = build(case, case.other_num_labels)
    assert other.trace_key() == head.trace_key()

    config = head.get_config()
    clone = type(head).from_config({**config, **case.tied})
    clone.build((None, None, HIDDEN))
    assert clone.get_config() == config and clone.family == case.name  # trainable alone
    clone.set_weights(head.get_weights())
    ours, theirs = (to_numpy(h(hidden, batch, training=False)) for h in (head, clone))
    tf.nest.map_structure(np.testing.assert_array_equal, ours, theirs)
    assert float(clone.compute_task_loss(clone(hidden, batch, training=True), batch)) == \
        float(head.compute_task_loss(head(hidden, batch, training=True), batch))
    return head


def _same(a, b):
    """Equal row by row, arrays and sets included."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not np.array_equal(np.asarray(x), np.asarray(y)):
                return False
        elif x != y:
            return False
    return True


def one_hot_logits(labels, n):
    """[B, n] logits that put label i of each row first (by a wide margin)."""
    labels = np.asarray(labels)
    return np.where(np.arange(n)[None] == labels[:, None], 10.0, -10.0).astype("float32")


def tied_embedding(vocab_size):
    """A stand-in for the backbone's token embedding matrix (what an mlm head is tied to)."""
    return keras.Variable(np.random.default_rng(1).normal(size=(vocab_size, HIDDEN)).astype("float32"))


def run_on_backbone(case, backbone):
    """The case's head on a real backbone's output (`backbone` built, hidden_size HIDDEN;
    any architecture), as training computes it (step/model.py `_outputs`: the choice axis
    folded into the batch): a finite loss with training True (padded, and packed as the
    TensorFlow step runs it, dropout on) and False, and finite gradients that reach every
    backbone weight a token's path uses."""
    from mtl_framework.families.heads import backbone_inputs

    batch = {k: tf.constant(v) for k, v in case.batch.items()}
    tied = {"embeddings": backbone.token_embedding} if case.tied else {}
    head = build_head(case.name, case.num_labels, HIDDEN, **case.head_kwargs(case.num_labels),
                      **tied)
    for training, packed in ((True, False), (True, True), (False, False)):
        with tf.GradientTape() as tape:
            hidden = backbone(backbone_inputs(batch), training=training, packed=packed)
            if family(case.name).choice_axis:
                shape = tf.shape(batch["token_ids"])
                hidden = tf.reshape(hidden, tf.concat([shape, tf.shape(hidden)[-1:]], 0))
            loss = head.compute_task_loss(head(hidden, batch, training=training), batch)
        assert np.isfinite(float(loss)), (case.name, training, packed, float(loss))
        weights = backbone.trainable_variables
        gradients = tape.gradient(loss, weights)
        reached = [w.path for w, g in zip(weights, gradients) if g is not None
                   and np.abs(np.asarray(tf.convert_to_tensor(g))).max() > 0]
        assert all(np.isfinite(np.asarray(tf.convert_to_tensor(g))).all()
                   for g in gradients if g is not None), case.name
        # every block weight learns (embedding rows of unused tokens need not)
        blocks = [w.path for w in weights if "transformer_layer" in w.path]
        assert set(blocks) <= set(reached), (case.name, sorted(set(blocks) - set(reached))[:3])
    return head


def jax_loss_and_gradients(loss_of, variables, jit=True):
    """(loss, [gradient as float64 NumPy]) of `loss_of()` with respect to `variables` on
    JAX: their values differentiated through a WeightsScope and jitted, as JAX's step does (a
    variable the loss does not read gets zeros where TensorFlow's tape gives None)."""
    import jax

    from mtl_framework.step import WeightsScope

    def loss(values):
        with WeightsScope(list(zip(variables, values))):
            return loss_of()

    gradient = jax.value_and_grad(loss)
    value, gradients = (jax.jit(gradient) if jit else gradient)([v.value for v in variables])
    return float(value), [np.asarray(g, "float64") for g in gradients]


def run_packed_parity(case, backbone, loss_bound=1e-5, gradient_bound=2e-6):
    """The case's micro-batch through MultiTaskModel as the training step computes it
    (`_loss`, training=True), its backbone packed (layers.Packing: token-wise work on
    the real tokens alone; the heads read the padded [B, L, H], zeros at padding) and
    padded: the loss within `loss_bound` of the loss's scale (at least 1); every weight's
    gradient (backbone and head) within `gradient_bound` of the largest gradient entry
    (issue 52's bounds), or, where float32 cannot resolve that, no further from the padded
    call's than the padded call's own gradient moves when the batch's rows are reversed
    (the same loss, its sums in another order: the softmax over choices or in-batch
    candidates sums terms far larger than the gradient they leave, and packing changes
    the order of those sums as reversing does). `backbone` without dropout (the masks
    differ by layout: [T, H] packed, [B, L, H] padded). Returns {loss: (packed, padded),
    packed: largest gradient difference / largest gradient entry, reversed: the same of
    the reversed rows}."""
    from mtl_framework.step.model import MultiTaskModel

    tied = {"embeddings": backbone.token_embedding} if case.tied else {}
    head = build_head(case.name, case.num_labels, backbone.config["hidden_size"],
                      **case.head_kwargs(case.num_labels), **tied)
    variables = backbone.trainable_variables + [
        v for v in head.trainable_variables
        if all(v is not w for w in backbone.trainable_variables)]

    def loss_and_gradients(packed, rows=slice(None), jit=True):
        model = MultiTaskModel(backbone, {case.name: head}, packed=packed)
        ids = case.batch["token_ids"]
        # the backbone's `packed` the step gives it: TensorFlow True, JAX T rounded up
        packed = packed and model._packed_rows(int(np.count_nonzero(ids)), ids.size)
        if keras.backend.backend() == "jax":
            batch = {k: keras.ops.convert_to_tensor(v[rows]) for k, v in case.batch.items()}
            return jax_loss_and_gradients(lambda: model._loss(head, batch, True, packed=packed),
                                          variables, jit)
        batch = {k: tf.constant(v[rows]) for k, v in case.batch.items()}
        with tf.GradientTape() as tape:  # the loss the training step differentiates
            loss = model._loss(head, batch, True, packed=packed)
        gradients = tape.gradient(loss, variables)
        return float(loss), [None if g is None else np.asarray(tf.convert_to_tensor(g), "float64")
                             for g in gradients]

    packed, packed_gradients = loss_and_gradients(True)
    padded, padded_gradients = loss_and_gradients(False)
    _, reversed_gradients = loss_and_gradients(False, slice(None, None, -1))
    assert np.isfinite(packed) and abs(packed - padded) <= loss_bound * max(abs(padded), 1.0), \
        (case.name, packed, padded)
    assert [g is None for g in packed_gradients] == [g is None for g in padded_gradients]
    largest = max(np.abs(g).max() for g in padded_gradients if g is not None)

    def farthest(gradients):
        return max(np.abs(ours - theirs).max()
                   for ours, theirs in zip(gradients, padded_gradients) if theirs is not None)

    moved, reordered = farthest(packed_gradients), farthest(reversed_gradients)
    if keras.backend.backend() == "jax" and moved > gradient_bound * largest:
        # XLA orders a fused op's sums by its shapes: the padded call op by op moves as far
        # (a cloze row of 2 choices, no padding: packing gathers every row, 4.8e-6)
        reordered = max(reordered, farthest(loss_and_gradients(False, jit=False)[1]))
    assert largest > 0 and moved <= max(gradient_bound * largest, reordered), \
        (case.name, moved / largest, reordered / largest)
    return {"loss": (packed, padded), "packed": moved / largest, "reversed": reordered / largest}


def run_read_rows_parity(case, backbone, loss_bound=1e-5, exact_bound=None):
    """The case's training loss and gradients with the backbone's last layer at the
    positions the head reads alone (TaskHead.read_positions, given to the batch as the
    TensorFlow step gives them: MultiTaskModel._with_read_positions; packed, as that step
    runs) against the padded call: the loss within `loss_bound` of its scale in the
    backbone's own precision, and, on float64 copies of the backbone and head (the same
    weights), every gradient within `exact_bound` of the largest entry, the losses within
    `loss_bound` (the step's losses are float32 in any policy). Float64, because the read
    rows' matmuls multiply B rows where the padded call multiplies B x L, another kernel
    with its own rounding, which a softmax over near-equal choices (or bfloat16) leaves
    above the bounds of the padded call's own noise; in float64 the two must be one
    function, so a wrong row shows. `backbone`
    without dropout. Returns {loss: (read rows, padded), exact: largest gradient difference
    / largest entry in float64}."""
    from mtl_framework.step.model import MultiTaskModel

    on_jax = keras.backend.backend() == "jax"
    if exact_bound is None:
        # JAX: coreference's float64 gradients sit 1.1e-8 (RoFormerV2) to 1.9e-7 (ALBERT) apart,
        # eager, where every other family's are within 5.4e-15 and TensorFlow's within 1e-15.
        # The float64 copies keep float32 steps (attention scores join the float32 padding
        # bias; the loss is float32): a last-bit change in float64 flips a float32 rounding
        # there (a wrong row moves the loss by 0.7%)
        exact_bound = 5e-7 if on_jax else 1e-9

    def loss_and_gradients(backbone, head, reads, jit=True):
        model = MultiTaskModel(backbone, {case.name: head}, packed=reads)
        given = model._with_read_positions(case.name, dict(case.batch)) if reads else case.batch
        assert not reads or "read_positions" in given, case.name
        variables = backbone.trainable_variables + [
            v for v in head.trainable_variables
            if all(v is not w for w in backbone.trainable_variables)]
        if on_jax:  # JAX's step reads rows without packing tokens (step/jax.py PACK_MICRO_BATCHES)
            batch = {k: keras.ops.convert_to_tensor(v) for k, v in given.items()}
            return jax_loss_and_gradients(lambda: model._loss(head, batch, True, packed=False),
                                          variables, jit)
        batch = {k: tf.constant(v) for k, v in given.items()}
        with tf.GradientTape() as tape:
            loss = model._loss(head, batch, True, packed=reads)
        return float(loss), [None if g is None else np.asarray(tf.convert_to_tensor(g), "float64")
                             for g in tape.gradient(loss, variables)]

    head = head_on(case, backbone)
    read, padded = loss_and_gradients(backbone, head, True)[0], loss_and_gradients(backbone, head, False)[0]
    assert np.isfinite(read) and abs(read - padded) <= loss_bound * max(abs(padded), 1.0), \
        (case.name, read, padded)
    policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float64")
    if on_jax:  # float64 arrays need x64, off by default
        import jax

        jax.config.update("jax_enable_x64", True)
    try:
        exact = type(backbone).from_config(backbone.get_config())
        exact.build()
        for copy, weight in zip(exact.weights, backbone.weights, strict=True):
            copy.assign(np.asarray(weight, "float64"))
        exact_head = head_on(case, exact)
        for copy, weight in zip(exact_head.weights, head.weights, strict=True):
            copy.assign(np.asarray(weight, "float64"))
        # eager on JAX: jitted, XLA's CPU code for BERT's and ALBERT's choice heads moves
        # either call's float64 gradient 1.6-2.8e-4 from the eager one (both ways alike)
        read_loss, read_gradients = loss_and_gradients(exact, exact_head, True, jit=False)
        padded_loss, padded_gradients = loss_and_gradients(exact, exact_head, False, jit=False)
    finally:
        keras.config.set_dtype_policy(policy)
        if on_jax:
            jax.config.update("jax_enable_x64", False)
    # the step computes every loss in float32 (`_loss_and_signs`): MLM's mean over its masked
    # tokens sums [B, R] there, [B, L] padded, in another order
    assert abs(read_loss - padded_loss) <= loss_bound * max(abs(padded_loss), 1.0), case.name
    assert [g is None for g in read_gradients] == [g is None for g in padded_gradients]
    largest = max(np.abs(g).max() for g in padded_gradients if g is not None)
    moved = max(np.abs(ours - theirs).max()
                for ours, theirs in zip(read_gradients, padded_gradients) if theirs is not None)
    assert largest > 0 and moved <= exact_bound * largest, (case.name, moved / largest)
    return {"loss": (read, padded), "exact": moved / largest}


def head_on(case, backbone):
    """The case's head for `backbone` (tied to its token embedding where the family ties)."""
    tied = {"embeddings": backbone.token_embedding} if case.tied else {}
    return build_head(case.name, case.num_labels, backbone.config["hidden_size"],
                      **case.head_kwargs(case.num_labels), **tied)
