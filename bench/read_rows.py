"""The last layer at the rows heads read (issue 52 point 5): `MultiTaskModel.run_update`
on the same drawn micro-batches with the backbone's last layer at each head's
`read_positions` alone ([CLS], MLM's masked tokens, coreference's span ends) and with it
padded (every position, the step before; a second run of the same experiment), blocks of
the two alternated in one process, on the demo mixture and bench/main_job.py's 8-family
catalog mixture, float32 and `auto`, CPU; TensorFlow, or JAX with `--backend jax` (its
workers in .venv-jax; MLM's count padded to eighths of the row, step/jax.py _read_slots; the
compilations each way are counted).

    .venv/bin/python -m bench.read_rows [--mixtures demo catalog] [--precisions float32 auto]
        [--updates 12] [--rounds 5] [--backend tensorflow|jax] [--quick]

Each cell runs in a worker process (`--worker`): the experiment main_job.py's `mtl train`
runs (bench.main_job.experiment_text), `--updates` updates drawn once from its mixture,
each way traced on them first (untimed), then `--rounds` rounds of one block each way
(order alternating). s/update = a block's wall seconds / its updates; ratios: medians,
and the median of the rounds' paired ratios. Writes bench/results/read_rows.json and .md,
one report per backend (--quick: a temporary folder).
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
    # one run each way, so that each compiles (traces) every step it needs itself: a step
    # both ways share (a head that reads every position) counts for both
    runs = {reads: Run(str(path), output=str(Path(workdir) / f"run_{reads}"), log=lambda _: None)
            for reads in (True, False)}
    drawn = [[runs[True].model.mixture.next() for _ in range(runs[True].model.tasks_per_update)]
             for _ in range(updates)]
    runs[False].model._with_read_positions = lambda task, batch: batch

    def block(reads):
        model = runs[reads].model
        wall, cpu = time.perf_counter(), time.process_time()
        for update in drawn:
            logs = model.run_update(list(update))
        float(logs[-1]["loss"])  # JAX dispatches asynchronously: wait for the last
        return (time.perf_counter() - wall) / updates, (time.process_time() - cpu) / updates

    def traces(reads):
        return sum(runs[reads].model.tracing_counts()["micro_step"].values())

    first = {}
    for reads in (True, False):  # each way traced (JAX: compiled) first
        wall = time.perf_counter()
        block(reads)
        first["read_rows" if reads else "padded"] = {"traces": traces(reads),
                                                     "seconds": time.perf_counter() - wall}
    blocks = {"read_rows": [], "padded": []}
    for r in range(rounds):
        for reads in ((True, False) if r % 2 == 0 else (False, True)):
            blocks["read_rows" if reads else "padded"].append(block(reads))
    run = runs[True]
    for each in runs.values():
        each.close()
    tasks = sorted({task for update in drawn for task, _ in update})
    import keras

    return {"mixture": mixture, "precision": precision, "policy": run.backbone.dtype_policy.name,
            "backend": keras.backend.backend(), "updates": updates, "rounds": rounds,
            "tasks": tasks, "blocks": blocks, "first_block": first}


def summarize(cell):
    read = [wall for wall, _ in cell["blocks"]["read_rows"]]
    padded = [wall for wall, _ in cell["blocks"]["padded"]]
    return {"read_rows_s": statistics.median(read), "padded_s": statistics.median(padded),
            "speedup": statistics.median(padded) / statistics.median(read),
            "speedup_paired": statistics.median(p / r for r, p in zip(read, padded))}


def markdown(report):
    backend = report.get("backend", "tensorflow")
    lines = [f"# The last layer at the rows heads read, {backend} ({report['cpu']}, "
             f"{os.cpu_count()} cores)", "",
             "`run_update` on the same drawn micro-batches, the backbone's last layer at each "
             "head's `read_positions` alone against it padded (the step before), blocks "
             f"alternated in one worker process per cell, {backend}, CPU. Speed-up: padded / "
             "read rows s/update (medians; paired: the median of the rounds' ratios). First "
             "block: each way's first pass over the updates, its traces (JAX: compilations) "
             "and seconds.", "",
             "| mixture | precision | read rows s/update | padded s/update | speed-up (paired) "
             "| first block: traces, s (read rows; padded) | other processes, cores |",
             "|---|---|---|---|---|---|---|"]
    for cell in report["cells"]:
        s, f = cell["summary"], cell.get("first_block", {})
        first = "; ".join(f"{f[way]['traces']}, {f[way]['seconds']:.0f}" for way in ("read_rows", "padded")
                          if way in f) or "-"
        lines.append(f"| {cell['mixture']} | {cell['precision']} ({cell['policy']}) | "
                     f"{s['read_rows_s']:.4f} | {s['padded_s']:.4f} | {s['speedup']:.2f}x "
                     f"({s['speedup_paired']:.2f}x) | {first} | {cell['other_cores']:.2f} |")
    lines += ["", "Tasks: " + "; ".join(f"{c['mixture']}: {', '.join(c['tasks'])}"
                                        for c in report["cells"][:1] + report["cells"][-1:]), "",
              f"Run: `{report['command']}`, {report['seconds']:.0f} s at {report['commit']}."
              + (" " + report["note"] if report.get("note") else "")]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mixtures", nargs="+", default=["demo", "catalog"])
    parser.add_argument("--precisions", nargs="+", default=["float32", "auto"])
    parser.add_argument("--updates", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--data-root", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--backend", choices=["tensorflow", "jax"], default="tensorflow",
                        help="jax: workers run .venv-jax's Python with KERAS_BACKEND=jax")
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
                python = str(REPO / ".venv-jax" / "bin" / "python") if args.backend == "jax" \
                    else sys.executable
                done = subprocess.run(
                    [python, "-m", "bench.read_rows", "--worker", mixture, precision,
                     workdir, "--updates", str(args.updates), "--rounds", str(args.rounds),
                     "--data-root", args.data_root],
                    cwd=REPO, capture_output=True, text=True,
                    env=dict(os.environ, PYTHONPATH=str(REPO), KERAS_BACKEND=args.backend))
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
              "backend": args.backend,
              "command": "python -m bench.read_rows " + " ".join(argv or sys.argv[1:]),
              "cells": cells}
    write_report(out_dir, report)


def write_report(out_dir, report):
    """read_rows.json holds one report per backend ({backend: report}); a run replaces its
    backend's and keeps the other's. The .md has them in that order."""
    path = out_dir / "read_rows.json"
    reports = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    if "cells" in reports:  # written before the JAX run: TensorFlow's report alone
        reports = {"tensorflow": reports}
    reports[report.get("backend", "tensorflow")] = report
    path.write_text(json.dumps(reports, indent=1) + "\n", encoding="utf-8")
    (out_dir / "read_rows.md").write_text(
        "\n".join(markdown(reports[b]) for b in ("tensorflow", "jax") if b in reports), encoding="utf-8")
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
