"""Does learning hold under bfloat16? TNEWS and CLUENER trained from scratch in float32 and
in mixed_bfloat16, same seeds, scored on dev; paired differences with 95% t-intervals.

    .venv/bin/python -m bench.precision [--quick] [--seeds 0 1 2] [--steps N] [--work-dir DIR]

Each run is a two-task mixture (tnews + cluener, temperature 2 sampling, gradient_norm
balancing) of a small RoFormerV2 trained from scratch through the framework's own Run
(bench/runs.py); the experiments differ only in `precision`. For every seed the two
precisions start from the same weights and see the same batches (same seed). Runs go in
the order f32, bf16 for even seeds and bf16, f32 for odd ones, so a slow phase of this
shared machine falls on both precisions alike. After each run the JSON and markdown are
rewritten: results come out as they are measured. Reported per task and seed: dev score
(tnews accuracy, cluener span F1, first `eval_examples` dev examples), the paired
difference bf16 - f32, its mean and 95% t-interval over seeds, and the seconds per update
of each run (median after the first updates), beside the load average (the machine is
shared). Writes the study into bench/results/precision.json and precision.md (--quick: its
work folder), beside the file's other studies (bench/studies.py). A study is named by its
tasks and updates (`mixture600`: TNEWS + CLUENER, 600 updates; `tnews600`; `cluener600`)
unless --study names it; re-running one replaces its entry.

`precision: auto` (mtl_framework.config.precision.resolve_precision) picks mixed_bfloat16 on
CPUs with amx_bf16 or avx512_bf16; it became the default once this study found that
learning holds (docs/benchmarks.md says what it found). The study names both precisions.
"""
import argparse
import os
import platform
import time
from pathlib import Path

from bench import REPO
from bench import runs as scratch_runs
from bench.learning import build_shared_vocab, featurize
from bench.load import cpu_model, load_average
from bench.runs import interval, progress_lines, scratch_experiment, train_and_evaluate
from bench.studies import write_study

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from mtl_framework.config.precision import native_bf16_flags  # noqa: E402
from mtl_framework.config.registry import load_registry  # noqa: E402
from mtl_framework.tokenizer import Tokenizer  # noqa: E402

TASKS = ["tnews", "cluener"]
PRECISIONS = ["float32", "mixed_bfloat16"]
FULL = dict(**scratch_runs.TINY_BACKBONE, steps=300, batch_size=32, tasks_per_update=2, max_length=64,
            lr=1e-3, warmup_steps=30, alpha_warmup_steps=50, vocab_size=6000, eval_examples=1000)
QUICK = dict(**scratch_runs.SMOKE_BACKBONE, steps=6, batch_size=8, tasks_per_update=2, max_length=32,
             lr=1e-3, warmup_steps=2, alpha_warmup_steps=2, vocab_size=3000, eval_examples=32)
QUICK_WORK = REPO / ".cache" / "bench_precision_quick"


def experiment(args, precision, seed, work, vocab_path):
    return scratch_experiment(f"precision-{precision}-s{seed}", args, work, vocab_path,
                              tasks=list(args.tasks), precision=precision, seed=seed,
                              sampling={"method": "temperature", "temperature": 2.0},
                              balancing="gradient_norm", tasks_per_update=args.tasks_per_update,
                              max_length=args.max_length)


def run_order(seeds):
    """(seed, precision) pairs: f32 first on even seeds, bf16 first on odd ones."""
    return [(seed, p) for i, seed in enumerate(seeds)
            for p in (PRECISIONS if i % 2 == 0 else PRECISIONS[::-1])]


def paired(runs, seeds, tasks):
    """Per task: bf16 - f32 per seed (only seeds with both runs), mean, 95% t-interval."""
    out = {}
    for task in tasks:
        diffs = {}
        for seed in seeds:
            pair = [runs.get(f"{p}/s{seed}") for p in PRECISIONS]
            if all(pair):
                scores = [r["scores"][task]["score"] for r in pair]
                diffs[seed] = scores[1] - scores[0]
        if not diffs:
            continue
        mean, ci = interval(list(diffs.values()))
        out[task] = {"metric": next(r for r in runs.values())["scores"][task]["metric"],
                     "bf16_minus_f32": {str(s): round(d, 4) for s, d in diffs.items()},
                     "mean": round(mean, 4), "ci95": [round(v, 4) for v in ci] if ci else None}
    speed = {}
    for seed in seeds:
        pair = [runs.get(f"{p}/s{seed}") for p in PRECISIONS]
        if all(pair) and all(r["seconds_per_update"] for r in pair):
            speed[str(seed)] = round(pair[0]["seconds_per_update"] / pair[1]["seconds_per_update"], 3)
    return out, speed


def markdown(result):
    c = result["config"]
    tasks = c["tasks"]
    lines = ["# Learning under bfloat16 mixed precision (CPU)", "",
             f"{c['backbone']}; tasks {', '.join(tasks)}"
             f"{' as one mixture' if len(tasks) > 1 else ''}; {c['steps']} updates of "
             f"{c['tasks_per_update']} micro-batches of {c['batch_size']} x <= {c['max_length']}; "
             f"seeds {c['seeds']}; dev scores on the first {c['eval_examples']} examples per "
             f"task. CPU: {result['machine']['cpu']} (bf16 flags: "
             f"{', '.join(result['machine']['native_bf16_flags']) or 'none'}), shared: load "
             f"average {result['load_average_start']} at the start, "
             f"{result.get('load_average_end')} at the end.", "",
             "| seed | precision | " + " | ".join(f"{t} dev" for t in tasks)
             + " | s/update | load avg (1 min) after |", "|---" * (len(tasks) + 4) + "|"]
    for key, r in result["runs"].items():
        seed = key.split("/s")[1]
        s = r["scores"]
        per_update = f"{r['seconds_per_update']:.3f}" if r["seconds_per_update"] else "-"
        lines.append(f"| {seed} | {r['precision']} | "
                     + " | ".join(f"{s[t]['score']:.4f}" for t in tasks)
                     + f" | {per_update} | {r['load_average_after'][0]} |")
    lines += ["", "Paired bf16 - f32 (mean over seeds, 95% t-interval):", ""]
    for task, p in result["paired"].items():
        ci = f"[{p['ci95'][0]:+.4f}, {p['ci95'][1]:+.4f}]" if p["ci95"] else "(one seed: no interval)"
        lines.append(f"- {task} ({p['metric']}): {p['mean']:+.4f} {ci}; per seed "
                     + ", ".join(f"s{s} {d:+.4f}" for s, d in p["bf16_minus_f32"].items()))
    if result["speedup"]:
        lines.append("- seconds per update, f32 / bf16, per seed: "
                     + ", ".join(f"s{s} {v}x" for s, v in result["speedup"].items()))
    if not result.get("complete"):
        lines += ["", f"Incomplete: {len(result['runs'])} of {len(result['order'])} runs so far."]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root",
                        default=os.environ.get("MTL_DATA_ROOT", REPO.parent / "shared" / "data"))
    parser.add_argument("--quick", action="store_true", help="tiny smoke check")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--tasks", nargs="+", default=TASKS, choices=TASKS)
    parser.add_argument("--study", default=None,
                        help="the study's name in precision.json (default: `mixture` or the one "
                             "task, then the updates, e.g. mixture600)")
    scratch_runs.add_size_options(parser, FULL, QUICK)
    parser.add_argument("--work-dir", default=None,
                        help="vocab, features and runs (default .cache/bench_precision, kept)")
    parser.add_argument("--output-dir", default=None,
                        help="default bench/results (--quick: the work folder)")
    args = parser.parse_args()
    scratch_runs.fill_sizes(args, FULL, QUICK)
    work = Path(args.work_dir or (QUICK_WORK if args.quick else REPO / ".cache" / "bench_precision"))
    work = work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    out = Path(args.output_dir or (work if args.quick else REPO / "bench" / "results"))
    study = args.study or f"{'mixture' if len(args.tasks) > 1 else args.tasks[0]}{args.steps}"

    def log(message):
        print(f"[precision {time.strftime('%H:%M:%S')}] {message}", flush=True)

    tasks = load_registry().select(args.tasks)
    vocab_path = work / "vocab.txt"
    if vocab_path.exists():
        tokenizer = Tokenizer(str(vocab_path))
    else:
        tokenizer = build_shared_vocab(tasks, args.data_root, vocab_path, args.vocab_size)
    features = featurize(tasks, tokenizer, args.data_root, work / "cache", args.max_length, log)
    order = run_order(args.seeds)
    result = {
        "benchmark": "bench/precision.py",
        "machine": {"cpu": cpu_model(), "cpus": os.cpu_count(),
                    "native_bf16_flags": native_bf16_flags(), "python": platform.python_version()},
        "config": {"quick": args.quick, "tasks": args.tasks, "seeds": args.seeds,
                   "backbone": f"RoFormerV2 L{args.num_layers}-H{args.hidden_size}-"
                               f"A{args.num_heads}-I{args.intermediate_size} from scratch, "
                               f"dropout 0.1, residual alpha warm-up {args.alpha_warmup_steps}",
                   **{k: getattr(args, k) for k in FULL},
                   "experiment": experiment(args, "<precision>", "<seed>", Path("<work>"),
                                            "<work>/vocab.txt")},
        "features": features, "order": [f"{p}/s{s}" for s, p in order],
        "load_average_start": load_average(), "runs": {}, "paired": {}, "speedup": {},
    }
    for seed, precision in order:
        log(f"seed {seed}, {precision}: {args.steps} updates")
        run = train_and_evaluate(experiment(args, precision, seed, work, vocab_path), work,
                                 f"{precision}-s{seed}", args.eval_examples, lambda *a, **k: None,
                                 [progress_lines(args.steps, max(1, args.steps // 5), log)])
        run.update(precision=precision, seed=seed, load_average_after=load_average())
        result["runs"][f"{precision}/s{seed}"] = run
        log("  " + ", ".join(f"{t} {run['scores'][t]['score']:.4f}" for t in args.tasks)
            + f"; {run['seconds_per_update']} s/update; load {run['load_average_after']}")
        result["paired"], result["speedup"] = paired(result["runs"], args.seeds, args.tasks)
        result["complete"] = len(result["runs"]) == len(order)
        result["load_average_end"] = load_average()
        write_study(out / "precision.json", "bench/precision.py",
                    "Learning under bfloat16 mixed precision (CPU)", study, result, markdown)
    print(markdown(result))


if __name__ == "__main__":
    main()
