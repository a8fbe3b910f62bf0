"""Cost of a contrastive task in the mixed update (issue 43, point 6 "Cost"), CPU, TF backend.

    .venv/bin/python -m bench.contrastive_cost [--quick] [--config small] [--rounds 6]

One MultiTaskModel (RoFormerV2 `small`: L6/H384/A6, bench/backbone.py's CONFIGS, random
weights) with a head per variant's task; four updates of the same 4,096 tokens, every
row 128 tokens long, no padding, random token ids (bench/mtl_overhead.py's batches):

- one_batch: one classification batch of 32 x 128 (the reference, as mtl_overhead's);
- contrastive_batch: one contrastive micro-batch of 16 (query, positive) pairs, K = 2
  texts a row (16 x 2 x 128), InfoNCE with in-batch negatives (the family's defaults:
  temperature 0.05, CLS pooling);
- mixed_with_contrastive: 7 micro-batches: the contrastive task's 4 pairs (4 x 2 x 128)
  and 4 x 128 of each of classification, matching, regression, mrc_span, extraction_ner
  and coreference;
- mixed_without_contrastive: the same update with the contrastive micro-batch replaced by
  8 x 128 of a classification task (the same 1,024 tokens).

mixed_with / one_batch is the issue's figure; contrastive_batch / one_batch is the
contrastive head's own cost per token (pooling + the [B, B] similarity and its loss);
mixed_with / mixed_without isolates the contrastive micro-step inside a mixed update.

Every update is `MultiTaskModel.run_update` (the model's public step, AdamW,
gradient_norm balancing, dropout 0.1), as bench/mtl_overhead.py drives it. Two untimed
updates of each variant trace its micro-steps first; then rounds, each running every
variant `--updates` times in a rotating order (the shared machine's slow phases hit every
variant alike). Medians of the wall and process CPU seconds per update; ratios of the
medians and, paired, the median over rounds of each round's ratio. The JSON records the
cores other processes used and the load average.

Writes bench/results/contrastive_cost.json and .md (--quick: a temporary folder unless
--output-dir says where).
"""
import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import REPO, write_results
from bench.backbone import COMMON, CONFIGS
from bench.load import cpu_model, load_average
from bench.mtl_overhead import Contention, family_batch

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

LENGTH, ROWS, TOKENS = 128, 4, 4096
OPTIMIZER = {"name": "adamw", "lr": 1e-4, "warmup_steps": 100}
# (task, family, labels) of the heads; `contrastive` and `classification_8` hold the
# 1,024-token micro-batch of the mixed updates
OTHERS = [("classification", "classification", 15), ("matching", "matching", 3),
          ("regression", "regression", None), ("mrc_span", "mrc_span", None),
          ("extraction_ner", "extraction_ner", 10), ("coreference", "coreference", 2)]
VARIANTS = ("one_batch", "contrastive_batch", "mixed_with_contrastive", "mixed_without_contrastive")


def contrastive_batch(pairs, length, rng, vocab):
    """collate_pairs' layout (families/contrastive.py) for `pairs` (query, positive) rows of
    `length` real tokens each: token_ids [B, 2, L], text_mask [B, 2], distinct positives."""
    token_ids = rng.integers(5, vocab, (pairs, 2, length)).astype("int32")
    token_ids[..., 0] = 2
    return {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids),
            "text_mask": np.ones((pairs, 2), "float32"), "score": np.ones(pairs, "float32"),
            "positive_id": np.arange(pairs, dtype="int32")}


class Bench:
    def __init__(self, config_name, seed=0):
        import keras

        from mtl_framework import RoFormerV2Backbone
        from mtl_framework.families.heads import build_head
        from mtl_framework.step.model import MultiTaskModel
        from mtl_framework.step.optimizers import build_optimizer

        keras.utils.set_random_seed(seed)
        self.config = dict(COMMON, **CONFIGS[config_name])
        hidden, vocab = self.config["hidden_size"], self.config["vocab_size"]
        backbone = RoFormerV2Backbone(**self.config)
        tasks = OTHERS + [("classification_8", "classification", 15), ("contrastive", "contrastive", None)]
        heads = {name: build_head(family, labels, hidden, name=name) for name, family, labels in tasks}
        self.model = MultiTaskModel(backbone, heads, tasks_per_update=8)
        self.model.compile(optimizer=build_optimizer(OPTIMIZER, total_steps=10 ** 6))
        self.model.build_all()
        rng = np.random.default_rng(seed)
        pairs = 4  # 4 pairs x 2 texts x 128 = 1,024 tokens, a quarter of the update
        small = {name: family_batch(family, labels, ROWS, LENGTH, rng, vocab)
                 for name, family, labels in OTHERS}
        others = [(name, small[name]) for name, _, _ in OTHERS]
        self.updates = {
            "one_batch": [("classification", family_batch("classification", 15, TOKENS // LENGTH,
                                                          LENGTH, rng, vocab))],
            "contrastive_batch": [("contrastive", contrastive_batch(
                TOKENS // LENGTH // 2, LENGTH, rng, vocab))],
            "mixed_with_contrastive": [("contrastive", contrastive_batch(
                pairs, LENGTH, rng, vocab))] + others,
            "mixed_without_contrastive": [("classification_8", family_batch(
                "classification", 15, 2 * pairs, LENGTH, rng, vocab))] + others,
        }
        for name, update in self.updates.items():  # every variant holds the same tokens
            assert sum(int(np.count_nonzero(b["token_ids"])) for _, b in update) == TOKENS, name

    def timed(self, variant):
        wall, cpu = time.perf_counter(), time.process_time()
        logs = self.model.run_update(self.updates[variant])
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        assert all(np.isfinite(float(log["loss"])) for log in logs), variant
        return wall, cpu


def median(values):
    return statistics.median(values) if values else None


def measure(config_name, rounds, updates, log):
    bench = Bench(config_name)
    first = {}
    for variant in VARIANTS:  # trace every micro-step; the second update is steady
        start = time.perf_counter()
        bench.timed(variant)
        first[variant] = round(time.perf_counter() - start, 2)
        bench.timed(variant)
        log(f"{config_name}: {variant} traced ({first[variant]} s first update)")
    contention = Contention()
    times = {v: {"wall_s": [], "cpu_s": []} for v in VARIANTS}
    per_round = []
    loads = [load_average()]
    for r in range(rounds):
        order = VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]
        this_round = {}

        def one_round():
            for variant in order:
                walls = []
                for _ in range(updates):
                    wall, cpu = bench.timed(variant)
                    walls.append(wall)
                    times[variant]["wall_s"].append(round(wall, 4))
                    times[variant]["cpu_s"].append(round(cpu, 4))
                this_round[variant] = median(walls)
        contention.measure([], one_round)
        per_round.append(this_round)
        loads.append(load_average())
        log(f"{config_name}: round {r + 1}/{rounds}: " + ", ".join(
            f"{v} {this_round[v]:.2f} s" for v in VARIANTS))
    medians = {v: {"median_wall_s": round(median(t["wall_s"]), 4),
                   "median_cpu_s": round(median(t["cpu_s"]), 4)} for v, t in times.items()}

    def ratio(a, b):
        return {"wall": round(medians[a]["median_wall_s"] / medians[b]["median_wall_s"], 3),
                "cpu": round(medians[a]["median_cpu_s"] / medians[b]["median_cpu_s"], 3),
                "paired_wall": round(median([r[a] / r[b] for r in per_round]), 3)}

    return {"config": config_name, "backbone": bench.config, "first_update_s": first,
            "rounds": rounds, "updates_per_round": updates, "times": times, "medians": medians,
            "ratios": {"mixed_with_contrastive / one_batch": ratio("mixed_with_contrastive", "one_batch"),
                       "contrastive_batch / one_batch": ratio("contrastive_batch", "one_batch"),
                       "mixed_with / mixed_without contrastive": ratio("mixed_with_contrastive",
                                                                       "mixed_without_contrastive"),
                       "mixed_without_contrastive / one_batch": ratio("mixed_without_contrastive",
                                                                      "one_batch")},
            "contention": contention.summary(), "load_average": loads,
            "lanes": bench.model.lanes}


def environment():
    import keras
    import tensorflow as tf

    env = {"cpu_count": os.cpu_count(), "python": platform.python_version(),
           "tensorflow": tf.__version__, "keras": keras.__version__,
           "keras_backend": keras.backend.backend(), "precision": "float32"}
    if model := cpu_model():
        env["cpu_model"] = model
    return env


def markdown(report):
    lines = ["# Contrastive task in the mixed update: cost", "",
             f"{report['environment'].get('cpu_model', 'CPU')}, {report['environment']['cpu_count']} "
             f"cores (shared), TF {report['environment']['tensorflow']}, Keras "
             f"{report['environment']['keras']}, float32. One update = 4,096 tokens (rows of 128, no "
             "padding, random ids); MultiTaskModel.run_update, AdamW, gradient_norm balancing, "
             "dropout 0.1. Medians of interleaved updates (wall s / process CPU s).", ""]
    for entry in report["entries"]:
        m = entry["medians"]
        lines += [f"## {entry['config']} ({entry['rounds']} rounds x {entry['updates_per_round']} "
                  f"updates; other processes used {entry['contention']['cores_used_by_others']} "
                  f"of the cores; load average {entry['load_average'][0]} -> "
                  f"{entry['load_average'][-1]})", "",
                  "| update (4,096 tokens) | wall s | CPU s |", "|---|---|---|"]
        descriptions = {
            "one_batch": "one classification batch 32 x 128",
            "contrastive_batch": "one contrastive micro-batch, 16 pairs x 2 x 128",
            "mixed_with_contrastive": "7 micro-batches: contrastive 4 x 2 x 128 + 6 families x (4 x 128)",
            "mixed_without_contrastive": "the same, contrastive -> classification 8 x 128"}
        for variant in VARIANTS:
            lines.append(f"| {variant}: {descriptions[variant]} | {m[variant]['median_wall_s']:.2f} | "
                         f"{m[variant]['median_cpu_s']:.2f} |")
        lines += ["", "| ratio | wall | CPU | wall, paired by round |", "|---|---|---|---|"]
        for name, r in entry["ratios"].items():
            lines.append(f"| {name} | {r['wall']:.3f}x | {r['cpu']:.3f}x | {r['paired_wall']:.3f}x |")
        lines.append("")
    lines.append(f"Run: `python -m bench.contrastive_cost`, finished {report['finished']} "
                 f"({report['wall_seconds']:.0f} s).")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="L4-H256-A4, 2 rounds")
    parser.add_argument("--config", choices=sorted(CONFIGS), help="default small (quick: L4-H256-A4)")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--updates", type=int, default=2, help="timed updates per variant per round")
    parser.add_argument("--output-dir")
    args = parser.parse_args(argv)
    config = args.config or ("L4-H256-A4" if args.quick else "small")
    rounds = args.rounds or (2 if args.quick else 6)
    started = time.perf_counter()

    def log(message):
        print(f"[{time.perf_counter() - started:6.0f}s] {message}", flush=True)

    entry = measure(config, rounds, args.updates, log)
    report = {"settings": {"tokens_per_update": TOKENS, "length": LENGTH, "optimizer": OPTIMIZER,
                           "balancing": "gradient_norm", "variants": list(VARIANTS),
                           "contrastive_head": "family defaults: infonce, temperature 0.05, "
                                               "in-batch negatives, cls pooling",
                           "quick": args.quick},
              "entries": [entry], "environment": environment(),
              "wall_seconds": time.perf_counter() - started,
              "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
              "notes": ["Shared 2-core machine: `contention` is the cores other processes used during "
                        "the timed rounds, `load_average` the 1/5/15-minute load before and after each "
                        "round. Ratios within one run are what to read: the variants ran interleaved."]}
    out = Path(args.output_dir or (tempfile.mkdtemp(prefix="bench_contrastive_cost_") if args.quick
                                   else REPO / "bench" / "results"))
    write_results(out, "contrastive_cost", report, markdown(report))


if __name__ == "__main__":
    main()
