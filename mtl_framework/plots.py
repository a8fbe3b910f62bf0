"""`mtl report`: PNG plots of a run directory's metrics.

Reads RUN_DIR/metrics.jsonl (one line per optimizer update, written by
loop.run.RunLogger) and, when present, RUN_DIR/evaluations.jsonl (one line per
evaluation) and writes:

  loss.png            per-task training loss, raw and smoothed (one subplot per task)
  gradient_norm.png   per-task gradient norm over the backbone, raw and smoothed
  sampling.png        how many micro-batches each task got: totals and over steps
  schedule.png        learning rate and residual alpha
  dev_scores.png      per-task dev score over steps (only with evaluations.jsonl)

A resumed run appends to metrics.jsonl again from its checkpoint's step, so a
step can appear twice: the later line (the run that went on) wins.
"""
import json
import math
import os

from mtl_framework.errors import UserError
from mtl_framework.files import check_folder, write_atomic
from mtl_framework.rundir import RunDir
from mtl_framework.rundir.records import other_settings
from mtl_framework.scoring.metrics import RANGES


class ReportError(UserError, ValueError):
    pass


try:  # the [plots] extra: a plain install trains and exports without it
    import matplotlib
except ModuleNotFoundError as error:
    if error.name != "matplotlib":
        raise
    raise ReportError("plots need matplotlib, which is not installed: "
                      "pip install mtl_framework[plots]") from None

matplotlib.use("Agg")  # files only: no display needed, none wanted on servers
import matplotlib.pyplot as plt  # noqa: E402  (must follow the backend choice)

# --- reading ------------------------------------------------------------------

def read_jsonl(path, check, key=lambda record: record["step"]):
    """The records of a JSON-lines file, sorted by `key`, the last line for a key kept;
    `check(record)` returns a problem or None."""
    if not os.path.exists(path):
        raise ReportError(f"{path}: not found; is this a run directory written by `mtl train`?")
    records = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise ReportError(f"{path}:{number}: not valid JSON ({error.msg}); a run killed "
                                  "while writing can leave a cut line: delete that line") from None
            problem = check(record)
            if problem:
                raise ReportError(f"{path}:{number}: {problem}")
            records[key(record)] = record
    return [records[k] for k in sorted(records)]


def _is_number(value):
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def check_update(record):
    """A metrics.jsonl line: {step, loss, alpha, lr, tasks: {task: {loss, gradient_norm}}}."""
    if not isinstance(record, dict):
        return "expected a JSON object per line"
    if not isinstance(record.get("step"), int):
        return f"'step' must be an integer, got {record.get('step')!r}"
    for key in ("loss", "alpha", "lr"):
        if not _is_number(record.get(key)):
            return f"{key!r} must be a number, got {record.get(key)!r}"
    tasks = record.get("tasks")
    if not isinstance(tasks, dict):
        return f"'tasks' must be a mapping task -> {{loss, gradient_norm}}, got {tasks!r}"
    for task, stats in tasks.items():
        if not isinstance(stats, dict) or not all(
                key in stats and _is_number(stats[key]) for key in ("loss", "gradient_norm")):
            return f"tasks.{task} must have numeric 'loss' and 'gradient_norm', got {stats!r}"
    return None


def check_evaluation(record):
    """An evaluations.jsonl line: {step, split, tasks: {task: {metric, score}}, aggregate}."""
    if not isinstance(record, dict):
        return "expected a JSON object per line"
    if not isinstance(record.get("step"), int):
        return f"'step' must be an integer, got {record.get('step')!r}"
    tasks = record.get("tasks")
    if not isinstance(tasks, dict):
        return f"'tasks' must be a mapping task -> {{metric, score}}, got {tasks!r}"
    for task, result in tasks.items():
        if not isinstance(result, dict) or "score" not in result or not _is_number(result["score"]):
            return f"tasks.{task} must have a numeric 'score', got {result!r}"
    if not _is_number(record.get("aggregate")):
        return f"'aggregate' must be a number, got {record.get('aggregate')!r}"
    return None


# --- series -------------------------------------------------------------------

def smooth(steps, values, log=False, width=None):
    """The trend through (step, value) points, at every step given: a Gaussian-weighted
    local linear fit (LOESS-like), in log space when `log` (log-scaled plots).

    Why not TensorBoard's EMA: it averages the past only, so on a falling loss it lags
    above the points (a task's loss can drop 10x within its first 20 draws), and it
    counts draws, not steps, so tasks drawn less often lag longer. A centred local
    *linear* fit has no lag on a trend, not even at the ends. `width` is the kernel's
    standard deviation in steps (default: 1/25 of the steps spanned, at least 2).
    Non-finite values (skipped micro-batches) are left out of the fit."""
    import numpy as np

    x = np.asarray(steps, dtype=np.float64)
    y = np.array([math.nan if v is None else v for v in values], dtype=np.float64)
    keep = np.isfinite(y) & ((y > 0) if log else True)
    if not keep.any():
        return [math.nan] * len(x)
    known_x, known_y = x[keep], np.log(y[keep]) if log else y[keep]
    width = width or max(2.0, (known_x.max() - known_x.min()) / 25)
    # long runs: fit at 500 points and interpolate (the trend is smooth at this width)
    grid = x if len(x) <= 500 else np.linspace(x.min(), x.max(), 500)
    out = []
    for at in grid:
        w = np.exp(-0.5 * ((known_x - at) / width) ** 2)
        dx = known_x - at
        sw, swx, swxx = w.sum(), (w * dx).sum(), (w * dx * dx).sum()
        swy, swxy = (w * known_y).sum(), (w * dx * known_y).sum()
        det = sw * swxx - swx * swx
        # the fit's value at `at`; one point (or all at one step) gives the weighted mean
        level = (swxx * swy - swx * swxy) / det if det > 1e-12 * max(sw * swxx, 1e-300) \
            else swy / sw
        out.append(level)
    out = np.asarray(out) if len(x) <= 500 else np.interp(x, grid, out)
    return [float(v) for v in (np.exp(out) if log else out)]


def task_names(records):
    return sorted({task for record in records for task in record["tasks"]})


def task_series(records, task, key):
    """(steps, values) of one task's statistic, over the updates that drew the task."""
    points = [(r["step"], r["tasks"][task][key]) for r in records if task in r["tasks"]]
    return [s for s, _ in points], [math.nan if v is None else v for _, v in points]


def draw_counts(records, task):
    """Micro-batches of `task` per update. Lines without a 'count' (older runs) say only
    that the task was drawn, so count them once: a lower bound."""
    return [r["tasks"][task].get("count", 1) if task in r["tasks"] else 0 for r in records]


# --- plots --------------------------------------------------------------------

# Dev scores are drawn on their metric's whole range (metrics.RANGES: 0-1, correlations
# -1..1): an auto-scaled axis makes noise of 0.01 look like a collapse.
def bounded_01(metric):
    return RANGES.get(metric) == (0.0, 1.0)


def subplot_grid(count, title):
    columns = min(3, count)
    rows = math.ceil(count / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4.5 * columns, 3.2 * rows),
                                squeeze=False, constrained_layout=True)
    figure.suptitle(title)
    axes = axes.ravel()
    for unused in axes[count:]:
        unused.set_visible(False)
    return figure, axes


def save(figure, path):
    """The figure into `path` whole or not at all (a temporary beside it, renamed): a full
    disk leaves the earlier plot and one line."""
    try:
        return write_atomic(path, lambda temporary: figure.savefig(temporary, dpi=100),
                            suffix=".png", remedy="free space or pass another --output")
    finally:
        plt.close(figure)


def plot_task_statistic(records, key, title, path, log_scale=False):
    tasks = task_names(records)
    figure, axes = subplot_grid(len(tasks), title)
    for axis, task in zip(axes, tasks):
        steps, values = task_series(records, task, key)
        log = log_scale and all(v > 0 for v in values if math.isfinite(v))
        axis.plot(steps, values, color="tab:blue", alpha=0.3, linewidth=1, label="raw")
        axis.plot(steps, smooth(steps, values, log=log), color="tab:blue", linewidth=2,
                  label="smoothed")
        axis.set_title(task)
        axis.set_xlabel("step")
        if log:
            axis.set_yscale("log")
        axis.grid(alpha=0.3)
    axes[0].legend()
    return save(figure, path)


def plot_sampling(records, path):
    tasks = task_names(records)
    steps = [r["step"] for r in records]
    figure, (totals, over_time) = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    figure.suptitle("micro-batches drawn per task")
    counts = {task: draw_counts(records, task) for task in tasks}
    totals.bar(tasks, [sum(counts[t]) for t in tasks], color="tab:blue")
    totals.set_ylabel("micro-batches")
    totals.tick_params(axis="x", labelrotation=45)
    for task in tasks:
        cumulative, running = [], 0
        for count in counts[task]:
            running += count
            cumulative.append(running)
        over_time.plot(steps, cumulative, label=task)
    over_time.set_xlabel("step")
    over_time.set_ylabel("cumulative micro-batches")
    over_time.legend(fontsize="small")
    over_time.grid(alpha=0.3)
    return save(figure, path)


def plot_schedule(records, path):
    steps = [r["step"] for r in records]
    figure, axes = plt.subplots(1, 2, figsize=(10, 3.5), constrained_layout=True)
    for axis, key, label in zip(axes, ("lr", "alpha"), ("learning rate", "residual alpha")):
        axis.plot(steps, [math.nan if r.get(key) is None else r[key] for r in records])
        axis.set_title(label)
        axis.set_xlabel("step")
        axis.grid(alpha=0.3)
    return save(figure, path)


def plot_dev_scores(evaluations, path):
    tasks = sorted({task for e in evaluations for task in e["tasks"]})
    panels = tasks + ["aggregate"]
    figure, axes = subplot_grid(len(panels), "evaluation scores")
    splits = sorted({e.get("split", "dev") for e in evaluations})
    for axis, panel in zip(axes, panels):
        for split in splits:
            chosen = [e for e in evaluations if e.get("split", "dev") == split]
            if panel == "aggregate":
                points = [(e["step"], e.get("aggregate")) for e in chosen]
            else:
                points = [(e["step"], e["tasks"][panel]["score"]) for e in chosen
                          if panel in e["tasks"]]
            axis.plot([s for s, _ in points], [math.nan if v is None else v for _, v in points],
                      marker="o", label=split)
        entries = [e["tasks"][panel] for e in evaluations if panel in e["tasks"]]
        metric = entries[0].get("metric") if entries else None
        baseline = next((x["baseline"] for x in reversed(entries) if x.get("baseline") is not None),
                        None)
        if baseline is not None:
            axis.axhline(baseline, color="black", linestyle="--", linewidth=1,
                         label="majority class")
        if panel == "aggregate":  # the mean of the tasks' scores: in 0-1 when they all are
            bounds = (0.0, 1.0) if all(bounded_01(x.get("metric")) for e in evaluations
                                       for x in e["tasks"].values()) else None
        else:
            bounds = RANGES.get(metric)
        if bounds:
            axis.set_ylim(*bounds)
        axis.set_title(f"{panel} ({metric})" if metric else panel)
        axis.set_xlabel("step")
        axis.grid(alpha=0.3)
        axis.legend(fontsize="small")
    return save(figure, path)


PLOTS = ("loss.png", "gradient_norm.png", "sampling.png", "schedule.png", "dev_scores.png")


def write_report(run_dir, output=None, force=False):
    """Write the plots; returns the paths written. A folder given as `output` may hold the
    user's own files: PNGs of the names written here are replaced only with `force`
    (RUN_DIR/plots is the report's own)."""
    run = RunDir(run_dir)
    metrics_path = run.metrics_path
    records = read_jsonl(metrics_path, check_update)
    if not task_names(records):
        raise ReportError(f"{metrics_path}: no update recorded yet; plot after the run's first update")
    check_folder(output or os.path.join(run_dir, "plots"),
                 "--output" if output else "the plots folder")
    taken = [name for name in PLOTS if output and os.path.lexists(os.path.join(output, name))]
    if taken and not force:
        raise ReportError(f"--output {output}: already holds {', '.join(taken)}: pass --force "
                          "to replace them, or another --output")
    output = output or os.path.join(run_dir, "plots")
    os.makedirs(output, exist_ok=True)
    written = [
        plot_task_statistic(records, "loss", "training loss per task",
                            os.path.join(output, "loss.png"), log_scale=True),
        plot_task_statistic(records, "gradient_norm", "gradient norm (backbone) per task",
                            os.path.join(output, "gradient_norm.png"), log_scale=True),
        plot_sampling(records, os.path.join(output, "sampling.png")),
        plot_schedule(records, os.path.join(output, "schedule.png")),
    ]
    evaluations_path = run.evaluations_path
    if os.path.exists(evaluations_path):
        # One evaluation per (split, step); the file may exist before its first line. Lines
        # scored at another length or rotary scaling (`mtl evaluate --max-length/--rope-scaling`)
        # are not the training curve.
        evaluations = read_jsonl(evaluations_path, check_evaluation,
                                 key=lambda record: (str(record.get("split", "dev")), record["step"],
                                                     other_settings(record)))
        evaluations = [e for e in evaluations if not other_settings(e)]
        if evaluations:
            written.append(plot_dev_scores(evaluations, os.path.join(output, "dev_scores.png")))
    return written


# --- benchmark ----------------------------------------------------------------

def plot_benchmark(results, path):
    """`mtl benchmark`'s results.png: per task (and the suite mean) one bar per export,
    its 95% interval as an error bar, the task's majority class as a dashed line."""
    import numpy as np

    exports = [e["name"] for e in results["exports"]]
    tasks = [t["name"] for t in results["tasks"]]
    by = {(e["export"], e["task"]): e for e in results["summary"]}
    by.update({(e["export"], "mean"): e for e in results["suite_mean"]})
    groups = tasks + (["mean"] if results["suite_mean"] else [])
    width = 0.8 / max(1, len(exports))
    figure, axis = plt.subplots(figsize=(max(6, 1.3 * len(groups) * max(1, len(exports)) ** 0.5), 4),
                                constrained_layout=True)
    for i, export in enumerate(exports):
        x = np.arange(len(groups)) + (i - (len(exports) - 1) / 2) * width
        entries = [by.get((export, g)) for g in groups]
        means = [math.nan if e is None else e["mean"] for e in entries]
        errors = np.array([[0, 0] if e is None or e["ci95"] is None else
                           [e["mean"] - e["ci95"][0], e["ci95"][1] - e["mean"]] for e in entries]).T
        axis.bar(x, means, width, yerr=errors, capsize=3, label=export)
    for j, task in enumerate(results["tasks"]):
        if task.get("baseline") is not None:
            axis.hlines(task["baseline"], j - 0.45, j + 0.45, colors="black", linestyles="dashed",
                        label="majority class" if j == 0 else None)
    axis.set_xticks(range(len(groups)))
    axis.set_xticklabels([f"{t['name']}\n({t['metric']})" for t in results["tasks"]]
                         + (["mean"] if results["suite_mean"] else []))
    if all(bounded_01(t["metric"]) for t in results["tasks"]):
        axis.set_ylim(0, 1)
    axis.set_ylabel("dev score")
    seeds = len(results["seeds"])
    axis.set_title(f"fine-tuned dev scores, mean and 95% interval over {seeds} seed(s)")
    axis.grid(alpha=0.3, axis="y")
    axis.legend(fontsize="small")
    return save(figure, path)
