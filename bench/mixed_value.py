"""What mixed supervised training buys (issue 42): the study bench/mixed_value_design.md
fixes, run so that it can stop and go on over several sittings.

    PYTHONPATH=. .venv/bin/python -m bench.mixed_value [--data-root ../shared/data]
        [--work-dir runs/mixed_value] [--quick]

1. corpus (bench.pretraining_value.write_corpus) -> stage 1 (MLM from scratch) -> stage 2
   arms B, C, B4, B12, then A (its batch size matched to B's real tokens); D is stage 1.
   Each stage is `mtl train` (resumed from its checkpoint when stopped) + `mtl export`,
   skipped when its export exists.
2. zero-shot STS of every arm's export (bench/zero_shot.py, a child process).
3. fine-tunes by `mtl benchmark`, one call per (phase, seed, budget, target) with every arm
   of the phase: A and B seeds 0-7 first, then C, D, B4, B12 seeds 0-2. The 1,000-example
   budget reads a data root of fixed 1,000-example train subsets (WORK/data_1k).

Every finished (arm, seed, target, budget) is appended to ROWS (bench/results/mixed_value/
rows.jsonl; with --quick WORK/rows.jsonl) with the code's commit and the CPU model; rows
there are skipped on restart, and `mtl benchmark` resumes its own half-done calls. Beside
the rows, compute.json: every arm's stage compute (tokens, seconds, CPU seconds).
bench/mixed_value_report.py turns the rows into the figure and tables.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import yaml

from bench import REPO, child_env
from bench.load import cpu_model

STUDY = REPO / "experiments" / "mixed_value"
ROWS = REPO / "bench" / "results" / "mixed_value" / "rows.jsonl"
PHASES = (("primary", ("A", "B"), range(8)), ("secondary", ("C", "D", "B4", "B12"), range(3)))
STAGE2 = {"B": "stage2_B", "C": "stage2_C", "B4": "stage2_B4", "B12": "stage2_B12",
          "A": "stage2_A"}  # A last: its batch size follows B's tokens
BUDGETS = {"full": None, "1k": 1000}  # training examples (None: the whole train split)
SMALL_STEPS = 100  # updates at the 1,000-example budget (the suite's steps are full size)
SUBSET_SEED = 1234
ZERO_SHOT = "zero-shot"
QUICK = {"stage": {"steps": 6, "checkpoint_every": 6, "eval_every": 0},
         "targets": ("chnsenticorp", "cmrc2018"), "phases": (range(2), range(1)),
         "finetune": {"steps": 3, "dev_examples": 40}, "small_steps": 2,
         "corpus_limit": 500, "zero_shot_limit": 200}


# ------------------------------------------------------------------ rows


def row_key(row):
    """What makes a row unique: (arm, seed, target, budget)."""
    return (row["arm"], int(row["seed"]), row["target"], row["budget"])


def read_rows(path):
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def append_row(path, row):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, ensure_ascii=False) + "\n")


def finetune_groups(targets, phases=PHASES, budgets=BUDGETS):
    """The fine-tunes in the order they run: [(phase, seed, budget, target, arms)]."""
    return [(phase, seed, budget, target, arms) for phase, arms, seeds in phases
            for seed in seeds for budget in budgets for target in targets]


def missing_arms(group, done):
    _, seed, budget, target, arms = group
    return [arm for arm in arms if (arm, seed, target, budget) not in done]


def provenance():
    """The code's commit (and whether bench/, mtl_framework/ or the study's files differ
    from it), the CPU model: recorded in every row, read each time (the fine-tunes are child
    processes that import the checkout as it is when they start)."""
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "bench", "mtl_framework",
                            "experiments/mixed_value", ":(exclude)bench/results"],
                           cwd=REPO, capture_output=True, text=True).stdout.strip()
    return {"commit": commit, "dirty": bool(dirty), "machine": cpu_model(),
            "cores": os.cpu_count()}


# ------------------------------------------------------------------ child processes


def children_cpu():
    times = os.times()
    return times.children_user + times.children_system


def run(command, log):
    """A child process (python -m ...), its output appended to the study's log."""
    print("$ " + " ".join(map(str, command)), flush=True)
    with open(log, "a", encoding="utf-8") as out:
        out.write("$ " + " ".join(map(str, command)) + "\n")
        out.flush()
        result = subprocess.run([sys.executable, *map(str, command)], cwd=REPO, stdout=out,
                                stderr=subprocess.STDOUT, env=child_env(TF_CPP_MIN_LOG_LEVEL="2"))
    if result.returncode:
        raise SystemExit(f"`{' '.join(map(str, command[:3]))}` failed (exit "
                         f"{result.returncode}): see {log}")


def mtl(*args, log):
    run(["-m", "mtl_framework", *args], log)


# ------------------------------------------------------------------ stages


def experiment(name, work, data_root, overrides):
    """The study's stage YAML, its `extends` merged, paths pointed into the work folder."""
    from bench.pretraining_value import resolved_yaml

    config = resolved_yaml(STUDY / f"{name}.yaml")
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


def train_and_export(name, work, data_root, overrides, log):
    """WORK/NAME trained and exported (keras) unless its export exists; a stopped run is
    resumed from its checkpoint. Records its seconds and CPU seconds in WORK/stages.json."""
    run_dir, record = work / name, work / "stages.json"
    export = run_dir / "export"
    if (export / "config.json").exists():
        print(f"{name}: done before ({export})", flush=True)
        return run_dir
    path = experiment(name, work, data_root, overrides)
    mtl("data", "prepare", path, log=log)
    started, cpu = time.time(), children_cpu()
    resume = ["--resume"] if (run_dir / "checkpoints").is_dir() else []
    mtl("train", path, "--output", run_dir, *resume, log=log)
    mtl("export", run_dir, "--format", "keras", "--output", export, log=log)
    stages = json.loads(record.read_text()) if record.exists() else {}
    stages[name] = {"wall_s": round(time.time() - started), "cpu_s": round(children_cpu() - cpu),
                    "resumed": bool(resume)}
    record.write_text(json.dumps(stages, indent=1))
    return run_dir


def a_batch_size(work, steps):
    """Arm A's batch size: as many real tokens as arm B, at stage 1's tokens per MLM row."""
    from bench.pretraining_value import metrics, resolved_yaml

    stage1, spec1 = metrics(work / "stage1"), resolved_yaml(STUDY / "stage1.yaml")
    row_tokens = stage1["tokens"] / (stage1["micro_batches"] * spec1["batch_size"])
    tokens_b = metrics(work / STAGE2["B"])["tokens"]
    per_update = resolved_yaml(STUDY / "stage2_A.yaml")["tasks_per_update"]
    return max(1, round(tokens_b / (steps * per_update * row_tokens)))


def write_compute(exports, work, path):
    """The compute of every arm's stage 2 (and stage 1), beside the rows: updates,
    micro-batches, real tokens (metrics.jsonl), seconds and CPU seconds, A's batch size."""
    from bench.pretraining_value import metrics

    record = json.loads((work / "stages.json").read_text()) if (work / "stages.json").exists() else {}
    compute = {}
    for arm, export in exports.items():
        name = export.parent.name
        spec = yaml.safe_load((work / "experiments" / f"{name}.yaml").read_text(encoding="utf-8"))
        compute[arm] = {"stage": name, **metrics(export.parent), **record.get(name, {}),
                        "batch_size": spec["batch_size"], "tasks": len(spec["tasks"])}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"compute": compute, **provenance()}, indent=1), encoding="utf-8")


def stages(work, data_root, quick, log):
    """{arm: export folder}, every stage trained and exported."""
    overrides = QUICK["stage"] if quick else {}
    exports = {"D": train_and_export("stage1", work, data_root, overrides, log) / "export"}
    for arm, name in STAGE2.items():
        extra = {}
        if arm == "A":
            from bench.pretraining_value import resolved_yaml

            steps = overrides.get("steps", resolved_yaml(STUDY / "stage2_A.yaml")["steps"])
            extra = {"batch_size": a_batch_size(work, steps)}
        exports[arm] = train_and_export(name, work, data_root, {**overrides, **extra}, log) / "export"
    return exports


# ------------------------------------------------------------------ 1,000-example data


def _sample(items, size):
    """The first `size` of one fixed shuffle of the indices (SUBSET_SEED), in file order: a
    larger size keeps every index a smaller one chose."""
    order = list(range(len(items)))
    random.Random(SUBSET_SEED).shuffle(order)
    return sorted(order[:size])


def subset_file(source, target, size):
    """SOURCE's train file cut to `size` examples chosen at random (SUBSET_SEED): a SQuAD
    JSON (cmrc2018) by question, any other file by line (one example a line)."""
    text = source.read_text(encoding="utf-8")
    if source.suffix == ".json" and text.lstrip().startswith("{") and '"data"' in text[:200]:
        document = json.loads(text)
        questions = [(a, p, q) for a, article in enumerate(document["data"])
                     for p, paragraph in enumerate(article["paragraphs"])
                     for q in range(len(paragraph["qas"]))]
        keep = {questions[i] for i in _sample(questions, size)}
        for a, article in enumerate(document["data"]):
            for p, paragraph in enumerate(article["paragraphs"]):
                paragraph["qas"] = [qa for q, qa in enumerate(paragraph["qas"]) if (a, p, q) in keep]
            article["paragraphs"] = [p for p in article["paragraphs"] if p["qas"]]
        document["data"] = [a for a in document["data"] if a["paragraphs"]]
        target.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
        return
    lines = [line for line in text.splitlines() if line.strip()]
    target.write_text("".join(lines[i] + "\n" for i in _sample(lines, size)), encoding="utf-8")


def small_data_root(work, data_root, targets, size):
    """WORK/data_1k: per target dataset, its train file cut to `size` examples, every other
    file a symlink. Checked: the framework reads exactly `size` train examples (a line that
    reads as no example is replaced by drawing more)."""
    from data_adapters import read_task
    from mtl_framework.registry import load_registry

    root = work / "data_1k"
    registry = load_registry(None)
    for name in targets:
        task = registry.tasks[name]
        train = task.files["train"]
        source = data_root / train
        folder = (root / train).parent
        if (root / train).exists() and sum(1 for _ in read_task(task, "train", root)) == size:
            continue
        folder.mkdir(parents=True, exist_ok=True)
        for path in (data_root / train).parent.iterdir():
            link = folder / path.name
            if path.name != Path(train).name and not link.exists():
                link.symlink_to(path)
        want = size
        for _ in range(5):
            subset_file(source, root / train, want)
            count = sum(1 for _ in read_task(task, "train", root))
            if count >= size:
                break
            want += size - count
        if count != size:
            raise SystemExit(f"{name}: {root / train} reads as {count} examples, not {size}")
        print(f"1k data: {name}: {count} train examples in {root / train}", flush=True)
    return root


# ------------------------------------------------------------------ fine-tunes


def group_suite(work, suite, target, seed, budget, quick):
    """A one-task, one-seed copy of the study's suite for one benchmark call."""
    entry = next(t for t in suite["tasks"] if (t if isinstance(t, str) else t["name"]) == target)
    entry = {"name": entry} if isinstance(entry, str) else dict(entry)
    if budget != "full":
        entry["steps"] = QUICK["small_steps"] if quick else SMALL_STEPS
    defaults = {**suite["defaults"], **(QUICK["finetune"] if quick else {})}
    if quick and budget == "full":
        entry["steps"] = QUICK["finetune"]["steps"]
    path = work / "suites" / f"{budget}-{target}-seed{seed}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    config = {"description": f"mixed value: {target}, {budget}, seed {seed}", "seeds": [seed],
              "defaults": defaults, "tasks": [entry]}
    path.write_text(yaml.safe_dump(config, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def run_group(group, exports, roots, work, suite, quick, rows_path, log):
    phase, seed, budget, target, arms = group
    output = work / "finetune" / phase / f"seed-{seed}" / budget / target
    suite_path = group_suite(work, suite, target, seed, budget, quick)
    started, cpu = time.time(), children_cpu()
    mtl("benchmark", *[exports[arm] for arm in arms], "--suite", suite_path, "--data-root",
        roots[budget], "--output", output, "--cache-dir", work / "cache_finetune", log=log)
    cpu_each = (children_cpu() - cpu) / len(arms)
    arm_of = {str(Path(exports[arm]).resolve()): arm for arm in arms}
    done = {row_key(r) for r in read_rows(rows_path)}
    for result in read_rows(output / "rows.jsonl"):
        arm = arm_of.get(str(Path(result["export"]).resolve()))
        row = {"arm": arm, "seed": result["seed"], "target": result["task"], "budget": budget,
               "score": result["score"], "metric": result["metric"],
               "baseline": result["baseline"], "examples": result["examples"],
               "settings": result["settings"], "start": result.get("start"),
               "wall_s": result["wall_s"], "cpu_s_share": round(cpu_each, 1),
               "time": round(time.time()), **provenance()}
        if arm and row_key(row) not in done:
            append_row(rows_path, row)
            done.add(row_key(row))
            print(f"row: {arm} seed {seed} {target} {budget}: {row['metric']} "
                  f"{row['score']:.4f} (floor {row['baseline']})", flush=True)
    print(f"group {phase} seed {seed} {budget} {target}: {time.time() - started:.0f} s", flush=True)


def zero_shot(exports, work, data_root, quick, rows_path, log):
    done = {row_key(r) for r in read_rows(rows_path)}
    from bench.zero_shot import SETS

    for arm, export in exports.items():
        if all((arm, 0, name, ZERO_SHOT) in done for name in SETS):
            continue
        output = work / "zero_shot" / f"{arm}.json"
        output.parent.mkdir(parents=True, exist_ok=True)
        limit = ["--limit", QUICK["zero_shot_limit"]] if quick else []
        cpu = children_cpu()
        run(["-m", "bench.zero_shot", export, "--data-root", data_root, "--output", output,
             *limit], log)
        cpu_s = round(children_cpu() - cpu, 1)
        for name, result in json.loads(output.read_text()).items():
            row = {"arm": arm, "seed": 0, "target": name, "budget": ZERO_SHOT,
                   "score": result["score"], "metric": "spearman_cosine",
                   "examples": result["examples"], "bootstrap": result["bootstrap"],
                   "cpu_s_share": cpu_s, "time": round(time.time()), **provenance()}
            if row_key(row) not in done:
                append_row(rows_path, row)
                print(f"row: {arm} zero-shot {name}: {result['score']:.4f}", flush=True)


def early_gate(rows_path):
    """A's seed-0 scores against their floors, printed as soon as they exist (the gate
    itself is decided by the report over all of A's seeds)."""
    for row in read_rows(rows_path):
        if row["arm"] == "A" and row["seed"] == 0 and row["budget"] != ZERO_SHOT:
            floor = row["baseline"] or 0.0
            flag = "ok" if row["score"] >= floor + 0.05 else "BELOW GATE"
            print(f"gate (A, seed 0): {row['target']} {row['budget']}: {row['score']:.4f} vs "
                  f"floor {floor:.4f}: {flag}", flush=True)


# ------------------------------------------------------------------ main


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-root", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--quick", action="store_true",
                        help="smoke check of the pipeline: rows under the work folder only")
    args = parser.parse_args(argv)
    data_root = Path(args.data_root).resolve()
    default_work = "runs/mixed_value_quick" if args.quick else "runs/mixed_value"
    work = Path(args.work_dir or REPO / default_work).resolve()
    rows_path = work / "rows.jsonl" if args.quick else ROWS
    work.mkdir(parents=True, exist_ok=True)
    log = work / "study.log"
    print(f"mixed value: work {work}, rows {rows_path}, {provenance()}", flush=True)

    if not (work / "corpus.json").exists():
        from bench.pretraining_value import write_corpus

        limit = QUICK["corpus_limit"] if args.quick else None
        counts = write_corpus(data_root, work / "corpus", limit=limit)
        (work / "corpus.json").write_text(json.dumps(counts, indent=1))
    exports = stages(work, data_root, args.quick, log)
    write_compute(exports, work, rows_path.parent / "compute.json")
    zero_shot(exports, work, data_root, args.quick, rows_path, log)

    suite = yaml.safe_load((STUDY / "suite.yaml").read_text(encoding="utf-8"))
    targets = [t if isinstance(t, str) else t["name"] for t in suite["tasks"]]
    phases = PHASES
    if args.quick:
        targets = list(QUICK["targets"])
        phases = tuple((name, arms, seeds) for (name, arms, _), seeds in
                       zip(PHASES, QUICK["phases"]))
    roots = {"full": data_root, "1k": small_data_root(work, data_root, targets, BUDGETS["1k"])}
    groups = finetune_groups(targets, phases)
    for number, group in enumerate(groups, 1):
        done = {row_key(r) for r in read_rows(rows_path)}
        arms = missing_arms(group, done)
        if not arms:
            continue
        print(f"[{number}/{len(groups)}] {group[0]} seed {group[1]} {group[2]} {group[3]}: "
              f"{', '.join(arms)}", flush=True)
        run_group(group, exports, roots, work, suite, args.quick, rows_path, log)
        if group[1] == 0 and "A" in arms:
            early_gate(rows_path)
    print(f"mixed value: all {len(groups)} groups done; rows in {rows_path}", flush=True)


if __name__ == "__main__":
    main()
