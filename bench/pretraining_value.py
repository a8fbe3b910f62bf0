"""What does mixed supervised pretraining buy? The RoFormerV2 paper's two-stage
recipe at the scale of 2 CPU cores, with held-out tasks fine-tuned by `mtl benchmark`.

    .venv/bin/python -m bench.pretraining_value [--data-root ../shared/data]
        [--work-dir runs/pretraining_value] [--quick]

Stages (each skipped when its export already exists, so a stopped study goes on):
1. corpus: the train text of every dataset in the data root with a train file,
   one text per line (`text_lines`), one file per dataset;
2. stage 1 (experiments/pretraining_value/stage1.yaml): a small RoFormerV2 from
   scratch, MLM only on that corpus, residual alpha warm-up on; exported (keras);
3. stage 2 from the stage-1 export, three arms of equal compute (same updates and
   micro-batches; arm A's batch size is set so that its real tokens match arm B's):
   A MLM only, continued; B every task with real train data except the held-out
   ones + MLM at a pinned rate, `gradient_norm`; C = B with `balancing: none`;
   D is the stage-1 export itself (no stage 2). B and C score every stage-2 task
   on dev at their last update (evaluations.jsonl, against the majority baseline);
4. `mtl benchmark` fine-tunes the four exports on the held-out suite
   (experiments/pretraining_value/heldout_suite.yaml), the same seeds, head init
   and batch order for every arm;
5. bench/results/pretraining_value.{json,md,png}: every fine-tune score as rows
   {arm, task, seed, score}, the mean and 95% t-interval per arm and task, the
   paired differences B-A, B-C, B-D per task and for the suite mean (per seed, the
   mean over tasks) with 95% t-intervals, the compute of each arm, and the stage-2
   dev scores beside their baselines.

--quick is a smoke check of the whole pipeline (a few updates per stage, two
tasks, two seeds) in runs/pretraining_value_quick; its results are written there,
never to bench/results. The held-out dev sets are only scored, never tuned on.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from bench import REPO, child_env
from bench.load import cpu_model, load_average
from bench.runs import interval

STUDY = REPO / "experiments" / "pretraining_value"
ARMS = {
    "A": "MLM only, continued from stage 1",
    "B": "mixed supervised (19 tasks) + MLM pinned at 0.2, gradient_norm",
    "C": "as B, balancing none",
    "D": "no stage 2 (the stage-1 export)",
}
PAIRS = (("B", "A"), ("B", "C"), ("B", "D"))


def mtl(*args, log):
    """Run an `mtl` command in a child process (its output goes to the study's log)."""
    command = [sys.executable, "-m", "mtl_framework.cli", *map(str, args)]
    print("$ mtl " + " ".join(map(str, args)), flush=True)
    with open(log, "a", encoding="utf-8") as out:
        out.write("$ mtl " + " ".join(map(str, args)) + "\n")
        out.flush()
        result = subprocess.run(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                env=child_env(TF_CPP_MIN_LOG_LEVEL="2"))
    if result.returncode:
        raise SystemExit(f"`mtl {args[0]}` failed (exit {result.returncode}): see {log}")


# ------------------------------------------------------------------ stage inputs


def write_corpus(data_root, folder, limit=None):
    """One text file per dataset with a train file here: every text of its train split
    (the first `limit` texts of each with --quick)."""
    from data_adapters import read_task
    from mtl_framework.config.registry import load_registry
    from mtl_framework.tokenizer import example_texts

    folder.mkdir(parents=True, exist_ok=True)
    counts, seen = {}, set()
    for task in load_registry(None).tasks.values():
        files = task.files.get("train")
        files = tuple(files if isinstance(files, list) else [files]) if files else ()
        if not files or files in seen or not all((data_root / f).exists() for f in files):
            continue
        seen.add(files)
        target = folder / f"{task.dataset}-{task.name}.txt"
        lines = 0
        with open(target, "w", encoding="utf-8") as out:
            for example in read_task(task, "train", data_root):
                if limit and lines >= limit:
                    break
                for text in example_texts(example):
                    text = " ".join(text.split())
                    if text:
                        out.write(text + "\n")
                        lines += 1
        counts[target.name] = lines
        print(f"corpus: {target.name}: {lines:,} texts", flush=True)
    return counts


def resolved_yaml(path):
    """A stage file as a mapping, its `extends` chain merged (stage2_C extends stage2_B)."""
    from mtl_framework.config.experiment import load_experiment

    return load_experiment(str(path)).raw


def experiment(name, work, data_root, overrides, study=STUDY):
    """The study's YAML (`study`/NAME.yaml, its `extends` merged) with its paths pointed
    into the work folder (and --quick's budget); returns the path written."""
    config = resolved_yaml(study / f"{name}.yaml")
    config["data_root"] = str(data_root)
    config["cache_dir"] = str(work / "cache")
    if "init" in config.get("backbone", {}):
        config["backbone"]["init"] = str(work / "stage1" / "export")
    for entry in config["tasks"]:
        if isinstance(entry, dict) and "corpus" in entry:
            entry["corpus"] = str(work / "corpus")
    config.update(overrides)
    path = work / "experiments" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def metrics(run_dir):
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").open(encoding="utf-8")]
    return {"updates": len(lines),
            "micro_batches": sum(s["count"] for line in lines for s in line["tasks"].values()),
            "tokens": sum(line.get("tokens", 0) for line in lines),
            "first_update_time": lines[0]["time"] if lines else None,
            "last_update_time": lines[-1]["time"] if lines else None}


def train_and_export(name, work, data_root, overrides, log):
    """(run directory, seconds `mtl train` took); a stage exported before is not run again,
    and its seconds are read back from the study's record of them (None if none)."""
    run_dir = work / name
    export = run_dir / "export"
    record = work / "train_seconds.json"
    seconds = json.loads(record.read_text()) if record.exists() else {}
    if (export / "config.json").exists():
        print(f"{name}: done before ({export})", flush=True)
        return run_dir, seconds.get(name)
    path = experiment(name, work, data_root, overrides)
    # a warm cache first, so that an arm's wall time is its training alone
    mtl("data", "prepare", path, log=log)
    started = time.time()
    resume = ["--resume"] if (run_dir / "checkpoints").is_dir() else []
    mtl("train", path, "--output", run_dir, *resume, log=log)
    wall = time.time() - started
    record.write_text(json.dumps({**seconds, name: wall}, indent=1))
    mtl("export", run_dir, "--format", "keras", "--output", export, log=log)
    return run_dir, wall


# ------------------------------------------------------------------ report


def summarise(rows, arms, tasks):
    summary, paired = [], []
    by = {(r["arm"], r["task"], r["seed"]): r["score"] for r in rows}
    seeds = sorted({r["seed"] for r in rows})
    for arm in arms:
        for task in tasks:
            values = [by[(arm, task, s)] for s in seeds if (arm, task, s) in by]
            if values:
                mean, ci = interval(values)
                summary.append({"arm": arm, "task": task, "mean": mean, "ci95": ci, "n": len(values)})
    for first, second in PAIRS:
        if first not in arms or second not in arms:
            continue
        for task in tasks + ["suite mean"]:
            if task == "suite mean":
                diffs = [sum(by[(first, t, s)] - by[(second, t, s)] for t in tasks) / len(tasks)
                         for s in seeds]
            else:
                diffs = [by[(first, task, s)] - by[(second, task, s)] for s in seeds]
            mean, ci = interval(diffs)
            paired.append({"pair": f"{first}-{second}", "task": task, "mean": mean, "ci95": ci,
                           "differences": diffs})
    return summary, paired


def fmt(mean, ci, scale=100):
    if ci is None:
        return f"{scale * mean:.1f}"
    return f"{scale * mean:.1f} ± {scale * (ci[1] - ci[0]) / 2:.1f}"


def write_report(result, output):
    tasks, arms = result["tasks"], result["arms"]
    summary = {(s["arm"], s["task"]): s for s in result["summary"]}
    lines = ["# Pretraining value (bench/pretraining_value.py)", "",
             "Held-out fine-tuning scores x 100 (mean ± half of the 95% t-interval over "
             f"{len(result['seeds'])} seeds; accuracy, Spearman, span F1):", "",
             "| arm | " + " | ".join(tasks) + " | mean |", "|---" * (len(tasks) + 2) + "|"]
    for arm in arms:
        cells = [fmt(summary[(arm, t)]["mean"], summary[(arm, t)]["ci95"]) for t in tasks]
        suite = [sum(r["score"] for r in result["rows"] if r["arm"] == arm and r["seed"] == s)
                 / len(tasks) for s in result["seeds"]]
        lines.append(f"| {arm}: {ARMS[arm]} | " + " | ".join(cells) + f" | {fmt(*interval(suite))} |")
    lines += ["", "Paired differences x 100 (same seeds, head init and batch order), 95% t-interval:",
              "", "| pair | " + " | ".join(tasks + ["suite mean"]) + " |",
              "|---" * (len(tasks) + 2) + "|"]
    for pair in sorted({p["pair"] for p in result["paired"]}):
        cells = []
        for task in tasks + ["suite mean"]:
            p = next(x for x in result["paired"] if x["pair"] == pair and x["task"] == task)
            ci = p["ci95"]
            cells.append(f"{100 * p['mean']:+.1f} [{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]"
                         if ci else f"{100 * p['mean']:+.1f}")
        lines.append(f"| {pair} | " + " | ".join(cells) + " |")
    lines += ["", "Compute per arm:", "", "| arm | updates | micro-batches | real tokens | wall s |",
              "|---|---|---|---|---|"]
    for arm, c in result["compute"].items():
        lines.append(f"| {arm} | {c.get('updates', '-')} | {c.get('micro_batches', '-')} | "
                     f"{c.get('tokens', 0):,} | {c.get('wall_seconds') or '-'} |")
    for arm in ("B", "C"):
        dev = result["stage2_dev"].get(arm)
        if not dev:
            continue
        lines += ["", f"Stage-2 dev scores after arm {arm} (first {dev['max_examples']} examples "
                      "per task; majority baseline beside):", "",
                  "| task | metric | score | baseline |", "|---|---|---|---|"]
        for task, e in dev["tasks"].items():
            score = "-" if e.get("score") is None else f"{e['score']:.3f}"
            base = "-" if e.get("baseline") is None else f"{e['baseline']:.3f}"
            lines.append(f"| {task} | {e.get('metric')} | {score} | {base} |")
    (output.with_suffix(".md")).write_text("\n".join(lines) + "\n", encoding="utf-8")


def plot(result, path):
    """Left: held-out scores per arm and task (mean, 95% interval over seeds); right: the
    paired differences B-A, B-C, B-D per task and for the suite mean, with a zero line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks, arms = result["tasks"], result["arms"]
    summary = {(s["arm"], s["task"]): s for s in result["summary"]}
    half = lambda ci: (ci[1] - ci[0]) / 2 if ci else 0  # noqa: E731
    width = 0.8 / len(arms)
    fig, (scores, diffs) = plt.subplots(1, 2, figsize=(4 + 2.6 * len(tasks), 4.6))
    for i, arm in enumerate(arms):
        cells = [summary[(arm, t)] for t in tasks]
        scores.bar([x + i * width for x in range(len(tasks))], [c["mean"] for c in cells], width,
                   yerr=[half(c["ci95"]) for c in cells], capsize=3, label=f"{arm}: {ARMS[arm]}")
    scores.set_xticks([x + width * (len(arms) - 1) / 2 for x in range(len(tasks))], tasks)
    scores.set_ylabel("dev score after fine-tuning")
    scores.set_title("Held-out tasks: mean, 95% interval over seeds", fontsize=10)
    scores.axhline(0, color="black", linewidth=0.5)
    scores.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2)
    columns = tasks + ["suite mean"]
    pairs = sorted({p["pair"] for p in result["paired"]})
    step = 0.8 / max(1, len(pairs))
    for i, pair in enumerate(pairs):
        cells = [next(p for p in result["paired"] if p["pair"] == pair and p["task"] == t)
                 for t in columns]
        diffs.errorbar([x + i * step for x in range(len(columns))], [100 * c["mean"] for c in cells],
                       yerr=[100 * half(c["ci95"]) for c in cells], fmt="o", capsize=3, label=pair)
    diffs.axhline(0, color="black", linewidth=0.8)
    diffs.set_xticks([x + step * (len(pairs) - 1) / 2 for x in range(len(columns))], columns)
    diffs.set_ylabel("paired difference (points)")
    diffs.set_title("Paired differences, 95% interval", fontsize=10)
    diffs.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ------------------------------------------------------------------ main


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-root", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--quick", action="store_true", help="smoke check of the pipeline")
    parser.add_argument("--report-from", metavar="JSON",
                        help="only rewrite the .md and .png beside an earlier result JSON")
    args = parser.parse_args()
    if args.report_from:
        output = Path(args.report_from)
        result = json.loads(output.read_text(encoding="utf-8"))
        write_report(result, output)
        plot(result, output.with_suffix(".png"))
        return
    data_root = Path(args.data_root).resolve()
    work = Path(args.work_dir or REPO / ("runs/pretraining_value_quick" if args.quick
                                         else "runs/pretraining_value")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    log = work / "study.log"
    started, load_before = time.time(), load_average()
    quick = {"steps": 6, "checkpoint_every": 6, "eval_every": 6, "eval_batches": 1} if args.quick else {}

    if not (work / "corpus").is_dir() or not any((work / "corpus").iterdir()):
        corpus = write_corpus(data_root, work / "corpus", limit=500 if args.quick else None)
        (work / "corpus.json").write_text(json.dumps(corpus, indent=1))
    corpus = json.loads((work / "corpus.json").read_text())

    compute, wall = {}, {}
    stage1, wall["stage1"] = train_and_export("stage1", work, data_root,
                                              {**quick, "eval_every": 0}, log)
    compute["stage1"] = {**metrics(stage1),
                         "wall_seconds": wall["stage1"] and round(wall["stage1"])}
    runs = {}
    for arm in ("B", "C"):
        runs[arm], wall[arm] = train_and_export(f"stage2_{arm}", work, data_root, quick, log)
    tokens_b = metrics(runs["B"])["tokens"]
    spec_a = resolved_yaml(STUDY / "stage2_A.yaml")
    s1 = compute["stage1"]
    row_tokens = s1["tokens"] / (s1["micro_batches"] * 32)  # stage 1 ran batches of 32 MLM rows
    steps = quick.get("steps", spec_a["steps"])
    batch_a = max(1, round(tokens_b / (steps * spec_a["tasks_per_update"] * row_tokens)))
    runs["A"], wall["A"] = train_and_export("stage2_A", work, data_root,
                                            {**quick, "batch_size": batch_a}, log)
    for arm in ("A", "B", "C"):
        compute[arm] = {**metrics(runs[arm]), "wall_seconds": wall[arm] and round(wall[arm])}
    compute["A"]["batch_size"] = batch_a
    compute["D"] = {"updates": 0, "micro_batches": 0, "tokens": 0, "wall_seconds": None}

    stage2_dev = {}
    for arm in ("B", "C"):
        from mtl_framework.rundir import RunDir

        last = [line for line in RunDir(runs[arm]).read_evaluations() if line["split"] == "dev"][-1]
        config = yaml.safe_load((work / "experiments" / f"stage2_{arm}.yaml").read_text())
        stage2_dev[arm] = {"step": last["step"], "tasks": last["tasks"],
                           "max_examples": config["eval_batches"] * config["batch_size"]}

    exports = {"A": runs["A"] / "export", "B": runs["B"] / "export", "C": runs["C"] / "export",
               "D": stage1 / "export"}
    suite = STUDY / "heldout_suite.yaml"
    if args.quick:
        config = yaml.safe_load(suite.read_text(encoding="utf-8"))
        config.update(seeds=[0, 1], tasks=config["tasks"][:2])
        config["defaults"]["steps"] = 4
        suite = work / "experiments" / "heldout_suite.yaml"
        suite.write_text(yaml.safe_dump(config, allow_unicode=True, sort_keys=False))
    benchmark_started = time.time()
    mtl("benchmark", *exports.values(), "--suite", suite, "--data-root", data_root,
        "--output", work / "benchmark", log=log)
    bench = json.loads((work / "benchmark" / "results.json").read_text(encoding="utf-8"))
    arm_of = {str(Path(p).resolve()): arm for arm, p in exports.items()}
    rows = [{"arm": arm_of[str(Path(r["export"]).resolve())], "task": r["task"],
             "seed": r["seed"], "score": r["score"]} for r in bench["rows"]]
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    arms = list(exports)
    summary, paired = summarise(rows, arms, tasks)
    result = {
        "arms": arms, "arm_descriptions": ARMS, "tasks": tasks,
        "seeds": sorted({r["seed"] for r in rows}), "rows": rows, "summary": summary,
        "paired": paired, "compute": compute, "stage2_dev": stage2_dev, "corpus": corpus,
        "experiments": {p.stem: yaml.safe_load(p.read_text()) for p in
                        sorted((work / "experiments").glob("*.yaml"))},
        "benchmark_seconds": round(time.time() - benchmark_started),
        "seconds": round(time.time() - started), "quick": args.quick,
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(),
                    "load_average_before": load_before, "load_average_after": load_average()},
    }
    output = (work if args.quick else REPO / "bench" / "results") / "pretraining_value.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=1, ensure_ascii=False, default=float))
    write_report(result, output)
    plot(result, output.with_suffix(".png"))
    print(output.with_suffix(".md").read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
