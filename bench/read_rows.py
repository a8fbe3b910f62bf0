"""The last layer at the rows heads read (issue 52 point 5): `MultiTaskModel.run_update`
on the same drawn micro-batches with the backbone's last layer at each head's
`read_positions` alone ([CLS], MLM's masked tokens, coreference's span ends) and with it
padded (every position, the step before), blocks of the two alternated in one process,
on the demo mixture and bench/main_job.py's 8-family catalog mixture, float32 and `auto`,
TensorFlow, CPU.

    .venv/bin/python -m bench.read_rows [--mixtures demo catalog] [--precisions float32 auto]
        [--updates 12] [--rounds 5] [--quick]

Each cell runs in a worker process (`--worker`): the experiment main_job.py's `mtl train`
runs (bench.main_job.experiment_text), `--updates` updates drawn once from its mixture,
each way traced on them first (untimed), then `--rounds` rounds of one block each way
(order alternating). s/update = a block's wall seconds / its updates; ratios: medians,
and the median of the rounds' paired ratios. Writes bench/results/read_rows.json and .md
(--quick: a temporary folder).
"""
import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def worker(mixture, precision, updates, rounds, data_root, workdir):
    from bench.main_job import experiment_text
    from mtl_framework.loop.run import Run

    path = Path(workdir) / "experiment.yaml"
    path.write_text(experiment_text(mixture, precision, 1000, Path(workdir) / "cache", data_root,
                                    REPO), encoding="utf-8")
    run = Run(str(path), output=str(Path(workdir) / "run"), log=lambda _: None)
    model = run.model
    drawn = [[model.mixture.next() for _ in range(model.tasks_per_update)] for _ in range(updates)]
    reads_positions = model._reads_positions

    def block(reads):
        model._reads_positions = reads_positions if reads else (lambda: False)
        wall, cpu = time.perf_counter(), time.process_time()
        for update in drawn:
            model.run_update(list(update))
        return (time.perf_counter() - wall) / updates, (time.process_time() - cpu) / updates

    for reads in (True, False):  # each way traced
        block(reads)
    blocks = {"read_rows": [], "padded": []}
    for r in range(rounds):
        for reads in ((True, False) if r % 2 == 0 else (False, True)):
            blocks["read_rows" if reads else "padded"].append(block(reads))
    run.close()
    tasks = sorted({task for update in drawn for task, _ in update})
    return {"mixture": mixture, "precision": precision, "policy": run.backbone.dtype_policy.name,
            "updates": updates, "rounds": rounds, "tasks": tasks, "blocks": blocks}


def summarize(cell):
    read = [wall for wall, _ in cell["blocks"]["read_rows"]]
    padded = [wall for wall, _ in cell["blocks"]["padded"]]
    return {"read_rows_s": statistics.median(read), "padded_s": statistics.median(padded),
            "speedup": statistics.median(padded) / statistics.median(read),
            "speedup_paired": statistics.median(p / r for r, p in zip(read, padded))}


def markdown(report):
    lines = [f"# The last layer at the rows heads read ({report['cpu']}, {os.cpu_count()} cores)", "",
             "`run_update` on the same drawn micro-batches, the backbone's last layer at each "
             "head's `read_positions` alone against it padded (the step before), blocks "
             "alternated in one worker process per cell, TensorFlow, CPU. Speed-up: padded / "
             "read rows s/update (medians; paired: the median of the rounds' ratios).", "",
             "| mixture | precision | read rows s/update | padded s/update | speed-up (paired) "
             "| other processes, cores |", "|---|---|---|---|---|---|"]
    for cell in report["cells"]:
        s = cell["summary"]
        lines.append(f"| {cell['mixture']} | {cell['precision']} ({cell['policy']}) | "
                     f"{s['read_rows_s']:.4f} | {s['padded_s']:.4f} | {s['speedup']:.2f}x "
                     f"({s['speedup_paired']:.2f}x) | {cell['other_cores']:.2f} |")
    lines += ["", "Tasks: " + "; ".join(f"{c['mixture']}: {', '.join(c['tasks'])}"
                                        for c in report["cells"][:1] + report["cells"][-1:]), "",
              f"Run: `{report['command']}`, {report['seconds']:.0f} s at {report['commit']}."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mixtures", nargs="+", default=["demo", "catalog"])
    parser.add_argument("--precisions", nargs="+", default=["float32", "auto"])
    parser.add_argument("--updates", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--data-root", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--quick", action="store_true", help="2 updates, 1 round; a temporary folder")
    parser.add_argument("--output-dir", default=None)
    parser.add_argument("--worker", nargs=3, metavar=("MIXTURE", "PRECISION", "WORKDIR"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.updates, args.rounds = 2, 1
    if args.worker:
        mixture, precision, workdir = args.worker
        print(json.dumps(worker(mixture, precision, args.updates, args.rounds, args.data_root,
                                workdir)))
        return
    out_dir = Path(args.output_dir or (tempfile.mkdtemp() if args.quick else HERE / "results"))
    out_dir.mkdir(parents=True, exist_ok=True)
    started, cells = time.time(), []
    for mixture in args.mixtures:
        for precision in args.precisions:
            print(f"[{time.time() - started:6.0f}s] {mixture} / {precision}", flush=True)
            with tempfile.TemporaryDirectory() as workdir:
                from bench.load import machine_busy_seconds

                busy, own = machine_busy_seconds(), resource.getrusage(resource.RUSAGE_CHILDREN)
                wall = time.time()
                done = subprocess.run(
                    [sys.executable, "-m", "bench.read_rows", "--worker", mixture, precision,
                     workdir, "--updates", str(args.updates), "--rounds", str(args.rounds),
                     "--data-root", args.data_root],
                    cwd=REPO, capture_output=True, text=True,
                    env=dict(os.environ, PYTHONPATH=str(REPO)))
                if done.returncode:
                    raise SystemExit(f"{mixture}/{precision} worker failed:\n{done.stderr[-3000:]}")
                used = resource.getrusage(resource.RUSAGE_CHILDREN)
                child = (used.ru_utime + used.ru_stime) - (own.ru_utime + own.ru_stime)
                cell = json.loads(done.stdout.strip().splitlines()[-1])
                cell["other_cores"] = max(0.0, machine_busy_seconds() - busy - child) / (time.time() - wall)
                cell["summary"] = summarize(cell)
                cells.append(cell)
                s = cell["summary"]
                print(f"  read rows {s['read_rows_s']:.4f} s/update, padded {s['padded_s']:.4f}: "
                      f"{s['speedup']:.2f}x (paired {s['speedup_paired']:.2f}x)", flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short=9", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()
    report = {"cpu": cpu_name(), "commit": commit, "seconds": time.time() - started,
              "command": "python -m bench.read_rows " + " ".join(argv or sys.argv[1:]),
              "cells": cells}
    (out_dir / "read_rows.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    (out_dir / "read_rows.md").write_text(markdown(report), encoding="utf-8")
    print(f"wrote {out_dir / 'read_rows.md'}")


def cpu_name():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


if __name__ == "__main__":
    main()
