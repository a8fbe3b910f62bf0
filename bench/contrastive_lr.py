"""Which learning rates train a sentence embedding (issue 50 point 5; docs/embeddings.md,
"Learning rates"), CPU.

    PYTHONPATH=. .venv/bin/python -m bench.contrastive_lr [--data-root ../shared/data]
        [--architecture bert roformer_v2 bert_small] [--lrs ...] [--steps N]
        [--work-dir runs/contrastive_lr]

The plan (PLAN): BERT and RoFormerV2 tiny at lr 1e-5, 1e-4, 5e-4, 1e-3, 2e-3, 300 updates
each; BERT small at 1e-4 and 2e-3, 150 updates (a run of it is 4 to 12 minutes here).
One `mtl train` per learning rate, everything else equal: a backbone from scratch (random
weights: the case where a wrong learning rate leaves the loss at chance), one InfoNCE task
on AFQMC's train pairs labelled 1 (query -> its positive, the other 127 rows' positives
its negatives: ln 128 = 4.852 is chance), batch 128, AdamW with `warmup_steps` 10% of
the updates then linear decay, float32, seed 0. Per learning rate: the task's contrastive
loss and in-batch accuracy (metrics.jsonl, the mean of the last 20 updates), the mean
cosine of different texts (the collapse sign), the first update whose loss is below
NotLearning.AT_CHANCE x chance, whether the run warned that it learns nothing
(loop/callbacks.py NotLearning), and two dev scores: nDCG@10 of each dev query's positive
among the 1,338 dev positives (the task's metric) and the Spearman of cosine on all 4,316
AFQMC dev pairs by their labels (C-MTEB's AFQMC figure, from the run's encoder). Runs are
kept in the work folder and skipped when present. Output: bench/results/contrastive_lr.json
and .md.

`--signs-cost`: what the signs cost the step instead: two models of the same run in one
process (BERT tiny, lr 1e-3), one whose head gives no signs, updated on the same batches in
interleaved rounds of 5 updates; medians of seconds per update and of the rounds' paired
ratios; and the signs alone (losses.ranking_signs on [128, 128] logits, traced), printed.
"""
import argparse
import contextlib
import io
import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from bench import REPO, afqmc_pairs_spec, child_env
from bench.load import cpu_model

OUTPUT = REPO / "bench" / "results" / "contrastive_lr"
TASK = "afqmc_pairs"
SPEC = afqmc_pairs_spec(
    TASK, 64, "{loss: infonce, pooling: POOLING}  # the pairs labelled 1 (positive_score 1.0)",
    metric_note="           # dev: each positive pair's query among the 1,338 positives")
BACKBONES = {  # tiny: 2 layers of 128, as the demo's; small: the released small size
    "bert": {"architecture": "bert", "num_layers": 2, "hidden_size": 128, "num_heads": 2,
             "intermediate_size": 512, "vocab_size": 6000},
    "bert_small": {"architecture": "bert", "num_layers": 6, "hidden_size": 384, "num_heads": 6,
                   "intermediate_size": 1536, "vocab_size": 6000},
    "roformer_v2": {"num_layers": 2, "hidden_size": 128, "num_heads": 2, "intermediate_size": 512,
                    "vocab_size": 6000, "dropout": 0.1},
}
LRS = (1e-5, 1e-4, 5e-4, 1e-3, 2e-3)
PLAN = {"bert": (LRS, 300), "roformer_v2": (LRS, 300), "bert_small": ((1e-4, 2e-3), 150)}
LAST = 20  # updates averaged for the final figures
RUN_SUFFIX = ""  # a run's folder: <architecture>-lr<lr><suffix>, "-mean" for --pooling mean


def experiment(work, data_root, architecture, lr, steps):
    return {"name": f"{architecture}-lr{lr:g}", "data_root": str(data_root),
            "task_specs": [str(work / "specs")], "cache_dir": str(work / "cache"),
            "backbone": BACKBONES[architecture], "tasks": [TASK], "tasks_per_update": 1,
            "batch_size": 128, "max_length": 64, "steps": steps, "seed": 0, "precision": "float32",
            "optimizer": {"name": "adamw", "lr": lr, "warmup_steps": steps // 10,
                          "weight_decay": 0.01},
            "checkpoint_every": steps, "eval_every": steps, "eval_batches": 34}  # 34 x 128 >= 4,316


def train(work, data_root, architecture, lr, steps):
    """The run's folder and (wall seconds, stderr) of its `mtl train` (None when kept)."""
    run = work / f"{architecture}-lr{lr:g}{RUN_SUFFIX}"
    if (run / "evaluations.jsonl").is_file():
        return run, None
    path = work / f"{run.name}.json"
    path.write_text(json.dumps(experiment(work, data_root, architecture, lr, steps)), encoding="utf-8")
    command = [sys.executable, "-m", "mtl_framework", "train", str(path), "--output", str(run)]
    print("$", " ".join(command[1:]), flush=True)
    start = time.time()
    done = subprocess.run(command, cwd=REPO, env=child_env(TF_CPP_MIN_LOG_LEVEL="2"),
                          capture_output=True, text=True)
    (work / f"{run.name}.log").write_text(done.stdout + done.stderr, encoding="utf-8")
    if done.returncode:
        raise SystemExit(f"failed ({done.returncode}): see {work / f'{run.name}.log'}")
    seconds = time.time() - start
    (work / f"{run.name}.seconds").write_text(f"{seconds:.1f}\n", encoding="utf-8")  # for a kept run
    return run, (seconds, done.stderr)


def afqmc_spearman(run, data_root):
    """Spearman of the run's cosines on AFQMC's dev pairs against their labels (mteb's STS)."""
    from scipy.stats import spearmanr

    from mtl_framework.embedding.encode import Encoder

    rows = [line.split("\t") for line in
            (data_root / "afqmc" / "dev.txt").read_text(encoding="utf-8").splitlines()]
    encoder = Encoder(str(run), log=None)
    first, second = (encoder.encode([row[i] for row in rows]) for i in (0, 1))
    cosines = np.sum(first * second, 1) / np.linalg.norm(first, axis=1) / np.linalg.norm(second, axis=1)
    return float(spearmanr(cosines, [float(row[2]) for row in rows]).statistic)


def figures(run, architecture, lr, trained, data_root):
    from mtl_framework.loop.callbacks import NotLearning

    logged = [json.loads(line)["tasks"][TASK] for line in
              (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    below = [i + 1 for i, entry in enumerate(logged)
             if entry["loss"] < NotLearning.AT_CHANCE * entry["chance"]]
    last = logged[-LAST:]
    evaluation = json.loads((run / "evaluations.jsonl").read_text(encoding="utf-8").splitlines()[-1])
    kept = run.parent / f"{run.name}.seconds"
    seconds = trained[0] if trained else float(kept.read_text()) if kept.is_file() else None
    warned = replayed_warning(logged, experiment(run.parent, None, architecture, lr, len(logged)))
    return {"architecture": architecture, "lr": lr, "updates": len(logged),
            "warmup": len(logged) // 10,
            **{key: float(np.mean([entry[key] for entry in last]))
               for key in ("loss", "chance", "accuracy", "cosine")},
            "first": {key: logged[0][key] for key in ("loss", "chance", "accuracy", "cosine")},
            "left_chance_at": below[0] if below else None,
            "dev_ndcg_at_10": evaluation["tasks"][TASK]["score"],
            "afqmc_dev_spearman": afqmc_spearman(run, data_root),
            "warned": warned, "seconds": seconds}


def replayed_warning(logged, config):
    """NotLearning's warning (None: none) fed the run's logged values update by update: with
    one micro-batch an update these are its micro-batches' own, so this is what the run
    said with the thresholds NotLearning has now (the run's log has what it said then)."""
    from mtl_framework.loop.callbacks import NotLearning

    run = SimpleNamespace(step=0, is_chief=True, experiment=SimpleNamespace(raw=config),
                          model=SimpleNamespace(last_micro_logs=[]))
    watch, said = NotLearning(run), io.StringIO()
    with contextlib.redirect_stderr(said):
        for update, entry in enumerate(logged, 1):
            run.step, run.model.last_micro_logs = update, [{"task": TASK, "finite": True, **entry}]
            watch.on_train_batch_end(update)
    return said.getvalue().strip() or None


def markdown(rows):
    lines = [f"# Learning rates for a sentence embedding from scratch ({cpu_model()}, 2 cores)", "",
             f"One InfoNCE task on AFQMC's positive train pairs, batch 128 (chance ln 128 = "
             f"{np.log(128):.3f}), AdamW, warm-up 10% of the updates then "
             f"linear decay, float32; final figures: the mean of the last {LAST} updates; dev: "
             "nDCG@10 of each dev query's positive among the 1,338 dev positives, and the "
             "Spearman of cosine on AFQMC's 4,316 dev pairs.", "",
             "Wall time: `mtl train` whole, on a machine shared with other jobs (load 5-10 on its 2 "
             "cores): compare nothing by it.", "",
             "| backbone | lr | updates | contrastive loss | in-batch accuracy | mean cosine | below "
             "0.98 x chance from update | dev nDCG@10 | AFQMC dev Spearman | warned | wall s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        wall = f"{row['seconds']:.0f}" if row["seconds"] else ""
        size = "" if row["architecture"].endswith("_small") else " tiny"
        lines.append(f"| {row['architecture']}{size} | {row['lr']:g} | {row['updates']} | "
                     f"{row['loss']:.3f} | "
                     f"{row['accuracy']:.3f} | {row['cosine']:.4f} | {row['left_chance_at'] or 'never'} | "
                     f"{row['dev_ndcg_at_10']:.4f} | {row['afqmc_dev_spearman']:.4f} | "
                     f"{'yes' if row['warned'] else 'no'} | {wall} |")
    advice = {}  # what a warning tells to try -> the first warning that says it
    for row in rows:
        if row["warned"]:
            advice.setdefault(row["warned"].split(" (optimizer.lr;")[0].rsplit("; ", 1)[-1], row["warned"])
    if advice:
        lines += ["", "The warnings (NotLearning fed each run's metrics.jsonl: with one micro-batch "
                  "an update, what the run says with today's thresholds), the first of each kind:",
                  "", "```", *advice.values(), "```"]
    return "\n".join(lines) + "\n"


def signs_cost(work, data_root, rounds=24):
    """(median s/update with the signs, without, median paired ratio) of interleaved rounds."""
    import statistics
    import types

    from mtl_framework import Run

    path = work / "signs_cost.json"
    path.write_text(json.dumps(experiment(work, data_root, "bert", 1e-3, 300)), encoding="utf-8")
    runs = {name: Run(str(path), str(work / f"signs_cost_{name}"), log=lambda *_: None)
            for name in ("signs", "none")}
    head = runs["none"].model.heads[TASK]
    head.compute_task_loss_and_signs = types.MethodType(
        lambda self, vectors, batch: (self._loss(vectors, batch, False)[0], {}), head)
    times = {name: [] for name in runs}
    for run in runs.values():  # traced first
        run.model.run_update([run.mixture.next()])
    for round_ in range(rounds):
        for name in ("signs", "none") if round_ % 2 == 0 else ("none", "signs"):
            batches = [runs[name].mixture.next() for _ in range(5)]
            start = time.perf_counter()
            for batch in batches:
                runs[name].model.run_update([batch])
            times[name].append((time.perf_counter() - start) / 5)
    return (statistics.median(times["signs"]), statistics.median(times["none"]),
            statistics.median(a / b for a, b in zip(times["signs"], times["none"])))


def signs_alone(rows=128, calls=2000):
    """Median seconds of one traced losses.ranking_signs on [rows, rows] logits."""
    import statistics

    import tensorflow as tf

    from mtl_framework import losses

    logits = tf.random.normal([rows, rows]) / 0.05
    valid, target = tf.ones([rows, rows], tf.bool), tf.range(rows)
    signs = tf.function(lambda: losses.ranking_signs(logits, valid, target, 0.05))
    signs()
    times = []
    for _ in range(calls // 100):
        start = time.perf_counter()
        for _ in range(100):
            signs()["accuracy"].numpy()
        times.append((time.perf_counter() - start) / 100)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-root", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--architecture", nargs="+", default=list(PLAN), choices=sorted(BACKBONES))
    parser.add_argument("--lrs", type=float, nargs="+", help="in place of the plan's")
    parser.add_argument("--steps", type=int, help="in place of the plan's")
    parser.add_argument("--work-dir", default=str(REPO / "runs" / "contrastive_lr"))
    parser.add_argument("--output", default=str(OUTPUT), help="the results' path, less .json / .md")
    parser.add_argument("--signs-cost", action="store_true", help="time the step with and without signs")
    parser.add_argument("--pooling", default="cls", choices=["cls", "mean"])
    args = parser.parse_args()
    global RUN_SUFFIX
    RUN_SUFFIX = "" if args.pooling == "cls" else f"-{args.pooling}"
    output = Path(args.output)
    work = Path(args.work_dir)
    (work / "specs").mkdir(parents=True, exist_ok=True)
    (work / "specs" / f"{TASK}.yaml").write_text(SPEC.replace("POOLING", args.pooling), encoding="utf-8")
    if args.signs_cost:
        with_signs, without, ratio = signs_cost(work, Path(args.data_root).resolve())
        print(f"s/update with the signs {with_signs:.4f}, without {without:.4f}, "
              f"paired ratio {ratio:.3f}; the signs alone on [128, 128] logits "
              f"{signs_alone() * 1e3:.3f} ms ({cpu_model()})")
        return
    rows = []
    data_root = Path(args.data_root).resolve()
    for architecture in args.architecture:
        lrs, steps = PLAN.get(architecture, (LRS, 300))
        for lr in args.lrs or lrs:
            run, trained = train(work, data_root, architecture, lr, args.steps or steps)
            rows.append(figures(run, architecture, lr, trained, data_root))
            print(json.dumps(rows[-1]), flush=True)
    output.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    output.with_suffix(".md").write_text(markdown(rows), encoding="utf-8")
    print(markdown(rows))


if __name__ == "__main__":
    main()
