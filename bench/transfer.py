"""Transfer check: does mixed supervised pretraining help a task kept out of the mixture?

    .venv/bin/python bench/transfer.py [--data-root ../shared/data] [--quick]
        [--work-dir DIR] [--output-dir bench/results]

Through the framework's own entry points only:
1. a from-scratch run of a small RoFormerV2 (`trainer.Run`) over a mixture of
   real CLUE tasks plus MLM (PRETRAIN_TASKS; chnsenticorp is not among them),
   its character vocab built from the mixture's train text;
2. before its first update, that run's backbone (same seed, same vocab) is
   saved as a keras preset: the "no pretraining" start;
3. after training, `mtl export --format keras` (export.export) of the run, its
   dev scores on the first examples of each mixture task recorded first so the
   model card cites them;
4. `mtl finetune` (finetune.finetune) of FINETUNE_TASK from (a) the pretrained
   export and (b) the step-0 preset: identical settings, seed, head init and
   batch order; only the backbone weights differ. Both are scored on the
   task's full dev split, beside its majority baseline.

Writes bench/results/transfer.json and transfer.md. The machine is shared: the
JSON records the load average and wall/CPU seconds of every stage.
--quick is a smoke check of the script (tiny model, a few updates).
"""
import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load import cpu_seconds, load_average  # noqa: E402

# cmrc2018 is left out for the time budget: its 128-token context windows are the
# most expensive micro-batches (add it with --tasks ... cmrc2018).
PRETRAIN_TASKS = ["tnews", "afqmc", "ocnli", "cluener"]
FINETUNE_TASK = "chnsenticorp"
FULL = dict(num_layers=2, hidden_size=128, num_heads=2, intermediate_size=512, vocab_size=6000,
            pretrain_steps=400, tasks_per_update=4, pretrain_batch_size=32, pretrain_lr=1e-3,
            pretrain_max_length=64, finetune_steps=300, finetune_batch_size=32,
            finetune_lr=5e-4, finetune_max_length=128, pretrain_eval_examples=500, mlm_rate=0.2)
QUICK = dict(num_layers=1, hidden_size=64, num_heads=2, intermediate_size=128, vocab_size=3000,
             pretrain_steps=4, tasks_per_update=2, pretrain_batch_size=8, pretrain_lr=1e-3,
             pretrain_max_length=64, finetune_steps=4, finetune_batch_size=8, finetune_lr=1e-3,
             finetune_max_length=128, pretrain_eval_examples=16, mlm_rate=0.2)






class Stage:
    """Wall and CPU seconds of a block, with the load average at its end."""

    def __init__(self, timings, name):
        self.timings, self.name = timings, name

    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), cpu_seconds()

    def __exit__(self, *exc):
        self.timings[self.name] = {"wall_s": round(time.perf_counter() - self.wall, 1),
                                   "cpu_s": round(cpu_seconds() - self.cpu, 1),
                                   "load_average_after": load_average()}


def pretrain_experiment(args, work, vocab=None):
    experiment = {
        "name": "transfer-pretrain",
        "data_root": str(Path(args.data_root).resolve()),
        "cache_dir": str(work / "cache"),
        "backbone": {"num_layers": args.num_layers, "hidden_size": args.hidden_size,
                     "num_heads": args.num_heads, "intermediate_size": args.intermediate_size,
                     "dropout": 0.1, "vocab_size": args.vocab_size,
                     # no residual warm-up: the step-0 start must be a usable encoder
                     # (a = 1) for the no-pretraining fine-tune as well
                     "alpha_warmup_steps": 0},
        "tasks": list(args.tasks) + [{"name": "mlm", "rate": args.mlm_rate}],
        "sampling": {"method": "temperature", "temperature": 2.0},
        "balancing": "gradient_norm",
        "tasks_per_update": args.tasks_per_update,
        "batch_size": args.pretrain_batch_size,
        "max_length": args.pretrain_max_length,
        "optimizer": {"name": "adamw", "lr": args.pretrain_lr,
                      "warmup_steps": max(1, args.pretrain_steps // 10), "weight_decay": 0.01},
        "steps": args.pretrain_steps,
        "seed": args.seed,
        "checkpoint_every": 0,
        "keep_checkpoints": 1,
        "eval_every": 0,
    }
    if vocab is not None:  # built by an earlier invocation with the same work folder
        experiment["vocab"] = str(vocab)
    return experiment


def scores(line):
    return {name: {k: entry.get(k) for k in ("metric", "score", "baseline", "examples")}
            for name, entry in line["tasks"].items()}


def unknown_rate(tokenizer, task, data_root):
    """Share of [UNK] tokens over the fine-tune task's dev text (vocab from the mixture)."""
    from data_adapters import read_task
    from mtl_framework.vocab import example_texts

    total = unknown = 0
    for example in read_task(task, "dev", data_root):
        for text in example_texts(example):
            ids = tokenizer.encode(text)[0][1:-1]
            total += len(ids)
            unknown += sum(i == tokenizer.unk_id for i in ids)
    return round(unknown / max(total, 1), 4)


def markdown(result):
    c, ft, task = result["config"], result["finetune"], result["finetune_task"]
    seeds = sorted(ft["pretrained"], key=int)
    lines = [
        f"Fine-tuning {task} (held out of the pretraining mixture), {c['finetune_steps']} "
        f"updates of batch {c['finetune_batch_size']} (max length {c['finetune_max_length']}, AdamW lr "
        f"{c['finetune_lr']}); per fine-tune seed both starts get the same head init, batch "
        "order and dropout. Dev accuracy on the full dev split:", "",
        "| start | " + " | ".join(f"seed {s}" for s in seeds) + " | mean | majority baseline |",
        "|---|" + "---|" * (len(seeds) + 2),
    ]
    for name, label in (("pretrained", "(a) after mixed pretraining"),
                        ("scratch", "(b) same initial weights, no pretraining")):
        values = [ft[name][s]["score"] for s in seeds]
        lines.append(f"| {label} | " + " | ".join(f"{v:.4f}" for v in values)
                     + f" | {sum(values) / len(values):.4f} | "
                     f"{ft[name][seeds[0]]['baseline']:.4f} |")
    gaps = [ft["pretrained"][s]["score"] - ft["scratch"][s]["score"] for s in seeds]
    lines += ["", f"(a) - (b) per seed: {', '.join(f'{g:+.4f}' for g in gaps)} "
                  f"({ft['pretrained'][seeds[0]]['examples']} dev examples: one example is "
                  f"{1 / ft['pretrained'][seeds[0]]['examples']:.4f})."]
    pre = result["pretrain"]
    lines += [
        "", f"Model: L{c['num_layers']}/H{c['hidden_size']}/A{c['num_heads']}, FFN "
        f"{c['intermediate_size']}, {result['parameters']:,} parameters, char vocab "
        f"{result['vocab_size']} built from the mixture's train text ({result['unk_rate']:.2%} "
        f"[UNK] on {task} dev). Pretraining: {c['pretrain_steps']} updates x "
        f"{c['tasks_per_update']} micro-batches of {c['pretrain_batch_size']} (max length "
        f"{c['pretrain_max_length']}) over "
        f"{', '.join(c['tasks'])} + MLM (rate {c['mlm_rate']}), temperature-2 sampling, "
        f"gradient_norm balancing, AdamW lr {c['pretrain_lr']}; micro-batches drawn: "
        f"{', '.join(f'{k} {v}' for k, v in pre['micro_batches'].items())}; {pre['wall_s']} s "
        f"wall ({pre['cpu_s']} s CPU).",
        "", "Pretraining dev scores (first "
        f"{c['pretrain_eval_examples']} dev examples per task):", "",
        "| task | metric | score | majority baseline |", "|---|---|---|---|"]
    for name, entry in pre["dev"].items():
        score = "-" if entry["score"] is None else f"{entry['score']:.4f}"
        baseline = "-" if entry["baseline"] is None else f"{entry['baseline']:.4f}"
        lines.append(f"| {name} | {entry['metric']} | {score} | {baseline} |")
    walls = "; ".join(f"{k}: {v} s" for k, v in result["benchmark_wall_s"].items())
    lines += ["", f"Wall time ({result['machine']}, shared with other work: load averages "
                  f"{result['load_average']}): {walls}."]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root",
                        default=os.environ.get("MTL_DATA_ROOT", REPO.parent / "shared" / "data"))
    parser.add_argument("--tasks", nargs="+", default=PRETRAIN_TASKS)
    parser.add_argument("--finetune-task", default=FINETUNE_TASK)
    parser.add_argument("--quick", action="store_true", help="tiny smoke check of the script")
    for key, value in FULL.items():
        parser.add_argument("--" + key.replace("_", "-"), type=type(value), default=None,
                            help=f"default {value} ({QUICK[key]} with --quick)")
    parser.add_argument("--seed", type=int, default=0, help="pretraining seed (initial weights)")
    parser.add_argument("--finetune-seeds", type=int, nargs="+", default=[0],
                        help="one fine-tune pair per seed (head init, batch order, dropout)")
    parser.add_argument("--reuse-pretraining", action="store_true",
                        help="skip pretraining: fine-tune the exports in --work-dir again "
                             "(more seeds) and add the results to the existing JSON")
    parser.add_argument("--work-dir", default=None,
                        help="runs, exports and feature cache (default: a temporary folder, "
                             "removed at the end)")
    parser.add_argument("--output-dir", default=None,
                        help="default bench/results (--quick: the work folder)")
    args = parser.parse_args()
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.finetune_task in args.tasks:
        parser.error(f"{args.finetune_task} is in the pretraining mixture: it must be held out")

    import keras

    from mtl_framework.cache import cached_features
    from mtl_framework.finetune import finetune
    from mtl_framework.registry import load_registry
    from mtl_framework.tokenizer import Tokenizer

    def log(message):
        print(message, flush=True)

    quiet = lambda *a, **k: None  # noqa: E731
    started, load_start = time.perf_counter(), load_average()
    temporary = args.work_dir is None
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="mtl_transfer_")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    output_dir = Path(args.output_dir or (work if args.quick else REPO / "bench" / "results"))
    stem = "transfer.quick" if args.quick else "transfer"
    config = {**{k: getattr(args, k) for k in FULL}, "tasks": list(args.tasks),
              "seed": args.seed, "quick": args.quick}
    log(f"work folder {work}")

    pretrained, scratch = work / "export" / "pretrained", work / "export" / "scratch"
    previous = output_dir / f"{stem}.json"
    if args.reuse_pretraining:
        result = json.loads(previous.read_text()) if previous.exists() else None
        if result is None or result["config"] != config or not pretrained.is_dir() \
                or not scratch.is_dir():
            parser.error(f"--reuse-pretraining needs {previous} written with the same settings "
                         f"and the exports in {work / 'export'}")
        log(f"reusing the pretraining of {previous} ({pretrained}, {scratch})")
    else:
        result = {"finetune_task": args.finetune_task, "config": config,
                  **pretrain(args, work, pretrained, scratch, log, quiet), "finetune": {}}

    # the same fine-tune from both starts (its features built first, timed apart)
    timings = result["timings"]
    task = load_registry().select([args.finetune_task])[0]
    tokenizer = Tokenizer(str(scratch / "vocab.txt"))
    with Stage(timings, "finetune_features"):
        for split in ("train", "dev"):
            cached_features(task, split, tokenizer, args.data_root, work / "cache",
                            max_length=min(task.max_length, args.finetune_max_length))
    result["unk_rate"] = unknown_rate(tokenizer, task, args.data_root)
    for seed in args.finetune_seeds:
        for name, start in (("pretrained", pretrained), ("scratch", scratch)):
            log(f"fine-tuning {args.finetune_task} from {name} ({start}), seed {seed}")
            stage, output = {}, work / "runs" / f"finetune-{name}-seed{seed}"
            shutil.rmtree(output, ignore_errors=True)
            with Stage(stage, "run"):
                _, line = finetune(
                    str(start), args.finetune_task,
                    output=str(output),
                    data_root=args.data_root, cache_dir=str(work / "cache"), log=quiet,
                    steps=args.finetune_steps, batch_size=args.finetune_batch_size,
                    lr=args.finetune_lr, max_length=args.finetune_max_length, seed=seed)
            entry = scores(line)[args.finetune_task]
            result["finetune"].setdefault(name, {})[str(seed)] = {**entry, **stage["run"]}
            log(f"  {name}: {entry['metric']} {entry['score']:.4f} (baseline "
                f"{entry['baseline']:.4f}, {entry['examples']} examples)")
            keras.backend.clear_session()
    result["benchmark_wall_s"] = {**result.get("benchmark_wall_s", {}), **{
        ("fine-tune seeds " + " ".join(map(str, args.finetune_seeds)) if args.reuse_pretraining
         else "pretraining + fine-tune seeds " + " ".join(map(str, args.finetune_seeds))):
        round(time.perf_counter() - started, 1)}}
    result.setdefault("load_average", []).append([load_start, load_average()])
    result["machine"] = (f"{platform.machine()}, {os.cpu_count()} cores, Python "
                         f"{platform.python_version()}")
    output_dir.mkdir(parents=True, exist_ok=True)
    previous.write_text(json.dumps(result, indent=1))
    (output_dir / f"{stem}.md").write_text(markdown(result))
    log(markdown(result))
    log(f"wrote {previous} and {stem}.md")
    if temporary:
        shutil.rmtree(work, ignore_errors=True)


def pretrain(args, work, pretrained, scratch, log, quiet):
    """Steps 1-3 of the module docstring; returns the result's pretraining entries."""
    import keras

    from mtl_framework.evaluation import record
    from mtl_framework.export import export
    from mtl_framework.trainer import Run

    timings = {}
    path = work / "pretrain.yaml"
    vocab = work / f"vocab-{args.vocab_size}.txt"
    path.write_text(yaml.safe_dump(pretrain_experiment(args, work, vocab if vocab.exists()
                                                       else None), sort_keys=False))
    run_dir = work / "runs" / "pretrain"
    for old in ("runs", "export"):
        shutil.rmtree(work / old, ignore_errors=True)
    with Stage(timings, "pretrain_build"):  # vocab + features of the mixture's train splits
        run = Run(str(path), output=str(run_dir), log=quiet)
    shutil.copyfile(run_dir / "vocab.txt", vocab)
    run.backbone.save_preset(str(scratch), str(run_dir / "vocab.txt"),
                             extra={"run": {"step": 0, "tasks": []}})
    log(f"pretraining {args.pretrain_steps} updates ({timings['pretrain_build']['wall_s']} s "
        "to build vocab and features)")
    with Stage(timings, "pretrain"):
        run.train()
    drawn = {}
    with open(run_dir / "metrics.jsonl", encoding="utf-8") as f:
        for text in f:
            for name, entry in json.loads(text)["tasks"].items():
                drawn[name] = drawn.get(name, 0) + entry.get("count", 1)
    with Stage(timings, "pretrain_eval"):
        line = record(run_dir, run.step, "dev",
                      run.evaluate("dev", max_examples=args.pretrain_eval_examples))
    export(str(run_dir), "keras", str(pretrained), log=quiet)
    for name, entry in scores(line).items():
        log(f"  {name}: {entry['metric']} {entry['score']} (baseline {entry['baseline']})")
    info = {"parameters": run.backbone.count_params_exact(),
            "vocab_size": run.tokenizer.vocab_size,
            "pretrain": {"dev": scores(line), "micro_batches": drawn, **timings["pretrain"]},
            "timings": timings}
    keras.backend.clear_session()
    return info


if __name__ == "__main__":
    main()
