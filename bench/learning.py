"""Learning check: does a small model learn a real four-task mixture, and how do
`gradient_norm` and `none` balancing compare on the same budget?

    .venv/bin/python -m bench.learning [--data-root ../shared/data] [--quick]
        [--tasks tnews afqmc ocnli cluener] [--steps N] [--work-dir DIR]

What it does, through the framework's own entry points (loop.run.Run):
1. builds a character vocab from the tasks' train text (vocab_size cap), once;
2. featurizes every task's full train split and its dev split into a cache
   folder in the work folder (timed separately: the first run's one-off cost);
3. writes one experiment per balancing mode (the only key that differs) and
   trains it with `Run(experiment).train()` (bench/runs.py): same seed, so the
   same initial weights, task draws and batches; same steps; the features come
   from the cache;
4. scores each trained model with `Run.evaluate("dev", max_examples=N)`: the
   first N dev examples per task (the same for both modes) with the task's
   metric, beside its majority baseline (the majority train label scored on
   the same dev examples; for span F1 the trivial "no spans" prediction, 0).

Reports per task: metric, dev score per mode, baseline; per mode: updates,
micro-batches and tokens (real and padded) per task, mean train loss over the
first and last updates, train and eval wall time. Writes
bench/results/learning.json and learning.md. The machine is shared: the JSON
records the load average and this process's CPU time beside wall times.
--quick is a smoke check of the script (tiny model, 12 updates, 64 dev
examples): about a minute once its work folder (.cache/bench_learning_quick,
kept) holds the vocab and features; the first --quick run builds them from
the full train splits (a few minutes on a busy machine). It writes its
learning.json/.md into that work folder unless --output-dir says otherwise.
"""
import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import REPO
from bench import runs as scratch_runs
from bench.load import cpu_seconds, load_average
from bench.runs import open_run, progress_lines, scratch_experiment

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from data_adapters import read_task  # noqa: E402
from mtl_framework.config.registry import load_registry  # noqa: E402
from mtl_framework.prepare.cache import cached_features  # noqa: E402
from mtl_framework.tokenizer import (  # noqa: E402
    Tokenizer,  # noqa: E402
    build_vocab,
    count_units,
    example_texts,
    write_vocab,
)

TASKS = ["tnews", "afqmc", "ocnli", "cluener"]
MODES = ["gradient_norm", "none"]
# Chosen so each mode trains ~4-5 min on 2 busy cores (~0.6 s per update of 4 x 32 rows).
FULL = dict(**scratch_runs.TINY_BACKBONE, steps=350, batch_size=32, tasks_per_update=4, max_length=64,
            lr=1e-3, warmup_steps=35, alpha_warmup_steps=50, vocab_size=6000, eval_examples=1000)
QUICK = dict(**scratch_runs.SMOKE_BACKBONE, steps=12, batch_size=16, tasks_per_update=4, max_length=64,
             lr=1e-3, warmup_steps=4, alpha_warmup_steps=4, vocab_size=6000, eval_examples=64)
QUICK_WORK = REPO / ".cache" / "bench_learning_quick"  # kept: later smoke checks reuse its features


def experiment_dict(args, mode, work, vocab_path):
    return scratch_experiment(f"learning-{mode}", args, work, vocab_path, tasks=list(args.tasks),
                              sampling={"method": "temperature", "temperature": 2.0}, balancing=mode,
                              tasks_per_update=args.tasks_per_update, max_length=args.max_length,
                              seed=args.seed)


def build_shared_vocab(tasks, data_root, path, size):
    """The vocab a from-scratch Run builds (prepare.pipeline.prepare_vocab), built once for both modes."""
    texts = (t for task in tasks for ex in read_task(task, "train", data_root)
             for t in example_texts(ex))
    write_vocab(build_vocab(count_units(texts), max_size=size), path)
    return Tokenizer(str(path))


def featurize(tasks, tokenizer, data_root, cache_dir, max_length, log):
    """Train + dev features of every task into the cache (what Run and evaluate then load)."""
    out = {}
    for task in tasks:
        length = min(task.max_length, max_length)
        entry = {"max_length": length}
        for split in ("train", "dev"):
            before = set(Path(cache_dir, task.name).glob(f"{split}-*")) \
                if Path(cache_dir, task.name).exists() else set()
            start = time.perf_counter()
            features = cached_features(task, split, tokenizer, data_root, cache_dir,
                                       max_length=length)
            seconds = time.perf_counter() - start
            after = set(Path(cache_dir, task.name).glob(f"{split}-*"))
            report = features.report.as_dict()
            entry[split] = {"rows": len(features), "seconds": round(seconds, 2),
                            "built": bool(after - before),
                            "examples": report.get("examples"),
                            "truncated": report.get("truncated_total"),
                            "spans_lost": report.get("spans_lost_total")}
        out[task.name] = entry
        log(f"  {task.name}: train {entry['train']['rows']} rows {entry['train']['seconds']} s, "
            f"dev {entry['dev']['rows']} rows {entry['dev']['seconds']} s "
            f"(truncated train {entry['train']['truncated']})")
    return out


class TokenCounter:
    """Wraps a stream's next_batch: real (non-[PAD]) and padded tokens drawn."""

    def __init__(self, stream, pad_id):
        self.next_batch_inner, self.pad_id = stream.next_batch, pad_id
        self.real = self.padded = self.batches = 0
        stream.next_batch = self

    def __call__(self):
        batch = self.next_batch_inner()
        ids = np.asarray(batch["token_ids"])
        self.real += int((ids != self.pad_id).sum())
        self.padded += int(ids.size)
        self.batches += 1
        return batch


def train_summary(run_dir, first, last):
    """Per task from metrics.jsonl: micro-batches, mean loss over the first/last
    updates in which the task was drawn, mean backbone gradient norm."""
    records = [json.loads(line) for line in Path(run_dir, "metrics.jsonl").read_text().splitlines()
               if line.strip()]
    tasks = {}
    for record in records:
        for name, stats in record["tasks"].items():
            tasks.setdefault(name, []).append(stats)
    out = {}
    for name, entries in tasks.items():
        out[name] = {
            "micro_batches": int(sum(e["count"] for e in entries)),
            "loss_first": float(np.mean([e["loss"] for e in entries[:first]])),
            "loss_last": float(np.mean([e["loss"] for e in entries[-last:]])),
            "gradient_norm_mean": float(np.mean([e["gradient_norm"] for e in entries])),
            "gradient_norm_last": float(np.mean([e["gradient_norm"] for e in entries[-last:]])),
        }
    first_losses = {n: s["loss"] for n, s in records[0]["tasks"].items()} if records else {}
    return out, first_losses, len(records)


def run_mode(args, mode, work, vocab_path, log):
    quiet = lambda *a, **k: None  # noqa: E731
    progress = progress_lines(args.steps, args.print_every, log)
    start, cpu0 = time.perf_counter(), cpu_seconds()
    with open_run(experiment_dict(args, mode, work, vocab_path), work, mode, quiet, [progress]) as run:
        build_s = time.perf_counter() - start
        counters = {name: TokenCounter(stream, run.tokenizer.pad_id)
                    for name, stream in run.mixture.streams.items()}
        load_before = load_average()
        start, cpu1 = time.perf_counter(), cpu_seconds()
        run.train()
        end = time.perf_counter()
        train_s, train_cpu = end - start, cpu_seconds() - cpu1
        # Run.train's time outside the update loop (fit set-up; final checkpoint, writers closed).
        outside = {"before_loop_s": round(progress.start - start, 1),
                   "after_loop_s": round(end - progress.ends[-1], 1)} if progress.ends else {}
        start = time.perf_counter()
        results = run.evaluate("dev", batch_size=2 * args.batch_size, max_examples=args.eval_examples)
        eval_s = time.perf_counter() - start
    summary, first_losses, updates = train_summary(run.run_dir, first=20, last=50)
    for name, stats in summary.items():
        counter = counters[name]
        stats.update(real_tokens=counter.real, padded_tokens=counter.padded)
    scores = {}
    for name, entry in results.items():
        scores[name] = {k: entry.get(k) for k in ("metric", "score", "baseline", "examples",
                                                  "result", "note", "gold_lost_in_features",
                                                  "unlabelled")
                        if entry.get(k) is not None}
    return {
        "balancing": mode,
        "updates": updates,
        "build_s": round(build_s, 2),
        "train_s": round(train_s, 1),
        "train_cpu_s": round(train_cpu, 1),
        "s_per_update": round(train_s / max(updates, 1), 3),
        **progress.timings(), **outside,
        "eval_s": round(eval_s, 1),
        "total_cpu_s": round(cpu_seconds() - cpu0, 1),
        "load_average_before_after": [load_before, load_average()],
        "real_tokens": sum(s["real_tokens"] for s in summary.values()),
        "padded_tokens": sum(s["padded_tokens"] for s in summary.values()),
        "first_update_losses": first_losses,
        "train": summary,
        "dev": scores,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root",
                        default=os.environ.get("MTL_DATA_ROOT", REPO.parent / "shared" / "data"))
    parser.add_argument("--tasks", nargs="+", default=TASKS)
    parser.add_argument("--modes", nargs="+", default=MODES)
    parser.add_argument("--quick", action="store_true", help="tiny smoke check (~1 min)")
    scratch_runs.add_size_options(parser, FULL, QUICK)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--render", metavar="JSON", default=None,
                        help="only rewrite the .md beside a learning.json (no training)")
    parser.add_argument("--print-every", type=int, default=None)
    parser.add_argument("--work-dir", default=None,
                        help="keep the vocab, feature cache and runs here (reused when "
                             "present); default a temporary folder, removed at the end "
                             f"(--quick: {QUICK_WORK.relative_to(REPO)}, kept)")
    parser.add_argument("--output-dir", default=None,
                        help="default bench/results (--quick: its work folder, so a smoke "
                             "check never overwrites the real results)")
    args = parser.parse_args()
    if args.render:
        path = Path(args.render)
        text = markdown(json.loads(path.read_text(encoding="utf-8")))
        path.with_suffix(".md").write_text(text, encoding="utf-8")
        print(text)
        return
    scratch_runs.fill_sizes(args, FULL, QUICK)
    args.print_every = args.print_every or max(1, args.steps // 10)
    if args.quick and not args.work_dir:
        args.work_dir = str(QUICK_WORK)
    if not args.output_dir:
        args.output_dir = args.work_dir if args.quick else REPO / "bench" / "results"

    def log(message):
        print(message, flush=True)

    started, cpu_start = time.perf_counter(), cpu_seconds()
    load_start = load_average()
    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="mtl_learning_"))
    work = work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    registry = load_registry()
    tasks = registry.select(args.tasks)

    log(f"work folder {work}")
    vocab_path = work / "vocab.txt"
    start = time.perf_counter()
    if vocab_path.exists():
        tokenizer, vocab_built = Tokenizer(str(vocab_path)), False
    else:
        tokenizer, vocab_built = build_shared_vocab(tasks, args.data_root, vocab_path,
                                                    args.vocab_size), True
    vocab_s = time.perf_counter() - start
    log(f"vocab: {tokenizer.vocab_size} units ({'built' if vocab_built else 'reused'}, "
        f"{vocab_s:.1f} s)")
    log("featurizing train + dev:")
    start = time.perf_counter()
    features = featurize(tasks, tokenizer, args.data_root, work / "cache", args.max_length, log)
    featurize_s = time.perf_counter() - start
    log(f"featurized in {featurize_s:.1f} s")

    modes = {}
    for mode in args.modes:
        log(f"training balancing={mode}: {args.steps} updates x {args.tasks_per_update} "
            f"micro-batches of {args.batch_size}")
        modes[mode] = run_mode(args, mode, work, vocab_path, log)
        m = modes[mode]
        log(f"  trained in {m['train_s']} s, evaluated in {m['eval_s']} s")
        for name, entry in m["dev"].items():
            log(f"    {name}: {entry['metric']} {entry.get('score')} (baseline "
                f"{entry.get('baseline')}, {entry.get('examples')} examples)")

    same_start = None
    if len(modes) > 1:
        firsts = [m["first_update_losses"] for m in modes.values()]
        same_start = all(f == firsts[0] for f in firsts[1:])
    output = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform(), "tensorflow": _version("tensorflow"),
                    "keras": _version("keras")},
        "config": {
            "quick": args.quick, "tasks": args.tasks, "modes": args.modes,
            "data_root": str(args.data_root), "seed": args.seed,
            "backbone": f"RoFormerV2 L{args.num_layers}-H{args.hidden_size}-A{args.num_heads}"
                        f"-I{args.intermediate_size}, from scratch, dropout 0.1, "
                        f"residual alpha warm-up {args.alpha_warmup_steps} updates",
            "vocab_size": tokenizer.vocab_size, "vocab_cap": args.vocab_size,
            "max_length": args.max_length, "batch_size": args.batch_size,
            "tasks_per_update": args.tasks_per_update, "steps": args.steps,
            "sampling": "temperature 2.0 over train sizes",
            "optimizer": f"AdamW lr {args.lr}, {args.warmup_steps} warm-up updates then linear "
                         "decay to 0, weight decay 0.01",
            "eval_examples": args.eval_examples,
            "experiment": experiment_dict(args, "<mode>", Path("<work>"), "<work>/vocab.txt"),
        },
        "timings": {"vocab_s": round(vocab_s, 1), "vocab_built": vocab_built,
                    "featurize_s": round(featurize_s, 1),
                    "total_s": round(time.perf_counter() - started, 1),
                    "total_cpu_s": round(cpu_seconds() - cpu_start, 1),
                    "load_average_start_end": [load_start, load_average()]},
        "same_initial_state": same_start,
        "features": features,
        "modes": modes,
    }
    if not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = "learning"
    (out / f"{stem}.json").write_text(json.dumps(output, indent=1, ensure_ascii=False) + "\n",
                                      encoding="utf-8")
    (out / f"{stem}.md").write_text(markdown(output), encoding="utf-8")
    print(markdown(output))


def _version(name):
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # noqa: BLE001
        return None


def _fmt(value):
    return "-" if value is None else f"{value:.4f}"


def markdown(output):
    c, t, modes = output["config"], output["timings"], output["modes"]
    names = list(modes)
    tasks = c["tasks"]
    lines = [
        "# Learning check" + (" (--quick smoke run)" if c["quick"] else ""),
        "",
        f"{c['backbone']}; char vocab {c['vocab_size']}; tasks {', '.join(tasks)} (full train "
        f"splits, {c['sampling']}); {c['steps']} updates x {c['tasks_per_update']} single-task "
        f"micro-batches of {c['batch_size']}, max_length {c['max_length']}; {c['optimizer']}; "
        f"seed {c['seed']}. Dev: the first {c['eval_examples']} examples of each task.",
        "",
        "| task | metric | dev examples | majority baseline | " +
        " | ".join(names) + " | micro-batches (" + " / ".join(names) + ") | "
        "train loss first 20 -> last 50 (" + " / ".join(names) + ") | "
        "mean backbone gradient norm (" + " / ".join(names) + ") |",
        "|---|---|---|---|" + "---|" * len(names) + "---|---|---|",
    ]
    for task in tasks:
        entries = [modes[m]["dev"].get(task, {}) for m in names]
        trains = [modes[m]["train"].get(task, {}) for m in names]
        first = entries[0]
        lines.append(
            f"| {task} | {first.get('metric', '-')} | {first.get('examples', '-')} | "
            f"{_fmt(first.get('baseline'))} | " + " | ".join(_fmt(e.get("score")) for e in entries)
            + " | " + " / ".join(str(s.get("micro_batches", "-")) for s in trains) + " | "
            + " / ".join(f"{s['loss_first']:.3f} -> {s['loss_last']:.3f}" if s else "-"
                         for s in trains) + " | "
            + " / ".join(f"{s['gradient_norm_mean']:.2f}" if s else "-" for s in trains) + " |")
    spans = [f"{task} precision / recall " + " / ".join(
        f"{m} {modes[m]['dev'][task]['result']['precision']:.3f} / "
        f"{modes[m]['dev'][task]['result']['recall']:.3f}" for m in names)
        for task in tasks if "precision" in (modes[names[0]]["dev"].get(task, {}).get("result") or {})]
    lines += ["", "Gradient norm: each micro-batch's backbone gradient norm before balancing, "
              "mean over the run. Majority baseline: the majority train label scored on the "
              "same dev examples; for span F1 the trivial no-spans prediction."
              + (" " + "; ".join(spans) + "." if spans else "")]
    lines += ["", "| balancing | updates | micro-batches | real tokens | padded tokens | "
              "train s (Run.train) | fit loop s | first 20 updates s (tracing) | "
              "median s/update after | eval s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for m in names:
        r = modes[m]
        batches = sum(s["micro_batches"] for s in r["train"].values())
        lines.append(f"| {m} | {r['updates']} | {batches} | {r['real_tokens']:,} | "
                     f"{r['padded_tokens']:,} | {r['train_s']} | {r.get('fit_loop_s', '-')} | "
                     f"{r.get('first_20_updates_s', '-')} | "
                     f"{r.get('median_update_s_after') or '-'} | {r['eval_s']} |")
    outside = [f"{m} {modes[m]['before_loop_s']} s before / {modes[m]['after_loop_s']} s after"
               for m in names if "before_loop_s" in modes[m]]
    if outside:
        lines += ["", "Run.train time outside the update loop (fit set-up; final checkpoint): "
                  + "; ".join(outside) + "."]
    feats = output["features"]
    built = ", ".join(f"{n} {f['train']['rows']:,} ({f['train']['truncated']:,} truncated)"
                      for n, f in feats.items())
    lines += [
        "",
        f"Train rows featurized at max_length {c['max_length']}: {built}. "
        f"One-off costs: vocab {t['vocab_s']} s, featurizing "
        f"train + dev {t['featurize_s']} s (cached after: both modes load the same features). "
        f"Whole run {t['total_s']} s wall, {t['total_cpu_s']} s CPU of this process; load "
        f"average (1/5/15 min) at start {t['load_average_start_end'][0]}, end "
        f"{t['load_average_start_end'][1]}. Same initial weights and batches in both modes "
        f"(first update's per-task losses equal): {output['same_initial_state']}.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
