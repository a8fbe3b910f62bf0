"""Which loss balancing works? Every balancing method on one mixture of real tasks, measured
the way LibMTL measures methods: Δm against single-task runs that see the same data.

    .venv/bin/python -m bench.balancing [--data-root ../shared/data] [--work-dir runs/balancing]
        [--seeds 3] [--quick]

Two stages, in this order, both in this script:

1. Pilot (task choice, no dev set read): every task of CANDIDATES is trained alone with the
   study's schedule on its train split minus a held-out slice (HELD_OUT examples, drawn by a
   fixed seed) and scored on that slice against its majority class. The pilot's data root
   (WORK_DIR/pilot_data) is the real one with each candidate's train file split in the
   publisher's own format: the kept rows stay the train file, the held-out rows are written
   where the spec reads dev. The rule (`choose_tasks`, fixed before the pilot ran): a task
   is eligible when on every pilot seed it beats its majority class by >= MARGIN and scores
   >= FLOOR (Δm divides by the single-task score); then the most clearly learned task of
   each type (family) in turn, by margin, then the next by margin, up to N_TASKS.
2. Study: every `balancing:` name (balancing.NAMES: the 4 old + the new ones) on the mixture
   of the chosen tasks, and `single`: one run per task alone. Same data per task in both,
   as in LibMTL (whose updates take one batch of every task): an update of the mixture is
   len(tasks) micro-batches drawn uniformly, a single-task update is one micro-batch of its
   task, both with the same updates, batch size and optimizer, so each task sees the same
   number of examples in expectation. Every arm runs with the same seeds; a seed fixes the
   initial weights, the batches of each task and the sampler. Scores: each task's dev score
   at the last update (the first EVAL_EXAMPLES dev examples; no checkpoint selection,
   nothing tuned on dev).

Each finished run appends its record to WORK_DIR/{pilot,rows}.jsonl at once, and a rerun
skips the runs already there, so a stopped study goes on where it stopped; the summary is
rewritten after every run. `--tasks` skips the pilot (a list of your own, reported as such).

Outputs (not with --quick, a smoke check whose results stay in its work dir):
bench/results/balancing.{json,md,png}: the pilot's rows and choice, raw rows {method, task,
seed, score} (baselines as method `single`), per method Δm ×100 (LibMTL: mean over tasks of
(M_k - M_k,single) / M_k,single, all metrics here higher-is-better) with a 95% t-interval
paired by seed, the per-task deltas, and each method's median seconds per update relative
to `none` (same seed, same run of the study; tracing updates left out).
"""
import argparse
import json
import math
import os
import random
import shutil
import statistics
import time
from pathlib import Path

from bench import REPO
from bench.load import cpu_model, cpu_seconds, load_average
from bench.runs import interval, train_and_evaluate

# Tasks of ../shared/data with a labelled train and dev split, seven types (families).
CANDIDATES = ["tnews", "chnsenticorp", "afqmc", "ocnli", "stsb_zh", "resume", "cluener",
              "weibo_nam", "duie_ent", "cmrc2018", "c3_m", "c3_d", "cluewsc"]
METHODS = ["none", "gradient_norm", "loss_norm", "initial_loss", "loss_rate", "dwa",
           "uncertainty", "rlw", "gradnorm", "pcgrad"]
# Sized for about an hour of 2 CPU cores shared with other work (docs/benchmarks.md);
# tasks_per_update: len(tasks) for a mixture, 1 alone (see above).
SCHEDULE = dict(steps=500, batch_size=16, max_length=80,
                optimizer={"name": "adamw", "lr": 0.005, "warmup_steps": 50, "weight_decay": 0.01})
BACKBONE = dict(num_layers=2, hidden_size=64, num_heads=2, intermediate_size=256, dropout=0.1,
                vocab_size=6000, alpha_warmup_steps=0)
EVAL_EXAMPLES = 300
HELD_OUT = 330  # examples of train held out for the pilot (>= EVAL_EXAMPLES after skipped rows)
PILOT_SEEDS = 2
MARGIN, FLOOR, N_TASKS, MIN_TYPES = 0.05, 0.10, 6, 4


def experiment(method, tasks, seed, data_root, work_dir, cache="cache"):
    """The experiment of one run (JSON is YAML): one vocab for every arm (built once from
    the candidates' pilot train text), so every arm has the same model."""
    return {"name": f"balancing-{method}-{seed}", "data_root": str(data_root),
            "cache_dir": str(work_dir / cache), "vocab": str(work_dir / "vocab.txt"),
            "backbone": dict(BACKBONE), "tasks": list(tasks),
            "sampling": "uniform", "balancing": "none" if method == "single" else method,
            "tasks_per_update": 1 if method == "single" else len(tasks),
            "seed": seed, "checkpoint_every": 0, "eval_every": 0, **SCHEDULE}


def run_arm(method, tasks, seed, args, log, data_root=None, stage="study"):
    """Train one run in this process; its dev scores and seconds per update."""
    name = f"{stage}-{method}-{'+'.join(tasks) if method == 'single' else 'mix'}-seed{seed}"
    cache = "cache" if stage == "study" else f"{stage}_cache"
    result = train_and_evaluate(experiment(method, tasks, seed, data_root or args.data_root,
                                           args.work_dir, cache), args.work_dir, name, EVAL_EXAMPLES, log)
    return {"method": method, "tasks": tasks, "seed": seed,
            **{k: result[k] for k in ("train_seconds", "seconds_per_update", "wall_seconds")},
            "scores": {t: result["scores"][t] for t in tasks}}


# ---------------------------------------------------------------- the pilot's data


def read_units(path, kind):
    """A file's units in order, the prefix to keep above them (a header), and how many
    examples each unit holds. kind: records (JSON objects, one per line or concatenated),
    lines, squad (articles of {"data": [...]}), list (a JSON array), blocks (CoNLL
    sentences separated by blank lines)."""
    text = path.read_text(encoding="utf-8")
    if kind == "records":
        decoder, units, at = json.JSONDecoder(), [], 0
        while True:
            while at < len(text) and text[at].isspace():
                at += 1
            if at == len(text):
                return units, None, [1] * len(units)
            unit, at = decoder.raw_decode(text, at)
            units.append(unit)
    if kind == "lines":
        units = [line for line in text.splitlines() if line.strip()]
        return units, None, [1] * len(units)
    if kind == "squad":
        document = json.loads(text)
        units = document["data"]
        return units, {k: v for k, v in document.items() if k != "data"}, [
            sum(len(p["qas"]) for p in article["paragraphs"]) for article in units]
    if kind == "list":
        units = json.loads(text)
        return units, None, [len(unit[1]) for unit in units]
    if kind == "blocks":
        units = [b for b in text.replace("\r\n", "\n").split("\n\n") if b.strip()]
        return units, None, [1] * len(units)
    raise ValueError(kind)


def write_units(path, kind, units, prefix):
    if kind == "records":
        text = "".join(json.dumps(u, ensure_ascii=False) + "\n" for u in units)
    elif kind == "lines":
        text = "".join(u + "\n" for u in units)
    elif kind == "squad":
        text = json.dumps({**prefix, "data": units}, ensure_ascii=False)
    elif kind == "list":
        text = json.dumps(units, ensure_ascii=False)
    else:
        text = "\n\n".join(u.strip("\n") for u in units) + "\n"
    path.write_text(text, encoding="utf-8")


UNIT_KINDS = {"jsonl": "records", "span_json": "records", "tagged_json": "records",
              "spo_json": "records", "wsc": "records", "delimited": "lines", "squad": "squad",
              "c3": "list", "tagged_chars": "blocks"}


def pilot_data(args, registry, log):
    """WORK_DIR/pilot_data: the data root with each candidate's train file split (once)."""
    root = args.work_dir / "pilot_data"
    done = root / "held_out.json"
    if done.exists():
        return root, json.loads(done.read_text())
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    specs = {t: registry.tasks[t] for t in CANDIDATES}
    folders = {s.files["train"].split("/")[0] for s in specs.values()}
    for entry in sorted(args.data_root.iterdir()):
        if entry.name in folders:  # a folder of its own: links to every file but the split ones
            (root / entry.name).mkdir()
            for item in entry.iterdir():
                (root / entry.name / item.name).symlink_to(item.resolve())
        else:
            (root / entry.name).symlink_to(entry.resolve())
    held_out = {}
    for task, spec in specs.items():
        kind = UNIT_KINDS[spec.format]
        if spec.options.get("header"):
            raise ValueError(f"{task}: a file with a header row is not split by this pilot")
        train, dev = root / spec.files["train"], root / spec.files["dev"]
        units, prefix, sizes = read_units(args.data_root / spec.files["train"], kind)
        order = list(range(len(units)))
        random.Random(f"held-out {task}").shuffle(order)
        chosen, count = set(), 0
        for i in order:
            if count >= HELD_OUT:
                break
            chosen.add(i)
            count += sizes[i]
        for path in (train, dev):
            path.unlink()
        write_units(train, kind, [u for i, u in enumerate(units) if i not in chosen], prefix)
        write_units(dev, kind, [u for i, u in enumerate(units) if i in chosen], prefix)
        held_out[task] = {"file": spec.files["train"], "units": len(units), "held_out_units": len(chosen),
                          "held_out_examples": count}
        log(f"pilot data: {task}: {len(chosen)} of {len(units)} units ({count} examples) held out")
    done.write_text(json.dumps(held_out, indent=1))
    return root, held_out


def known(value):
    return value is not None and not math.isnan(value)


def margin_over_majority(score):
    """score - majority (a baseline that is not a number, e.g. Spearman of a constant,
    counts as 0); None when the score itself is missing."""
    if not known(score["score"]):
        return None
    return score["score"] - (score["baseline"] if known(score["baseline"]) else 0.0)


def choose_tasks(pilot_records, types):
    """The rule of the module docstring: (chosen tasks, per-task table)."""
    table = {}
    for task in CANDIDATES:
        seen = [r["scores"][task] for r in pilot_records if r["tasks"] == [task]]
        if not seen:
            continue
        scores = [s["score"] for s in seen]
        margins = [margin_over_majority(s) for s in seen]
        margin = None if None in margins else min(margins)
        table[task] = {"type": types[task], "scores": scores, "baselines": [s["baseline"] for s in seen],
                       "margin": margin, "eligible": margin is not None and margin >= MARGIN
                       and min(scores) >= FLOOR and len(seen) >= PILOT_SEEDS}
    ranked = sorted((t for t in table if table[t]["eligible"]), key=lambda t: -table[t]["margin"])
    chosen = []
    for task in ranked:  # the best of each type first, then the next best overall
        if types[task] not in {types[t] for t in chosen}:
            chosen.append(task)
    chosen = chosen[:N_TASKS]
    chosen += [t for t in ranked if t not in chosen][:N_TASKS - len(chosen)]
    for task in table:
        table[task]["chosen"] = task in chosen
    return chosen, table


def build_vocab(args, pilot_root, log):
    """WORK_DIR/vocab.txt from the candidates' train text in the pilot's data root, so no
    held-out row shapes it (once)."""
    path = args.work_dir / "vocab.txt"
    if path.exists():
        return
    from mtl_framework.plan import plan_run, vocab_sources
    from mtl_framework.prepare.pipeline import cached_vocab

    probe = args.work_dir / "experiments" / "vocab.yaml"
    probe.parent.mkdir(parents=True, exist_ok=True)
    spec = experiment("none", CANDIDATES, 0, pilot_root, args.work_dir, "pilot_cache")
    spec.pop("vocab")
    probe.write_text(json.dumps(spec))
    plan = plan_run(str(probe), str(args.work_dir / "runs" / "vocab"), None)
    built = cached_vocab(vocab_sources(plan), plan.data_root, BACKBONE["vocab_size"],
                         str(args.work_dir / "pilot_cache"), log=log)
    shutil.copyfile(built, path)


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
    pilot = meta["pilot"]
    if pilot["table"]:
        lines += ["", f"Pilot (how the tasks were chosen, before any study run; no dev set read): "
                  f"each candidate alone with this schedule on its train split minus a held-out "
                  f"slice, scored on that slice, seeds {list(range(pilot['seeds']))}. Eligible: "
                  f"score - majority >= {pilot['margin']} and score >= {pilot['floor']} on every "
                  "seed; chosen: the eligible task with the largest margin of each type in turn, "
                  f"then by margin, up to {pilot['n_tasks']}.", "",
                  "| candidate | type | held-out examples | scores | majority | min margin "
                  "| eligible | chosen |",
                  "|---|---|---|---|---|---|---|---|"]
        for task, row in sorted(pilot["table"].items(), key=lambda kv: -(kv[1]["margin"] or -9)):
            held = pilot["held_out"].get(task, {}).get("held_out_examples", "-")
            margin = "-" if row["margin"] is None else f"{row['margin']:+.3f}"
            lines.append(f"| {task} | {row['type']} | {held} | "
                         + ", ".join("-" if v is None else f"{v:.3f}" for v in row["scores"]) + " | "
                         + ", ".join("-" if v is None else f"{v:.3f}" for v in row["baselines"][:1])
                         + f" | {margin} | {'yes' if row['eligible'] else 'no'} | "
                         f"{'yes' if row['chosen'] else ''} |")
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


def run_plan(plan, path, args, log, started, after_each, **arm_options):
    """Run the arms of `plan` not yet in `path` (jsonl of records), appending each."""
    records = [json.loads(line) for line in open(path)] if path.exists() else []
    done = {(r["method"], tuple(r["tasks"]), r["seed"]) for r in records}
    for i, (method, tasks, seed) in enumerate(plan):
        if (method, tasks, seed) in done:
            continue
        print(f"[{path.stem} {i + 1}/{len(plan)}] {method} {'+'.join(tasks)} seed {seed} "
              f"({time.time() - started:.0f} s, load {load_average()})", flush=True)
        record = run_arm(method, list(tasks), seed, args, log, **arm_options)
        record["load_average"] = load_average()
        records.append(record)
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        print(f"    {record['wall_seconds']} s: " + ", ".join(
            f"{t} {s['score']:.4f} (majority {s['baseline']:.4f})" if s["score"] is not None
            and s["baseline"] is not None else f"{t} {s['score']}"
            for t, s in record["scores"].items()), flush=True)
        after_each(records)
    return records


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-root", type=Path, default=Path(os.environ.get(
        "MTL_SHARED_DATA", REPO.parent / "shared" / "data")))
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--results", type=Path, help="where balancing.{json,md,png} go "
                        "(default bench/results)")
    parser.add_argument("--tasks", nargs="*", help="your own task list (no pilot)")
    parser.add_argument("--pilot-only", action="store_true", help="stop after the pilot's choice")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke check: 3 candidates, 2 chosen, 3 methods, 12 updates, 1 seed")
    args = parser.parse_args()
    global CANDIDATES, METHODS, N_TASKS, MIN_TYPES, PILOT_SEEDS, MARGIN, FLOOR
    if args.quick:
        CANDIDATES, METHODS = ["chnsenticorp", "resume", "c3_m"], ["none", "dwa", "pcgrad"]
        N_TASKS, MIN_TYPES, PILOT_SEEDS, MARGIN, FLOOR = 2, 1, 1, -1.0, -1.0
        SCHEDULE.update(steps=12)
        args.seeds = 1
    args.data_root = args.data_root.resolve()
    args.work_dir = args.work_dir or REPO / "runs" / ("balancing_quick" if args.quick else "balancing")
    args.work_dir = args.work_dir.resolve()  # experiments name paths relative to their folder
    args.work_dir.mkdir(parents=True, exist_ok=True)
    out = args.work_dir if args.quick else (args.results or REPO / "bench" / "results")
    log_file = open(args.work_dir / "log.txt", "a", encoding="utf-8")
    log = lambda message: (log_file.write(str(message) + "\n"), log_file.flush())
    started, cpu0 = time.time(), cpu_seconds()
    from mtl_framework.config.registry import load_registry
    registry = load_registry()
    types = {t: s.type for t, s in registry.tasks.items()}

    pilot = {"records": [], "held_out": {}, "table": {}, "chosen": None}
    pilot_root, pilot["held_out"] = pilot_data(args, registry, log)
    build_vocab(args, pilot_root, log)
    if args.tasks:
        tasks = args.tasks
    else:
        plan = [("single", (t,), s) for s in range(PILOT_SEEDS) for t in CANDIDATES]
        pilot["records"] = run_plan(plan, args.work_dir / "pilot.jsonl", args, log, started,
                                    lambda records: None, data_root=pilot_root, stage="pilot")
        tasks, pilot["table"] = choose_tasks(pilot["records"], types)
        pilot["chosen"] = tasks
        print("pilot's choice: " + ", ".join(f"{t} ({types[t]})" for t in tasks), flush=True)
        if len({types[t] for t in tasks}) < MIN_TYPES or len(tasks) < N_TASKS:
            report([], tasks, pilot, out, started, cpu0)
            raise SystemExit(f"the pilot found {len(tasks)} eligible tasks of "
                             f"{len({types[t] for t in tasks})} types; the study needs "
                             f"{N_TASKS} of {MIN_TYPES}: see {out / 'balancing.md'}")
    if args.pilot_only:
        report([], tasks, pilot, out, started, cpu0)
        return
    plan = [("single", (t,), s) for s in range(args.seeds) for t in tasks] + \
           [(m, tuple(tasks), s) for s in range(args.seeds) for m in ["none"] + METHODS[1:]]
    # seed by seed, baselines first: a study stopped in its last seed still pairs the
    # methods it finished there
    plan.sort(key=lambda arm: arm[2])
    records = run_plan(plan, args.work_dir / "rows.jsonl", args, log, started,
                       lambda records: report(records, tasks, pilot, out, started, cpu0))
    report(records, tasks, pilot, out, started, cpu0)


def report(records, tasks, pilot, out, started, cpu0):
    summary = summarize(records, tasks)
    wall = sum(r["wall_seconds"] for r in records + pilot["records"])
    b = BACKBONE
    setup = (f"RoFormerV2 L{b['num_layers']}-H{b['hidden_size']}-A{b['num_heads']}-"
             f"I{b['intermediate_size']} from scratch (dropout {b['dropout']}, vocab <= "
             f"{b['vocab_size']}); tasks {', '.join(tasks)} (full train splits); "
             f"{SCHEDULE['steps']} updates of batch size {SCHEDULE['batch_size']}: a mixture's "
             f"update is {len(tasks)} single-task micro-batches drawn uniformly, a single-task "
             "update one micro-batch of its task (the same examples per task in expectation, "
             f"as in LibMTL); max_length {SCHEDULE['max_length']}; "
             f"AdamW lr {SCHEDULE['optimizer']['lr']}, {SCHEDULE['optimizer']['warmup_steps']} "
             "warm-up updates then linear decay; every method with its default options. "
             f"Seeds {sorted({r['seed'] for r in records})}. "
             f"Dev: the first {EVAL_EXAMPLES} examples of each task, scored once at the last update.")
    loads = [r["load_average"][0] for r in records + pilot["records"] if r.get("load_average")]
    timing = (f"Runs: {len(pilot['records'])} pilot + {len(records)} study, {wall / 60:.1f} min of "
              "run wall time summed over them "
              f"(this invocation: {(time.time() - started) / 60:.1f} min wall, "
              f"{(cpu_seconds() - cpu0) / 60:.1f} CPU min of this process). 1-minute load average "
              f"after each run: {min(loads, default=0):.1f} to {max(loads, default=0):.1f} "
              "(the 2 cores are shared with other work: the cost column is noisy). "
              f"CPU: {cpu_model()}.")
    meta = {"setup": setup, "timing": timing, "tasks": tasks, "methods": METHODS,
            "schedule": SCHEDULE, "backbone": BACKBONE, "eval_examples": EVAL_EXAMPLES,
            "pilot": {"candidates": CANDIDATES, "held_out": pilot["held_out"], "table": pilot["table"],
                      "chosen": pilot["chosen"], "seeds": PILOT_SEEDS, "margin": MARGIN,
                      "floor": FLOOR, "n_tasks": N_TASKS, "min_types": MIN_TYPES,
                      "runs": pilot["records"]}}
    out.mkdir(parents=True, exist_ok=True)
    (out / "balancing.json").write_text(json.dumps(
        {**meta, **summary, "runs": records}, indent=1), encoding="utf-8")
    write_markdown(out / "balancing.md", summary, meta, tasks)
    plot(out / "balancing.png", summary)


if __name__ == "__main__":
    main()
