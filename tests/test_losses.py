"""Losses against independent NumPy computations."""
import numpy as np
import pytest
import tensorflow as tf

from mtl_framework import losses

rng = np.random.default_rng(0)


def np_log_softmax(x):
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def np_multilabel_ce(y_true, y_pred):
    """Closed form: log(1 + sum_neg e^s) + log(1 + sum_pos e^-s), rows only."""
    out = []
    for t, s in zip(y_true.reshape(-1, y_true.shape[-1]), y_pred.reshape(-1, y_pred.shape[-1])):
        pos, neg = s[(t == 1) & np.isfinite(s)], s[(t == 0) & np.isfinite(s)]
        out.append(np.log1p(np.exp(neg).sum()) + np.log1p(np.exp(-pos).sum()))
    return np.array(out).reshape(y_true.shape[:-1])


def test_sparse_categorical_crossentropy():
    logits = rng.normal(size=(4, 5)).astype("float32")
    labels = np.array([0, 4, 2, 2])
    expected = -np_log_softmax(logits.astype(np.float64))[np.arange(4), labels]
    np.testing.assert_allclose(losses.sparse_categorical_crossentropy(labels, logits),
                               expected, rtol=1e-5)


def test_mean_squared_error():
    y, p = np.array([1.0, -2.0, 0.5], "float32"), np.array([0.0, -1.0, 0.5], "float32")
    np.testing.assert_allclose(losses.mean_squared_error(y, p), [1.0, 1.0, 0.0])


def test_multilabel_categorical_crossentropy_matches_closed_form():
    y_pred = rng.normal(size=(3, 6)).astype("float32") * 3
    y_true = (rng.random((3, 6)) < 0.4).astype("float32")
    y_pred[1, 2] = -np.inf  # masked position: ignored
    ours = np.asarray(losses.multilabel_categorical_crossentropy(y_true, y_pred))
    np.testing.assert_allclose(ours, np_multilabel_ce(y_true, y_pred.astype(np.float64)), rtol=1e-5)


@pytest.mark.parametrize("mask_zero", [True, False])
def test_sparse_multilabel_equals_dense(mask_zero):
    n = 10
    y_pred = (rng.normal(size=(2, 3, n)) * 4).astype("float32")
    if mask_zero:  # lists padded with index 0
        y_true = np.array([[[3, 7, 0], [0, 0, 0], [1, 2, 9]],
                           [[5, 0, 0], [8, 4, 0], [6, 0, 0]]])
    else:  # no padding: every index counts, so no repeats
        y_true = np.array([[[3, 7, 0], [1, 5, 2], [1, 2, 9]],
                           [[5, 6, 0], [8, 4, 3], [6, 9, 7]]])
    dense = np.zeros_like(y_pred)
    for idx in np.ndindex(y_true.shape[:2]):
        for k in y_true[idx]:
            dense[idx + (k,)] = 1.0
    ref_pred = y_pred.copy()
    if mask_zero:  # index 0 is padding: neither positive nor negative
        dense[..., 0] = 0.0
        ref_pred[..., 0] = -np.inf
    sparse = np.asarray(losses.sparse_multilabel_categorical_crossentropy(y_true, y_pred, mask_zero))
    full = np.asarray(losses.multilabel_categorical_crossentropy(dense, ref_pred))
    np.testing.assert_allclose(sparse, full, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sparse, np_multilabel_ce(dense, ref_pred.astype(np.float64)),
                               rtol=1e-4, atol=1e-5)


def test_sparse_multilabel_gradient_equals_dense_gradient():
    """The sparse loss skips bert4keras's concatenations: its gradient must still be the
    dense loss's; a row of only masked scores gives loss 0 and gradient 0, not NaN."""
    n = 12
    y_pred = (rng.normal(size=(2, 2, n)) * 3).astype("float32")
    y_pred[1, 1] = -np.inf
    y_true = np.array([[[3, 7, 0], [0, 0, 0]], [[5, 11, 2], [0, 0, 0]]])
    dense = np.zeros_like(y_pred)
    for idx in np.ndindex(y_true.shape[:2]):
        dense[idx + (y_true[idx][y_true[idx] > 0],)] = 1.0
    x = tf.constant(y_pred)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        sparse = losses.sparse_multilabel_categorical_crossentropy(y_true, x, True)
        full = losses.multilabel_categorical_crossentropy(
            dense, tf.where(tf.range(n) == 0, -np.inf, x))
    np.testing.assert_allclose(sparse.numpy(), full.numpy(), rtol=1e-5, atol=1e-6)
    assert sparse.numpy()[1, 1] == 0.0
    g_sparse, g_full = tape.gradient(sparse, x).numpy(), tape.gradient(full, x).numpy()
    assert np.isfinite(g_sparse).all()
    np.testing.assert_allclose(g_sparse, np.nan_to_num(g_full), rtol=1e-4, atol=1e-5)
    assert np.abs(g_sparse[1, 1]).max() == 0.0 and np.abs(g_sparse[0, 0]).max() > 0.1


def test_globalpointer_crossentropy_and_finite_gradients():
    b, h, n = 2, 3, 5
    scores = rng.normal(size=(b, h, n, n)).astype("float32")
    scores[:, :, np.tril_indices(n, -1)[0], np.tril_indices(n, -1)[1]] = -np.inf
    labels = np.array([[[[1, 2], [0, 0]], [[0, 0], [0, 0]], [[3, 4], [2, 2]]],
                       [[[0, 0], [0, 0]], [[1, 1], [0, 0]], [[0, 0], [0, 0]]]])
    expected = []
    for i in range(b):
        total = 0.0
        for j in range(h):
            t = np.zeros(n * n)
            for s, e in labels[i, j]:
                if (s, e) != (0, 0):
                    t[s * n + e] = 1
            pred = scores[i, j].reshape(-1).astype(np.float64)
            pred[0] = -np.inf  # (0, 0) is padding
            total += np_multilabel_ce(t[None], pred[None])[0]
        expected.append(total)
    x = tf.constant(scores)
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = losses.globalpointer_crossentropy(labels, x)
    np.testing.assert_allclose(float(loss), np.mean(expected), rtol=1e-5)
    # rows whose labels are all padding and -inf scores must not give NaN
    assert np.isfinite(tape.gradient(loss, x).numpy()).all()


def test_masked_lm_crossentropy():
    logits = rng.normal(size=(2, 4, 7)).astype("float32")
    labels = np.array([[0, 3, 0, 6], [1, 0, 0, 0]])
    logp = np_log_softmax(logits.astype(np.float64))
    expected = -np.mean([logp[0, 1, 3], logp[0, 3, 6], logp[1, 0, 1]])
    assert float(losses.masked_lm_crossentropy(labels, logits)) == pytest.approx(expected, rel=1e-5)
    assert float(losses.masked_lm_crossentropy(np.zeros_like(labels), logits)) == 0.0


def test_choice_crossentropy_ignores_padded_choices():
    logits = np.array([[1.0, 2.0, 50.0], [0.5, -1.0, 3.0]], "float32")
    mask = np.array([[1, 1, 0], [1, 1, 1]], "float32")
    labels = np.array([1, 2])
    expected = [-np_log_softmax(np.array([1.0, 2.0]))[1],
                -np_log_softmax(np.array([0.5, -1.0, 3.0]))[2]]
    np.testing.assert_allclose(losses.choice_crossentropy(labels, logits, mask), expected, rtol=1e-5)


def factored_case(dtype, b=3, h=4, n=7, spread=3.0, tril=True):
    """Random parts of EfficientGlobalPointer scores with padding (row 2 has 4 real
    tokens, row 1 none beyond [CLS]), a start <= end mask, and gold pairs incl. padding."""
    pair = rng.normal(scale=spread, size=(b, n, n))
    real = np.array([n, 1, 4])[:b, None] > np.arange(n)
    valid = real[:, :, None] & real[:, None, :]
    if tril:
        valid &= np.triu(np.ones((n, n), bool))[None]
    pair = np.where(valid, pair, -np.inf).astype(dtype)
    start = rng.normal(scale=spread, size=(b, h, n)).astype(dtype)
    end = rng.normal(scale=spread, size=(b, h, n)).astype(dtype)
    labels = np.zeros((b, h, 3, 2), "int32")
    labels[0, 0, :2] = [[1, 2], [3, 3]]
    labels[0, 2, 0] = [0, 5]
    labels[2, 1, :3] = [[1, 1], [1, 3], [2, 3]]
    return pair, start, end, labels


def dense_scores(pair, start, end):
    return pair[:, None] + end[:, :, None, :] + start[..., None]


def dense_and_factored(pair, start, end, labels):
    """(dense loss, factored loss, [(dense gradient, factored gradient) per part])."""
    parts = [tf.constant(x) for x in (pair, start, end)]
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(parts)
        dense = losses.globalpointer_crossentropy(labels, dense_scores(*parts))
        factored = losses.factored_globalpointer_crossentropy(labels, *parts)
    return dense, factored, list(zip(tape.gradient(dense, parts), tape.gradient(factored, parts)))


@pytest.mark.parametrize("tril", [True, False])
def test_factored_globalpointer_loss_equals_dense_with_gradients_float64(tril):
    pair, start, end, labels = factored_case("float64", tril=tril)
    dense, factored, gradients = dense_and_factored(pair, start, end, labels)
    np.testing.assert_allclose(float(factored), float(dense), rtol=1e-12)
    for want, got in gradients:
        assert np.isfinite(got.numpy()).all()
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10, atol=1e-14)


def test_factored_globalpointer_loss_float32_and_large_scores():
    """float32 as in training, scores spread over +-60: tight agreement, no NaN."""
    for spread in (1.0, 20.0):
        pair, start, end, labels = factored_case("float32", spread=spread)
        dense, factored, gradients = dense_and_factored(pair, start, end, labels)
        np.testing.assert_allclose(float(factored), float(dense), rtol=2e-6)
        for want, got in gradients:
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-6)
