"""bench/real_tokens.py's counting (no data set is read): each family's backbone calls as
TensorFlow's step makes them, and the real-token and attention fractions of known rows."""
import numpy as np

from bench.real_tokens import by_rates, call_counts, fractions, step_calls


def rows(*lengths, width=None):
    """Token ids [N, width]: row i holds lengths[i] real tokens (ids 5), then padding."""
    width = width or max(lengths)
    ids = np.zeros((len(lengths), width), np.int32)
    for i, n in enumerate(lengths):
        ids[i, :n] = 5
    return ids


def test_counts_of_known_rows():
    got = call_counts(rows(2, 4, 4, 1, 3, width=4), block_rows=2)
    # 14 real of 20 positions; attention 4+16+16+1+9 = 46 of 5 x 16; sorted 1,2 | 3,4 | 4:
    # blocks 2x2^2 + 2x4^2 + 1x4^2 = 8 + 32 + 16
    assert got == {"rows": 5, "length": 4, "real": 14, "positions": 20, "attention_real": 46,
                   "attention_padded": 80, "attention_blocked": 56}
    f = fractions(got)
    assert f["tokens"] == 0.7 and f["attention"] == 46 / 80 and f["attention_in_blocks"] == 46 / 56


def test_contrastive_sides_are_cut_apart_and_choices_fold():
    pairs = np.stack([rows(2, 3, width=9), rows(7, 1, width=9)], axis=1)  # [B 2, K 2, L 9]
    queries, passages = step_calls("contrastive", pairs)
    assert queries.shape == (2, 3) and passages.shape == (2, 7)  # each side to its longest
    choices = np.zeros((3, 4, 6), np.int32)
    assert [c.shape for c in step_calls("multiple_choice", choices)] == [(12, 6)]
    assert [c.shape for c in step_calls("classification", rows(3, 5))] == [(2, 5)]


def test_rates_weight_each_task_by_its_mean_micro_batch():
    per_task = {"a": {"micro_batches": 2, "real": 20, "positions": 40, "attention_real": 1,
                      "attention_padded": 2, "attention_blocked": 1},
                "b": {"micro_batches": 1, "real": 30, "positions": 30, "attention_real": 1,
                      "attention_padded": 1, "attention_blocked": 1}}
    # a: 10 real of 20 a micro-batch at rate 0.75, b: 30 of 30 at 0.25 -> 15 / 22.5
    assert by_rates(per_task, {"a": 0.75, "b": 0.25})["tokens"] == 15 / 22.5
    assert by_rates(per_task, {"a": 1.0, "b": 1.0}, ["a"])["tokens"] == 0.5
