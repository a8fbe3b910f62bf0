"""Zero-shot STS of an exported encoder: each sentence encoded alone, the mean of its last
hidden states over non-padding tokens as its embedding, the Spearman correlation of each
pair's cosine with the gold label. No fine-tuning, so no seed.

    .venv/bin/python -m bench.zero_shot EXPORT --data-root ../shared/data --output OUT.json
        [--limit N]

`mtl` has no such command; this uses the public API only (`RoFormerV2Backbone.from_preset`,
`Tokenizer`) on a keras export folder. OUT.json: {set: {score, examples, bootstrap}} where
`bootstrap` is the Spearman on each of BOOTSTRAP resamples of the pairs, drawn from a
fixed seed, so two exports' lists pair up resample by resample (bench/mixed_value_report.py
takes B's minus A's for a paired interval).
"""
import argparse
import json
from pathlib import Path

import numpy as np

# name: (file under the data root, layout); none of them is in any stage-2 mixture
SETS = {
    "stsb_zh": ("chinese_stsb/sts-b-dev.txt", "a_b_label"),
    "lcqmc": ("lcqmc/test.txt", "a_b_label"),
    "pawsx": ("pawsx_zh/dev_2k.tsv", "id_a_b_label_header"),
    "bq": ("bq_corpus/dev.jsonl", "jsonl"),
}
BOOTSTRAP, BOOTSTRAP_SEED = 2000, 0
MAX_LENGTH, BATCH = 128, 128


def read_pairs(path, layout, limit=None):
    """([text a], [text b], [gold]) of a pair file; lines that do not parse are skipped."""
    a, b, gold = [], [], []
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    if layout == "id_a_b_label_header":
        lines = lines[1:]
    for line in lines:
        if limit and len(gold) >= limit:
            break
        if layout == "jsonl":
            if not line.strip():
                continue
            record = json.loads(line)
            fields = [record["text1"], record["text2"], record["label"]]
        else:
            fields = line.split("\t")
            fields = fields[1:] if layout == "id_a_b_label_header" else fields
            if len(fields) != 3:
                continue
        try:
            score = float(fields[2])
        except ValueError:
            continue
        a.append(fields[0])
        b.append(fields[1])
        gold.append(score)
    return a, b, gold


def rankdata(values):
    """Ranks from 1, ties given their average rank (as scipy.stats.rankdata's default)."""
    values = np.asarray(values, dtype=float)
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    new_group = np.r_[True, ordered[1:] != ordered[:-1]]
    group = np.cumsum(new_group) - 1
    starts = np.flatnonzero(new_group)
    ends = np.r_[starts[1:], len(values)]
    average = (starts + ends - 1) / 2 + 1
    ranks = np.empty(len(values))
    ranks[order] = average[group]
    return ranks


def spearman(x, y):
    """Spearman's rho: Pearson's r of the (tie-averaged) ranks; 0 when either is constant."""
    rx, ry = rankdata(x), rankdata(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denominator = np.sqrt((rx * rx).sum() * (ry * ry).sum())
    return float((rx * ry).sum() / denominator) if denominator else 0.0


def bootstrap_spearman(x, y, resamples=BOOTSTRAP, seed=BOOTSTRAP_SEED):
    """Spearman on `resamples` resamples of the pairs (with replacement), the indices drawn
    from `seed` alone: the same resamples for any x of the same length."""
    rng = np.random.default_rng(seed)
    x, y = np.asarray(x), np.asarray(y)
    return [round(spearman(x[i], y[i]), 5)
            for i in (rng.integers(0, len(x), len(x)) for _ in range(resamples))]


def embed(backbone, tokenizer, texts):
    """Mean-pooled last hidden states, one row per text (shortest first within batches)."""
    encoded = [tokenizer.encode(text, max_length=MAX_LENGTH)[0] for text in texts]
    order = np.argsort([len(e) for e in encoded], kind="mergesort")
    rows = []
    for start in range(0, len(order), BATCH):
        batch = [encoded[i] for i in order[start:start + BATCH]]
        width = max(len(e) for e in batch)
        ids = np.array([e + [0] * (width - len(e)) for e in batch], dtype="int32")
        hidden = np.asarray(backbone({"token_ids": ids, "segment_ids": np.zeros_like(ids)}),
                            dtype="float32")
        mask = (ids != 0)[..., None]
        rows.append((hidden * mask).sum(1) / mask.sum(1))
    pooled = np.concatenate(rows)
    out = np.empty_like(pooled)
    out[order] = pooled
    return out


def cosines(left, right):
    norms = np.linalg.norm(left, axis=1) * np.linalg.norm(right, axis=1)
    return (left * right).sum(1) / np.maximum(norms, 1e-12)


def score_export(export, data_root, limit=None):
    from mtl_framework import RoFormerV2Backbone, Tokenizer

    backbone = RoFormerV2Backbone.from_preset(str(export))
    tokenizer = Tokenizer(str(Path(export) / "vocab.txt"))
    results = {}
    for name, (file, layout) in SETS.items():
        a, b, gold = read_pairs(Path(data_root) / file, layout, limit)
        cos = cosines(embed(backbone, tokenizer, a), embed(backbone, tokenizer, b))
        results[name] = {"score": spearman(cos, gold), "examples": len(gold),
                         "bootstrap": bootstrap_spearman(cos, gold)}
        print(f"zero-shot {name}: Spearman {results[name]['score']:.4f} ({len(gold)} pairs)",
              flush=True)
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("export")
    parser.add_argument("--data-root", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--limit", type=int, default=None, help="first N pairs of each set")
    args = parser.parse_args()
    results = score_export(args.export, args.data_root, args.limit)
    Path(args.output).write_text(json.dumps(results), encoding="utf-8")


if __name__ == "__main__":
    main()
