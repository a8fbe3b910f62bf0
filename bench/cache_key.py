"""Cost of the feature cache's content key (issue 35 item 4) and of the resume data check.

    .venv/bin/python -m bench.cache_key [--data-root ../shared/data] [--workers 2]

The cache key holds each data file's SHA-256 (not its mtime: `cp -p` puts an old mtime
on new content), so every `mtl train` / `mtl data prepare` hashes the data it reads, warm
cache or cold. Measured, written to bench/results/cache_key.json:

1. `key_s`: `cache.data_files` (the content key's data part: every file hashed) over the
   train split of every task of bench/experiments/full24.yaml (24 tasks + mlm: what that
   prepare reads), and `stat_key_s`, the same with (path, size, mtime) as before;
2. `all_data_s`: `cache.file_digest` of every file under --data-root (the full data,
   an upper bound: no run reads all of it);
3. `resume_check_s`: `mixture.data_digest` of every task's features (what a resume
   compares), on the caches the prepare built;
4. `prepare_cold_s`: a cold `mtl data prepare full24.yaml` (empty feature cache, fresh
   process, --workers N), which includes (1) once.

Each hash is timed first (page cache as the prepare left it: warm) and the ratios
(key + resume check) / cold prepare are the issue's target (< 5%). The machine is
shared: the load average is recorded beside the wall times.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import REPO, child_env
from bench.load import load_average

FULL24 = REPO / "bench" / "experiments" / "full24.yaml"
RESULTS = REPO / "bench" / "results" / "cache_key.json"


def timed(fn, *args):
    start = time.perf_counter()
    value = fn(*args)
    return time.perf_counter() - start, value


def stat_key(task, split, data_root):
    """The data part of the key as it was before: (path, size, mtime_ns) per file."""
    from data_adapters import split_paths

    present, _ = split_paths(task, split, data_root)
    out = []
    for path in present:
        for file in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if file.is_file():
                stat = file.stat()
                out.append((str(file), stat.st_size, stat.st_mtime_ns))
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-root", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    from mtl_framework.plan import mlm_corpus_task, plan_run
    from mtl_framework.prepare import cache

    plan = plan_run(str(FULL24), output=tempfile.mkdtemp(prefix="cache-key-run-"),
                    data_root=args.data_root)
    tasks = list(plan.tasks)
    mlm = plan.entries.get("mlm", {})
    if mlm.get("corpus"):
        tasks.append(mlm_corpus_task(plan.experiment, mlm))
    files = [p for p in Path(args.data_root).rglob("*") if p.is_file()]
    total_bytes = sum(p.stat().st_size for p in files)
    read_bytes = sum(size or 0 for task in tasks
                     for _, size, _ in cache.data_files(task, "train", args.data_root))
    result = {"data_root": args.data_root, "files": len(files), "bytes": total_bytes,
              "tasks": len(tasks), "train_bytes_keyed": read_bytes,
              "load_before": load_average()}
    result["stat_key_s"] = timed(lambda: [stat_key(t, "train", args.data_root) for t in tasks])[0]
    cache._DIGESTS.clear()  # each file hashed afresh, as a new process does
    result["key_s"] = timed(lambda: [cache.data_files(t, "train", args.data_root)
                                     for t in tasks])[0]
    cache._DIGESTS.clear()
    result["all_data_s"] = timed(lambda: [cache.file_digest(p) for p in files])[0]

    with tempfile.TemporaryDirectory(prefix="cache-key-") as scratch:
        env = child_env(MTL_CACHE_DIR=os.path.join(scratch, "cache"),
                        TF_CPP_MIN_LOG_LEVEL="2")
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "mtl_framework", "data", "prepare",
                               str(FULL24), "--workers", str(args.workers), "--data-root",
                               args.data_root], cwd=scratch, env=env, capture_output=True,
                              text=True)
        result["prepare_cold_s"] = time.perf_counter() - start
        result["prepare_exit"] = done.returncode
        if done.returncode:
            result["prepare_stderr_tail"] = done.stderr[-2000:]
        result["load_after"] = load_average()
        # the resume check: data_digest of each cache folder the prepare built
        from mtl_framework.families.features import Features
        from mtl_framework.mixing.mixture import data_digest

        metas = [Features(None, {}, json.loads(meta.read_text(encoding="utf-8")))
                 for meta in Path(scratch, "cache").rglob("meta.json")]
        result["resume_check_folders"] = len(metas)
        result["resume_check_s"] = timed(lambda: [data_digest(f) for f in metas])[0]
    cold = result["prepare_cold_s"]
    result["key_share_of_cold_prepare"] = (result["key_s"] + result["resume_check_s"]) / cold
    result["added_share_of_cold_prepare"] = \
        (result["key_s"] - result["stat_key_s"] + result["resume_check_s"]) / cold
    result["all_data_share_of_cold_prepare"] = result["all_data_s"] / cold
    result["target"] = "key + resume check < 5% of a cold prepare"
    RESULTS.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
