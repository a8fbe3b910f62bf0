"""`mtl benchmark`: fine-tune exported encoders on a suite of tasks, several seeds each.

    results = benchmark(["runs/demo/export/keras", "runs/demo/export/step0"],
                        "suites/clue_small.yaml", data_root="../shared/data", output="runs/bench")

A suite is data (suites/*.yaml):

    seeds: [0, 1, 2]
    defaults: {steps: 300, lr: 5.0e-4, batch_size: 32, max_length: 128}
    tasks:
      - chnsenticorp
      - {name: tnews, steps: 400, dev_examples: 2000}

Per task: any key of SETTINGS (a task's own value, else `defaults`, else
finetune.DEFAULTS). Every (export, task, seed) is one `mtl finetune`
(finetune.finetune) scored on dev. The loop runs task by task, seed by seed,
export by export, so an interrupted benchmark leaves whole pairs.

Paired comparison: for one task and seed, every export is fine-tuned with the
same settings and seed, so the head starts from the same weights and sees the
same batches (same dropout seeds too). Each row records digests of both
(finetune.start_digests); a difference is marked `paired: false` when they
disagree (e.g. exports of different hidden sizes), and its interval is then
not a paired one.

OUTPUT/
  rows.jsonl      one line per finished (export, task, seed): what resuming skips
  results.json    rows, summary (mean and 95% t-interval over seeds), suite_mean,
                  differences and suite_mean_differences (paired by seed: for each pair of
                  exports, the one listed earlier minus the later one)
  results.md      the table (exports as rows, tasks as columns, mean +- half-interval)
  results.png     grouped bars with the intervals (report.plot_benchmark)
  runs/EXPORT/TASK/seed-N/   each fine-tune's run directory and log (checkpoints removed
                  once scored, unless keep_checkpoints)
  cache/          features (per vocab), shared by every fine-tune
"""
import contextlib
import json
import math
import os
import re
import shutil
import statistics
import time

import yaml

from mtl_framework.config.experiment import OPTIMIZERS
from mtl_framework.config.yaml_io import parse_yaml
from mtl_framework.errors import UserError
from mtl_framework.files import check_folder, write_text_atomic
from mtl_framework.formats import OURS
from mtl_framework.rundir import RunDir
from mtl_framework.rundir.trained_on import export_fingerprint
from mtl_framework.scoring.scorers import score_name
from mtl_framework.transfer.finetune import DEFAULTS as FINETUNE_DEFAULTS

# What a suite may set per task (or in `defaults`): the fine-tune's settings, and how
# many dev examples to score (default: the whole dev split).
SETTINGS = {"steps": int, "lr": float, "batch_size": int, "max_length": int,
            "warmup_steps": int, "weight_decay": float, "optimizer": str, "dropout": float,
            "dev_examples": int}
SUITE_KEYS = ("tasks", "seeds", "defaults", "description")
ROWS = "rows.jsonl"


# --- the suite ----------------------------------------------------------------

def _check_setting(key, value):
    kind = SETTINGS[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        return None, f"{key} must be {'a number' if kind is float else kind.__name__}, got {value!r}"
    if kind in (int, float) and key not in ("weight_decay", "dropout", "warmup_steps") and value <= 0:
        return None, f"{key} must be > 0, got {value}"
    if kind in (int, float) and value < 0:
        return None, f"{key} must be >= 0, got {value}"
    if key == "optimizer" and value not in OPTIMIZERS:
        return None, f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {value!r}"
    return value, None


def load_suite(path, registry=None):
    """{"path", "seeds", "tasks": [{"name", "line", **settings}], "description"}; every
    problem is reported at once as `file:line: message` (UserError)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as error:
        raise UserError(f"{path}: cannot read the suite ({error.strerror}); give a suite YAML "
                        "such as suites/clue_small.yaml") from None
    document = parse_yaml(text, path)  # the package's one YAML reader: keys given twice too
    if document.problems:
        raise UserError("\n".join(f"{path}:{line}: invalid YAML ({message})"
                                   for line, message in document.problems))
    raw, lines, errors = document.data, document.lines, []

    def error(where, message):
        errors.append(f"{path}:{lines.get(where, 1)}: {message}")

    if not isinstance(raw, dict):
        raise UserError(f"{path}:1: a suite is a mapping with tasks, seeds and defaults")
    for key in raw:
        if key not in SUITE_KEYS:
            error((key,), f"unknown key {key!r}; a suite has {', '.join(SUITE_KEYS)}")
    defaults = raw.get("defaults") or {}
    if not isinstance(defaults, dict):
        error(("defaults",), f"defaults must be a mapping of {', '.join(SETTINGS)}")
        defaults = {}
    checked_defaults = {}
    for key, value in defaults.items():
        if key not in SETTINGS:
            error(("defaults", key), f"unknown setting {key!r}; known: {', '.join(SETTINGS)}")
            continue
        checked_defaults[key], problem = _check_setting(key, value)
        if problem:
            error(("defaults", key), problem)
    seeds = raw.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds or not all(
            isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**32 for s in seeds):
        error(("seeds",), f"seeds must be a non-empty list of integers from 0 to 2^32 - 1, "
                          f"got {seeds!r}")
    elif len(set(seeds)) != len(seeds):
        error(("seeds",), f"seeds repeat a value: {seeds}")
    entries = raw.get("tasks")
    if not isinstance(entries, list) or not entries:
        error(("tasks",), "tasks must be a non-empty list of task names or {name, steps, ...}")
        entries = []
    tasks, known = [], registry.tasks if registry is not None else None
    for i, entry in enumerate(entries):
        where = ("tasks", i)
        entry = {"name": entry} if isinstance(entry, str) else entry
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            error(where, f"tasks[{i}] must be a task name or a mapping with 'name', got {entry!r}")
            continue
        task = {"name": entry["name"], "line": lines.get(where, 1), **checked_defaults}
        for key, value in entry.items():
            if key == "name":
                continue
            if key not in SETTINGS:
                error(where + (key,), f"unknown setting {key!r} for task {entry['name']!r}; "
                                      f"known: {', '.join(SETTINGS)}")
                continue
            task[key], problem = _check_setting(key, value)
            if problem:
                error(where + (key,), problem)
        if known is not None and task["name"] not in known:
            from mtl_framework.config.registry import did_you_mean

            error(where, f"unknown task {task['name']!r}{did_you_mean(task['name'], list(known))}"
                         f"; {registry.searched()} (`mtl tasks list` shows them all)")
        if any(t["name"] == task["name"] for t in tasks):
            error(where, f"task {task['name']!r} is listed twice")
        tasks.append(task)
    if errors:
        raise UserError("\n".join(errors))
    return {"path": path, "seeds": list(seeds), "tasks": tasks,
            "description": raw.get("description", "")}


def task_settings(task):
    """The fine-tune settings of a suite task, every default filled in."""
    settings = {**{k: v for k, v in FINETUNE_DEFAULTS.items() if k != "seed"},
                "dev_examples": None}
    settings.update({k: task[k] for k in SETTINGS if k in task})
    return settings


# --- statistics ---------------------------------------------------------------

def t_quantile(df, p=0.975):
    """Student's t quantile for integer df >= 1 (bisection on the exact CDF of
    Abramowitz & Stegun 26.7.3-4)."""
    def inside(t):  # P(|T| < t)
        theta = math.atan(t / math.sqrt(df))
        c2, s = math.cos(theta) ** 2, math.sin(theta)
        if df % 2:  # odd
            term, total = math.cos(theta), 0.0
            for k in range(1, (df - 1) // 2 + 1):
                total += term
                term *= c2 * (2 * k) / (2 * k + 1)
            return 2 / math.pi * (theta + s * total) if df > 1 else 2 * theta / math.pi
        term, total = 1.0, 0.0
        for k in range(1, df // 2 + 1):
            total += term
            term *= c2 * (2 * k - 1) / (2 * k)
        return s * total

    low, high, target = 0.0, 1e4, 2 * p - 1
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if inside(middle) < target else (low, middle)
    return (low + high) / 2


def mean_ci(values, level=0.95):
    """(mean, [low, high]) with a t-interval over `values`; None interval for one value."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None
    half = t_quantile(len(values) - 1, (1 + level) / 2) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, [mean - half, mean + half]


def summarize(rows, exports, tasks):
    """summary, suite_mean, differences, suite_mean_differences from the rows alone."""
    score = {(r["export"], r["task"], r["seed"]): r["score"] for r in rows}
    start = {(r["export"], r["task"], r["seed"]): r.get("start") for r in rows}
    seeds = sorted({r["seed"] for r in rows})
    summary = []
    for export in exports:
        for task in tasks:
            values = [score[export, task, s] for s in seeds if (export, task, s) in score]
            if values:
                mean, ci = mean_ci(values)
                summary.append({"export": export, "task": task, "mean": mean, "ci95": ci,
                                "seeds": len(values)})

    def suite_means(export):  # per seed with every task scored: the mean over tasks
        return {s: statistics.fmean(score[export, t, s] for t in tasks)
                for s in seeds if all((export, t, s) in score for t in tasks)}

    suite_mean = []
    for export in exports:
        means = suite_means(export)
        if means:
            mean, ci = mean_ci(list(means.values()))
            suite_mean.append({"export": export, "mean": mean, "ci95": ci, "seeds": len(means)})
    differences, suite_differences = [], []
    for i, a in enumerate(exports):
        for b in exports[i + 1:]:
            for task in tasks:
                common = [s for s in seeds if (a, task, s) in score and (b, task, s) in score]
                if common:
                    mean, ci = mean_ci([score[a, task, s] - score[b, task, s] for s in common])
                    paired = all(start[a, task, s] is not None and start[a, task, s] ==
                                 start[b, task, s] for s in common)
                    differences.append({"a": a, "b": b, "task": task, "mean": mean, "ci95": ci,
                                        "seeds": len(common), "paired": paired})
            means_a, means_b = suite_means(a), suite_means(b)
            common = [s for s in seeds if s in means_a and s in means_b]
            if common:
                mean, ci = mean_ci([means_a[s] - means_b[s] for s in common])
                suite_differences.append({"a": a, "b": b, "mean": mean, "ci95": ci,
                                          "seeds": len(common)})
    return {"summary": summary, "suite_mean": suite_mean, "differences": differences,
            "suite_mean_differences": suite_differences}


# --- exports and rows ---------------------------------------------------------

def export_label(path):
    return os.path.normpath(path)


def export_slug(label):
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_.") or "export"


def check_exports(paths):
    """Each path a backbone folder `mtl finetune` starts from (`architectures.layout`),
    none given twice."""
    from mtl_framework import architectures

    errors = []
    for path in paths:
        try:
            architectures.layout(path)
        except UserError as error:
            errors.append(str(error))
    seen = {}
    for path in paths:
        slug = export_slug(export_label(path))
        if slug not in seen:
            seen[slug] = path
        elif os.path.realpath(seen[slug]) == os.path.realpath(path):
            errors.append(f"exports {seen[slug]} and {path}: the same export is given twice")
        else:
            errors.append(f"exports {seen[slug]} and {path}: different folders whose names "
                          f"both become {slug!r} in --output's runs/ and results: rename one "
                          "of them (or link it under another name)")
    if errors:
        raise UserError("\n".join(errors))


def check_task_files(tasks, data_root):
    from data_adapters import MissingDataFile, split_paths

    errors = []
    for task in tasks:
        for split in ("train", "dev"):
            if not task.files.get(split):
                errors.append(f"{task.spec_path}:{task.line}: task {task.name!r} has no {split} "
                              "file: a benchmark task needs train and dev splits")
                continue
            try:  # lists of files, optional ones and mirror names, as reading sees them
                split_paths(task, split, data_root)
            except MissingDataFile as error:
                errors.append(f"{os.path.join(data_root, error.relative)}: missing {split} file "
                              f"of task {task.name!r}; check --data-root")
    if errors:
        raise UserError("\n".join(errors))


def read_rows(output):
    """Finished rows of an earlier invocation (rows.jsonl), with their line numbers."""
    path = os.path.join(output, ROWS)
    rows = []
    if not os.path.exists(path):
        return rows
    with open(path, encoding="utf-8") as f:
        for number, text in enumerate(f, 1):
            if not text.strip():
                continue
            try:
                rows.append((number, json.loads(text)))
            except json.JSONDecodeError:
                raise UserError(f"{path}:{number}: not a JSON line (a benchmark killed while "
                                "writing can leave a cut line): delete that line and run again") from None
    return rows


def reusable_rows(output, plan):
    """{(export, task, seed): row} of rows.jsonl that match this invocation; a row for
    the same key with other settings or other export weights is an error."""
    path, done = os.path.join(output, ROWS), {}
    for number, row in read_rows(output):
        key = (row.get("export"), row.get("task"), row.get("seed"))
        if key not in plan:
            continue  # another export/task/seed: kept in the file, not in these results
        expected = plan[key]
        for field in ("settings", "fingerprint"):
            if row.get(field) != expected[field]:
                raise UserError(
                    f"{path}:{number}: {key[0]} / {key[1]} / seed {key[2]} was scored with other "
                    f"{'settings' if field == 'settings' else 'export weights'}: give a new "
                    "--output, or delete that line to run it again")
        done[key] = row
    return done


# --- the "no pretraining" start ------------------------------------------------

def initial_export(run_dir, output, log=print):
    """Export the step-0 model of a training run: the same experiment, seed and vocab
    rebuilt (so the same initial weights), its residual scale set to 1 as after any
    warm-up, written as a one-checkpoint run directory OUTPUT/run and exported with
    `mtl export --format keras` to OUTPUT/keras. Returns the keras export's folder."""
    import keras

    from mtl_framework.loop.run import Run
    from mtl_framework.saving.writer import export

    run = RunDir(run_dir)
    source = run.experiment_path
    if not os.path.exists(source) or not os.path.exists(run.vocab_path):
        raise UserError(f"{run_dir}: no experiment.yaml and vocab.txt; give a run directory "
                        "written by `mtl train`")
    experiment = run.read_experiment()
    if (experiment.get("backbone") or {}).get("init") or \
            (experiment.get("backbone") or {}).get("checkpoint"):
        raise UserError(f"{source}: the run started from other weights (backbone.init or "
                        "checkpoint): its step-0 model is that export, use it directly")
    experiment["vocab"] = os.path.abspath(run.vocab_path)
    initial_run = os.path.join(output, "run")
    if os.path.exists(initial_run):
        raise UserError(f"{initial_run}: already exists; remove it or give another --output")
    os.makedirs(initial_run)
    path = os.path.join(output, "initial.yaml")
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(experiment, f, allow_unicode=True, sort_keys=False)
    run = Run(path, output=initial_run, log=log)
    if hasattr(run.backbone, "residual_alpha"):  # RoFormerV2's residual scale
        run.backbone.residual_alpha.assign(1.0)
    run.write_run_files()  # experiment.yaml and vocab.txt: `train` would write them
    run.save_checkpoint(0, 1)
    keras.backend.clear_session()
    return export(initial_run, OURS, os.path.join(output, OURS), log=log)


# --- running ------------------------------------------------------------------

def benchmark(exports, suite_path, data_root, output, task_specs=(), cache_dir=None,
              keep_checkpoints=False, log=print):
    """Run what is not done yet, then write results.json, results.md, results.png.
    Returns the results dict."""
    from mtl_framework.config.registry import load_registry

    if not data_root:
        raise UserError("no data root: pass --data-root DIR (the folder holding the datasets, "
                        "e.g. ../shared/data) or set MTL_DATA_ROOT")
    if not os.path.isdir(data_root):  # a hint other than what was passed
        raise UserError(f"--data-root {data_root}: no such folder ({os.path.abspath(data_root)}); "
                        "give the folder that holds the suite's datasets, one folder per "
                        "dataset (tnews/, ocnli/, ...; where to get them: docs/hub_data.md)")
    check_folder(output, "--output")  # where the results go, before anything is read
    check_exports(exports)
    try:
        registry = load_registry(task_specs or None)
    except ValueError as error:
        raise UserError(str(error)) from None
    suite = load_suite(suite_path, registry)
    specs = registry.select([t["name"] for t in suite["tasks"]])
    check_task_files(specs, data_root)
    labels = [export_label(p) for p in exports]
    paths = dict(zip(labels, exports))
    fingerprints = {label: export_fingerprint(paths[label]) for label in labels}
    settings = {t["name"]: task_settings(t) for t in suite["tasks"]}
    order = [(label, task["name"], seed) for task in suite["tasks"] for seed in suite["seeds"]
             for label in labels]
    plan = {key: {"settings": settings[key[1]], "fingerprint": fingerprints[key[0]]}
            for key in order}
    done = reusable_rows(output, plan)  # refuses before anything is written
    os.makedirs(output, exist_ok=True)
    cache_dir = cache_dir or os.path.join(output, "cache")
    log(f"benchmark: {len(labels)} export(s) x {len(suite['tasks'])} task(s) x "
        f"{len(suite['seeds'])} seed(s) = {len(order)} fine-tunes, {len(done)} already done")
    for number, key in enumerate(order, 1):
        label, task, seed = key
        prefix = f"[{number}/{len(order)}] {task} seed {seed} {label}"
        if key in done:
            log(f"{prefix}: done earlier, score {done[key]['score']:.4f}")
            continue
        row = finetune_one(paths[label], label, task, seed, settings[task], data_root, output,
                           task_specs, cache_dir, keep_checkpoints)
        row["fingerprint"] = fingerprints[label]
        with open(os.path.join(output, ROWS), "a", encoding="utf-8") as f:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
        done[key] = row
        majority = "-" if row["baseline"] is None else f"{row['baseline']:.4f}"
        log(f"{prefix}: {row['metric']} {row['score']:.4f} (majority class {majority}, "
            f"{row['wall_s']:.0f} s)")
    return write_results(output, suite, labels, paths, [done[key] for key in order], log)


def finetune_one(path, label, task, seed, settings, data_root, output, task_specs, cache_dir,
                 keep_checkpoints):
    """One fine-tune, its output in its run directory's finetune.log; returns its row."""
    import keras

    from mtl_framework.transfer.finetune import finetune

    run_dir = os.path.join(output, "runs", export_slug(label), task, f"seed-{seed}")
    shutil.rmtree(run_dir, ignore_errors=True)  # an interrupted attempt starts again
    os.makedirs(run_dir)
    train = {k: v for k, v in settings.items() if k != "dev_examples"}
    started = time.perf_counter()
    with open(RunDir(run_dir).file("finetune.log"), "w", encoding="utf-8") as log_file, \
            contextlib.redirect_stdout(log_file):
        def log(message):
            print(message, file=log_file, flush=True)

        _, line = finetune(path, task, output=run_dir, data_root=data_root, task_specs=task_specs,
                           cache_dir=cache_dir, eval_max_examples=settings["dev_examples"],
                           log=log, seed=seed, **train)
    keras.backend.clear_session()
    if not keep_checkpoints:
        shutil.rmtree(RunDir(run_dir).checkpoints_path, ignore_errors=True)
    entry = line["tasks"][task]
    return {"export": label, "task": task, "seed": seed, "score": entry["score"],
            "metric": score_name(entry), "metric_score": entry.get("metric_score"),
            "baseline": entry.get("baseline"),
            "examples": entry.get("examples"), "settings": settings, "start": line["start"],
            "wall_s": round(time.perf_counter() - started, 1)}


# --- results ------------------------------------------------------------------

def write_results(output, suite, labels, paths, rows, log=print):
    tasks = [t["name"] for t in suite["tasks"]]
    first = {}
    for row in rows:
        first.setdefault(row["task"], row)
    results = {
        "suite": os.path.abspath(suite["path"]), "description": suite["description"],
        "seeds": suite["seeds"],
        "exports": [{"name": label, "path": os.path.abspath(paths[label])} for label in labels],
        "tasks": [{"name": t["name"], "metric": first[t["name"]]["metric"],
                   "baseline": first[t["name"]]["baseline"],
                   "examples": first[t["name"]]["examples"], "settings": task_settings(t)}
                  for t in suite["tasks"] if t["name"] in first],
        "rows": [{k: row[k] for k in ("export", "task", "seed", "score", "start", "wall_s")}
                 for row in rows],
        **summarize(rows, labels, tasks),
    }
    # whole or not at all: a kill or a full disk never leaves an earlier run's results cut
    write_text_atomic(os.path.join(output, "results.json"),
                      json.dumps(results, indent=1, ensure_ascii=False))
    write_text_atomic(os.path.join(output, "results.md"), markdown(results))
    try:
        from mtl_framework.plots import plot_benchmark
    except UserError as error:  # no [plots] extra: results.json and .md are the results
        log(f"warning: no results.png: {error}")
    else:
        plot_benchmark(results, os.path.join(output, "results.png"))
    return results


def _cell(entry, scale=100):
    if entry is None:
        return "-"
    if entry["ci95"] is None:
        return f"{entry['mean'] * scale:.2f}"
    half = (entry["ci95"][1] - entry["ci95"][0]) / 2
    return f"{entry['mean'] * scale:.2f} ± {half * scale:.2f}"


def _signed(entry, scale=100):
    if entry is None:
        return "-"
    text = f"{entry['mean'] * scale:+.2f}"
    if entry["ci95"] is not None:
        text += f" ± {(entry['ci95'][1] - entry['ci95'][0]) / 2 * scale:.2f}"
    return text + ("" if entry.get("paired", True) else " (unpaired)")


def markdown(results):
    """Exports as rows, tasks as columns (scores x 100, mean ± half of the 95% t-interval
    over seeds), then the majority class and the paired differences."""
    tasks = [t["name"] for t in results["tasks"]]
    by = {(e["export"], e["task"]): e for e in results["summary"]}
    means = {e["export"]: e for e in results["suite_mean"]}
    header = [f"{t['name']} ({t['metric']})" for t in results["tasks"]]
    lines = ["| export | " + " | ".join(header) + " | mean |",
             "|---|" + "---|" * (len(tasks) + 1)]
    for export in (e["name"] for e in results["exports"]):
        lines.append(f"| {export} | " + " | ".join(_cell(by.get((export, t))) for t in tasks)
                     + f" | {_cell(means.get(export))} |")
    baselines = [t["baseline"] for t in results["tasks"]]
    if all(b is not None for b in baselines):
        lines.append("| majority class | " + " | ".join(f"{b * 100:.2f}" for b in baselines)
                     + f" | {sum(baselines) / len(baselines) * 100:.2f} |")
    else:
        lines.append("| majority class | " + " | ".join(
            "-" if b is None else f"{b * 100:.2f}" for b in baselines) + " | - |")
    pairs = {(d["a"], d["b"]) for d in results["differences"]}
    diff = {(d["a"], d["b"], d["task"]): d for d in results["differences"]}
    suite_diff = {(d["a"], d["b"]): d for d in results["suite_mean_differences"]}
    for a, b in sorted(pairs, key=lambda p: [e["name"] for e in results["exports"]].index(p[0])):
        lines.append(f"| {a} − {b} (paired) | " + " | ".join(
            _signed(diff.get((a, b, t))) for t in tasks) + f" | {_signed(suite_diff.get((a, b)))} |")
    seeds = results["seeds"]
    notes = ["", f"Dev scores x 100, mean ± half of the 95% t-interval over {len(seeds)} "
                 f"fine-tune seed(s) ({', '.join(map(str, seeds))}); the mean column averages the "
                 "tasks per seed first. Differences are per seed (same seed: same head init, "
                 "batch order and dropout), then averaged.", "",
             "| task | steps | batch | lr | max length | dev examples scored |",
             "|---|---|---|---|---|---|"]
    for t in results["tasks"]:
        s = t["settings"]
        notes.append(f"| {t['name']} | {s['steps']} | {s['batch_size']} | {s['lr']:g} | "
                     f"{s['max_length']} | {t['examples']} |")
    unpaired = [d for d in results["differences"] if not d["paired"]]
    if unpaired:
        notes += ["", "Unpaired (head init or batch order differed between the exports): "
                      + ", ".join(f"{d['a']} vs {d['b']} on {d['task']}" for d in unpaired)]
    return "\n".join(lines + notes) + "\n"
