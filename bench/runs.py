"""Runs of a study trained inside the benchmark's own process, the same way in every study
(bench/balancing.py, bench/learning.py, bench/long_context.py), and the t-interval the
studies' summaries use (bench/balancing.py, bench/pretraining_value.py).

A run: the experiment, a dict, is written as WORK/experiments/NAME.yaml (JSON, which is
YAML) and trained by `loop.run.Run` into WORK/runs/NAME, removed first (a run stopped
half-way starts again). On the way out the run is closed (`Run.close`: its micro-step
threads stop) and the Keras session cleared, so one process can train many runs in turn.
"""
from __future__ import annotations

import contextlib
import json
import math
import shutil
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from typing import Any

    import keras

    from mtl_framework.loop.run import Run

SKIP_UPDATES = 10  # the first updates trace each task's micro-step: left out of seconds per update
SCORE_KEYS = ("score", "baseline", "metric", "examples")
# two-sided 95% Student t quantiles by degrees of freedom
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
       9: 2.262, 10: 2.228}


def write_experiment(experiment: dict, path: Path) -> Path:
    """`experiment` as JSON (which is YAML) at `path`, folders made; returns `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(experiment, indent=1, ensure_ascii=False), encoding="utf-8")
    return path


@contextlib.contextmanager
def open_run(experiment: dict, work_dir: Path, name: str, log: Callable[[str], Any],
             callbacks: Iterable[keras.callbacks.Callback] = ()) -> Iterator[Run]:
    """A new Run of `experiment` (WORK/experiments/NAME.yaml into WORK/runs/NAME, removed
    first), built but not trained; closed and the Keras session cleared on the way out.
    `callbacks`: Keras callbacks for its fit (a ProgbarLogger, e.g. `progress_lines`,
    replaces the run's progress bar)."""
    import keras

    from mtl_framework.loop.run import Run

    work_dir = Path(work_dir)
    run_dir = work_dir / "runs" / name
    shutil.rmtree(run_dir, ignore_errors=True)
    path = write_experiment(experiment, work_dir / "experiments" / f"{name}.yaml")
    try:
        with Run(str(path), str(run_dir), log=log, callbacks=list(callbacks)) as run:
            yield run
    finally:
        keras.backend.clear_session()


def seconds_per_update(run_dir: Path, skip: int = SKIP_UPDATES) -> float | None:
    """Median seconds between consecutive updates in RUN_DIR/metrics.jsonl after the first
    `skip` (tracing); None when the run had no more than skip + 1 updates."""
    stamps = [json.loads(line)["time"]
              for line in Path(run_dir, "metrics.jsonl").read_text(encoding="utf-8").splitlines()
              if line.strip()]
    gaps = [b - a for a, b in zip(stamps[skip:], stamps[skip + 1:])]
    return statistics.median(gaps) if gaps else None


def train_and_evaluate(experiment: dict, work_dir: Path, name: str, eval_examples: int | None,
                       log: Callable[[str], Any],
                       callbacks: Iterable[keras.callbacks.Callback] = ()) -> dict:
    """Train `experiment` in this process (`open_run`), then score every task on dev, the
    first `eval_examples` examples each (None: all), at the last update. Returns
    {"scores": {task: {score, baseline, metric, examples}}, "seconds_per_update": median
    after the first SKIP_UPDATES updates (None if too few), "train_seconds": building and
    training, "wall_seconds": that plus scoring and closing, "run_dir": str}."""
    started = time.time()
    with open_run(experiment, work_dir, name, log, callbacks) as run:
        run.train()
        trained = time.time() - started
        results = run.evaluate("dev", max_examples=eval_examples)
    return {"scores": {task: {k: entry.get(k) for k in SCORE_KEYS} for task, entry in results.items()},
            "seconds_per_update": seconds_per_update(run.run_dir),
            "train_seconds": round(trained, 1), "wall_seconds": round(time.time() - started, 1),
            "run_dir": str(run.run_dir)}


# A from-scratch study's backbone: the demo's (experiments/demo.yaml), and its smoke check's
TINY_BACKBONE = dict(num_layers=2, hidden_size=128, num_heads=2, intermediate_size=512)
SMOKE_BACKBONE = dict(num_layers=1, hidden_size=64, num_heads=2, intermediate_size=128)


def add_size_options(parser: Any, full: dict, quick: dict) -> None:
    """An option --KEY for each setting of `full` (scratch_experiment's `args`), default None:
    fill_sizes gives what is left out."""
    for key, value in full.items():
        parser.add_argument("--" + key.replace("_", "-"), type=type(value), default=None,
                            help=f"default {value} ({quick[key]} with --quick)")


def fill_sizes(args: Any, full: dict, quick: dict) -> None:
    """Each setting no --KEY gave: `quick`'s with --quick, else `full`'s."""
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)


def scratch_experiment(name: str, args: Any, work_dir: Path, vocab: Path, **settings: Any) -> dict:
    """A from-scratch model's experiment sized by `args` (num_layers, hidden_size, num_heads,
    intermediate_size, alpha_warmup_steps, lr, warmup_steps, batch_size, steps, data_root),
    dropout 0.1, AdamW with weight decay 0.01, features cached in WORK/cache, no checkpoint
    before the last and no evaluation during training (the study scores it after);
    `settings` add to or replace the top-level keys (tasks, balancing, max_length...)."""
    return {
        "name": name,
        "data_root": str(Path(args.data_root).resolve()),
        "vocab": str(vocab),
        "cache_dir": str(Path(work_dir) / "cache"),
        "backbone": {"num_layers": args.num_layers, "hidden_size": args.hidden_size,
                     "num_heads": args.num_heads, "intermediate_size": args.intermediate_size,
                     "dropout": 0.1, "alpha_warmup_steps": args.alpha_warmup_steps},
        "batch_size": args.batch_size,
        "optimizer": {"name": "adamw", "lr": args.lr, "warmup_steps": args.warmup_steps,
                      "weight_decay": 0.01},
        "steps": args.steps,
        "checkpoint_every": 0,  # the final checkpoint only (on_train_end)
        "keep_checkpoints": 1,
        "eval_every": 0,  # evaluated once, after training, by the study
        "precision": "float32",  # as the recorded studies ran (auto differs by CPU)
        **settings,
    }


def progress_lines(total: int, every: int, log: Callable[[str], Any]) -> keras.callbacks.Callback:
    """A Keras callback for a run's fit that logs a line every `every` updates (mean loss
    over them, seconds so far) and keeps `.start`, each update's end time (`.ends`) and
    loss (`.losses`); `.timings()` sums them up. A ProgbarLogger: Run shows it in place of
    its progress bar."""
    import keras
    import numpy as np

    class ProgressLines(keras.callbacks.ProgbarLogger):
        def __init__(self):
            super().__init__()
            self.start, self.ends, self.losses = None, [], []

        def on_train_begin(self, logs=None):
            self.start, self.ends, self.losses = time.perf_counter(), [], []

        def on_train_batch_end(self, batch, logs=None):
            self.ends.append(time.perf_counter())
            self.losses.append((logs or {}).get("loss", float("nan")))
            step = len(self.ends)
            if step % every == 0 or step == total:
                elapsed = self.ends[-1] - self.start
                log(f"    update {step}/{total}  loss(last {every}) "
                    f"{np.nanmean(self.losses[-every:]):.4f}  {elapsed:.0f} s "
                    f"({elapsed / step:.2f} s/update)")

        def silent(self, *args, **kwargs):  # nothing else prints: no bar, no "Epoch 1/1"
            pass

        on_epoch_begin = on_epoch_end = on_test_begin = on_test_batch_end = on_test_end = silent
        on_predict_begin = on_predict_batch_end = on_predict_end = silent

        def timings(self, settle=20):
            """fit-loop seconds, the first `settle` updates (every task's first draw
            traces its micro-step) and the median update after them."""
            if not self.ends:
                return {}
            gaps = np.diff([self.start] + self.ends)
            return {"fit_loop_s": round(self.ends[-1] - self.start, 1),
                    f"first_{settle}_updates_s": round(float(gaps[:settle].sum()), 1),
                    "median_update_s_after": round(float(np.median(gaps[settle:])), 3)
                    if len(gaps) > settle else None}

    return ProgressLines()


def interval(values: list[float]) -> tuple[float, list[float] | None]:
    """(mean, [low, high]) 95% t-interval; the interval is None for fewer than 2 values."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, None
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = T95.get(n - 1, 1.96) * sd / math.sqrt(n)
    return mean, [mean - half, mean + half]
