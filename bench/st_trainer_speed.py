"""Whole training processes against sentence-transformers' own trainer (issue 50 point 6,
"Speed holds"), CPU.

    .venv/bin/python -m bench.st_trainer_speed [--st-python .venv-current/bin/python]
        [--rounds 3] [--steps 200] [--model DIR] [--trainer-threads 1]

bench/embedding_speed.py times one update inside warm processes against a hand-written
PyTorch loop; this times what a user runs, start to exit: `mtl train` of `--steps` updates
against a Python process that runs sentence-transformers' `SentenceTransformerTrainer`
with `MultipleNegativesRankingLoss` for as many, on the same pairs from the same weights.

- Weights: one BERT `small` folder (L6/H384/A6, FFN 1536), embedding_speed.make_model's
  (a one-update `mtl train` on AFQMC, `mtl export --format transformers`), or `--model DIR`.
  Ours starts from it with `backbone: {init: DIR}`, the trainer with SentenceTransformer(DIR);
  both pool as the folder's 1_Pooling says (make_model's: [CLS], its afqmc_sts task's).
- Pairs: AFQMC train rows labelled 1 as (query, positive), 10,573 of them; ours reads
  afqmc/train.txt through a `delimited` spec (the rows labelled 0 are left out and
  counted, `positive_score` 1.0), the trainer gets the same rows as
  datasets.Dataset.from_dict({"anchor", "positive"}). Batch `--batch` (32) pairs, in-batch
  negatives only, temperature 0.05 = MultipleNegativesRankingLoss's scale 20,
  max_length 128; each side shuffles with its own seeded sampler (seed 0).
- Optimiser, both: AdamW, lr 1e-4, weight decay 0.01, no warm-up, linear decay to 0,
  gradients clipped to global norm 1.0 (the trainer's max_grad_norm default; ours
  `global_clipnorm: 1.0`).
- Precision: `float32` on both; `auto`: ours mixed_bfloat16 where the CPU has AMX /
  AVX512-BF16 (config/precision.py), the trainer `bf16=True` (torch autocast bfloat16,
  float32 weights) when torch says the CPU supports bfloat16, else float32 (recorded).
- Writing: one checkpoint each, at the end: ours `checkpoint_every: STEPS` (the run's
  metrics.jsonl, TensorBoard scalars and console lines as a run writes them), the trainer
  `save_strategy: steps, save_steps: STEPS` (model, optimizer, scheduler, the model card:
  its checkpoint-STEPS folder). No evaluation on either side. Logging: ours its console
  lines (plain lines through a pipe: one a minute), the trainer `logging_steps` 50 and its
  progress bar (stderr, to a log file) as it comes.
- Start-up counts: each process is timed from launch to exit (wall, and its CPU seconds
  from the kernel: os.wait4). Ours tokenizes its data in every process (a fresh
  `cache_dir` each, as the trainer's collator tokenizes each run). Beside the whole-process
  time, each side's update timestamps (ours: metrics.jsonl; the trainer: a callback's
  on_step_end) split it into start-up (launch to the first update's end), the median
  update, and the tail (last update to exit: the checkpoint).
- Threads: TensorFlow's default for ours (both cores); torch's default for the trainer (2
  here) unless `--trainer-threads N`. Under heavy load torch's 2 OpenMP threads spin
  waiting for each other while other jobs hold a core: on 2026-12-07 at a load average of
  10, the trainer at 2 threads took 24 s an update (ours 1.4 s); with 1 thread it does not
  spin (bench/embedding_speed.py's `st_1thread`), so a loaded machine is measured with
  `--trainer-threads 1`, the trainer's better setting there.

Rounds: every round runs every (side, precision) once, ours then the trainer in even
rounds and the trainer first in odd ones, so the shared machine's load falls on both. Per
run: the load average before it and the CPU seconds all other processes used during it
(/proc/stat less the run's own). Pairs per second = steps x batch / whole-process wall
seconds; ratios of the medians and the median of each round's paired ratio. The report is
rewritten after every pair of runs (an interrupted bench keeps the finished pairs).

Writes bench/results/st_trainer_speed.json and .md (--quick: 3 updates, 1 round, to a
temporary folder unless --output-dir says where).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import REPO, afqmc_pairs_spec, child_env, write_results
from bench.load import cpu_model, load_average, machine_busy_seconds

TASK = "afqmc_pairs"
MAX_LENGTH = 128
LR, WEIGHT_DECAY, TEMPERATURE, CLIP_NORM = 1e-4, 0.01, 0.05, 1.0
SEED = 0
LOGGING_STEPS = 50  # the trainer's log lines; ours writes one a minute through a pipe
PRECISIONS = ("float32", "auto")
THREADS_SET = " (`--trainer-threads`; torch's default spins under load: the script's docstring)."
SIDES = ("ours", "trainer")
DEFAULT_ST_PYTHON = REPO / ".venv-current" / "bin" / "python"
# No network on either side: the trainer's hub and datasets calls stay local.
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2", "TOKENIZERS_PARALLELISM": "false"}
SPEC = afqmc_pairs_spec(TASK, MAX_LENGTH, "{loss: infonce, pooling: POOLING, temperature: "
                        f"{TEMPERATURE}, hard_negatives: 0}}", dev=False)


# --- the two commands --------------------------------------------------------------------

def our_experiment(work, model_dir, precision, steps, batch):
    """`mtl train`'s experiment: one contrastive task from the folder's weights."""
    from bench.embedding_speed import DATA

    return {"name": f"st_trainer_speed-{precision}", "data_root": str(DATA.parent),
            "task_specs": [str(work / "specs")], "backbone": {"init": str(model_dir)},
            "tasks": [TASK], "tasks_per_update": 1, "batch_size": batch, "max_length": MAX_LENGTH,
            "steps": steps, "seed": SEED, "precision": precision,
            "optimizer": {"name": "adamw", "lr": LR, "weight_decay": WEIGHT_DECAY,
                          "warmup_steps": 0, "global_clipnorm": CLIP_NORM},
            "checkpoint_every": steps, "keep_checkpoints": 1, "eval_every": 0}


def command_of(side, precision, args, work, run_dir):
    """The command line of one whole run (its output folder `run_dir`, fresh)."""
    if side == "ours":
        experiment = work / f"ours_{precision}.json"
        body = our_experiment(work, args.model, precision, args.steps, args.batch)
        body["cache_dir"] = str(run_dir.parent / f"{run_dir.name}_cache")  # tokenized afresh
        experiment.write_text(json.dumps(body), encoding="utf-8")
        return [sys.executable, "-m", "mtl_framework", "train", str(experiment), "--output", str(run_dir)]
    return [str(args.st_python), "-m", "bench.st_trainer_speed", "--worker", "--model", str(args.model),
            "--pairs", str(work / "pairs.json"), "--precision", precision, "--steps", str(args.steps),
            "--batch", str(args.batch), "--output-dir", str(run_dir)] + (
                ["--trainer-threads", str(args.trainer_threads)] if args.trainer_threads else [])


def folder_pooling(model_dir):
    """The folder's sentence-transformers pooling (1_Pooling), which ours is set to as well."""
    config = json.loads((Path(model_dir) / "1_Pooling" / "config.json").read_text(encoding="utf-8"))
    return "cls" if config.get("pooling_mode_cls_token") else "mean"


def afqmc_positive_pairs():
    """AFQMC train rows labelled 1, in file order: the trainer's dataset (ours reads the file)."""
    from bench.embedding_speed import afqmc

    rows = [(a, b) for a, b, label in afqmc("train") if label == "1"]
    return {"anchor": [a for a, _ in rows], "positive": [b for _, b in rows]}


# --- the trainer's process ----------------------------------------------------------------

def trainer_main(model_dir, pairs_path, precision, steps, batch, output_dir, threads=None):
    """SentenceTransformerTrainer + MultipleNegativesRankingLoss: what its docs show, offline;
    `threads`: torch's intra-op threads (None: its default)."""
    import datasets
    import sentence_transformers
    import torch
    import transformers
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from transformers import TrainerCallback
    from transformers.utils.import_utils import is_torch_bf16_available_on_device

    stamps = []

    class Stamps(TrainerCallback):  # each update's end, as ours' metrics.jsonl "time"
        def on_step_end(self, args, state, control, **kwargs):
            stamps.append(time.time())

    if threads:
        torch.set_num_threads(threads)
    bf16 = precision == "auto" and is_torch_bf16_available_on_device("cpu")
    model = SentenceTransformer(model_dir, device="cpu")
    model.max_seq_length = MAX_LENGTH
    pairs = json.loads(Path(pairs_path).read_text(encoding="utf-8"))
    dataset = datasets.Dataset.from_dict(pairs)
    arguments = SentenceTransformerTrainingArguments(
        output_dir=output_dir, max_steps=steps, per_device_train_batch_size=batch,
        learning_rate=LR, weight_decay=WEIGHT_DECAY, warmup_steps=0, lr_scheduler_type="linear",
        max_grad_norm=CLIP_NORM, bf16=bf16, use_cpu=True, seed=SEED, eval_strategy="no",
        save_strategy="steps", save_steps=steps, save_total_limit=1, logging_steps=LOGGING_STEPS,
        report_to="none", dataloader_num_workers=0)
    trainer = SentenceTransformerTrainer(model=model, args=arguments, train_dataset=dataset,
                                         loss=MultipleNegativesRankingLoss(model, scale=1 / TEMPERATURE),
                                         callbacks=[Stamps()])
    result = trainer.train()
    info = {"stamps": stamps, "train_runtime": result.metrics.get("train_runtime"),
            "train_loss": result.metrics.get("train_loss"), "bf16": bf16,
            "bf16_native": {"avx512_bf16": torch.cpu._is_avx512_bf16_supported(),
                            "amx_tile": torch.cpu._is_amx_tile_supported()},
            "pairs": len(dataset), "torch_threads": torch.get_num_threads(),
            "versions": {"sentence_transformers": sentence_transformers.__version__,
                         "transformers": transformers.__version__, "torch": torch.__version__,
                         "datasets": datasets.__version__}}
    (Path(output_dir) / "bench_stamps.json").write_text(json.dumps(info), encoding="utf-8")


# --- one timed run -------------------------------------------------------------------------

def timed(command, log_path, env):
    """(wall s, the child's CPU s from the kernel, exit code, others' CPU s meanwhile)."""
    busy = machine_busy_seconds()
    start = time.perf_counter()
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    cpu = usage.ru_utime + usage.ru_stime
    return wall, cpu, os.waitstatus_to_exitcode(status), machine_busy_seconds() - busy - cpu


def update_stamps(side, run_dir):
    """Wall-clock times (time.time()) at each update's end, as the side recorded them."""
    if side == "ours":
        lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
        return [json.loads(line)["time"] for line in lines if line.strip()], {}
    info = json.loads((run_dir / "bench_stamps.json").read_text(encoding="utf-8"))
    return info.pop("stamps"), info


def run_once(side, precision, args, work, round_index):
    run_dir = work / f"{side}_{precision}_r{round_index}"
    command = command_of(side, precision, args, work, run_dir)
    env = child_env(**OFFLINE)
    before = load_average()
    launched = time.time()
    wall, cpu, code, others = timed(command, work / f"{run_dir.name}.log", env)
    if code:
        raise SystemExit(f"{side} {precision} failed ({code}): see {work / f'{run_dir.name}.log'}")
    stamps, info = update_stamps(side, run_dir)
    if len(stamps) != args.steps:
        raise SystemExit(f"{side} {precision}: {len(stamps)} updates recorded, not {args.steps}")
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    pairs = args.steps * args.batch
    return {"round": round_index, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "pairs_per_s": round(pairs / wall, 2),
            "start_to_first_update_s": round(stamps[0] - launched, 2),
            "median_update_s": round(statistics.median(gaps), 4) if gaps else None,
            "updates_s": round(stamps[-1] - stamps[0], 2),
            "last_update_to_exit_s": round(launched + wall - stamps[-1], 2),
            "load_average_before": before, "others_cpu_s": round(others, 1), **info}


def commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=REPO, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


# --- the report ----------------------------------------------------------------------------

def summarize(samples, pairs):
    def med(key):
        values = [s[key] for s in samples if s.get(key) is not None]
        return round(statistics.median(values), 4) if values else None

    wall = med("wall_s")
    return {"runs": len(samples), "median_wall_s": wall, "pairs_per_s": round(pairs / wall, 2),
            "median_cpu_s": med("cpu_s"), "median_start_to_first_update_s": med("start_to_first_update_s"),
            "median_update_s": med("median_update_s"),
            "median_last_update_to_exit_s": med("last_update_to_exit_s")}


def build_report(samples, args, settings, started):
    pairs = args.steps * args.batch
    results = {}
    for precision in args.precisions:
        done = min(len(samples[side, precision]) for side in SIDES)  # whole pairs of runs
        if not done:
            continue
        ours, theirs = samples["ours", precision][:done], samples["trainer", precision][:done]
        entry = {"ours": summarize(ours, pairs), "trainer": summarize(theirs, pairs)}
        paired = [t["wall_s"] / o["wall_s"] for o, t in zip(ours, theirs)]
        entry["ours_over_trainer"] = round(entry["ours"]["pairs_per_s"] / entry["trainer"]["pairs_per_s"], 3)
        entry["ours_over_trainer_paired"] = round(statistics.median(paired), 3)
        entry["paired_range"] = [round(min(paired), 3), round(max(paired), 3)]
        entry["ours_ahead"] = all(r > 1 for r in paired)
        entry["samples"] = {"ours": ours, "trainer": theirs}
        results[precision] = entry
    return {"settings": settings, "results": results, "load_average_end": load_average(),
            "environment": {"cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
                            "python": platform.python_version()},
            "wall_seconds": round(time.perf_counter() - started, 1),
            "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "notes": ["Shared 2-core machine: other engineers' jobs ran meanwhile; each run records "
                      "the load average before it and the CPU seconds all other processes used "
                      "during it (others_cpu_s). Read the paired ratios.",
                      "Whole processes: interpreter and library imports, data reading and "
                      "tokenization, model load and build (ours traces its step), 200 updates, "
                      "the one checkpoint, exit."]}


def markdown(report):
    s, env = report["settings"], report["environment"]
    versions = s["trainer_versions"]
    lines = ["# Whole training processes: `mtl train` against SentenceTransformerTrainer", "",
             f"{env['cpu_model']}, {env['cpu_count']} cores, shared with other engineers' jobs "
             f"(load and their CPU seconds per run in the JSON). {s['steps']} updates of "
             f"{s['batch']} AFQMC pairs (train, label 1), MultipleNegativesRankingLoss scale 20 = "
             f"temperature 0.05, in-batch negatives, {s['pooling']} pooling, AdamW lr 1e-4 (linear decay, "
             "clip 1.0), one checkpoint at the end, no evaluation; both from the same BERT small "
             "folder (L6/H384/A6). sentence-transformers "
             f"{versions['sentence_transformers']}, transformers {versions['transformers']}, torch "
             f"{versions['torch']}. Each figure: the median of the runs counted in `runs` (sides "
             "interleaved, ours first in even rounds, the trainer first in odd ones), whole "
             "processes, start-up included.", "",
             "| precision | side | runs | pairs/s (whole process) | wall s | CPU s | start to 1st update s "
             "| s per update (median) | last update to exit s | ours / trainer (medians) | paired by round "
             "(range) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for precision, r in report["results"].items():
        for side in SIDES:
            v = r[side]
            ratio = (f"**{r['ours_over_trainer']:.2f}x** | {r['ours_over_trainer_paired']:.2f}x "
                     f"({r['paired_range'][0]:.2f}-{r['paired_range'][1]:.2f})") if side == "ours" else " | "
            name = "ours (`mtl train`)" if side == "ours" else "SentenceTransformerTrainer"
            lines.append(f"| {precision} | {name} | {v['runs']} | {v['pairs_per_s']:.1f} | "
                         f"{v['median_wall_s']:.1f} | {v['median_cpu_s']:.1f} | "
                         f"{v['median_start_to_first_update_s']:.1f} | {v['median_update_s']:.3f} | "
                         f"{v['median_last_update_to_exit_s']:.1f} | {ratio} |")
    lines += ["", "auto: ours " + s["our_auto_policy"] + "; the trainer "
              + ("bf16=True (autocast bfloat16, float32 weights)" if s["trainer_bf16"]
                 else "float32 (torch reports no bfloat16 on this CPU)") + ".",
              f"Threads: ours TensorFlow's default; the trainer {s['trainer_torch_threads']} torch "
              "thread(s)" + (THREADS_SET if s.get("trainer_threads_set") else ", torch's default."), "",
              "Load average before each run (1 min): " + "; ".join(
                  f"{p} {side} " + ", ".join(f"{x['load_average_before'][0]:.2f}" for x in r["samples"][side])
                  for p, r in report["results"].items() for side in SIDES) + ".",
              "CPU seconds other processes used during each run: " + "; ".join(
                  f"{p} {side} " + ", ".join(f"{x['others_cpu_s']:.0f}" for x in r["samples"][side])
                  for p, r in report["results"].items() for side in SIDES) + ".", "",
              f"Run: `python -m bench.st_trainer_speed`, finished {report['finished']} "
              f"({report['wall_seconds']:.0f} s), commit {s['commit']}."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--st-python", default=str(DEFAULT_ST_PYTHON),
                        help="a Python with sentence-transformers 6, datasets and accelerate")
    parser.add_argument("--model", help="a `mtl export --format transformers` folder (default: make one)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    parser.add_argument("--quick", action="store_true", help="3 updates, 1 round")
    parser.add_argument("--trainer-threads", type=int, help="torch threads of the trainer's process "
                        "(default: torch's own, 2 here; 1 under heavy load, see the docstring)")
    parser.add_argument("--output-dir")
    parser.add_argument("--commit", help="the commit measured, for a tree exported from git "
                        "(git archive: the tree stays still while others edit theirs); default HEAD")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--pairs", help=argparse.SUPPRESS)
    parser.add_argument("--precision", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return trainer_main(args.model, args.pairs, args.precision, args.steps, args.batch, args.output_dir,
                            args.trainer_threads)
    if args.quick:
        args.steps, args.rounds = 3, 1
    from bench.embedding_speed import make_model
    from mtl_framework.config.precision import resolve_precision

    work = Path(tempfile.mkdtemp(prefix="bench_st_trainer_speed_"))
    started = time.perf_counter()

    def log(message):
        print(f"[{time.perf_counter() - started:6.0f}s] {message}", flush=True)

    args.model = Path(args.model) if args.model else make_model(work, log)
    (work / "specs").mkdir()
    pooling = folder_pooling(args.model)
    (work / "specs" / f"{TASK}.yaml").write_text(SPEC.replace("POOLING", pooling), encoding="utf-8")
    pairs = afqmc_positive_pairs()
    (work / "pairs.json").write_text(json.dumps(pairs, ensure_ascii=False), encoding="utf-8")
    settings = {"steps": args.steps, "batch": args.batch, "max_length": MAX_LENGTH, "lr": LR,
                "weight_decay": WEIGHT_DECAY, "temperature": TEMPERATURE, "clip_norm": CLIP_NORM,
                "seed": SEED, "pairs": len(pairs["anchor"]), "pooling": pooling, "model": str(args.model),
                "backbone": json.loads((args.model / "config.json").read_text(encoding="utf-8")),
                "our_auto_policy": resolve_precision("auto")[0], "rounds": args.rounds,
                "quick": args.quick, "work": str(work), "commit": args.commit or commit(),
                "our_experiment": our_experiment(work, args.model, "PRECISION", args.steps, args.batch),
                "trainer_logging_steps": LOGGING_STEPS,
                "trainer_threads_set": args.trainer_threads, "command": sys.argv[1:]}
    samples = {(side, p): [] for side in SIDES for p in args.precisions}
    out = Path(args.output_dir or (work if args.quick else REPO / "bench" / "results"))
    for r in range(args.rounds):
        for precision in args.precisions:
            for side in (SIDES if r % 2 == 0 else SIDES[::-1]):
                log(f"round {r + 1}/{args.rounds}: {side} {precision}")
                sample = run_once(side, precision, args, work, r)
                samples[side, precision].append(sample)
                log(f"  {sample['wall_s']:.1f} s, {sample['pairs_per_s']:.1f} pairs/s, CPU "
                    f"{sample['cpu_s']:.1f} s, first update at {sample['start_to_first_update_s']:.1f} s, "
                    f"others used {sample['others_cpu_s']:.0f} CPU s")
                if all(samples[k, precision] for k in SIDES):  # a pair more: the report so far
                    write_report(samples, args, settings, started, out)


def write_report(samples, args, settings, started, out):
    trainer = [s for (side, _), runs in samples.items() if side == "trainer" for s in runs]
    settings.update(trainer_versions=trainer[0]["versions"],
                    trainer_torch_threads=trainer[0]["torch_threads"],
                    trainer_bf16=any(s["bf16"] for s in samples.get(("trainer", "auto"), [])),
                    trainer_pairs=trainer[0]["pairs"])
    report = build_report(samples, args, settings, started)
    write_results(out, "st_trainer_speed", report, markdown(report))


if __name__ == "__main__":
    main()
