"""One traced micro-step per head family and settings, whatever the label counts.

Every head family, two or more tasks each with different label counts: the mixed update
equals an independent per-task GradientTape computation through each task's own head
(not the shared trace), and the number of traced functions follows the families, not
the tasks.
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

from mtl_framework import RoFormerV2Backbone
from mtl_framework.families import FAMILIES
from mtl_framework.families.heads import build_head, head_classes
from mtl_framework.step.model import MultiTaskModel

HID, B = 16, 3
TINY = dict(vocab_size=40, num_layers=1, hidden_size=HID, num_heads=2, intermediate_size=32,
            dropout=0.0)

# task -> (family, number of labels, head options)
TASKS = {
    "cls2": ("classification", 2, {}), "cls5": ("classification", 5, {}),
    "match3": ("matching", 3, {}), "tags4": ("classification", 4, {"multi_label": True}),
    "reg": ("regression", None, {}), "span": ("mrc_span", None, {"head_size": 4}),
    "choice": ("multiple_choice", None, {}), "cloze": ("cloze", None, {}),
    "ner1": ("extraction_ner", 1, {"head_size": 4}), "ner3": ("extraction_ner", 3, {"head_size": 4}),
    "rel2": ("extraction_relation", 2, {"head_size": 4}),
    "rel5": ("extraction_relation", 5, {"head_size": 4}),
    "event2": ("extraction_event", 2, {"head_size": 4, "role_groups": [0, 0]}),
    "event3": ("extraction_event", 3, {"head_size": 4, "role_groups": [0, 1, 1]}),
    "coref": ("coreference", 2, {}), "mlm": ("mlm", 40, {}),
    "pairs": ("contrastive", None, {}),
}
# one group per head class (classification and matching share ClassificationHead, ...),
# and multi_label changes the loss: one more
FAMILY_GROUPS = len(set(head_classes().values())) + 1


def test_every_family_has_tasks_here():
    assert {family for family, _, _ in TASKS.values()} == set(FAMILIES)


def family_batch(family, labels, length, rng):
    def ids(shape):
        x = rng.integers(5, TINY["vocab_size"], shape).astype("int32")
        x[..., 0] = 2
        return x

    def pairs(heads):  # one (start, end) per head and row, padded by one (0, 0)
        out = np.zeros((B, heads, 2, 2), "int32")
        start = rng.integers(1, length - 3, (B, heads))
        out[:, :, 0] = np.stack([start, start + rng.integers(0, 2, (B, heads))], -1)
        return out

    if family == "contrastive":  # query, positive, one hard negative (row 1 has none)
        token_ids = ids((B, 3, length))
        return {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids),
                "text_mask": np.array([[1, 1, 1], [1, 1, 0], [1, 1, 1]], "float32"),
                "score": np.full(B, np.nan, "float32"),
                "positive_id": np.array([7, 8, 7], "int32")}
    if family in ("multiple_choice", "cloze"):
        token_ids = ids((B, 3, length))
        return {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids),
                "choice_mask": np.array([[1, 1, 1], [1, 1, 0], [1, 1, 1]], "float32"),
                "label": np.array([2, 1, 0], "int32")}
    token_ids = ids((B, length))
    token_ids[1, -2:] = 0  # padding
    batch = {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids)}
    if family in ("classification", "matching"):
        batch["label"] = rng.integers(0, labels, B).astype("int32")
    elif family == "multi_label":
        batch["label"] = (rng.random((B, labels)) < 0.5).astype("float32")
    elif family == "regression":
        batch["label"] = rng.random(B).astype("float32")
    elif family == "mrc_span":
        batch["context_mask"] = np.zeros_like(token_ids)
        batch["context_mask"][:, 3:length - 3] = 1
        batch["start"] = np.array([3, 4, 0], "int32")
        batch["end"] = np.array([5, 4, 0], "int32")
    elif family == "extraction_ner":
        batch["entity_labels"] = pairs(labels)
    elif family == "extraction_relation":
        batch.update(entity_labels=pairs(2), head_labels=pairs(labels), tail_labels=pairs(labels))
    elif family == "extraction_event":
        batch.update(argument_labels=pairs(labels), head_labels=pairs(1), tail_labels=pairs(1))
    elif family == "coreference":
        batch["span1"] = np.array([[1, 2], [2, 3], [1, 1]], "int32")
        batch["span2"] = np.array([[4, 5], [5, 5], [3, 4]], "int32")
        batch["label"] = np.array([1, 0, 1], "int32")
    elif family == "mlm":
        batch["mlm_labels"] = np.where(rng.random((B, length)) < 0.3, token_ids, 0).astype("int32")
    return batch


def make_model():
    keras.utils.set_random_seed(0)
    backbone = RoFormerV2Backbone(**TINY)
    backbone.build()
    heads = {name: build_head(family, labels, HID, name=name,
                              **(dict(options, embeddings=backbone.token_embedding)
                                 if family == "mlm" else options))
             for name, (family, labels, options) in TASKS.items()}
    model = MultiTaskModel(backbone, heads, tasks_per_update=len(TASKS))
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=1.0))
    model.build_all()
    return model


@pytest.fixture(scope="module")
def model():
    """One model for the three tests: each checks what holds in any state (an update
    against tapes on the current weights, one trace per family however many updates,
    traced outputs against the heads' own); building and tracing every family again per
    test cost most of this file's time. `initial_state`: its named state as built."""
    model = make_model()
    model.initial_state = {name: np.array(v.numpy()) for name, v in model.named_state_variables.items()}
    return model


def micro_batches(length, seed):
    rng = np.random.default_rng(seed)
    return [(name, family_batch("multi_label" if options.get("multi_label") else family,
                                labels, length, rng))
            for name, (family, labels, options) in TASKS.items()]


def reference_update(model, micro):
    """Independent: each task's loss through its own head, its gradient over backbone +
    own head, scaled by 1 / ||backbone part||, summed per variable."""
    index = {id(v): i for i, v in enumerate(model.all_variables)}
    total = [np.zeros(v.shape, "float64") for v in model.all_variables]
    backbone = model.backbone.trainable_variables
    for task, b in micro:
        variables = backbone + model.head_variables[task]
        with tf.GradientTape() as tape:
            loss = model.task_loss(task, {k: tf.constant(v) for k, v in b.items()}, training=True)
        grads = [np.asarray(tf.convert_to_tensor(g), "float64") if g is not None
                 else np.zeros(v.shape) for g, v in zip(tape.gradient(loss, variables), variables)]
        norm = np.sqrt(sum((g ** 2).sum() for g in grads[:len(backbone)]))
        for v, g in zip(variables, grads):
            total[index[id(v)]] += g / norm
    return total


def test_one_update_over_every_family_equals_per_task_tapes(model):
    for name, variable in model.named_state_variables.items():  # as built: every head moves
        variable.assign(model.initial_state[name])
    assert len(model.trace_groups) == FAMILY_GROUPS
    assert sorted(model.trace_groups.values(), key=len)[-1] == ["cls2", "cls5", "match3"]
    micro = micro_batches(length=10, seed=1)
    before = [np.asarray(v, "float64") for v in model.all_variables]
    expected = reference_update(model, micro)
    logs = model.run_update(micro)
    assert all(log["finite"] for log in logs)
    for v, b0, g in zip(model.all_variables, before, expected):
        np.testing.assert_allclose(np.asarray(v) - b0, -g, rtol=1e-4, atol=1e-6, err_msg=v.path)
    # every task's own head moved (no task updated another one's weights)
    index = {id(v): i for i, v in enumerate(model.all_variables)}
    for task in TASKS:
        moved = [np.abs(np.asarray(v) - before[index[id(v)]]).max() for v in model.head_variables[task]]
        assert task == "mlm" or not moved or min(moved) > 0, task  # contrastive: no weights


def test_tracing_follows_head_families_not_tasks(model):
    for length, seed in ((10, 1), (13, 2), (8, 3)):
        model.run_update(micro_batches(length, seed))

    def traces():
        return model.tracing_counts()["micro_step"]

    relaxed = traces()
    assert len(relaxed) == FAMILY_GROUPS  # 16 tasks
    # traced once, every axis unknown: any length, batch size and label count
    assert max(relaxed.values()) == 1, relaxed
    for length, seed in ((11, 4), (12, 5)):  # new lengths, every task again: no tracing
        model.run_update(micro_batches(length, seed))
    assert traces() == relaxed


def test_traced_outputs_equal_each_heads_own_outputs(model):
    for task, b in micro_batches(length=9, seed=7):
        b = {k: tf.constant(v) for k, v in b.items()}
        ours = model.traced_outputs(task, b)
        direct = model.task_outputs(task, b, training=False)
        for x, y in zip(tf.nest.flatten(ours), tf.nest.flatten(direct)):
            np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=1e-5, atol=1e-6, err_msg=task)
    assert len(model.tracing_counts()["forward"]) == FAMILY_GROUPS
