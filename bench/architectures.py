"""RoFormerV2, BERT and ALBERT of equal size trained from scratch on the demo mixture, and
their training-step speed against keras-hub's BertBackbone (issue 32 point 6).

    .venv/bin/python -m bench.architectures --output bench/results/architectures.json
        [--steps N] [--seeds 0 1 2] [--budget-seconds S] [--quick]

Learning: experiments/demo.yaml's tasks, rates, optimizer and real data
(experiments/demo/data), its backbone dims (L2 H128 A2 FFN512, dropout 0.1) for each
architecture (ALBERT: embedding_size = hidden_size, so the mlm head ties as in the others;
its one block is shared across the depth, so it has fewer weights: the JSON counts them),
the same seeds, updates and vocab; each run is scored on all of dev after its last update.
Runs go seed by seed (the three architectures of a seed in turn); `--budget-seconds` stops
starting runs after that long, and the JSON says which finished.

Speed: one process, the systems interleaved in rounds (order rotated), each a backbone ->
[CLS] -> Dense(2) trained by `train_on_batch` on one fixed batch (batch 32, length 128,
random ids, Adam 1e-4, dropout 0.1): ours as roformer_v2, bert and albert, and keras-hub's
BertBackbone, all at L4 H256 A4 FFN1024. The first steps of each system (tracing) are
dropped; medians of the rest. Writes a markdown summary beside the JSON.
"""
import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from bench import REPO
from bench.runs import interval, train_and_evaluate

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ARCHITECTURES = ("roformer_v2", "bert", "albert")
SPEED_DIMS = dict(num_layers=4, hidden_size=256, num_heads=4, intermediate_size=1024)
QUICK_SPEED_DIMS = dict(num_layers=1, hidden_size=32, num_heads=2, intermediate_size=64)


def demo_experiment():
    import yaml

    path = REPO / "experiments" / "demo.yaml"
    experiment = yaml.safe_load(path.read_text(encoding="utf-8"))
    experiment["data_root"] = str((path.parent / experiment["data_root"]).resolve())
    return experiment


def architecture_experiment(architecture, seed, steps, work):
    """The demo experiment with `architecture`'s backbone at the demo's dims."""
    experiment = demo_experiment()
    demo = experiment["backbone"]
    backbone = {key: demo[key] for key in ("num_layers", "hidden_size", "num_heads",
                                            "intermediate_size", "dropout", "vocab_size")}
    backbone["attention_dropout"] = 0.0
    if architecture == "roformer_v2":
        backbone["alpha_warmup_steps"] = demo.get("alpha_warmup_steps", 0)
    else:
        backbone["architecture"] = architecture
        backbone["max_positions"] = experiment["max_length"]
    if architecture == "albert":
        backbone["embedding_size"] = demo["hidden_size"]
    experiment.update(name=f"{architecture}-seed{seed}", backbone=backbone, seed=seed,
                      steps=steps, eval_every=0, checkpoint_every=0, keep_checkpoints=1,
                      cache_dir=str(work / "cache"))
    experiment["optimizer"]["warmup_steps"] = min(experiment["optimizer"].get("warmup_steps", 0),
                                                  max(1, steps // 4))
    return experiment


def count_weights(run_dir):
    from mtl_framework.saving.trained import load_run_backbone

    backbone, _ = load_run_backbone(str(run_dir))
    return int(sum(int(w.numpy().size) for w in backbone.weights))


def learning(args, work, log, deadline):
    runs = []
    for seed in args.seeds:
        for architecture in ARCHITECTURES:
            if time.time() > deadline:
                log(f"budget spent: {architecture} seed {seed} not started")
                runs.append({"architecture": architecture, "seed": seed, "finished": False})
                continue
            log(f"{architecture} seed {seed}: {args.steps} updates")
            result = train_and_evaluate(architecture_experiment(architecture, seed, args.steps, work),
                                        work, f"{architecture}-seed{seed}", None, log)
            scores = {task: entry["score"] for task, entry in result["scores"].items()}
            runs.append({"architecture": architecture, "seed": seed, "finished": True,
                         "scores": scores, "backbone_weights": count_weights(result["run_dir"]),
                         "seconds_per_update": result["seconds_per_update"],
                         "train_seconds": result["train_seconds"]})
            log(f"  {json.dumps(scores)}")
    summary = {}
    for architecture in ARCHITECTURES:
        done = [r for r in runs if r["architecture"] == architecture and r["finished"]]
        if not done:
            continue
        tasks = sorted(done[0]["scores"])
        per_task = {}
        for task in tasks:
            mean, ci = interval([r["scores"][task] for r in done])
            per_task[task] = {"mean": round(mean, 4), "ci95": ci and [round(v, 4) for v in ci]}
        mean, ci = interval([statistics.mean(r["scores"].values()) for r in done])
        summary[architecture] = {"seeds": [r["seed"] for r in done], "tasks": per_task,
                                 "mean_of_tasks": {"mean": round(mean, 4),
                                                   "ci95": ci and [round(v, 4) for v in ci]},
                                 "backbone_weights": done[0]["backbone_weights"]}
    return runs, summary


def speed_models(dims, length):
    import keras
    import keras_hub

    from mtl_framework import architectures

    def classifier(backbone, hidden):
        ids = keras.Input((length,), dtype="int32", name="token_ids")
        segments = keras.Input((length,), dtype="int32", name="segment_ids")
        inputs = {"token_ids": ids, "segment_ids": segments}
        if hidden == "hub":
            out = backbone({**inputs, "padding_mask": keras.ops.not_equal(ids, 0)})["sequence_output"]
        else:
            out = backbone(inputs)
        logits = keras.layers.Dense(2, activation="softmax")(out[:, 0])
        model = keras.Model(inputs, logits)
        model.compile(optimizer=keras.optimizers.Adam(1e-4), loss="sparse_categorical_crossentropy")
        return model

    common = dict(vocab_size=12000, dropout=0.1, attention_dropout=0.0, **dims)
    models = {}
    for architecture in ARCHITECTURES:
        extra = {"max_positions": 512} if architecture != "roformer_v2" else {}
        if architecture == "albert":
            extra["embedding_size"] = dims["hidden_size"]
        config = architectures.backbone_config(architecture, None, **common, **extra)
        models[f"ours {architecture}"] = classifier(architectures.build_backbone(config), "ours")
    hub = keras_hub.models.BertBackbone(
        vocabulary_size=12000, num_layers=dims["num_layers"], num_heads=dims["num_heads"],
        hidden_dim=dims["hidden_size"], intermediate_dim=dims["intermediate_size"], dropout=0.1,
        max_sequence_length=512)
    models["keras-hub BertBackbone"] = classifier(hub, "hub")
    return models


def speed(args, log):
    import numpy as np

    dims = QUICK_SPEED_DIMS if args.quick else SPEED_DIMS
    batch, length = (4, 16) if args.quick else (32, 128)
    models = speed_models(dims, length)
    rng = np.random.default_rng(0)
    inputs = {"token_ids": rng.integers(5, 12000, (batch, length)).astype("int32"),
              "segment_ids": np.zeros((batch, length), "int32")}
    labels = rng.integers(0, 2, batch)
    names = list(models)
    times = {name: [] for name in names}
    warm = 2
    for name in names:  # tracing and first allocation, not timed
        for _ in range(warm):
            models[name].train_on_batch(inputs, labels)
    for round_ in range(args.speed_rounds):
        order = names[round_ % len(names):] + names[:round_ % len(names)]
        for name in order:
            models[name].train_on_batch(inputs, labels)  # caches hold the previous model
            for _ in range(args.speed_steps):
                start = time.perf_counter()
                models[name].train_on_batch(inputs, labels)
                times[name].append(time.perf_counter() - start)
        log(f"speed round {round_ + 1}/{args.speed_rounds}: " + ", ".join(
            f"{n} {statistics.median(t):.3f} s" for n, t in times.items()))
    result = {"dims": dims, "batch": batch, "length": length, "systems": {}}
    for name, values in times.items():
        median = statistics.median(values)
        result["systems"][name] = {"median_step_s": round(median, 4),
                                   "tokens_per_s": round(batch * length / median),
                                   "steps": [round(v, 4) for v in values]}
    base = result["systems"]["ours roformer_v2"]["median_step_s"]
    for entry in result["systems"].values():
        entry["step_time_vs_roformer_v2"] = round(entry["median_step_s"] / base, 3)
    return result


def markdown(result):
    lines = ["# RoFormerV2, BERT, ALBERT of equal size (bench/architectures.py)", "",
             f"Demo mixture, {result['steps']} updates, seeds {result['seeds']}; dev scores, "
             "mean over finished seeds (95% t-interval).", ""]
    summary = result["learning"]
    if summary:
        tasks = sorted({t for s in summary.values() for t in s["tasks"]})
        lines += ["| architecture | seeds | weights | " + " | ".join(tasks) + " | mean |",
                  "|---" * (len(tasks) + 4) + "|"]
        for architecture, s in summary.items():
            cells = [f"{s['tasks'][t]['mean']:.4f}" for t in tasks]
            lines.append(f"| {architecture} | {len(s['seeds'])} | {s['backbone_weights']} | "
                         + " | ".join(cells) + f" | {s['mean_of_tasks']['mean']:.4f} |")
    unfinished = [f"{r['architecture']} seed {r['seed']}" for r in result["runs"]
                  if not r["finished"]]
    if unfinished:
        lines += ["", "Not run (budget spent): " + ", ".join(unfinished) + "."]
    if result.get("speed"):
        sp = result["speed"]
        lines += ["", f"Training-step speed, {sp['dims']}, batch {sp['batch']}, length "
                      f"{sp['length']}, medians:", "",
                  "| system | s/step | tokens/s | step time vs RoFormerV2 |", "|---|---|---|---|"]
        for name, e in sp["systems"].items():
            lines.append(f"| {name} | {e['median_step_s']} | {e['tokens_per_s']} | "
                         f"{e['step_time_vs_roformer_v2']} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", default=str(REPO / "bench" / "results" / "architectures.json"))
    parser.add_argument("--steps", type=int, default=240)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget-seconds", type=float, default=None,
                        help="start no training run after this long")
    parser.add_argument("--speed-rounds", type=int, default=5)
    parser.add_argument("--speed-steps", type=int, default=3)
    parser.add_argument("--no-speed", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help="3 updates, one seed, tiny speed models: checks the script")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.seeds, args.speed_rounds, args.speed_steps = 3, [0], 2, 1
    started = time.time()
    deadline = started + args.budget_seconds if args.budget_seconds else float("inf")

    def log(line):
        print(f"[{time.time() - started:6.0f} s] {line}", flush=True)

    result = {"steps": args.steps, "seeds": args.seeds, "quick": args.quick,
              "machine": {"cpu": platform.processor() or platform.machine(),
                          "cores": os.cpu_count()}}
    if not args.no_speed:
        result["speed"] = speed(args, log)
    with tempfile.TemporaryDirectory(prefix="bench-architectures-") as work:
        result["runs"], result["learning"] = learning(args, Path(work), log, deadline)
    result["wall_seconds"] = round(time.time() - started, 1)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=1), encoding="utf-8")
    output.with_suffix(".md").write_text(markdown(result), encoding="utf-8")
    log(f"wrote {output} and {output.with_suffix('.md')}")


if __name__ == "__main__":
    main()
