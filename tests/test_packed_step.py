"""The packed training step (issue 52 point 2) and its switch, `backbone.packed`: on
TensorFlow every family's micro-batch runs the backbone's token-wise layers on its real
tokens alone (layers.Packing) unless the experiment says `packed: false`, which builds the
padded step of before (no Packing at all). Each family's packed loss and gradients against
the padded call's: tests/test_architectures_families.py (family_harness.run_packed_parity)."""
import keras
import numpy as np
import pytest
import tensorflow as tf
from test_families import harness_case, tokenizer  # noqa: F401 (the fixture)
from test_faults import BASE, experiment, line_of, refused

from mtl_framework import architectures, cli
from mtl_framework.architectures.bert import backbone as bert_backbone
from mtl_framework.families.heads import build_head
from mtl_framework.step import model as step_model
from mtl_framework.step.model import MultiTaskModel

# Families whose gradients float32 resolves to 2e-6 of the largest entry; a softmax over
# choices (or in-batch candidates) leaves a gradient far smaller than the terms it sums, and
# its own noise (rows reordered) above that: family_harness.run_packed_parity bounds those.
FAMILIES = ("classification", "extraction_ner", "mrc_span", "mlm")


def test_backbone_packed_must_be_true_or_false(tmp_path, capsys):
    path = experiment(tmp_path, backbone={**BASE["backbone"], "packed": "maybe"})
    message = refused(capsys, ["train", path, "--output", tmp_path / "run"], tmp_path / "run")
    assert message == (f"{path}:{line_of(path, 'packed')}: backbone.packed must be true or "
                       "false, got 'maybe'")


def test_a_resume_may_turn_packing_off(tmp_path):
    """`packed` changes how the step computes, not what it trains: a run resumes with it
    changed (a run of before this option resumes with packed: false, bit for bit padded)."""
    path = experiment(tmp_path, cache_dir=str(tmp_path / "cache"))
    run = tmp_path / "run"
    assert cli.main(["train", str(path), "--output", str(run)]) == 0
    assert cli.main(["train", str(path), "--output", str(run), "--resume", "--set", "steps=3",
                     "--set", "backbone.packed=false"]) == 0
    assert (run / "experiment.yaml").exists()


def model_of(tokenizer, packed):  # noqa: F811
    keras.utils.set_random_seed(0)
    backbone = architectures.build_backbone(architectures.backbone_config(
        "bert", None, vocab_size=tokenizer.vocab_size, num_layers=2, hidden_size=16, num_heads=2,
        intermediate_size=32, dropout=0.0, attention_dropout=0.0))
    backbone.build()
    heads = {}
    for name in FAMILIES:
        case = harness_case(tokenizer, name)
        tied = {"embeddings": backbone.token_embedding} if case.tied else {}
        heads[name] = build_head(name, case.num_labels, 16, name=name,
                                 **case.head_kwargs(case.num_labels), **tied)
    model = MultiTaskModel(backbone, heads, len(FAMILIES), packed=packed,
                           parallel_micro_batches=1)
    model.compile(optimizer=keras.optimizers.SGD(1.0))  # the change is the balanced gradient
    model.build_all()
    return model


@pytest.fixture
def packings(monkeypatch):
    """How many Packing objects the BERT backbone makes (one per traced packed call)."""
    made = []

    class Counted(bert_backbone.Packing):
        def __init__(self, *args, **kwargs):
            made.append(1)
            super().__init__(*args, **kwargs)
    monkeypatch.setattr(bert_backbone, "Packing", Counted)
    return made


def test_packing_off_is_the_padded_step_and_on_moves_the_update_by_rounding(tokenizer, packings,  # noqa: F811
                                                                             monkeypatch):
    """One update of four families' micro-batches: with packed false no Packing is made (the
    padded graph of before); packed, every micro-step packs, and the update (SGD: the sum of
    the balanced gradients) equals the padded one's within 2e-6 of its largest entry
    (dropout 0)."""
    monkeypatch.setattr(step_model, "PACK_BELOW", 1.0)  # every micro-batch packs
    batches = [(name, harness_case(tokenizer, name).batch) for name in FAMILIES]
    changes = {}
    for packed in (False, True):
        model = model_of(tokenizer, packed)
        before = [np.array(v) for v in model.backbone.trainable_variables]
        logs = model.run_update(batches)
        assert all(log["finite"] for log in logs)
        assert len(packings) == (len(FAMILIES) if packed else 0)
        changes[packed] = [np.asarray(v) - b for v, b in zip(model.backbone.trainable_variables,
                                                             before)]
    largest = max(np.abs(c).max() for c in changes[False])
    assert largest > 0
    for padded, packed in zip(changes[False], changes[True]):
        np.testing.assert_allclose(packed, padded, rtol=0, atol=2e-6 * largest)


def test_a_micro_batch_packs_where_padding_is_worth_skipping(tokenizer):  # noqa: F811
    """_packs_batch: packed where at most PACK_BELOW of the positions are real tokens (a
    batch with more pays more for Packing's gathers than the padding costs), never with
    packed false or for the contrastive passes alone (they decide in _text_vectors)."""
    model = model_of(tokenizer, True)
    ids = np.zeros((4, 10), "int32")
    ids[:, :9] = 7  # 90% real
    assert model._packs_batch({"token_ids": ids}) is (0.9 <= step_model.PACK_BELOW)
    ids[:, 9] = 7  # 100%
    assert not model._packs_batch({"token_ids": ids})
    ids[1:, 3:] = 0  # 35%
    assert model._packs_batch({"token_ids": ids})
    for packed in (False, step_model.TEXTS_ALONE):
        model.packed = packed
        assert not model._packs_batch({"token_ids": ids})


def test_evaluation_runs_padded(tokenizer, packings):  # noqa: F811
    """Only training micro-steps pack: a traced forward pass (evaluation, predict) keeps
    the padded outputs, real values at padding, as before."""
    model = model_of(tokenizer, True)
    batch = {k: tf.constant(v) for k, v in harness_case(tokenizer, "mlm").batch.items()}
    logits = np.asarray(model.traced_outputs("mlm", batch))
    assert not packings
    assert np.abs(logits[np.asarray(batch["token_ids"]) == 0]).max() > 0


def test_the_step_gives_a_micro_batch_the_positions_its_head_reads(tokenizer):  # noqa: F811
    """_with_read_positions: with packed true, a [CLS] head's batch gets position 0 of each
    row, MLM's its masked positions in order (0, [CLS], in a row's unused slots), a head
    that reads every position none; with packed false or texts alone, nothing."""
    model = model_of(tokenizer, True)
    cls = model._with_read_positions("classification", harness_case(tokenizer, "classification").batch)
    assert cls["read_positions"].tolist() == [[0]] * len(cls["token_ids"])
    mlm_batch = harness_case(tokenizer, "mlm").batch
    labels = np.asarray(mlm_batch["mlm_labels"])
    read = model._with_read_positions("mlm", mlm_batch)["read_positions"]
    assert read.shape == (len(labels), (labels > 0).sum(1).max())
    for row, positions in zip(labels, read):
        masked = np.flatnonzero(row > 0).tolist()
        assert positions.tolist() == masked + [0] * (read.shape[1] - len(masked))
    for name in ("extraction_ner", "mrc_span"):
        assert "read_positions" not in model._with_read_positions(name, harness_case(tokenizer, name).batch)
    # a backend that compiles per shape pads a varying count (MLM's) to its _read_slots with
    # position 0; a count that never varies ([CLS]'s 1) stays as it is
    model._read_slots = lambda count, positions: count + 3
    padded = model._with_read_positions("mlm", mlm_batch)["read_positions"]
    assert padded.tolist() == np.pad(read, [(0, 0), (0, 3)]).tolist()
    assert model._with_read_positions("classification", cls)["read_positions"].shape[1] == 1
    del model._read_slots
    for packed in (False, step_model.TEXTS_ALONE):
        model.packed = packed
        assert "read_positions" not in model._with_read_positions("mlm", mlm_batch)
