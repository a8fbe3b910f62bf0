"""Longer than trained: a model trained at max_length 128 on cmrc2018, scored on dev at
128 (windows), 256 and 512 under each rotary scaling (docs/backbone.md "Longer than trained").

    .venv/bin/python -m bench.long_context [--data-root ../shared/data] [--quick]
        [--steps N] [--dev-examples N] [--work-dir DIR]

1. builds a character vocab from cmrc2018's train text, trains a small RoFormerV2 from
   scratch on cmrc2018 (mrc_span) at max_length 128 through `loop.run.Run` (contexts
   longer than a window become several windows, as always);
2. builds dev features at 128, 256 and 512 (cmrc2018's spec allows 512): at 128 a
   context is several overlapping windows, at 512 almost always one;
3. scores the first --dev-examples dev questions (the same ones everywhere) with the
   trained checkpoint at 128 (none: every scaling is the identity at the trained
   length, factor 1), and at 256 and 512 with none / linear / ntk / dynamic_ntk, factor
   = length / 128, each as `mtl evaluate RUN --max-length L --rope-scaling TYPE:F`
   builds it (assemble.open_run(...).model() + evaluate_features). Time per example is
   the forward passes and decoding of those questions after a warm-up batch has traced
   the step (features already built).

Writes bench/results/long_context.json and .md (--quick: into its work folder). The
machine is shared: the JSON records the load average and the process's CPU time.
"""
import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from bench import REPO
from bench.learning import build_shared_vocab
from bench.load import cpu_seconds, load_average
from bench.runs import open_run, progress_lines, scratch_experiment

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from mtl_framework.config.registry import load_registry  # noqa: E402
from mtl_framework.tokenizer import Tokenizer  # noqa: E402

TASK = "cmrc2018"
TRAINED = 128
LENGTHS = (128, 256, 512)
TYPES = ("none", "linear", "ntk", "dynamic_ntk")
FULL = dict(num_layers=4, hidden_size=256, num_heads=4, intermediate_size=1024, steps=1000,
            batch_size=32, lr=1e-3, warmup_steps=100, alpha_warmup_steps=100,
            vocab_size=6000, dev_examples=400)
QUICK = dict(num_layers=1, hidden_size=64, num_heads=2, intermediate_size=128, steps=6,
             batch_size=8, lr=1e-3, warmup_steps=2, alpha_warmup_steps=2,
             vocab_size=6000, dev_examples=16)


def experiment_dict(args, work, vocab_path):
    return scratch_experiment("long-context", args, work, vocab_path, tasks=[TASK], balancing="none",
                              tasks_per_update=1, max_length=TRAINED, seed=0)


def settings():
    """(length, rope_scaling text) pairs in table order."""
    yield TRAINED, "none"
    for length in LENGTHS[1:]:
        for kind in TYPES:
            yield length, kind if kind == "none" else f"{kind}:{length // TRAINED}"


def train(args, work, log):
    task = load_registry().select([TASK])[0]
    vocab_path = work / "vocab.txt"
    if not vocab_path.exists():
        log("building the vocab from cmrc2018 train ...")
        build_shared_vocab([task], args.data_root, vocab_path, args.vocab_size)
    progress = progress_lines(args.steps, max(1, args.steps // 12), log)
    quiet = lambda *a, **k: None  # noqa: E731
    with open_run(experiment_dict(args, work, vocab_path), work, "run", quiet, [progress]) as run:
        start, cpu = time.perf_counter(), cpu_seconds()
        run.train()
        seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    losses = progress.losses
    return Path(run.run_dir), {"steps": args.steps, "seconds": round(seconds, 1), "cpu_s": round(cpu, 1),
                         "loss_first_50": float(np.nanmean(losses[:50])),
                         "loss_last_50": float(np.nanmean(losses[-50:]))}


def evaluate(args, run_dir, log):
    from mtl_framework.architectures.rope_scaling import describe
    from mtl_framework.evaluation import dev as evaluation
    from mtl_framework.prepare.cache import cached_features
    from mtl_framework.saving.trained import open_run

    experiment = open_run(str(run_dir), log=None).experiment
    task = load_registry().select([TASK])[0]
    tokenizer = Tokenizer(str(run_dir / "vocab.txt"))
    cache_dir = experiment.resolve_path(experiment.raw.get("cache_dir"))
    features = {length: cached_features(task, "dev", tokenizer, args.data_root, cache_dir,
                                        max_length=length) for length in LENGTHS}
    rows = []
    for length, scaling in settings():
        trained = open_run(str(run_dir), log=None, rope_scaling=scaling)
        model = trained.model()
        predictor = evaluation.TaskPredictor(model)
        evaluation.evaluate_features(model, task, features[length], predictor,  # traces
                                     args.batch_size, max_examples=args.batch_size // 2)
        start, cpu = time.perf_counter(), cpu_seconds()
        entry = evaluation.evaluate_features(model, task, features[length], predictor,
                                             args.batch_size, max_examples=args.dev_examples)
        seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu
        row = {"max_length": length, "rope_scaling": describe(trained.rope_scaling),
               "em": entry["result"]["em"], "f1": entry["result"]["f1"],
               "examples": entry["examples"], "windows": entry["windows"],
               "ms_per_example": round(1000 * seconds / entry["examples"], 2),
               "cpu_ms_per_example": round(1000 * cpu / entry["examples"], 2)}
        rows.append(row)
        log(f"  {length:4d}  {row['rope_scaling']:32s} EM {row['em']:.4f}  F1 {row['f1']:.4f}  "
            f"windows {row['windows']}  {row['ms_per_example']} ms/example")
    return rows


def markdown(result):
    t, s = result["training"], result["settings"]
    lines = [
        "# Longer than trained: cmrc2018 dev at 128 / 256 / 512 (bench/long_context.py)", "",
        f"A {s['num_layers']}-layer RoFormerV2 (hidden {s['hidden_size']}, {s['num_heads']} heads)"
        f" trained from scratch on cmrc2018 train at max_length {TRAINED} ({t['steps']} updates "
        f"of {s['batch_size']} windows, {t['seconds']} s; loss {t['loss_first_50']:.2f} over the "
        f"first 50 updates, {t['loss_last_50']:.2f} over the last 50). Scored on the first "
        f"{s['dev_examples']} dev questions (the same ones in every row); factor = length / "
        f"{TRAINED}. Windows: feature rows scored (a question's context split at the length).",
        "", "| max_length | rope_scaling | EM | F1 | windows | ms / example | CPU ms / example |",
        "|---:|---|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        lines.append(f"| {r['max_length']} | {r['rope_scaling']} | {r['em']:.4f} | {r['f1']:.4f} "
                     f"| {r['windows']} | {r['ms_per_example']} | {r['cpu_ms_per_example']} |")
    lines += ["", f"Machine: {result['machine']}; load average at the start "
                  f"{result['load_average_start']}, at the end {result['load_average_end']} "
                  "(2 cores shared with other work: times are indicative).", ""]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", default=os.environ.get(
        "MTL_SHARED_DATA", str(REPO.parent / "shared" / "data")))
    parser.add_argument("--quick", action="store_true", help="a smoke check of the script")
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--output-dir", default=None)
    for key, value in FULL.items():
        parser.add_argument("--" + key.replace("_", "-"), type=type(value), default=None)
    args = parser.parse_args()
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if not Path(args.data_root, "cmrc2018", "train.json").exists():
        sys.exit(f"{args.data_root}/cmrc2018/train.json not found: pass --data-root")
    work = Path(args.work_dir or REPO / ".cache" / ("bench_long_context" +
                                                   ("_quick" if args.quick else ""))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    output = Path(args.output_dir or (work if args.quick else REPO / "bench" / "results"))
    log = lambda message: print(message, flush=True)  # noqa: E731
    load_start = load_average()
    log(f"training at max_length {TRAINED} ({args.steps} updates) ...")
    run_dir, training = train(args, work, log)
    log(f"scoring {args.dev_examples} dev questions ...")
    rows = evaluate(args, run_dir, log)
    result = {"task": TASK, "trained_length": TRAINED,
              "settings": {k: getattr(args, k) for k in FULL},
              "training": training, "rows": rows, "machine": platform.platform(),
              "load_average_start": load_start, "load_average_end": load_average()}
    output.mkdir(parents=True, exist_ok=True)
    (output / "long_context.json").write_text(json.dumps(result, indent=1) + "\n")
    (output / "long_context.md").write_text(markdown(result))
    log(f"wrote {output}/long_context.json and .md")


if __name__ == "__main__":
    main()
