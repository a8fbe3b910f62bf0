"""What the contrastive family buys at the demo's scale (issue 43 point 6, "Gain"), 3 seeds.

    PYTHONPATH=. .venv/bin/python -m bench.embedding_gain [--data-root ../shared/data]
        [--work-dir runs/embedding_gain]

Three arms, each the demo experiment (experiments/demo.yaml: its backbone, 240 updates,
float32, the demo's bundled samples) at seeds 0, 1, 2:

- supervised: the demo's mixture as it is (tnews, chnsenticorp, cluener, afqmc, cluewsc, mlm);
- supervised+contrastive: the same mixture plus afqmc_sts (CoSENT) and cmrc2018_retrieval
  (InfoNCE, in-batch negatives), whose data the demo bundles, at rates 0.1 each;
- contrastive: those two contrastive tasks and mlm alone (mlm keeps the texts' language
  modelling in every arm).

Every run is scored zero-shot on suites/embeddings.yaml against the full dev sets of the data
root (`mtl benchmark --suite`, one call per seed with its three runs: paired intervals).
The figures: per seed the suite mean of each arm; the paired differences
(supervised+contrastive - supervised: does adding the family help the embedding?
supervised+contrastive - contrastive: does mixing help it?) with their mean over the seeds
and a t interval (t = 4.30 at 2 degrees of freedom), and each seed's bootstrap interval.
Runs and scores are kept in the work folder and skipped when present: the study resumes.
Output: bench/results/embedding_gain.json.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

from bench import REPO, child_env
from bench.load import cpu_model

OUTPUT = REPO / "bench" / "results" / "embedding_gain.json"
SEEDS = (0, 1, 2)
CONTRASTIVE = [{"name": "afqmc_sts", "rate": 0.1}, {"name": "cmrc2018_retrieval", "rate": 0.1}]
T_975_DF2 = 4.302652729911275  # scipy.stats.t.ppf(0.975, 2)


def arms():
    demo = yaml.safe_load((REPO / "experiments" / "demo.yaml").read_text(encoding="utf-8"))
    supervised = demo["tasks"]
    mlm = [t for t in supervised if t["name"] == "mlm"]
    return {"supervised": supervised, "supervised+contrastive": supervised + CONTRASTIVE,
            "contrastive": CONTRASTIVE + mlm}, demo


def experiment(demo, tasks, seed, cache):
    return {**demo, "name": None, "tasks": tasks, "seed": seed,
            "data_root": str(REPO / "experiments" / "demo" / "data"), "cache_dir": str(cache),
            "eval_every": 0, "checkpoint_every": demo["steps"]}


def mtl(*args, log):
    command = [sys.executable, "-m", "mtl_framework", *map(str, args)]
    print("$", " ".join(command[1:]), flush=True)
    with open(log, "ab") as out:
        done = subprocess.run(command, cwd=REPO, env=child_env(TF_CPP_MIN_LOG_LEVEL="2"),
                              stdout=out, stderr=subprocess.STDOUT)
    if done.returncode:
        raise SystemExit(f"failed ({done.returncode}): see {log}")


def train(work, name, config):
    run = work / name
    if (run / "checkpoints").is_dir() and any((run / "checkpoints").glob("step-*")):
        return run, None
    path = work / f"{name}.json"
    path.write_text(json.dumps({k: v for k, v in config.items() if v is not None}), encoding="utf-8")
    start = time.time()
    mtl("train", path, "--output", run, log=work / "train.log")
    return run, time.time() - start


def paired(values):
    values = np.asarray(values, np.float64)
    half = T_975_DF2 * values.std(ddof=1) / np.sqrt(len(values))
    return {"per_seed": values.tolist(), "mean": float(values.mean()),
            "interval": [float(values.mean() - half), float(values.mean() + half)]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-root", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--work-dir", default=str(REPO / "runs" / "embedding_gain"))
    args = parser.parse_args()
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    tasks, demo = arms()
    seconds, suites = {}, {}
    for seed in SEEDS:
        runs = []
        for arm, arm_tasks in tasks.items():
            name = f"{arm.replace('+', '_and_')}-seed{seed}"
            run, took = train(work, name, experiment(demo, arm_tasks, seed, work / "cache"))
            if took is not None:
                seconds[name] = round(took, 1)
            runs.append(run)
        scored = work / f"suite-seed{seed}"
        if not (scored / "results.json").exists():
            mtl("benchmark", *runs, "--suite", REPO / "suites" / "embeddings.yaml",
                "--data-root", args.data_root, "--output", scored, log=work / "suite.log")
        suites[seed] = json.loads((scored / "results.json").read_text(encoding="utf-8"))
    names = list(tasks)
    per_seed = {arm: [] for arm in names}
    per_task = {}
    for seed, results in suites.items():
        for arm, model in zip(names, results["models"]):
            per_seed[arm].append(results["summary"][model]["mean"])
            for row in (r for r in results["rows"] if r["model"] == model):
                per_task.setdefault(row["task"], {}).setdefault(arm, []).append(row["score"])
    comparisons = {"supervised+contrastive - supervised": ("supervised+contrastive", "supervised"),
                   "supervised+contrastive - contrastive": ("supervised+contrastive", "contrastive")}
    figures = {}
    for label, (first, second) in comparisons.items():
        bootstrap = []
        for seed, results in suites.items():
            a, b = (results["models"][names.index(first)], results["models"][names.index(second)])
            entry = next(d for d in results["differences"]
                         if {d["first"], d["second"]} == {a, b})
            low, high = entry["interval"]  # of entry's first minus its second
            bootstrap.append([low, high] if entry["first"] == a else [-high, -low])
        figures[label] = {**paired(np.subtract(per_seed[first], per_seed[second])),
                          "bootstrap_interval_per_seed": bootstrap,
                          "per_task_mean_difference": {
                              task: float(np.mean(np.subtract(v[first], v[second])))
                              for task, v in per_task.items()}}
    result = {"benchmark": "embedding_gain", "issue": 43, "suite": "suites/embeddings.yaml",
              "arms": {arm: [t["name"] for t in arm_tasks] for arm, arm_tasks in tasks.items()},
              "seeds": list(SEEDS), "steps": demo["steps"], "precision": demo.get("precision"),
              "suite_mean_per_seed": per_seed,
              "per_task_mean": {task: {arm: float(np.mean(v)) for arm, v in arms_.items()}
                                for task, arms_ in per_task.items()},
              "differences": figures, "train_seconds": seconds,
              "commit": subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO,
                                       capture_output=True, text=True).stdout.strip(),
              "machine": cpu_model(), "cores": os.cpu_count()}
    OUTPUT.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: result[k] for k in ("suite_mean_per_seed", "differences")}, indent=1))


if __name__ == "__main__":
    main()
