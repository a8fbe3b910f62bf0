"""Heads: pointer formulas vs NumPy (and bert4keras), masks, losses, decoding,
use inside tf.function + tf.switch_case."""
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf
from interop.legacy_bert4keras import bert4keras_available

from mtl_framework import losses
from mtl_framework.families import FAMILIES
from mtl_framework.families import heads as H
from mtl_framework.families.choice_heads import ChoiceHead
from mtl_framework.families.spans_heads import clique_search

rng = np.random.default_rng(0)
B, L, HID = 2, 6, 16
TOKENS = np.array([[2, 5, 6, 3, 0, 0], [2, 5, 6, 7, 8, 3]], "int32")
HIDDEN = rng.normal(size=(B, L, HID)).astype("float32")


# ------------------------------------------------- NumPy reference pointers


def np_rotary(x):
    """Pairs (2i, 2i+1) as complex numbers times e^{i m theta_i}: [B, n, ..., d]."""
    n, d = x.shape[1], x.shape[-1]
    theta = 10000.0 ** (-2 * np.arange(d // 2) / d)
    angle = np.arange(n)[:, None] * theta[None]
    angle = angle.reshape((1, n) + (1,) * (x.ndim - 3) + (d // 2,))
    z = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * angle)
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = z.real, z.imag
    return out


def np_mask(logits, mask, tril=True):
    logits = logits.copy()
    n = logits.shape[-1]
    valid = (mask[:, None, :, None] > 0) & (mask[:, None, None, :] > 0)
    if tril:
        valid = valid & (np.arange(n)[:, None] <= np.arange(n)[None, :])
    logits[~np.broadcast_to(valid, logits.shape)] = -np.inf
    return logits


def np_global_pointer(x, kernel, bias, heads, d, mask):
    y = (x @ kernel + bias).reshape(x.shape[0], x.shape[1], heads, 2 * d)
    q, k = np_rotary(y[..., :d]), np_rotary(y[..., d:])
    return np_mask(np.einsum("bmhd,bnhd->bhmn", q, k) / np.sqrt(d), mask)


def np_efficient_global_pointer(x, pk, pb, qk, qb, heads, d, mask, rope=True, tril=True):
    y = x @ pk + pb
    q, k = y[..., 0::2], y[..., 1::2]
    if rope:
        q, k = np_rotary(q), np_rotary(k)
    scores = np.einsum("bmd,bnd->bmn", q, k) / np.sqrt(d)
    bias = (y @ qk + qb) / 2  # [B, n, 2 heads]: even = end bias, odd = start bias
    out = (scores[:, None] + bias[..., 0::2].transpose(0, 2, 1)[:, :, None, :]
           + bias[..., 1::2].transpose(0, 2, 1)[:, :, :, None])
    return np_mask(out, mask, tril)


def weights_of(layer):
    return [np.asarray(w, dtype=np.float64) for w in layer.weights]


def test_global_pointer_matches_numpy_reference():
    gp = H.GlobalPointer(3, 8, kernel_initializer="glorot_normal")
    gp.build((None, None, HID))
    gp.dense.bias.assign(rng.normal(size=48).astype("float32"))
    mask = (TOKENS != 0).astype("float32")
    ours = np.asarray(gp(HIDDEN, mask=mask))
    kernel, bias = weights_of(gp)
    ref = np_global_pointer(HIDDEN.astype(np.float64), kernel, bias, 3, 8, mask)
    assert ours.shape == (B, 3, L, L)
    np.testing.assert_array_equal(np.isinf(ours), np.isinf(ref))
    finite = np.isfinite(ref)
    np.testing.assert_allclose(ours[finite], ref[finite], rtol=1e-4, atol=1e-5)
    # padding rows/columns and start > end are -inf, the rest finite
    assert np.isneginf(ours[0, :, 4:, :]).all() and np.isneginf(ours[0, :, :, 4:]).all()
    assert np.isneginf(ours[1, :, 3, 2]).all() and np.isfinite(ours[1, :, 2, 3]).all()


@pytest.mark.parametrize("rope,tril", [(True, True), (False, False)])
def test_efficient_global_pointer_matches_numpy_reference(rope, tril):
    egp = H.EfficientGlobalPointer(3, 8, RoPE=rope, tril_mask=tril)
    egp.build((None, None, HID))
    egp.p_dense.bias.assign(rng.normal(size=16).astype("float32"))
    egp.q_dense.bias.assign(rng.normal(size=6).astype("float32"))
    mask = (TOKENS != 0).astype("float32")
    ours = np.asarray(egp(HIDDEN, mask=mask))
    ref = np_efficient_global_pointer(HIDDEN.astype(np.float64), *weights_of(egp), 3, 8, mask, rope, tril)
    np.testing.assert_array_equal(np.isinf(ours), np.isinf(ref))
    finite = np.isfinite(ref)
    np.testing.assert_allclose(ours[finite], ref[finite], rtol=1e-4, atol=1e-5)


WORKER = textwrap.dedent("""
    import sys, numpy as np, tensorflow as tf
    from bert4keras.backend import K, multilabel_categorical_crossentropy
    from bert4keras.backend import sparse_multilabel_categorical_crossentropy
    from bert4keras.layers import GlobalPointer, EfficientGlobalPointer
    d = dict(np.load(sys.argv[1]))
    x, mask = tf.constant(d["x"]), tf.constant(d["mask"])
    gp = GlobalPointer(heads=3, head_size=8)
    gp(x, mask=mask)
    gp.dense.set_weights([d["gp_kernel"], d["gp_bias"]])
    egp = EfficientGlobalPointer(heads=3, head_size=8)
    egp(x, mask=mask)
    egp.p_dense.set_weights([d["p_kernel"], d["p_bias"]])
    egp.q_dense.set_weights([d["q_kernel"], d["q_bias"]])
    scores = tf.constant(d["scores"])
    np.savez(sys.argv[2], gp=gp(x, mask=mask).numpy(), egp=egp(x, mask=mask).numpy(),
             mlce=K.eval(multilabel_categorical_crossentropy(tf.constant(d["dense_true"]), scores)),
             smlce=K.eval(sparse_multilabel_categorical_crossentropy(
                 tf.constant(d["sparse_true"]), scores, True)))
""")


def test_pointers_and_losses_equal_bert4keras(tmp_path):
    if not bert4keras_available():
        pytest.skip("bert4keras/tf-keras not installed (make interop)")
    gp, egp = H.GlobalPointer(3, 8), H.EfficientGlobalPointer(3, 8)
    gp.build((None, None, HID))
    egp.build((None, None, HID))
    for layer in (gp.dense, egp.p_dense, egp.q_dense):
        layer.bias.assign(rng.normal(size=layer.bias.shape).astype("float32"))
    mask = (TOKENS != 0).astype("float32")
    scores = rng.normal(size=(3, 8)).astype("float32") * 3
    data = dict(x=HIDDEN, mask=mask, scores=scores,
                gp_kernel=gp.dense.kernel.numpy(), gp_bias=gp.dense.bias.numpy(),
                p_kernel=egp.p_dense.kernel.numpy(), p_bias=egp.p_dense.bias.numpy(),
                q_kernel=egp.q_dense.kernel.numpy(), q_bias=egp.q_dense.bias.numpy(),
                dense_true=(rng.random((3, 8)) < 0.3).astype("float32"),
                sparse_true=np.array([[1, 4, 0], [2, 0, 0], [0, 0, 0]], "int32"))
    np.savez(tmp_path / "in.npz", **data)
    (tmp_path / "worker.py").write_text(WORKER)
    env = dict(os.environ, TF_KERAS="1", TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2",
               CUDA_VISIBLE_DEVICES="")
    run = subprocess.run([sys.executable, str(tmp_path / "worker.py"), str(tmp_path / "in.npz"),
                          str(tmp_path / "out.npz")], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    theirs = np.load(tmp_path / "out.npz")
    for name, ours in (("gp", gp(HIDDEN, mask=mask)), ("egp", egp(HIDDEN, mask=mask)),
                       ("mlce", losses.multilabel_categorical_crossentropy(data["dense_true"], scores)),
                       ("smlce", losses.sparse_multilabel_categorical_crossentropy(
                           data["sparse_true"], scores, True))):
        ours = np.asarray(ours)
        np.testing.assert_array_equal(np.isinf(ours), np.isinf(theirs[name]), err_msg=name)
        finite = np.isfinite(ours)
        np.testing.assert_allclose(ours[finite], theirs[name][finite], rtol=1e-5, atol=1e-5,
                                   err_msg=name)


# ----------------------------------------------------------------- heads


def batch_of(**extra):
    return dict(token_ids=TOKENS, segment_ids=np.zeros_like(TOKENS), **extra)


def test_classification_head_loss_and_decode():
    head = H.build_head("classification", 3, HID)
    batch = batch_of(label=np.array([2, 0], "int32"))
    logits = np.asarray(head(HIDDEN, batch))
    kernel, bias = weights_of(head)
    np.testing.assert_allclose(logits, HIDDEN[:, 0] @ kernel + bias, rtol=1e-5, atol=1e-6)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -np.mean([logp[0, 2], logp[1, 0]])
    assert float(head.compute_task_loss(logits, batch)) == pytest.approx(expected, rel=1e-5)
    assert head.decode(logits, batch) == list(logits.argmax(-1))
    assert head.targets(batch) == [2, 0]


def test_multilabel_classification_head():
    head = H.build_head("classification", 4, HID, multi_label=True)
    batch = batch_of(label=np.array([[1, 0, 1, 0], [0, 0, 0, 0]], "float32"))
    logits = np.array([[2.0, -1.0, 0.5, -3.0], [-1.0, 0.2, -2.0, -0.1]], "float32")
    assert head.decode(logits, batch) == [[0, 2], [1]]
    assert head.targets(batch) == [[0, 2], []]
    expected = np.mean([np.log1p(np.exp(-1.0) + np.exp(-3.0)) + np.log1p(np.exp(-2.0) + np.exp(-0.5)),
                        np.log1p(np.exp([-1.0, 0.2, -2.0, -0.1]).sum())])
    assert float(head.compute_task_loss(logits, batch)) == pytest.approx(expected, rel=1e-5)


def test_regression_head_mse():
    head = H.build_head("regression", None, HID)
    batch = batch_of(label=np.array([0.5, -1.0], "float32"))
    scores = np.asarray(head(HIDDEN, batch))
    assert scores.shape == (B,)
    expected = np.mean((scores - batch["label"]) ** 2)
    assert float(head.compute_task_loss(scores, batch)) == pytest.approx(expected, rel=1e-5)


def span_batch():
    return batch_of(context_mask=np.array([[0, 1, 1, 0, 0, 0], [0, 0, 0, 1, 1, 0]], "int32"),
                    start=np.array([1, 0], "int32"), end=np.array([2, 0], "int32"),
                    window_id=np.array([7, 8], "int32"))


def test_span_head_masks_and_loss():
    head = H.build_head("mrc_span", None, HID, head_size=8)
    batch = span_batch()
    logits = np.asarray(head(HIDDEN, batch))
    assert logits.shape == (B, L, L)
    for b in range(B):
        allowed = set(np.flatnonzero(batch["context_mask"][b])) | {0}
        for s in range(L):
            for e in range(L):
                ok = s in allowed and e in allowed and s <= e and not (s == 0 and e > 0)
                assert np.isfinite(logits[b, s, e]) == ok, (b, s, e)
    flat = logits.reshape(B, -1).astype(np.float64)
    target = batch["start"] * L + batch["end"]
    finite_max = np.where(np.isfinite(flat), flat, -1e30).max(-1, keepdims=True)
    lse = np.log(np.where(np.isfinite(flat), np.exp(flat - finite_max), 0).sum(-1)) + finite_max[:, 0]
    expected = np.mean(lse - flat[np.arange(B), target])
    assert float(head.compute_task_loss(logits, batch)) == pytest.approx(expected, rel=1e-5)


def test_span_decode_best_pair():
    head = H.build_head("mrc_span", None, HID, head_size=8)
    batch = span_batch()
    logits = np.full((B, L, L), -np.inf, "float32")
    logits[0, 0, 0], logits[0, 1, 2], logits[0, 2, 2] = 9.0, 3.0, 1.0
    logits[1, 0, 0], logits[1, 3, 4], logits[1, 4, 4] = -1.0, 0.5, 2.0
    out = head.decode(logits, batch)
    assert out[0] == {"start": 1, "end": 2, "score": 3.0, "null_score": 9.0, "window_id": 7}
    assert (out[1]["start"], out[1]["end"], out[1]["score"]) == (4, 4, 2.0)
    logits[1, 4, 4] = -np.inf
    short = head.decode(logits, batch, max_answer_length=1)[1]
    assert (short["start"], short["end"], short["score"]) == (0, 0, -np.inf)  # 3..4 too long
    assert head.targets(batch) == [(1, 2), (0, 0)]


def test_choice_head_folds_choices():
    head = H.build_head("multiple_choice", None, HID)
    tokens = np.stack([TOKENS, TOKENS, TOKENS], axis=1)  # [B, C, L]
    batch = dict(token_ids=tokens, segment_ids=np.zeros_like(tokens),
                 choice_mask=np.array([[1, 1, 0], [1, 1, 1]], "float32"),
                 label=np.array([1, 2], "int32"))
    folded = H.backbone_inputs(batch)
    assert folded["token_ids"].shape == (B * 3, L)
    hidden = rng.normal(size=(B * 3, L, HID)).astype("float32")
    logits = np.array(head(hidden, batch))
    kernel, bias = weights_of(head)
    np.testing.assert_allclose(logits, (hidden[:, 0] @ kernel + bias).reshape(B, 3), rtol=1e-5, atol=1e-6)
    logits[0, 2] = 100.0  # a padded choice never wins
    assert head.decode(logits, batch)[0] == int(np.argmax(logits[0, :2]))
    row0 = logits[0, :2] - np.log(np.exp(logits[0, :2]).sum())
    row1 = logits[1] - np.log(np.exp(logits[1]).sum())
    expected = -np.mean([row0[1], row1[2]])
    assert float(head.compute_task_loss(logits, batch)) == pytest.approx(expected, rel=1e-5)


def test_entity_head_decode_and_targets():
    head = H.build_head("extraction_ner", 2, HID, head_size=8)
    batch = batch_of(entity_labels=np.array([[[[1, 2], [0, 0]], [[2, 2], [0, 0]]],
                                             [[[0, 0], [0, 0]], [[1, 4], [3, 3]]]], "int32"))
    assert head.targets(batch) == [{(0, 1, 2), (1, 2, 2)}, {(1, 1, 4), (1, 3, 3)}]
    scores = np.full((B, 2, L, L), -5.0, "float32")
    scores[0, 0, 1, 2] = 1.0
    scores[0, 1, 0, 0] = 3.0  # [CLS] never an entity
    scores[0, 1, 1, 3] = 2.0  # [SEP] (last real token) never part of one
    scores[1, 1, 2, 4] = 0.5
    assert head.decode(scores, batch) == [{(0, 1, 2)}, {(1, 2, 4)}]
    assert head.decode(np.full((B, 2, L, L), 1.0, "float32"), batch, max_spans=3)[1].__len__() == 3
    loss = float(head.compute_task_loss(head(HIDDEN, batch), batch))
    assert np.isfinite(loss) and loss > 0


def test_relation_head_gplinker_decode():
    head = H.build_head("extraction_relation", 3, HID, head_size=8)
    # row 0: (1..2) -p2-> (3..3); row 1: nothing labelled
    entity = np.zeros((B, 2, 1, 2), "int32")
    entity[0, 0, 0], entity[0, 1, 0] = (1, 2), (3, 3)
    head_l, tail_l = np.zeros((B, 3, 1, 2), "int32"), np.zeros((B, 3, 1, 2), "int32")
    head_l[0, 2, 0], tail_l[0, 2, 0] = (1, 3), (2, 3)
    tokens = np.array([[2, 5, 6, 7, 3, 0], [2, 5, 6, 7, 8, 3]], "int32")
    batch = dict(token_ids=tokens, segment_ids=np.zeros_like(tokens), entity_labels=entity,
                 head_labels=head_l, tail_labels=tail_l)
    assert head.targets(batch) == [{(1, 2, 2, 3, 3)}, set()]
    out = {k: np.full((B, n, L, L), -1.0, "float32") for k, n in (("entity", 2), ("head", 3), ("tail", 3))}
    out["entity"][0, 0, 1, 2] = out["entity"][0, 1, 3, 3] = 1.0
    out["head"][0, 2, 1, 3] = out["tail"][0, 2, 2, 3] = 1.0
    out["head"][0, 0, 1, 3] = 1.0  # head link without its tail link: no triple
    assert head.decode(out, batch) == [{(1, 2, 2, 3, 3)}, set()]
    outputs = head(HIDDEN, batch)
    assert outputs["head"].shape == (B, 3, L, L)
    # link pointers: no RoPE and no start <= end mask (object may precede subject)
    assert np.isfinite(np.asarray(outputs["head"])[1, :, 4, 1]).all()
    loss = float(head.compute_task_loss(outputs, batch))
    expected = sum(float(losses.globalpointer_crossentropy(batch[k + "_labels"], outputs[k]))
                   for k in ("entity", "head", "tail"))
    assert loss == pytest.approx(expected, rel=1e-6)


def bert4keras_clique_search(argus, links):
    """bojone/GPLinker duee_v1.py's recursion, on (role, start, end) tuples."""
    class DedupList(list):
        def append(self, x):
            if x not in self:
                super().append(x)

    def neighbors(host, argus, links):
        return list(sorted([host] + [a for a in argus if host[1:] + a[1:] in links]))

    found = DedupList()
    for i1, (_, h1, t1) in enumerate(argus):
        for i2, (_, h2, t2) in enumerate(argus):
            if i2 > i1 and (h1, t1, h2, t2) not in links:
                found.append(neighbors(argus[i1], argus, links))
                found.append(neighbors(argus[i2], argus, links))
    if found:
        results = DedupList()
        for A in found:
            for a in bert4keras_clique_search(A, links):
                results.append(a)
        return results
    return [list(sorted(argus))]


def test_clique_search_equals_bert4keras_recursion():
    r = np.random.default_rng(1)
    for _ in range(30):
        n = int(r.integers(1, 9))
        argus = sorted({(int(r.integers(3)), int(s), int(s) + 1) for s in r.choice(20, n, replace=False)})
        links = set()
        for i, a in enumerate(argus):
            for b in argus[i + 1:]:
                if r.random() < 0.6:
                    links |= {a[1:] + b[1:], b[1:] + a[1:]}
        assert sorted(clique_search(argus, links)) == sorted(bert4keras_clique_search(argus, links))


def test_event_head_decodes_events():
    # roles 0 = A/trigger, 1 = A/agent, 2 = B/trigger; two events of type A
    head = H.build_head("extraction_event", 3, HID, head_size=8, role_groups=["A", "A", "B"])
    tokens = np.full((1, 10), 5, "int32")
    tokens[0, 0], tokens[0, 9] = 2, 3
    argument = np.zeros((1, 3, 2, 2), "int32")
    argument[0, 0] = [(1, 1), (5, 5)]
    argument[0, 1] = [(2, 3), (6, 7)]
    argument[0, 2, 0] = (8, 8)
    link_heads = np.array([[[(1, 2), (5, 6)]]], "int32")
    link_tails = np.array([[[(1, 3), (5, 7)]]], "int32")
    batch = dict(token_ids=tokens, segment_ids=np.zeros_like(tokens), argument_labels=argument,
                 head_labels=link_heads, tail_labels=link_tails)
    expected = [((0, 1, 1), (1, 2, 3)), ((0, 5, 5), (1, 6, 7)), ((2, 8, 8),)]
    assert sorted(head.targets(batch)[0]) == sorted(expected)
    out = {"argument": np.full((1, 3, 10, 10), -1.0, "float32"),
           "head": np.full((1, 1, 10, 10), -1.0, "float32"),
           "tail": np.full((1, 1, 10, 10), -1.0, "float32")}
    for role, s, e in [(0, 1, 1), (1, 2, 3), (0, 5, 5), (1, 6, 7), (2, 8, 8)]:
        out["argument"][0, role, s, e] = 1.0
    for (a, b), (c, d) in [((1, 2), (1, 3)), ((5, 6), (5, 7))]:
        out["head"][0, 0, a, b] = out["tail"][0, 0, c, d] = 1.0
    assert sorted(head.decode(out, batch)[0]) == sorted(expected)
    with pytest.raises(ValueError, match="role_groups"):
        H.build_head("extraction_event", 3, HID, role_groups=["A"])


def test_coref_head_gathers_span_ends():
    head = H.build_head("coreference", 2, HID)
    batch = batch_of(span1=np.array([[1, 2], [3, 3]], "int32"),
                     span2=np.array([[4, 4], [1, 5]], "int32"), label=np.array([1, 0], "int32"))
    logits = np.asarray(head(HIDDEN, batch))
    kernel, bias = weights_of(head)
    features = np.stack([np.concatenate([HIDDEN[b, i] for i in (*batch["span1"][b], *batch["span2"][b])])
                         for b in range(B)])
    np.testing.assert_allclose(logits, features @ kernel + bias, rtol=1e-5, atol=1e-5)
    assert head.decode(logits, batch) == list(logits.argmax(-1))


def test_mlm_head_is_tied_and_untracked():
    embedding = keras.layers.Embedding(11, HID)
    embedding.build((None,))
    head = H.build_head("mlm", 11, HID, embeddings=embedding)
    assert head.weights == []  # the backbone owns the embedding
    batch = batch_of(mlm_labels=np.array([[0, 9, 0, 0, 0, 0], [0, 0, 4, 0, 7, 0]], "int32"))
    logits = np.asarray(head(HIDDEN, batch))
    np.testing.assert_allclose(logits, HIDDEN @ embedding.embeddings.numpy().T, rtol=1e-5, atol=1e-5)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -np.mean([logp[0, 1, 9], logp[1, 2, 4], logp[1, 4, 7]])
    assert float(head.compute_task_loss(logits, batch)) == pytest.approx(expected, rel=1e-5)
    decoded = head.decode(logits, batch)
    assert list(decoded[1]) == [logits[1, 2].argmax(), logits[1, 4].argmax()]
    assert [list(t) for t in head.targets(batch)] == [[9], [4, 7]]
    with pytest.raises(ValueError, match="embeddings="):
        H.build_head("mlm", 11, HID)


def test_build_head_errors():
    with pytest.raises(ValueError, match="unknown task type 'ner'"):
        H.build_head("ner", 3, HID)
    with pytest.raises(ValueError, match="type: regression"):
        H.build_head("matching", 1, HID)
    assert isinstance(H.build_head("cloze", None, HID), ChoiceHead)
    for name, record in FAMILIES.items():  # too few labels: the family's least, named
        if record.min_labels:
            with pytest.raises(ValueError, match=f"needs at least {record.min_labels} label"):
                H.build_head(name, record.min_labels - 1, HID)


def test_heads_inside_switch_case_make_no_variables_and_give_finite_grads():
    heads = [H.build_head("classification", 3, HID), H.build_head("mrc_span", None, HID, head_size=8),
             H.build_head("extraction_ner", 2, HID, head_size=8)]
    batch = {**batch_of(), **span_batch(), "label": np.array([2, 0], "int32"),
             "entity_labels": np.array([[[[1, 2]], [[0, 0]]], [[[0, 0]], [[0, 0]]]], "int32")}
    batch = {k: tf.constant(v) for k, v in batch.items()}
    counts = [len(h.weights) for h in heads]
    variables = [v for h in heads for v in h.trainable_variables]

    @tf.function
    def step(task, hidden):
        with tf.GradientTape() as tape:
            tape.watch(hidden)
            branches = [lambda h=h: h.compute_task_loss(h(hidden, batch, training=True), batch)
                        for h in heads]
            loss = tf.switch_case(task, branches)
        return loss, tape.gradient(loss, [hidden] + variables)

    hidden = tf.constant(HIDDEN)
    for i, head in enumerate(heads):
        loss, grads = step(tf.constant(i), hidden)
        eager = head.compute_task_loss(head(HIDDEN, batch), batch)
        assert float(loss) == pytest.approx(float(eager), rel=1e-5)
        assert all(np.isfinite(g.numpy()).all() for g in grads if g is not None)
    assert [len(h.weights) for h in heads] == counts


def gplinker_batch(family, labels, rows=3, length=12):
    """Random tokens with padding and random gold pairs (padded with (0, 0)) for every
    pointer of a GPLinker-style head."""
    g = np.random.default_rng(4)
    tokens = np.zeros((rows, length), "int32")
    for row, n in enumerate([length, 5, 9][:rows]):
        tokens[row, :n] = g.integers(1, 50, n)
    batch = dict(token_ids=tokens, segment_ids=np.zeros_like(tokens))
    sizes = {"extraction_ner": {"entity": labels},
             "extraction_relation": {"entity": 2, "head": labels, "tail": labels},
             "extraction_event": {"argument": labels, "head": 1, "tail": 1}}[family]
    for key, heads in sizes.items():
        pairs = np.zeros((rows, heads, 3, 2), "int32")
        for row, n in enumerate([length, 5, 9][:rows]):
            for h in range(heads):
                for s in range(g.integers(0, 3)):
                    start, end = sorted(g.integers(1, n - 1, 2))
                    pairs[row, h, s] = (start, end)
        batch[key + "_labels"] = pairs
    return batch


# the families whose batches carry pointer labels [B, kinds, S, 2]: the GPLinker-style heads
POINTER_FAMILIES = [name for name, record in FAMILIES.items()
                    if ("int32", 4) in record.batch_spec.values()]


@pytest.mark.parametrize("family", POINTER_FAMILIES)
def test_training_loss_from_score_parts_equals_dense_loss_and_gradients(family):
    """In training the pointers hand the loss their parts, never [B, types, L, L]:
    same loss and gradients as the dense scores of evaluation (same weights)."""
    keras.utils.set_random_seed(2)
    head = H.build_head(family, 4, HID, head_size=8)
    batch = gplinker_batch(family, 4)
    hidden = tf.constant(np.random.default_rng(5).normal(size=(3, 12, HID)), "float32")
    outputs = {}
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(hidden)
        for training in (True, False):
            out = head(hidden, batch, training=training)
            outputs[training] = (out, head.compute_task_loss(out, batch))
    parts, dense = outputs[True][0], outputs[False][0]
    for scores in ([parts] if "pair" in parts else parts.values()):
        assert set(scores) == {"pair", "start", "end"}  # no score tensor per type
    np.testing.assert_allclose(float(outputs[True][1]), float(outputs[False][1]), rtol=2e-6)
    targets = [hidden] + head.trainable_variables
    for a, b in zip(tape.gradient(outputs[True][1], targets), tape.gradient(outputs[False][1], targets)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=2e-6)
    # evaluation gets the whole scores, decoded as before
    for scores in (dense.values() if isinstance(dense, dict) else [dense]):
        assert tuple(scores.shape[-2:]) == (12, 12) and len(scores.shape) == 4
