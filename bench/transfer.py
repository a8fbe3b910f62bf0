"""Transfer check: does a run's mixed pretraining help fine-tuning, against the same
initial weights without pretraining? A thin use of `mtl benchmark`.

    .venv/bin/python -m bench.transfer [RUN_DIR] [--suite suites/clue_small.yaml]
        [--data-root ../shared/data] [--output bench/results/transfer]

1. `mtl export RUN_DIR --format keras` -> RUN_DIR/export/keras (if not there yet);
2. the run's step-0 model (same experiment, seed and vocab, not trained) ->
   RUN_DIR/export/initial/keras (benchmark.initial_export);
3. `mtl benchmark` of both on the suite -> OUTPUT/results.{json,md,png}, resumable;
   OUTPUT/machine.json records wall and CPU seconds and the load average (the
   machine is shared). RUN_DIR defaults to runs/demo (`make demo`).
"""
import argparse
import json
import os
import platform
import sys
import time

from bench import REPO
from bench.load import load_average, proc_cpu_seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", nargs="?", default=str(REPO / "runs" / "demo"))
    parser.add_argument("--suite", default=str(REPO / "suites" / "clue_small.yaml"))
    parser.add_argument("--data-root",
                        default=os.environ.get("MTL_DATA_ROOT", str(REPO.parent / "shared" / "data")))
    parser.add_argument("--output", default=str(REPO / "bench" / "results" / "transfer"))
    args = parser.parse_args()

    from mtl_framework.cli import main as mtl
    from mtl_framework.transfer.benchmark import initial_export

    started, load_start = time.perf_counter(), load_average()
    trained = os.path.join(args.run_dir, "export", "keras")
    initial = os.path.join(args.run_dir, "export", "initial")
    if not os.path.exists(os.path.join(trained, "config.json")):
        if mtl(["export", args.run_dir, "--format", "keras", "--output", trained]) != 0:
            return 2
    if not os.path.exists(os.path.join(initial, "keras", "config.json")):
        initial_export(args.run_dir, initial)
    code = mtl(["benchmark", trained, os.path.join(initial, "keras"), "--suite", args.suite,
                "--data-root", args.data_root, "--output", args.output])
    if code == 0:
        record = {"wall_s": round(time.perf_counter() - started, 1),
                  "cpu_s": round(proc_cpu_seconds(os.getpid()), 1),
                  "load_average": [load_start, load_average()],
                  "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
                             f"{platform.python_version()}"}
        with open(os.path.join(args.output, "machine.json"), "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1)
    return code


if __name__ == "__main__":
    sys.exit(main())
