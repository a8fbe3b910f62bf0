"""Micro-steps computed two at a time (MultiTaskModel's lanes) give the update of one at
a time, dropout included: the gradients are accumulated in micro-batch order and every
micro-batch draws its dropout masks from its own seeds."""
import os
import threading

import keras
import numpy as np
import pytest

from mtl_framework import RoFormerV2Backbone
from mtl_framework.families.heads import build_head
from mtl_framework.step.model import MultiTaskModel

TINY = dict(vocab_size=60, num_layers=2, hidden_size=32, num_heads=2, intermediate_size=64, dropout=0.1)


def make_model(lanes, balancing="gradient_norm"):
    keras.utils.set_random_seed(3)
    backbone = RoFormerV2Backbone(**TINY)
    backbone.build()
    heads = {"cls3": build_head("classification", 3, 32, name="cls3"),
             "cls2": build_head("classification", 2, 32, name="cls2"),
             "ner": build_head("extraction_ner", 4, 32, name="ner")}
    model = MultiTaskModel(backbone, heads, tasks_per_update=6, balancing=balancing,
                           parallel_micro_batches=lanes)
    model.compile(optimizer=keras.optimizers.AdamW(learning_rate=1e-2))
    model.build_all()
    return model


def micro_batches(seed, length=10):
    rng = np.random.default_rng(seed)
    out = []
    for task in ("cls3", "cls2", "ner", "cls3", "ner", "cls2"):
        ids = rng.integers(5, 60, size=(3, length)).astype("int32")
        ids[:, 0], ids[2, length - 3:] = 2, 0
        batch = {"token_ids": ids, "segment_ids": np.zeros_like(ids)}
        if task == "ner":
            labels = np.zeros((3, 4, 2, 2), "int32")
            labels[:, 1, 0] = (1, 2)  # one entity of type 1 per row
            batch["entity_labels"] = labels
        else:
            batch["label"] = rng.integers(0, int(task[-1]), size=3).astype("int32")
        out.append((task, batch))
    return out


def train(model, updates=3):
    """(losses, state after the last update, the threads launches ran in, state after the
    first update)."""
    launched_in = []
    launch = model._launch

    def recording_launch(task, batch, count):
        launched_in.append(threading.current_thread().name)
        return launch(task, batch, count)
    model._launch = recording_launch
    losses, first = [], None
    for seed in range(updates):
        losses.append([log["loss"] for log in model.run_update(micro_batches(seed))])
        first = first or [np.asarray(v) for v in model.state_variables]
    model._launch = launch
    return losses, [np.asarray(v) for v in model.state_variables], launched_in, first


@pytest.fixture(scope="module")
def runs():
    """Three updates with one lane and with two, shared by the tests below (each model's
    tracing was most of this file's time); the two-lane model comes along."""
    one, two = make_model(1), make_model(2)
    return {"one": train(one), "two": train(two), "two_model": two}


def test_two_lanes_make_the_update_of_one(runs):
    one_losses, one_state, one_threads, _ = runs["one"]
    two_losses, two_state, two_threads, _ = runs["two"]
    assert not any(name.startswith("micro_step") for name in one_threads)
    # the first update traces, one at a time; the later ones run in the two threads
    assert sum(name.startswith("micro_step") for name in two_threads) >= 10
    np.testing.assert_allclose(two_losses, one_losses, rtol=1e-6)
    assert len(one_state) == len(two_state)
    for a, b in zip(one_state, two_state):
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)


def test_every_micro_batch_draws_its_own_dropout_masks():
    model = make_model(2)
    task, batch = micro_batches(0)[0]
    first, second = (log["loss"] for log in model.run_update([(task, batch), (task, batch)]))
    assert first != second  # the same rows, two micro-batches: two masks
    assert int(model.micro_batches_seen.numpy()) == 2


def test_lanes_default_and_errors():
    assert make_model(None).lanes == min(2, os.cpu_count())  # no GPU here
    assert make_model(None, balancing="initial_loss").lanes == 1  # reads the previous one's state
    with pytest.raises(ValueError, match="set it to 1"):
        make_model(2, balancing="initial_loss")


def test_micro_steps_then_apply_update_make_run_updates_update(runs):
    """The public pieces of run_update (micro_step per micro-batch, then apply_update) give
    its update (the one-lane run's first), and close() stops the lanes' threads without
    breaking a later update."""
    whole = runs["one"][3]  # state after run_update(micro_batches(0)) of a fresh model
    parts = make_model(1)
    for task, batch in micro_batches(0):
        parts.micro_step(task, {k: keras.ops.convert_to_tensor(v) for k, v in batch.items()})
    parts.apply_update()
    for a, b in zip(whole, parts.state_variables):
        np.testing.assert_allclose(np.asarray(b), a, rtol=1e-6, atol=1e-7)
    assert parts.tracing_counts()["apply_update"] == 1

    def new_lane_threads():  # other tests' models may still hold theirs
        return [t for t in set(threading.enumerate()) - before if t.name.startswith("micro_step")]

    model = runs["two_model"]  # traced by its three updates
    model.close()
    before = set(threading.enumerate())
    model.run_update(micro_batches(3))  # in the lanes' threads, started anew
    assert new_lane_threads()
    model.close()
    assert not new_lane_threads()
    model.run_update(micro_batches(2))
    model.close()
