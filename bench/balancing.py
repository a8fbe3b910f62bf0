"""Which loss balancing works? Every balancing method on one mixture of real tasks, measured
the way LibMTL measures methods: Δm against single-task runs of the same schedule.

    .venv/bin/python bench/balancing.py [--data-root ../shared/data] [--work-dir runs/balancing]
        [--seeds 3] [--quick]

Arms: every `balancing:` name (balancing.NAMES: the 4 old + the new ones) on the mixture of
TASKS (uniform sampling), and `single`: one run per task with the same schedule (updates,
micro-batches per update, batch size, optimizer) on that task alone. Every arm runs with
the same seeds; a seed fixes the initial weights, the batches of each task and the sampler.
Scores: each task's dev score at the last update (the first EVAL_EXAMPLES dev examples; no
checkpoint selection, nothing tuned on dev). Each finished run appends its rows to
WORK_DIR/rows.jsonl at once, and a rerun skips the runs already there, so a stopped study
goes on where it stopped; the summary is rewritten after every run.

Outputs (not with --quick, a smoke check whose results stay in its work dir):
bench/results/balancing.{json,md,png}: raw rows {method, task, seed, score} (baselines as
method `single`), per method Δm ×100 (LibMTL: mean over tasks of (M_k - M_k,single) /
M_k,single, all metrics here higher-is-better) with a 95% t-interval paired by seed, the
per-task deltas, and each method's median seconds per update relative to `none` (same
seed, same run of the study; tracing updates left out).
"""
import argparse
import json
import math
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.load import cpu_model, cpu_seconds, load_average  # noqa: E402

# Four families: text (classification, matching), spans (extraction_ner), mrc (mrc_span,
# in windows of max_length), choice (multiple_choice). cluener was in the first list: its
# single-task run of this schedule scored span F1 0.0 (= its baseline; Δm divides by it),
# so ocnli took its place; the vocab (VOCAB_TASKS) stayed the one built for that list.
TASKS = ["tnews", "chnsenticorp", "ocnli", "resume", "cmrc2018", "c3_m"]
VOCAB_TASKS = ["tnews", "chnsenticorp", "cluener", "resume", "cmrc2018", "c3_m"]
METHODS = ["none", "gradient_norm", "loss_norm", "initial_loss", "loss_rate", "dwa",
           "uncertainty", "rlw", "gradnorm", "pcgrad"]
# Sized for ~1 hour of 2 CPU cores shared with other work (docs/benchmarks.md).
SCHEDULE = dict(steps=100, tasks_per_update=4, batch_size=16, max_length=80,
                optimizer={"name": "adamw", "lr": 0.005, "warmup_steps": 10, "weight_decay": 0.01})
BACKBONE = dict(num_layers=2, hidden_size=64, num_heads=2, intermediate_size=256, dropout=0.1,
                vocab_size=6000, alpha_warmup_steps=0)
EVAL_EXAMPLES = 300
SKIP_UPDATES = 10  # first updates trace: left out of the seconds per update
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
       9: 2.262, 10: 2.228}


def experiment(method, tasks, seed, data_root, work_dir):
    """The experiment of one run (JSON is YAML): one vocab for every arm (built once from
    all the study's tasks), so every arm has the same model."""
    return {"name": f"balancing-{method}-{seed}", "data_root": str(data_root),
            "cache_dir": str(work_dir / "cache"), "vocab": str(work_dir / "vocab.txt"),
            "backbone": dict(BACKBONE), "tasks": list(tasks),
            "sampling": "uniform", "balancing": "none" if method == "single" else method,
            "seed": seed, "checkpoint_every": 0, "eval_every": 0, **SCHEDULE}


def run_arm(method, tasks, seed, args, log):
    """Train one run in this process; its dev scores and seconds per update."""
    import keras

    from mtl_framework.trainer import Run

    name = f"{method}-{'+'.join(tasks) if method == 'single' else 'mix'}-seed{seed}"
    run_dir = args.work_dir / "runs" / name
    shutil.rmtree(run_dir, ignore_errors=True)  # a run stopped half-way starts again
    path = args.work_dir / "experiments" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(experiment(method, tasks, seed, args.data_root, args.work_dir)))
    started = time.time()
    run = Run(str(path), str(run_dir), log=log)
    run.train()
    trained = time.time() - started
    results = run.evaluate("dev", max_examples=EVAL_EXAMPLES)
    stamps = [json.loads(line)["time"] for line in open(run_dir / "metrics.jsonl")]
    per_update = [b - a for a, b in zip(stamps[SKIP_UPDATES:], stamps[SKIP_UPDATES + 1:])]
    if run.model._threads is not None:
        run.model._threads.shutdown()
    del run
    keras.backend.clear_session()
    return {"method": method, "tasks": tasks, "seed": seed, "train_seconds": round(trained, 1),
            "seconds_per_update": statistics.median(per_update),
            "wall_seconds": round(time.time() - started, 1),
            "scores": {t: {k: results[t].get(k) for k in ("score", "baseline", "metric", "examples")}
                       for t in tasks}}


def build_vocab(args, log):
    """WORK_DIR/vocab.txt from the train text of VOCAB_TASKS (once)."""
    path = args.work_dir / "vocab.txt"
    if path.exists():
        return
    from mtl_framework.preflight import plan_run
    from mtl_framework.prepare import cached_vocab

    probe = args.work_dir / "experiments" / "vocab.yaml"
    probe.parent.mkdir(parents=True, exist_ok=True)
    spec = experiment("none", VOCAB_TASKS, 0, args.data_root, args.work_dir)
    spec.pop("vocab")
    probe.write_text(json.dumps(spec))
    plan = plan_run(str(probe), str(args.work_dir / "runs" / "vocab"), None)
    from mtl_framework.preflight import vocab_sources
    built = cached_vocab(vocab_sources(plan), plan.data_root, BACKBONE["vocab_size"],
                         str(args.work_dir / "cache"), log=log)
    shutil.copyfile(built, path)


def interval(values):
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, None
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = T95.get(n - 1, 1.96) * sd / math.sqrt(n)
    return mean, [mean - half, mean + half]


def summarize(records, tasks):
    """Rows, Δm per method (paired by seed), per-task deltas, cost relative to none."""
    rows = [{"method": r["method"], "task": t, "seed": r["seed"], "score": s["score"]}
            for r in records for t, s in r["scores"].items()]
    score = {(r["method"], r["task"], r["seed"]): r["score"] for r in rows}
    seeds = sorted({r["seed"] for r in rows})
    baselines = {t: s["baseline"] for r in records for t, s in r["scores"].items()}
    single = {t: [score[("single", t, s)] for s in seeds if ("single", t, s) in score] for t in tasks}
    seconds = {(r["method"], r["seed"]): r["seconds_per_update"] for r in records if r["method"] != "single"}
    methods = {}
    for method in METHODS:
        paired = [s for s in seeds if all((method, t, s) in score and ("single", t, s) in score
                                          for t in tasks)]
        if not paired:
            continue
        delta_m = [100 * sum((score[(method, t, s)] - score[("single", t, s)]) / score[("single", t, s)]
                             for t in tasks) / len(tasks) for s in paired]
        mean, ci = interval(delta_m)
        per_task = {}
        for t in tasks:
            mean_t, ci_t = interval([score[(method, t, s)] - score[("single", t, s)] for s in paired])
            per_task[t] = {"score": statistics.mean(score[(method, t, s)] for s in paired),
                           "delta": mean_t, "ci95": ci_t}
        cost = [seconds[(method, s)] / seconds[("none", s)] for s in paired
                if (method, s) in seconds and ("none", s) in seconds]
        # against `none` in the same seeds: the seed's shared noise (initial weights,
        # batches, single-task scores) cancels
        both = [s for s in paired if s in methods.get("none", {}).get("seeds", [])]
        versus = interval([delta_m[paired.index(s)] - methods["none"]["delta_m_per_seed"][
            methods["none"]["seeds"].index(s)] for s in both]) if both and method != "none" else (None, None)
        methods[method] = {"seeds": paired, "delta_m": mean, "delta_m_ci95": ci,
                           "vs_none": versus[0], "vs_none_ci95": versus[1],
                           "delta_m_per_seed": delta_m, "per_task": per_task,
                           "cost_vs_none": statistics.mean(cost) if cost else None,
                           "seconds_per_update": statistics.mean(seconds[(method, s)] for s in paired
                                                                 if (method, s) in seconds)}
    return {"rows": rows, "methods": methods, "baselines": baselines,
            "single": {t: statistics.mean(v) if v else None for t, v in single.items()}}


def write_markdown(path, summary, meta, tasks):
    lines = ["# Loss balancing study", "", meta["setup"], "",
             "Δm (LibMTL, ×100): mean over tasks of (score − single-task score) / single-task "
             "score, per seed, then the mean over seeds with a 95% t-interval (paired by seed). "
             "Δm − none's: the same per seed minus `none`'s Δm of that seed (mean, 95% t-interval). "
             "Per-task Δ: score − single-task score, mean over seeds. "
             "Cost: median seconds per update relative to `none` in the same seed of this study "
             "(first updates, which trace, left out).", "",
             "| method | Δm ×100 | 95% interval | seeds | Δm − none's (95%) | cost vs none | s/update | "
             + " | ".join(f"{t} Δ" for t in tasks) + " |",
             "|---|---|---|---|---|---|---|" + "---|" * len(tasks)]
    for method, m in sorted(summary["methods"].items(), key=lambda kv: -kv[1]["delta_m"]):
        ci = "-" if m["delta_m_ci95"] is None else f"[{m['delta_m_ci95'][0]:.1f}, {m['delta_m_ci95'][1]:.1f}]"
        cost = "-" if m["cost_vs_none"] is None else f"{m['cost_vs_none']:.2f}x"
        versus = "-" if m["vs_none"] is None else f"{m['vs_none']:+.1f}" + (
            "" if m["vs_none_ci95"] is None else
            f" [{m['vs_none_ci95'][0]:+.1f}, {m['vs_none_ci95'][1]:+.1f}]")
        lines.append(f"| {method} | {m['delta_m']:.1f} | {ci} | {len(m['seeds'])} | {versus} | {cost} | "
                     f"{m['seconds_per_update']:.2f} | "
                     + " | ".join(f"{m['per_task'][t]['delta']:+.3f}" for t in tasks) + " |")
    lines += ["", "Single-task scores (mean over seeds) and the majority baseline:", "",
              "| task | single | majority baseline |", "|---|---|---|"]
    for t in tasks:
        single, base = summary["single"].get(t), summary["baselines"].get(t)
        lines.append(f"| {t} | {'-' if single is None else f'{single:.4f}'} | "
                     f"{'-' if base is None else f'{base:.4f}'} |")
    lines += ["", meta["timing"], ""]
    path.write_text("\n".join(lines), encoding="utf-8")


def plot(path, summary):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    items = sorted(summary["methods"].items(), key=lambda kv: kv[1]["delta_m"])
    if not items:
        return
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(items) + 1.2))
    for i, (method, m) in enumerate(items):
        ax.plot([m["delta_m"]], [i], "o", color="C0")
        if m["delta_m_ci95"]:
            ax.plot(m["delta_m_ci95"], [i, i], "-", color="C0")
    ax.axvline(0, color="gray", lw=0.8)
    ax.set_yticks(range(len(items)), [m for m, _ in items])
    ax.set_xlabel("Δm ×100 vs single-task (95% interval, paired by seed)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-root", type=Path, default=Path(os.environ.get(
        "MTL_SHARED_DATA", REPO.parent / "shared" / "data")))
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--results", type=Path, help="where balancing.{json,md,png} go "
                        "(default bench/results)")
    parser.add_argument("--tasks", nargs="*", help="another task list (a pilot)")
    parser.add_argument("--only", nargs="*", help="run only these arms (a pilot; e.g. none single)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke check: 2 tasks, 3 methods, 12 updates, 1 seed")
    args = parser.parse_args()
    global TASKS, METHODS
    if args.tasks:
        TASKS = args.tasks
    if args.quick:
        TASKS, METHODS = TASKS[:2], ["none", "dwa", "pcgrad"]
        SCHEDULE.update(steps=12, tasks_per_update=2)
    args.work_dir = args.work_dir or REPO / "runs" / ("balancing_quick" if args.quick else "balancing")
    args.work_dir = args.work_dir.resolve()  # experiments name paths relative to their folder
    args.work_dir.mkdir(parents=True, exist_ok=True)
    out = args.work_dir if args.quick else (args.results or REPO / "bench" / "results")
    records_path = args.work_dir / "rows.jsonl"
    records = [json.loads(l) for l in open(records_path)] if records_path.exists() else []
    done = {(r["method"], tuple(r["tasks"]), r["seed"]) for r in records}
    log_file = open(args.work_dir / "log.txt", "a", encoding="utf-8")
    log = lambda message: (log_file.write(str(message) + "\n"), log_file.flush())
    started, cpu0, load0 = time.time(), cpu_seconds(), load_average()
    plan = [("single", (t,), s) for s in range(args.seeds) for t in TASKS] + \
           [(m, tuple(TASKS), s) for s in range(args.seeds) for m in ["none"] + METHODS[1:]]
    # seed by seed, baselines first: a study stopped in its last seed still pairs the
    # methods it finished there
    plan.sort(key=lambda arm: arm[2])
    plan = [arm for arm in plan if not args.only or arm[0] in args.only]
    build_vocab(args, log)
    for i, (method, tasks, seed) in enumerate(plan):
        if (method, tasks, seed) in done:
            continue
        print(f"[{i + 1}/{len(plan)}] {method} {'+'.join(tasks)} seed {seed} "
              f"({time.time() - started:.0f} s, load {load_average()})", flush=True)
        record = run_arm(method, list(tasks), seed, args, log)
        record["load_average"] = load_average()
        records.append(record)
        with open(records_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        print(f"    {record['wall_seconds']} s: " + ", ".join(
            f"{t} {s['score']:.4f} (majority {s['baseline']:.4f})" if s["score"] is not None
            else f"{t} -" for t, s in record["scores"].items()), flush=True)
        report(records, out, args, started, cpu0, load0)
    report(records, out, args, started, cpu0, load0)


def report(records, out, args, started, cpu0, load0):
    summary = summarize(records, TASKS)
    wall = sum(r["wall_seconds"] for r in records)
    b = BACKBONE
    setup = (f"RoFormerV2 L{b['num_layers']}-H{b['hidden_size']}-A{b['num_heads']}-"
             f"I{b['intermediate_size']} from scratch (dropout {b['dropout']}, vocab <= "
             f"{b['vocab_size']}); tasks {', '.join(TASKS)} (full train splits, uniform sampling); "
             f"{SCHEDULE['steps']} updates x {SCHEDULE['tasks_per_update']} single-task "
             f"micro-batches of {SCHEDULE['batch_size']}, max_length {SCHEDULE['max_length']}; "
             f"AdamW lr {SCHEDULE['optimizer']['lr']}, {SCHEDULE['optimizer']['warmup_steps']} "
             "warm-up updates then linear decay; every method with its default options; "
             f"`single`: the same schedule on one task. Seeds {sorted({r['seed'] for r in records})}. "
             f"Dev: the first {EVAL_EXAMPLES} examples of each task, scored once at the last update.")
    loads = [r["load_average"][0] for r in records if r.get("load_average")]
    timing = (f"Runs: {len(records)}, {wall / 60:.1f} min of run wall time summed over them "
              f"(this invocation: {(time.time() - started) / 60:.1f} min wall, "
              f"{(cpu_seconds() - cpu0) / 60:.1f} CPU min of this process). 1-minute load average "
              f"after each run: {min(loads, default=0):.1f} to {max(loads, default=0):.1f} "
              "(the 2 cores are shared with other work: the cost column is noisy). "
              f"CPU: {cpu_model()}.")
    meta = {"setup": setup, "timing": timing, "tasks": TASKS, "methods": METHODS,
            "schedule": SCHEDULE, "backbone": BACKBONE, "eval_examples": EVAL_EXAMPLES}
    out.mkdir(parents=True, exist_ok=True)
    (out / "balancing.json").write_text(json.dumps(
        {**meta, **summary, "runs": records}, indent=1), encoding="utf-8")
    write_markdown(out / "balancing.md", summary, meta, TASKS)
    plot(out / "balancing.png", summary)


if __name__ == "__main__":
    main()
