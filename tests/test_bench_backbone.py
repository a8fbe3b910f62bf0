"""bench/backbone.py's report arithmetic (no model is built): ours on JAX over ours on
TensorFlow (`ours_jax/ours`, "JAX / TF (ours)" in the markdown) at each precision, from
step times whose ratio is known, beside the ratios it already had."""
from bench.backbone import BATCH, entry, markdown, ratios, summarize


def records(step_seconds, seq=128):
    """A cell's records: each system's rounds of constant step times."""
    out = {}
    for system, (steps, rounds) in step_seconds.items():
        walls = [t for t in rounds for _ in range(steps)]
        out[system] = {**summarize(walls, walls, BATCH * seq),
                       "round_medians_s": list(rounds)}
    return out


def test_jax_over_tensorflow_ratio_at_both_precisions():
    cell = records({"ours": (3, [1.0, 1.2]), "ours_jax": (3, [2.0, 1.8]),
                    entry("ours", "mixed_bfloat16"): (3, [0.5, 0.5]),
                    entry("ours_jax", "mixed_bfloat16"): (3, [2.0, 2.0]),
                    "roberta_like": (3, [1.5, 1.5])})
    got = ratios(cell)
    # pooled: medians 1.1 s (ours) and 1.9 s (JAX); per round 1/2, 1.2/1.8; best 1.0 / 1.8
    jax = got["ours_jax/ours"]
    assert jax["pooled_median"] == round(1.1 / 1.9, 3)
    assert jax["per_round"] == [0.5, round(1.2 / 1.8, 3)]
    assert jax["median_of_rounds"] == round((0.5 + 1.2 / 1.8) / 2, 3)
    assert jax["best_step"] == round(1.0 / 1.8, 3)
    assert got["ours_jax@bf16/ours@bf16"]["pooled_median"] == 0.25
    assert got["ours_jax@bf16/ours_jax"]["pooled_median"] == round(1.9 / 2.0, 3)
    assert got["ours/roberta_like"]["pooled_median"] == round(1.5 / 1.1, 3)
    assert "ours_jax/roberta_like" not in got  # peers are compared with ours on TF only

    report = {"environment": {"cpu_count": 2, "tensorflow": "x", "keras": "y"},
              "contention": {"cores_used_by_others": 0.5},
              "cells": [{"config": "small", "seq": 128, "rounds": 2, "steps_per_round": 3,
                         "systems": cell, "ratios": got}],
              "settings": {"quick": False}, "data": {"source": "random token ids"},
              "wall_seconds": 1.0, "command": "python -m bench.backbone --systems ours ours_jax"}
    text = markdown(report)
    header = next(line for line in text.splitlines() if line.startswith("| config | seq | precision | steps"))
    assert header.endswith("| ours / keras-hub | JAX / TF (ours) |")
    rows = [line for line in text.splitlines() if line.startswith("| small | 128 |")]
    assert rows[0].endswith(f"| {1.1 / 1.9:.2f}x |") and rows[1].endswith("| 0.25x |")
    assert "Run: `python -m bench.backbone --systems ours ours_jax`" in text


def test_no_jax_column_without_ours_jax():
    cell = records({"ours": (2, [1.0]), "roberta_like": (2, [1.2])})
    report = {"environment": {"cpu_count": 2, "tensorflow": "x", "keras": "y"},
              "contention": {"cores_used_by_others": 0.0},
              "cells": [{"config": "small", "seq": 128, "rounds": 1, "steps_per_round": 2,
                         "systems": cell, "ratios": ratios(cell)}],
              "settings": {"quick": True}, "data": {"source": "random token ids"},
              "wall_seconds": 1.0}
    text = markdown(report)
    assert "JAX / TF" not in text
    assert "| small | 128 | float32 | 1x2 | 4,096 | 3,413 | - | 1.20x | - |" in text
    assert "Run: `python -m bench.backbone --quick`" in text


def test_matmul_floor_counts_the_steps_products():
    """bench/matmul_floor.py: the products of a `small` step at batch 32 x 128, counted by
    hand: per layer the four dense kernels (forward, input and kernel gradients: 3 passes)
    and 6 attention products of [192, 128, 128] x [.., 64]; then run at a tiny size."""
    import numpy as np

    from bench.backbone import CONFIGS
    from bench.matmul_floor import MatmulFloor, step_flops, step_products

    tokens, hidden, inner = 32 * 128, 384, 1536
    dense = 2 * 3 * tokens * (hidden * 3 * hidden + hidden * hidden + 2 * hidden * inner)
    attention = 6 * 2 * (32 * 6) * 128 * 128 * 64
    assert step_flops(CONFIGS["small"], 32, 128) == 6 * (dense + attention) == 275_414_777_856
    assert len(step_products(CONFIGS["small"], 32, 128)) == 6 * (4 * 3 + 6)

    tiny = dict(num_layers=1, hidden_size=8, num_heads=2, intermediate_size=16)
    floor = MatmulFloor(tiny)
    assert floor.train_on_batch({"token_ids": np.zeros((2, 4), "int32")}, None) == 0.0
    outputs = floor.step()
    assert [tuple(o.shape) for o in outputs] == [
        (8, 24), (8, 8), (8, 24), (8, 8), (8, 8), (8, 8), (8, 16), (8, 8), (8, 16),
        (8, 8), (8, 16), (16, 8), (4, 4, 4), (4, 4, 4), (4, 4, 4), (4, 4, 4), (4, 4, 4),
        (4, 4, 4)]


def test_floor_columns_bound_each_ratio():
    """With the matmul floor measured, the markdown gives the floor over ours, bert4keras and
    the RoBERTa-like baseline: the most a change to each one's step could gain."""
    cell = records({"ours": (2, [1.0]), "bert4keras": (2, [1.25]),
                    "roberta_like": (2, [1.2]), "matmul_floor": (2, [0.8])})
    got = ratios(cell)
    assert got["matmul_floor/ours"]["pooled_median"] == 1.25
    assert got["matmul_floor/bert4keras"]["pooled_median"] == round(1.25 / 0.8, 3)
    report = {"environment": {"cpu_count": 2, "tensorflow": "x", "keras": "y"},
              "contention": {"cores_used_by_others": 0.0},
              "cells": [{"config": "small", "seq": 128, "rounds": 1, "steps_per_round": 2,
                         "systems": cell, "ratios": got}],
              "settings": {"quick": False}, "data": {"source": "random token ids"},
              "wall_seconds": 1.0}
    text = markdown(report)
    assert ("| floor / ours | floor / bert4keras | floor / RoBERTa-like |" in text)
    assert "| 1.25x | 1.20x | - | 1.25x | 1.56x | 1.50x |" in text
