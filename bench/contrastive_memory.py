"""How many in-batch negatives fit (issue 43, point 6 "Memory"), CPU, TF backend.

    .venv/bin/python -m bench.contrastive_memory [--precision float32] [--time-cap 540]

The largest batch B of (query, positive) pairs, K = 2 texts a row, each text 128 tokens
(no padding, random ids), whose training step runs on this machine at RoFormerV2 `small`
(L6/H384/A6, bench/backbone.py's CONFIGS): every query's candidates are the B positives,
so it has B - 1 in-batch negatives. The step is MultiTaskModel.run_update of one
contrastive task (InfoNCE, in-batch negatives, the family's defaults), AdamW, as a run
with only that task trains; the 2 x B texts go through the backbone as one batch.

Each try is a child process (`--try B`) that builds the model and runs two updates (the
first traces). The parent watches it every 0.1 s and stops it when its resident memory
passes `--budget-gib` (default: the machine's memory less 2 GiB for the system and the
other users), when the machine's MemAvailable falls under `--floor-gib` (other users'
processes must not be pushed out), or when the try passes its time. Peak RSS: the child's
ru_maxrss (os.wait4, so also for a try that was stopped); the watcher's highest VmRSS
beside it. Search: B doubles from `--start` until a try does not fit, then bisection
between the last B that fitted and the first that did not, to `--resolution` pairs,
all within `--time-cap` seconds.

`--cached-chunk C` measures the cached-gradient step instead (GradCache, the head's
`embedding.cached_chunk`, as sentence-transformers' CachedMultipleNegativesRankingLoss): the
2 x B texts go through the backbone C at a time, twice; its entry sits beside the plain one
(`--keep`), told apart by `cached_chunk` (0: the plain step).

Writes bench/results/contrastive_memory.json and .md (--quick: a temporary folder unless
--output-dir says where).
"""
import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import REPO, child_env
from bench.backbone import COMMON, CONFIGS
from bench.load import cpu_model, load_average

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

LENGTH, TEXTS_PER_ROW = 128, 2
OPTIMIZER = {"name": "adamw", "lr": 1e-4, "warmup_steps": 100}
GIB = 2 ** 30
FITS = {True: "fits", False: "does not fit", None: "undecided (time)"}
CACHED_LOSS = ("embedding.cached_chunk: C (GradCache; step/tensorflow.py _cached_gradients): each "
               "entry's cached_chunk says which step it measured (0: the plain one)")


# --- the child: one try -----------------------------------------------------------

def status_kib(pid, field):
    """A `field` (VmRSS, VmHWM) of /proc/PID/status in KiB; 0 when the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((int(line.split()[1]) for line in f if line.startswith(field + ":")), 0)
    except OSError:
        return 0


def try_pairs(pairs, config_name, precision, updates, cached_chunk=0):
    """Build the model, run `updates` updates of `pairs` pairs; one JSON line on stdout."""
    import keras

    from bench.contrastive_cost import contrastive_batch
    from mtl_framework import RoFormerV2Backbone
    from mtl_framework.families.heads import build_head
    from mtl_framework.step.distributed import precision_policy
    from mtl_framework.step.model import MultiTaskModel
    from mtl_framework.step.optimizers import build_optimizer

    keras.utils.set_random_seed(0)
    config = dict(COMMON, **CONFIGS[config_name])
    with precision_policy(precision):
        backbone = RoFormerV2Backbone(**config)
        head = build_head("contrastive", None, config["hidden_size"], name="pairs",
                          cached_chunk=cached_chunk)
        model = MultiTaskModel(backbone, {"pairs": head}, tasks_per_update=1)
    model.compile(optimizer=build_optimizer(OPTIMIZER, total_steps=10 ** 6))
    model.build_all()
    after_build = status_kib(os.getpid(), "VmRSS") * 1024
    rng = np.random.default_rng(0)
    batch = contrastive_batch(pairs, LENGTH, rng, config["vocab_size"])
    seconds, losses = [], []
    for _ in range(updates):
        start = time.perf_counter()
        logs = model.run_update([("pairs", batch)])
        seconds.append(round(time.perf_counter() - start, 2))
        losses.append(float(logs[0]["loss"]))
        print(json.dumps({"update_s": seconds[-1]}), flush=True)  # the parent logs progress
    print(json.dumps({"pairs": pairs, "update_s": seconds, "loss": losses,
                      "rss_after_build": after_build,
                      "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}),
          flush=True)


# --- the parent: watch, search ------------------------------------------------------

def mem_available():
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))


def mem_total():
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def run_try(pairs, args, time_left, workdir, log):
    """{pairs, fits, why, peak_rss (ru_maxrss), watched_peak_rss, seconds, ...} of one child."""
    command = [sys.executable, "-m", "bench.contrastive_memory", "--try", str(pairs),
               "--config", args.config, "--precision", args.precision, "--updates", str(args.updates),
               "--cached-chunk", str(args.cached_chunk)]
    out_path = Path(workdir) / f"try_{pairs}.out"
    with open(out_path, "w") as out, open(Path(workdir) / f"try_{pairs}.err", "w") as err:
        child = subprocess.Popen(command, stdout=out, stderr=err,
                                 env=child_env(CUDA_VISIBLE_DEVICES=""))
        start, watched, least_available, why = time.perf_counter(), 0, mem_available(), None
        cap = min(args.try_cap, time_left)
        while True:
            done, status, usage = os.wait4(child.pid, os.WNOHANG)
            if done:
                break
            rss = status_kib(child.pid, "VmRSS") * 1024
            watched = max(watched, rss)
            available = mem_available()
            least_available = min(least_available, available)
            if why is None:
                if rss > args.budget_gib * GIB:
                    why = f"RSS passed the budget of {args.budget_gib} GiB"
                elif available < args.floor_gib * GIB:
                    why = (f"the machine's MemAvailable fell under {args.floor_gib} GiB "
                           f"(this try's RSS {rss / GIB:.1f} GiB)")
                elif time.perf_counter() - start > cap:
                    why = f"over the time left for it ({cap:.0f} s)"
                if why:
                    child.kill()
            time.sleep(0.1)
        child.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    lines = [json.loads(line) for line in out_path.read_text().splitlines() if line.startswith("{")]
    result = next((line for line in lines if "pairs" in line), None)
    if why is None and (child.returncode != 0 or result is None):
        why = f"the child exited with {child.returncode} (see {out_path.with_suffix('.err')})"
    stopped_by_time = why is not None and why.startswith("over the time")
    # fits: True, False, or None where the time ran out first (neither shown)
    entry = {"pairs": pairs, "in_batch_negatives_per_query": pairs - 1,
             "texts_per_update": pairs * TEXTS_PER_ROW,
             "fits": None if stopped_by_time else why is None, "why_not": why,
             "peak_rss": usage.ru_maxrss * 1024, "watched_peak_rss": watched,
             "least_mem_available": least_available, "seconds": round(seconds, 1),
             "load_average": load_average()}
    if result:
        entry.update(update_s=result["update_s"], loss=result["loss"],
                     rss_after_build=result["rss_after_build"])
    else:
        entry["update_s"] = [line["update_s"] for line in lines]
    log(f"B={pairs}: {FITS[entry['fits']]} {why or ''}; peak RSS "
        f"{entry['peak_rss'] / GIB:.2f} GiB; updates {entry['update_s']}; {seconds:.0f} s")
    return entry


def next_pairs(low, high, start):
    """The next B to try: doubling from `start` until one does not fit, then the middle."""
    if high is None:
        return start if low is None else 2 * low
    return (low + high) // 2


def search(args, workdir, log, earlier=()):
    """Doubling from args.start, then bisection; every try in order, the stop reason.
    `earlier`: tries of a previous search (--resume) whose decisions it continues from."""
    started, tries = time.perf_counter(), list(earlier)
    low = max((t["pairs"] for t in tries if t["fits"]), default=None)
    high = min((t["pairs"] for t in tries if t["fits"] is False), default=None)

    def left():
        return args.time_cap - (time.perf_counter() - started)

    while left() > 0:
        if low is None and high is not None:
            return tries, low, high, f"the first try (B={high}) does not fit"
        if high is not None and high - low <= args.resolution:
            return tries, low, high, f"bisected to {args.resolution} pairs"
        pairs = next_pairs(low, high, args.start)
        entry = run_try(pairs, args, left(), workdir, log)
        tries.append(entry)
        if entry["fits"] is None:  # the time ran out: the bracket is what was decided before
            return tries, low, high, "time cap reached during a try"
        if entry["fits"]:
            low = pairs
        else:
            high = pairs
    return tries, low, high, "time cap reached"


def environment(args):
    env = {"cpu_count": os.cpu_count(), "python": platform.python_version(),
           "memory_gib": round(mem_total() / GIB, 1), "cpu_model": cpu_model(),
           "rss_measure": "the child's ru_maxrss (os.wait4), and its VmRSS polled every 0.1 s "
                          "(psutil is not installed)"}
    try:
        import keras
        import tensorflow as tf

        env.update(tensorflow=tf.__version__, keras=keras.__version__)
    except ImportError:
        pass
    return env


def rss_fit(entry):
    """Peak RSS against B over the tries that fitted, least squares, and the B at which it
    reaches the budget. The plain step: a line (its activations, linear in B, dwarf the
    [B, B] logits). The cached-gradient step: fixed + a B + c B^2, since what grows there
    is the float32 [B, B] logits and the loss's copies of them (needs 3 tries)."""
    fitted = [t for t in entry["tries"] if t["fits"]]
    pairs = np.array([t["pairs"] for t in fitted], float)
    peaks = np.array([t["peak_rss"] for t in fitted], float)
    budget = entry["budget_gib"] * GIB
    if not entry.get("cached_chunk"):
        if len(fitted) < 2:
            return None
        slope, fixed = np.polyfit(pairs, peaks, 1)
        return {"fixed_gib": round(fixed / GIB, 3), "mib_per_pair": round(slope / 2 ** 20, 2),
                "budget_pairs": int((budget - fixed) / slope)}
    if len(fitted) < 3:
        return None
    square, slope, fixed = np.polyfit(pairs, peaks, 2)
    roots = [r.real for r in np.roots([square, slope, fixed - budget]) if abs(r.imag) < 1e-9 and r.real > 0]
    return {"fixed_gib": round(fixed / GIB, 3), "mib_per_pair": round(slope / 2 ** 20, 4),
            "bytes_per_pair_squared": round(square, 2),
            "budget_pairs": int(min(roots)) if roots else None}


def markdown(report):
    lines = ["# In-batch negatives that fit: a contrastive training step at small / 128", "",
             f"{report['environment']['cpu_model']}, {report['environment']['memory_gib']} GiB, "
             f"TF {report['environment'].get('tensorflow')}. B (query, positive) pairs x 2 texts x 128 "
             "tokens, one contrastive task (InfoNCE, in-batch negatives: B - 1 per query), "
             "MultiTaskModel.run_update, AdamW; each try a child process running "
             f"{report['settings']['updates_per_try']} update(s) (the first traces).", ""]
    for entry in report["entries"]:
        step = (f"cached-gradient step, {entry['cached_chunk']} texts a chunk"
                if entry.get("cached_chunk") else "plain step")
        lines += [f"## {entry['precision']}, {step}: largest B that fits: **{entry['largest_fitting']}** "
                  f"({(entry['largest_fitting'] or 1) - 1} in-batch negatives per query); smallest "
                  f"that did not: {entry['smallest_not_fitting'] or 'none found'}; stopped: "
                  f"{entry['stopped']}", "",
                  f"Budget: RSS <= {entry['budget_gib']} GiB, the machine's MemAvailable kept >= "
                  f"{entry['floor_gib']} GiB. Search {entry['search_seconds']:.0f} s.", "",
                  "| B pairs | texts | fits | peak RSS GiB | update s | why not |",
                  "|---|---|---|---|---|---|"]
        for t in entry["tries"]:
            lines.append(f"| {t['pairs']} | {t['texts_per_update']} | {FITS[t['fits']]} | "
                         f"{t['peak_rss'] / GIB:.2f} | {', '.join(str(s) for s in t['update_s'])} | "
                         f"{t['why_not'] or ''} |")
        fit = rss_fit(entry)
        if fit and "bytes_per_pair_squared" in fit:
            lines += ["", f"Peak RSS over the tries that fitted: {fit['fixed_gib']:.2f} GiB + "
                      f"{fit['mib_per_pair']:.3f} MiB x B + {fit['bytes_per_pair_squared']:.1f} "
                      f"bytes x B^2 (least squares; the [B, B] logits grow as B^2); that curve "
                      f"reaches the budget at B ~ {fit['budget_pairs']} (an extrapolation)."]
        elif fit:
            lines += ["", f"Peak RSS over the tries that fitted: {fit['fixed_gib']:.2f} GiB + "
                      f"{fit['mib_per_pair']:.1f} MiB per pair (least squares); at that slope the "
                      f"budget holds B ~ {fit['budget_pairs']}."]
        lines.append("")
    lines += [f"Cached-gradient loss: {CACHED_LOSS}.", ""]
    lines += [f"Note: {note}" for note in report.get("notes", [])[1:]] + [""]
    lines += [
              f"Run: `python -m bench.contrastive_memory`, finished {report['finished']}."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="small", choices=sorted(CONFIGS))
    parser.add_argument("--precision", default="float32",
                        help="Keras policy of the step: float32, mixed_bfloat16 (our auto here), ...")
    parser.add_argument("--start", type=int, default=32, help="first B tried (pairs)")
    parser.add_argument("--resolution", type=int, default=16, help="bisection stops at this many pairs")
    parser.add_argument("--budget-gib", type=float, default=round(mem_total() / GIB - 2, 1))
    parser.add_argument("--floor-gib", type=float, default=1.5)
    parser.add_argument("--time-cap", type=float, default=540, help="seconds for the whole search")
    parser.add_argument("--try-cap", type=float, default=300, help="seconds for one try")
    parser.add_argument("--updates", type=int, default=2)
    parser.add_argument("--cached-chunk", type=int, default=0,
                        help="texts per chunk of the cached-gradient step (0: the plain step)")
    parser.add_argument("--quick", action="store_true", help="L4-H256-A4, 2 GiB budget, 120 s")
    parser.add_argument("--output-dir")
    parser.add_argument("--keep", action="store_true",
                        help="keep the existing JSON's entries of other precisions")
    parser.add_argument("--resume", action="store_true",
                        help="continue the search of the existing JSON (same precision and config) "
                             "from its decided tries (an undecided one is tried again)")
    parser.add_argument("--markdown", action="store_true",
                        help="rewrite contrastive_memory.md from the existing JSON, measure nothing")
    parser.add_argument("--try", dest="try_pairs", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.try_pairs:
        return try_pairs(args.try_pairs, args.config, args.precision, args.updates, args.cached_chunk)
    if args.markdown:
        out = Path(args.output_dir or REPO / "bench" / "results")
        report = json.loads((out / "contrastive_memory.json").read_text(encoding="utf-8"))
        for entry in report["entries"]:  # the fit as rss_fit computes it now
            entry.pop("rss_per_pair", None)
            fit = rss_fit(entry)
            if fit:
                entry["rss_per_pair"] = fit
        (out / "contrastive_memory.json").write_text(json.dumps(report, indent=1) + "\n",
                                                      encoding="utf-8")
        (out / "contrastive_memory.md").write_text(markdown(report), encoding="utf-8")
        return print(markdown(report))
    if args.quick:
        args.config, args.budget_gib, args.time_cap, args.start = "L4-H256-A4", 2.0, 120, 8
    workdir = tempfile.mkdtemp(prefix="bench_contrastive_memory_")
    started = time.perf_counter()

    def log(message):
        print(f"[{time.perf_counter() - started:6.0f}s] {message}", flush=True)

    log(f"budget {args.budget_gib} GiB RSS, floor {args.floor_gib} GiB available, "
        f"{args.time_cap:.0f} s; child logs in {workdir}")
    earlier, earlier_seconds = [], 0.0
    previous = Path(args.output_dir or REPO / "bench" / "results") / "contrastive_memory.json"
    if args.resume and previous.exists():  # continue that search: its decided tries count
        old = [e for e in json.loads(previous.read_text(encoding="utf-8"))["entries"]
               if e["precision"] == args.precision and e["config"] == args.config
               and e.get("cached_chunk", 0) == args.cached_chunk]
        earlier = old[0]["tries"] if old else []  # an undecided one stays on record, tried again
        earlier_seconds = old[0]["search_seconds"] if old else 0.0
        log(f"resuming from the {len(earlier)} tries of {previous}")
    tries, low, high, stopped = search(args, workdir, log, earlier)
    entry = {"precision": args.precision, "config": args.config, "cached_chunk": args.cached_chunk,
             "backbone": dict(COMMON, **CONFIGS[args.config]),
             "length": LENGTH, "texts_per_row": TEXTS_PER_ROW, "largest_fitting": low,
             "smallest_not_fitting": high, "stopped": stopped, "budget_gib": args.budget_gib,
             "floor_gib": args.floor_gib,
             "search_seconds": round(earlier_seconds + time.perf_counter() - started, 1),
             "resumed_after_tries": len(earlier),
             "tries": tries, "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    fit = rss_fit(entry)
    if fit:
        entry["rss_per_pair"] = fit
    out = Path(args.output_dir or (workdir if args.quick else REPO / "bench" / "results"))
    out.mkdir(parents=True, exist_ok=True)
    path = out / "contrastive_memory.json"
    entries = [entry]
    if args.keep and path.exists():
        entries += [e for e in json.loads(path.read_text())["entries"]
                    if (e["precision"], e.get("cached_chunk", 0)) != (args.precision, args.cached_chunk)]
    report = {"settings": {"optimizer": OPTIMIZER, "updates_per_try": args.updates,
                           "contrastive_head": "family defaults: infonce, temperature 0.05, "
                                               "in-batch negatives, cls pooling"},
              "entries": entries, "cached_gradient_loss": CACHED_LOSS,
              "environment": environment(args),
              "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
              "notes": ["Shared machine: other users' memory counts against MemAvailable; a try "
                        "stopped by the floor did not fit in what the machine had free then "
                        "(least_mem_available per try)."]}
    path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    (out / "contrastive_memory.md").write_text(markdown(report), encoding="utf-8")
    print(markdown(report))


if __name__ == "__main__":
    main()
