"""Task losses in keras.ops (bert4keras formulas, TF backend).

Per-example functions return one value per row; the heads average them over
the batch. Logits may hold -inf where a head masked a position (the
GlobalPointer convention of bert4keras); every loss here stays finite as long
as no target points at a masked position.
"""
import numpy as np
from keras import ops

from mtl_framework.numbers import l2_normalize

# Finite "minus infinity" for choice padding: an all-padding row then gives
# log(C) instead of NaN.
CHOICE_PAD = -1e12


def sparse_categorical_crossentropy(y_true, logits):
    """Softmax CE from logits [..., n] and integer targets [...]."""
    y_true = ops.cast(y_true, "int32")
    target = ops.take_along_axis(logits, y_true[..., None], axis=-1)[..., 0]
    return ops.logsumexp(logits, axis=-1) - target


def mean_squared_error(y_true, y_pred):
    """Squared error per example; a trailing axis, if any, is averaged."""
    y_true = ops.cast(y_true, y_pred.dtype)
    error = ops.square(y_pred - y_true)
    return error if len(error.shape) < 2 else ops.mean(error, axis=-1)


def multilabel_categorical_crossentropy(y_true, y_pred):
    """Su's multi-label CE (https://kexue.fm/archives/7359), bert4keras 0.11.5.

    y_true, y_pred: [..., n]; y_true in [0, 1]; y_pred are raw scores (no
    sigmoid); a class is predicted when its score > 0. Positions with
    y_pred == -inf are ignored.
    """
    y_true = ops.cast(y_true, y_pred.dtype)
    y_mask = ops.not_equal(y_pred, -np.inf)
    y_neg = ops.where(y_mask, y_pred, -np.inf) + ops.log(1 - y_true)
    y_pos = ops.where(y_mask, -y_pred, -np.inf) + ops.log(y_true)
    zeros = ops.zeros_like(y_pred[..., :1])
    y_neg = ops.concatenate([y_neg, zeros], axis=-1)
    y_pos = ops.concatenate([y_pos, zeros], axis=-1)
    return ops.logsumexp(y_neg, axis=-1) + ops.logsumexp(y_pos, axis=-1)


def sparse_multilabel_categorical_crossentropy(y_true, y_pred, mask_zero=True):
    """Sparse form of the multi-label CE, bert4keras 0.11.5.

    y_true: [..., k] integer indices of the positive classes; y_pred:
    [..., n] raw scores. With mask_zero, index 0 is padding (bert4keras's
    default is False; every batch here pads label lists with index 0, so the
    default is True).

    The same formula as bert4keras, without its three concatenations of a zero
    or infinite column to the full y_pred: there n = L * L per pointer head,
    and those copies (and their gradients) were most of a GPLinker head's time.
    """
    y_true = ops.cast(y_true, "int32")
    y_pos = ops.take_along_axis(y_pred, y_true, axis=-1)  # positives' scores [..., k]
    if mask_zero:  # index 0 holds no class: out of both the positives and all classes
        padding = ops.equal(y_true, 0)
        y_pos_1 = ops.where(padding, np.inf, y_pos)
        y_pos_2 = ops.where(padding, -np.inf, y_pos)
        y_pred = ops.where(ops.equal(ops.arange(ops.shape(y_pred)[-1]), 0), -np.inf, y_pred)
    else:
        y_pos_1 = y_pos_2 = y_pos
    zeros = ops.zeros_like(y_pos[..., :1])
    pos_loss = ops.logsumexp(ops.concatenate([-y_pos_1, zeros], axis=-1), axis=-1)
    # log(exp(0) + sum exp(y_pred)), bert4keras's appended 0 class, shifted by the row's
    # max (at least 0, so an all -inf row gives 0 and a zero gradient, not NaN)
    top = ops.stop_gradient(ops.maximum(ops.max(y_pred, axis=-1), 0.0))
    all_loss = top + ops.log(ops.exp(-top) + ops.sum(ops.exp(y_pred - top[..., None]), axis=-1))
    aux_loss = ops.logsumexp(y_pos_2, axis=-1) - all_loss
    aux_loss = ops.clip(1 - ops.exp(aux_loss), 1e-7, 1)  # K.epsilon()
    neg_loss = all_loss + ops.log(aux_loss)
    return pos_loss + neg_loss


def globalpointer_crossentropy(y_true, y_pred):
    """bert4keras GPLinker loss: y_true [B, heads, S, 2] (start, end) pairs
    padded with (0, 0); y_pred [B, heads, L, L]. Sum over heads, mean over B.
    """
    y_true = ops.cast(y_true, "int32")
    shape = ops.shape(y_pred)
    y_true = y_true[..., 0] * shape[2] + y_true[..., 1]
    y_pred = ops.reshape(y_pred, (shape[0], shape[1], -1))
    loss = sparse_multilabel_categorical_crossentropy(y_true, y_pred, True)
    return ops.mean(ops.sum(loss, axis=1))


def factored_globalpointer_crossentropy(y_true, pair, start, end):
    """`globalpointer_crossentropy` of the scores s[b, h, m, n] = pair[b, m, n] +
    end[b, h, n] + start[b, h, m] (EfficientGlobalPointer's), without forming them.

    pair [B, L, L] holds -inf where (m, n) is masked (the same mask for every head);
    start, end [B, heads, L]. The positives' scores are gathered from the three parts.
    The sum over all pairs that the loss needs, sum_mn exp(s), factors per head as
    sum_m exp(start[m]) * sum_n exp(pair[m, n]) exp(end[n]): one [B, L, L] x [B, L, heads]
    matmul instead of a [B, heads, L, L] tensor (48 predicates: 48x less memory).
    Shifts keep it finite: each row of pair by its max, each head's end by its max; the
    largest term of a row is then exp(end[n] - max end) at worst, so a head whose end
    scores span more than ~80 over one row's tokens would underflow that row in float32.
    Position (0, 0) is out of every sum (mask_zero, as bert4keras).
    """
    y_true = ops.cast(y_true, "int32")
    batch, length = ops.shape(pair)[0], ops.shape(pair)[1]
    heads, spans = ops.shape(y_true)[1], ops.shape(y_true)[2]
    starts, ends = y_true[..., 0], y_true[..., 1]  # [B, heads, S]
    flat = ops.reshape(starts * length + ends, (batch, heads * spans))
    y_pos = (ops.reshape(ops.take_along_axis(ops.reshape(pair, (batch, -1)), flat, axis=1),
                         (batch, heads, spans))
             + ops.take_along_axis(end, ends, axis=-1) + ops.take_along_axis(start, starts, axis=-1))
    padding = ops.equal(starts * length + ends, 0)
    zeros = ops.zeros_like(y_pos[..., :1])
    pos_loss = ops.logsumexp(ops.concatenate([-ops.where(padding, np.inf, y_pos), zeros], -1), -1)
    # log of sum_mn exp(s) per head, row by row: [B, heads, L]
    first = ops.logical_and(ops.equal(ops.arange(length), 0)[:, None],
                            ops.equal(ops.arange(length), 0)[None, :])
    pair = ops.where(first[None], -np.inf, pair)
    row_max = ops.stop_gradient(ops.max(pair, axis=-1))  # [B, L]; -inf on all-masked rows
    row_max = ops.where(ops.isfinite(row_max), row_max, 0.0)
    end_max = ops.stop_gradient(ops.max(end, axis=-1, keepdims=True))  # [B, heads, 1]
    rows = ops.einsum("bmn,bhn->bhm", ops.exp(pair - row_max[..., None]), ops.exp(end - end_max))
    nonzero = ops.greater(rows, 0.0)
    log_rows = ops.where(nonzero, ops.log(ops.where(nonzero, rows, 1.0)) + row_max[:, None]
                         + end_max + start, -np.inf)
    all_loss = ops.logsumexp(ops.concatenate([log_rows, zeros], -1), -1)  # [B, heads]
    aux_loss = ops.logsumexp(ops.where(padding, -np.inf, y_pos), axis=-1) - all_loss
    aux_loss = ops.clip(1 - ops.exp(aux_loss), 1e-7, 1)  # K.epsilon()
    loss = pos_loss + all_loss + ops.log(aux_loss)
    return ops.mean(ops.sum(loss, axis=1))


def masked_lm_crossentropy(labels, logits):
    """MLM CE averaged over masked tokens: labels [B, L] hold the original
    token id at masked positions and 0 elsewhere; logits [B, L, V]."""
    mask = ops.cast(ops.greater(labels, 0), logits.dtype)
    loss = sparse_categorical_crossentropy(labels, logits)
    return ops.sum(loss * mask) / ops.maximum(ops.sum(mask), 1.0)


def choice_crossentropy(y_true, logits, choice_mask):
    """Softmax CE over choices [B, C]; padded choices (mask 0) get no mass."""
    valid = ops.greater(ops.cast(choice_mask, logits.dtype), 0)
    logits = ops.where(valid, logits, CHOICE_PAD)
    return sparse_categorical_crossentropy(y_true, logits)


def info_nce(queries, positives, negatives, negative_mask, positive_ids, temperature,
             in_batch_negatives=True):
    """InfoNCE over cosines / temperature, per query [B]: its positive against the others.

    queries, positives [B, H]; negatives [B, N, H] (hard negatives; N may be 0) with
    negative_mask [B, N] (0: padding). With in_batch_negatives every row's positive and
    negatives are candidates for every query (sentence-transformers'
    MultipleNegativesRankingLoss, FlagEmbedding's in-batch negatives), except another
    row's positive equal to the query's own (positive_ids equal: the same passage answers
    both); without, a query's candidates are its own positive and negatives only
    (FlagEmbedding's no_in_batch_neg, for data whose batch-mates may be positives).
    """
    logits, _, target = info_nce_logits(queries, positives, negatives, negative_mask,
                                        positive_ids, temperature, in_batch_negatives)
    return sparse_categorical_crossentropy(target, logits)


def info_nce_logits(queries, positives, negatives, negative_mask, positive_ids, temperature,
                    in_batch_negatives=True):
    """(logits [B, C], valid [B, C], target [B]) of info_nce (its arguments): each query's
    cosines / temperature with its C candidates, the ones that are not its candidates
    (padding, a twin positive) at CHOICE_PAD and False in `valid`; `target` the column of
    its positive."""
    queries, positives, negatives = (l2_normalize(v, xp=ops) for v in (queries, positives, negatives))
    valid_negatives = ops.greater(negative_mask, 0)
    rows = ops.shape(queries)[0]
    if in_batch_negatives:
        hidden = ops.shape(queries)[-1]
        candidates = ops.concatenate([positives, ops.reshape(negatives, (-1, hidden))], axis=0)
        logits = ops.matmul(queries, ops.transpose(candidates)) / temperature  # [B, B + B N]
        own = ops.equal(ops.arange(rows)[:, None], ops.arange(rows)[None, :])
        twin = ops.logical_and(ops.equal(positive_ids[:, None], positive_ids[None, :]),
                               ops.logical_not(own))
        flat_valid = ops.reshape(valid_negatives, (1, -1))
        valid = ops.concatenate(
            [ops.logical_not(twin), ops.broadcast_to(flat_valid, (rows, ops.shape(flat_valid)[1]))],
            axis=1)
        target = ops.arange(rows)
    else:
        positive = ops.sum(queries * positives, axis=-1, keepdims=True)
        logits = ops.concatenate([positive, ops.einsum("bh,bnh->bn", queries, negatives)],
                                 axis=1) / temperature  # [B, 1 + N]
        valid = ops.concatenate([ops.ones_like(positive, dtype="bool"), valid_negatives], axis=1)
        target = ops.zeros((rows,), "int32")
    return ops.where(valid, logits, CHOICE_PAD), valid, target


def ranking_signs(logits, valid, target, temperature):
    """What says whether a ranking loss learns, from its logits [B, C] (cosine /
    temperature), `valid` [B, C] and `target` [B] (info_nce_logits): `accuracy`, the
    fraction of queries whose positive scores strictly above every other candidate;
    `chance`, the loss of vectors that tell nothing apart (mean ln of each query's
    number of candidates); `cosine`, the mean cosine of a query with its other
    candidates (1: the vectors have collapsed into one)."""
    columns = ops.arange(ops.shape(logits)[1])[None, :]
    positive = ops.equal(columns, ops.cast(target, columns.dtype)[:, None])
    others = ops.logical_and(valid, ops.logical_not(positive))
    target_logit = ops.sum(ops.where(positive, logits, 0.0), axis=1)
    best_other = ops.max(ops.where(others, logits, CHOICE_PAD), axis=1)
    counts = ops.sum(ops.cast(valid, "float32"), axis=1)
    other_count = ops.sum(ops.cast(others, "float32"))
    return {"accuracy": ops.mean(ops.cast(ops.greater(target_logit, best_other), "float32")),
            "chance": ops.mean(ops.log(ops.maximum(counts, 1.0))),
            "cosine": ops.sum(ops.where(others, logits, 0.0)) * temperature
            / ops.maximum(other_count, 1.0)}


def cosent(queries, positives, scores, temperature):
    """CoSENT (Su, https://kexue.fm/archives/8847; sentence-transformers' CoSENTLoss):
    log(1 + sum over pairs (i, j) with score_i < score_j of exp((cos_i - cos_j) / t)),
    one value for the batch. Rows whose score is NaN take no part."""
    cosines = ops.sum(l2_normalize(queries, xp=ops) * l2_normalize(positives, xp=ops),
                      axis=-1) / temperature
    scored = ops.logical_not(ops.isnan(scores))
    scores = ops.where(scored, scores, 0.0)
    below = ops.logical_and(ops.less(scores[:, None], scores[None, :]),
                            ops.logical_and(scored[:, None], scored[None, :]))
    differences = ops.where(below, cosines[:, None] - cosines[None, :], CHOICE_PAD)
    differences = ops.concatenate([ops.zeros((1,), differences.dtype),
                                   ops.reshape(differences, (-1,))], axis=0)
    return ops.logsumexp(differences)


def cosent_signs(queries, positives, scores):
    """ranking_signs' `chance` and `cosine` for cosent (its arguments): `chance`, its loss
    when every cosine is equal (ln(1 + the pairs it orders)); `cosine`, the mean cosine of
    a query with the other rows' positives (1: the vectors have collapsed into one)."""
    scored = ops.logical_not(ops.isnan(scores))
    scores = ops.where(scored, scores, 0.0)
    ordered = ops.logical_and(ops.less(scores[:, None], scores[None, :]),
                              ops.logical_and(scored[:, None], scored[None, :]))
    cosines = ops.matmul(l2_normalize(queries, xp=ops),
                         ops.transpose(l2_normalize(positives, xp=ops)))
    rows = ops.shape(cosines)[0]
    others = ops.not_equal(ops.arange(rows)[:, None], ops.arange(rows)[None, :])
    return {"chance": ops.log(1.0 + ops.sum(ops.cast(ordered, "float32"))),
            "cosine": ops.sum(ops.where(others, cosines, 0.0))
            / ops.maximum(ops.sum(ops.cast(others, "float32")), 1.0)}
