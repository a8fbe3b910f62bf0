"""Data preparation benchmark (issue 17 item 3): `mtl_framework.prepare.pipeline` at scale.

    .venv/bin/python -m bench.prepare [--data-root ../shared/data]
        [--corpus-mb 2048] [--skip speed memory first_update]

Four measurements, written to bench/results/prepare.json and prepare.md:

1. examples/s per family with 1 worker (each cache built alone in this
   process on one tokenizer thread, as `--workers 1` does), on the train split of every task
   with real data in ../shared/data (reading included) plus mlm on three
   tasks; then all those caches at once with 2 workers (`prepare`). Speed-up
   = the 1-worker total / the 2-worker wall time (target >= 1.7x on 2 cores);
   the two caches are checked byte-identical. Also timed: the 1-worker path with
   `tokenizers` on its own threads, the 1-process figure before `--workers 1`
   kept to one thread. Each of the three counts the splits afresh, as a new
   `mtl data prepare` does.
2. peak RSS (this process + its workers, sampled every 0.1 s) while preparing
   a corpus made by repeating real files (TNEWS train listed N times in one
   spec: no copies on disk), at --corpus-mb and at a tenth of it, each in a
   fresh process (target: flat, within 20%).
3. time to the first update of bench/experiments/full24.yaml (24 tasks + mlm):
   `mtl train` with an empty feature cache (vocab + every cache built in the
   workers), then again with the cache warm.

The machine is shared: every result records the load average and CPU seconds
(this process and its workers) beside wall times (bench/load.py).
"""
import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from unittest import mock

import numpy as np

from bench import REPO, child_env
from bench.load import child_pids, cpu_model, cpu_seconds, load_average, proc_cpu_seconds

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from mtl_framework.prepare import cache as C  # noqa: E402

FULL24 = REPO / "bench" / "experiments" / "full24.yaml"
MLM_TASKS = ("tnews", "cmrc2018", "cluener")


def rss_bytes(pid, field="VmRSS"):
    """A /proc/<pid>/status memory field in bytes: VmRSS (all resident pages, the
    memory-mapped cache files being written included) or RssAnon (heap: what the
    process itself holds)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class PeakRSS:
    """Peak of (this process + the pool's workers) RSS, sampled in a thread."""

    def __init__(self, workers, every=0.1):
        self.workers, self.every, self.peak, self.peak_anon = workers, every, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _pids(self):
        return [os.getpid()] + (child_pids() if self.workers.pool is not None else [])

    def _run(self):
        while not self._stop.is_set():
            pids = self._pids()
            self.peak = max(self.peak, sum(rss_bytes(p) for p in pids))
            self.peak_anon = max(self.peak_anon, sum(rss_bytes(p, "RssAnon") for p in pids))
            time.sleep(self.every)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def worker_cpu(workers):
    return sum(proc_cpu_seconds(p) for p in child_pids()) if workers.pool is not None else 0.0


def tokenizer_for(tasks, data_root, cache_dir):
    from mtl_framework.prepare.pipeline import cached_vocab
    from mtl_framework.tokenizer import Tokenizer

    return Tokenizer(str(cached_vocab(tasks, data_root, 12000, cache_dir, workers=None)))


def real_tasks(registry, data_root):
    return [t for t in registry.tasks.values() if "train" in (t.files or {}) and all(
        (Path(data_root) / f).exists()
        for f in (t.files["train"] if isinstance(t.files["train"], list) else [t.files["train"]]))]


def family_speed(args, registry, data_root, scratch):
    """1 worker: each job alone in this process, on one tokenizer thread (`--workers 1`),
    timed per job -> examples/s per family. 2 workers: `prepare` over all the
    jobs at once (big ones chunked, small ones whole, side by side)."""
    from mtl_framework.prepare import pipeline as P
    from mtl_framework.prepare.pipeline import Job, Workers, prepare

    tasks = real_tasks(registry, data_root)
    tokenizer = tokenizer_for(tasks, data_root, scratch / "vocab-cache")
    jobs = [Job(t, "train", min(128, t.max_length)) for t in tasks]
    jobs += [Job(registry.tasks[n], "train", min(128, registry.tasks[n].max_length), "mlm")
             for n in MLM_TASKS]
    rows = []
    quiet = lambda message: None  # noqa: E731
    P._COUNTS.clear()
    with Workers(1) as one:
        for job in jobs:
            cpu0, start = cpu_seconds(), time.perf_counter()
            prepare([job], tokenizer, data_root, scratch / "one", log=quiet, workers_pool=one)
            wall = time.perf_counter() - start
            features = C.cached_features(job.task, job.split, tokenizer, data_root, scratch / "one",
                                         job.max_length, job.family)
            rows.append({"job": job.name, "family": job.family or job.task.type,
                         "examples": features.report.examples, "rows": len(features),
                         "wall_s": round(wall, 3), "cpu_s": round(cpu_seconds() - cpu0, 3),
                         "load": load_average()})
            print(f"1 worker {job.name}: {rows[-1]['examples'] / wall:.0f} ex/s", flush=True)
    # Before `--workers 1` tokenized on one thread: the same path with `tokenizers`
    # spreading each batch over its own threads. Every timing counts the splits afresh
    # (the counts a process keeps are dropped), as a new `mtl data prepare` does.
    P._COUNTS.clear()
    cpu0, start = cpu_seconds(), time.perf_counter()
    with Workers(1) as one, mock.patch.object(P, "one_tokenizer_thread", contextlib.nullcontext):
        for job in jobs:
            prepare([job], tokenizer, data_root, scratch / "threaded", log=quiet, workers_pool=one)
    threaded = {"wall_s": round(time.perf_counter() - start, 1),
                "cpu_s": round(cpu_seconds() - cpu0, 1), "load_end": load_average()}
    print(f"1 process, tokenizer threads: {threaded['wall_s']} s", flush=True)
    with Workers(2) as two:
        list(two.map(abs, range(8)))  # workers started (spawn) before the clock
        P._COUNTS.clear()
        cpu0, wcpu0, start = cpu_seconds(), worker_cpu(two), time.perf_counter()
        prepare(jobs, tokenizer, data_root, scratch / "two", log=quiet, workers_pool=two)
        wall_two = time.perf_counter() - start
        cpu_two = cpu_seconds() - cpu0 + worker_cpu(two) - wcpu0
    for job in jobs:  # and the same arrays
        a = C.cached_features(job.task, job.split, tokenizer, data_root, scratch / "one",
                              job.max_length, job.family)
        b = C.cached_features(job.task, job.split, tokenizer, data_root, scratch / "two",
                              job.max_length, job.family)
        assert all(np.asarray(a[k]).tobytes() == np.asarray(b[k]).tobytes() for k in a.arrays), job.name
    families = {}
    for row in rows:
        entry = families.setdefault(row["family"], {"examples": 0, "rows": 0, "wall_s": 0.0,
                                                    "cpu_s": 0.0})
        for key in ("examples", "rows", "wall_s", "cpu_s"):
            entry[key] += row[key]
    for entry in families.values():
        entry["ex_per_s"] = round(entry["examples"] / entry["wall_s"], 1)
        entry["ex_per_cpu_s"] = round(entry["examples"] / max(entry["cpu_s"], 1e-9), 1)
    wall_one = sum(r["wall_s"] for r in rows)
    cpu_one = sum(r["cpu_s"] for r in rows)
    return {"jobs": rows, "families": families,
            "one_worker": {"wall_s": round(wall_one, 1), "cpu_s": round(cpu_one, 1)},
            "two_workers": {"wall_s": round(wall_two, 1), "cpu_s": round(cpu_two, 1),
                            "load_end": load_average()},
            "one_process_tokenizer_threads": threaded,
            "speedup_2_over_1": round(wall_one / wall_two, 3),
            "speedup_2_over_threaded": round(threaded["wall_s"] / wall_two, 3),
            "examples": sum(r["examples"] for r in rows), "arrays_identical": True}


def corpus_spec(folder, copies, labels):
    """A spec reading TNEWS train `copies` times (a list of the same file)."""
    spec = folder / f"tnews_x{copies}.yaml"
    files = ", ".join(["tnews/train.json"] * copies)
    spec.write_text(f"""dataset: tnews_x{copies}
format: jsonl
files: {{train: [{files}]}}
fields: {{text: sentence, text_b: keywords, label: label_desc}}
tasks:
  - name: tnews_x{copies}
    type: classification
    labels: [{", ".join(labels)}]
    max_length: 128
    metric: accuracy
""", encoding="utf-8")
    return spec


def rss_case(spec, data_root, cache_dir, workers):
    """(Run in a fresh process) prepare one corpus; peak RSS, wall, CPU, examples."""
    from mtl_framework.config.registry import load_paths
    from mtl_framework.prepare.pipeline import Job, Workers, prepare

    task = next(iter(load_paths([spec]).tasks.values()))
    tokenizer = tokenizer_for([task], data_root, cache_dir)
    with Workers(workers) as pool:
        list(pool.map(abs, range(4 * pool.count)))
        before = sum(rss_bytes(p) for p in PeakRSS(pool)._pids())
        cpu0, start = cpu_seconds(), time.perf_counter()
        with PeakRSS(pool) as peak:
            prepare([Job(task, "train", 128)], tokenizer, data_root, cache_dir, log=lambda m: None,
                    workers_pool=pool)
            wall = time.perf_counter() - start
            cpu = cpu_seconds() - cpu0 + worker_cpu(pool)
    return {"peak_rss_mb": round(peak.peak / 2**20, 1), "rss_before_mb": round(before / 2**20, 1),
            "peak_anon_mb": round(peak.peak_anon / 2**20, 1),
            "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "load": load_average()}


def memory(args, registry, data_root, scratch):
    sizes = {}
    tnews_mb = (Path(data_root) / "tnews" / "train.json").stat().st_size / 2**20
    big = max(1, round(args.corpus_mb / tnews_mb))
    small = max(1, round(big / 10))
    for copies in (small, big):
        spec = corpus_spec(scratch, copies, registry.tasks["tnews"].labels)
        done = subprocess.run([sys.executable, "-m", "bench.prepare", "--rss-case", str(spec),
                               "--data-root", str(data_root), "--cache", str(scratch / f"rss{copies}")],
                              capture_output=True, text=True, env=child_env())
        if done.returncode:
            raise RuntimeError(done.stderr[-2000:])
        result = json.loads(done.stdout.strip().splitlines()[-1])
        result.update(copies=copies, corpus_mb=round(copies * tnews_mb, 1))
        shutil.rmtree(scratch / f"rss{copies}", ignore_errors=True)
        sizes[copies] = result
        print(f"corpus {result['corpus_mb']} MB: peak RSS {result['peak_rss_mb']} MB, "
              f"{result['wall_s']} s", flush=True)
    ratio = sizes[big]["peak_rss_mb"] / sizes[small]["peak_rss_mb"]
    anon = sizes[big]["peak_anon_mb"] / sizes[small]["peak_anon_mb"]
    return {"cases": list(sizes.values()), "peak_ratio_big_over_tenth": round(ratio, 3),
            "peak_anon_ratio_big_over_tenth": round(anon, 3),
            "requested_corpus_mb": args.corpus_mb}


def first_update(scratch, cache):
    """Seconds from `mtl train` start to its first metrics.jsonl line."""
    run_dir = scratch / f"run-{time.time_ns()}"
    env = child_env(MTL_CACHE_DIR=str(cache))
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "mtl_framework.cli", "train", str(FULL24),
                                "--output", str(run_dir)], env=env, cwd=scratch,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    metrics, seconds = run_dir / "metrics.jsonl", None
    while process.poll() is None:
        if seconds is None and metrics.exists() and metrics.stat().st_size:
            seconds = time.perf_counter() - start
        time.sleep(0.2)
    output = process.stdout.read()
    if seconds is None and metrics.exists() and metrics.stat().st_size:
        seconds = time.perf_counter() - start
    if process.returncode or seconds is None:
        raise RuntimeError(f"mtl train failed ({process.returncode}):\n{output[-3000:]}")
    cpu = os.times()
    return {"seconds": round(seconds, 1), "load": load_average(),
            "children_cpu_s": round(cpu.children_user + cpu.children_system, 1),
            "log_tail": output.strip().splitlines()[-3:]}


def first_updates(scratch):
    cache = scratch / "full24-cache"
    before = os.times()
    cold = first_update(scratch, cache)
    cold["children_cpu_s"] = round(cold["children_cpu_s"] - before.children_user
                                   - before.children_system, 1)
    print(f"first update, cold cache: {cold['seconds']} s", flush=True)
    mid = os.times()
    warm = first_update(scratch, cache)
    warm["children_cpu_s"] = round(warm["children_cpu_s"] - mid.children_user
                                   - mid.children_system, 1)
    print(f"first update, warm cache: {warm['seconds']} s", flush=True)
    return {"cold": cold, "warm": warm}


def markdown(out):
    lines = ["# bench/prepare.py", "",
             f"{out['machine']['cpu']}, {out['machine']['cores']} cores; load average at start "
             f"{out['machine']['load_start']}, at end {out['machine']['load_end']} (shared machine).", ""]
    speed = out.get("family_speed")
    if speed:
        lines += ["## examples/s per family (train, whole files, max_length <= 128; 1 worker)", "",
                  "| family | examples | rows | ex/s (wall) | ex per CPU s |", "|---|---|---|---|---|"]
        for family, e in sorted(speed["families"].items()):
            lines.append(f"| {family} | {e['examples']} | {e['rows']} | {e['ex_per_s']} | "
                         f"{e['ex_per_cpu_s']} |")
        one, two = speed["one_worker"], speed["two_workers"]
        lines += ["", f"All {len(speed['jobs'])} jobs ({speed['examples']} examples): "
                  f"{one['wall_s']} s wall / {one['cpu_s']} CPU s with 1 worker, {two['wall_s']} s "
                  f"wall / {two['cpu_s']} CPU s with 2: **{speed['speedup_2_over_1']}x** "
                  "(target >= 1.7x); the arrays of both are byte-identical.", ""]
        threaded = speed.get("one_process_tokenizer_threads")
        if threaded:
            lines += [f"One process with `tokenizers` using its own threads (what `--workers 1` "
                      f"did before it kept to one thread): {threaded['wall_s']} s wall / "
                      f"{threaded['cpu_s']} CPU s; 2 workers over it: "
                      f"**{speed['speedup_2_over_threaded']}x**.", ""]
    mem = out.get("memory")
    if mem:
        lines += ["## peak RSS (parent + 2 workers)", "",
                  "| corpus | copies of TNEWS train | peak RSS MB | of it heap (RssAnon) MB | "
                  "before MB | wall s | CPU s | load |", "|---|---|---|---|---|---|---|---|"]
        for c in mem["cases"]:
            lines.append(f"| {c['corpus_mb']} MB | {c['copies']} | {c['peak_rss_mb']} | "
                         f"{c.get('peak_anon_mb', '-')} | {c['rss_before_mb']} | {c['wall_s']} | "
                         f"{c['cpu_s']} | {c['load']} |")
        lines += ["", f"Peak RSS at the big corpus / at a tenth: **{mem['peak_ratio_big_over_tenth']}**"
                  f", heap only: **{mem.get('peak_anon_ratio_big_over_tenth', '-')}** (target <= 1.2; "
                  f"requested {mem['requested_corpus_mb']} MB).", ""]
    first = out.get("first_update")
    if first:
        lines += ["## time to the first update, bench/experiments/full24.yaml (24 tasks + mlm)", "",
                  "| cache | seconds | CPU s (mtl train + workers) | load |", "|---|---|---|---|"]
        for name in ("cold", "warm"):
            e = first[name]
            lines.append(f"| {name} | {e['seconds']} | {e['children_cpu_s']} | {e['load']} |")
        lines.append("")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-root", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--corpus-mb", type=float, default=2048)
    parser.add_argument("--skip", nargs="*", default=[], choices=("speed", "memory", "first_update"))
    parser.add_argument("--output", default=str(REPO / "bench" / "results"))
    parser.add_argument("--rss-case", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_case:
        print(json.dumps(rss_case(Path(args.rss_case), args.data_root, args.cache, 2)))
        return
    from mtl_framework.config.registry import load_registry

    out = {"machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
                       "load_start": load_average()}, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    with tempfile.TemporaryDirectory(prefix="bench-prepare-") as scratch:
        scratch = Path(scratch)
        if "speed" not in args.skip:
            out["family_speed"] = family_speed(args, load_registry(), args.data_root, scratch)
        if "memory" not in args.skip:
            out["memory"] = memory(args, load_registry(), args.data_root, scratch)
        if "first_update" not in args.skip:
            out["first_update"] = first_updates(scratch)
    out["machine"]["load_end"] = load_average()
    results = Path(args.output)
    results.mkdir(parents=True, exist_ok=True)
    if args.skip and (results / "prepare.json").exists():  # a partial run: keep the other sections
        earlier = json.loads((results / "prepare.json").read_text(encoding="utf-8"))
        measured = [s for s in ("family_speed", "memory", "first_update") if s in out]
        out = {**earlier, **out, "machine": {**earlier.get("machine", {}), **out["machine"]}}
        out.setdefault("runs", earlier.get("runs", [])).append(
            {"sections": measured, "started": out["started"], "machine": out["machine"]})
    (results / "prepare.json").write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    (results / "prepare.md").write_text(markdown(out), encoding="utf-8")
    print(markdown(out))


if __name__ == "__main__":
    main()
