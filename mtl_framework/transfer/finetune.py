"""Fine-tune one task from an exported backbone, then score it on dev.

    run, line = finetune("runs/demo/export/keras", "chnsenticorp", data_root="../shared/data")

EXPORTED_DIR is any folder `architectures.layout` knows: our keras export, a bert4keras
checkpoint folder (as released or exported), a PyTorch `roformer` folder.
Nothing here trains or scores by itself: it writes a one-task experiment
(`backbone: {init: EXPORTED_DIR}`, balancing `none`, one micro-batch per
update) to RUN_DIR/finetune.yaml, trains it with `loop.run.Run` and scores
the result with `Run.evaluate` (recorded in RUN_DIR/evaluations.jsonl).

Two fine-tunes with the same `seed` and settings start from the same head
weights and draw the same batches, whatever the export's weights: the head is
drawn from the seed after a backbone of the same shape, and the batch order is
a function of the seed and the rows. `start_digests` fingerprints both, so a
paired comparison (`mtl benchmark`) can check it instead of assuming it.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from typing import TYPE_CHECKING

import yaml

from mtl_framework.errors import UserError
from mtl_framework.files import not_inside
from mtl_framework.prepare.stats import default_data_root

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any

    from mtl_framework.loop.run import Run

FINETUNE_YAML = "finetune.yaml"

DEFAULTS = dict(steps=200, batch_size=16, lr=2e-5, max_length=128, warmup_steps=None,
                weight_decay=0.01, optimizer="adamw", seed=0, dropout=None, rope_scaling=None)


def finetune_experiment(export_dir: str, task: str, data_root: str | None = None,
                        task_specs: Iterable[str] = (), cache_dir: str | None = None,
                        **settings: Any) -> dict[str, Any]:
    """The experiment dict `mtl finetune` trains (all paths absolute)."""
    s = {**DEFAULTS, **{k: v for k, v in settings.items() if v is not None}}
    warmup = s["warmup_steps"] if s["warmup_steps"] is not None else max(1, s["steps"] // 10)
    backbone = {"init": os.path.abspath(export_dir)}
    if s["dropout"] is not None:
        backbone["dropout"] = s["dropout"]
    if s["rope_scaling"] is not None:  # TYPE:FACTOR[:TRAINED] (--rope-scaling), or a mapping
        backbone["rope_scaling"] = rope_setting(s["rope_scaling"])
    experiment = {
        "name": f"finetune-{task}",
        "backbone": backbone,
        "tasks": [task],
        "balancing": "none",  # one task: its raw gradient, not a normalised one
        "tasks_per_update": 1,
        "batch_size": s["batch_size"],
        "max_length": s["max_length"],
        "optimizer": {"name": s["optimizer"], "lr": s["lr"], "warmup_steps": warmup,
                      "weight_decay": s["weight_decay"]},
        "steps": s["steps"],
        "seed": s["seed"],
        "checkpoint_every": 0,
        "keep_checkpoints": 1,
        "eval_every": 0,
    }
    if data_root:
        experiment["data_root"] = os.path.abspath(data_root)
    if task_specs:
        experiment["task_specs"] = [os.path.abspath(d) for d in task_specs]
    if cache_dir:
        experiment["cache_dir"] = os.path.abspath(cache_dir)
    return experiment


def fitting_length(export_dir, found, asked, log=print):
    """--max-length: `asked`, refused past a learned position table (BERT, ALBERT) naming
    the flag; by default DEFAULTS' 128, or the table's length where it is shorter (said in
    one line)."""
    from mtl_framework import architectures

    positions = architectures.read_config(export_dir, found).get("max_positions")
    if positions is None:  # rotary positions: any length is computed
        return asked
    if asked is not None and asked > positions:
        raise UserError(f"--max-length {asked}: longer than the backbone's max_positions "
                        f"{positions} ({architectures.config_path(export_dir, found)}: its "
                        f"learned position table has no rows past it): give --max-length "
                        f"{positions} or less")
    if asked is None and positions < DEFAULTS["max_length"]:
        if log:
            log(f"max length {positions}: the backbone's position table "
                f"({architectures.config_path(export_dir, found)}) is shorter than the default "
                f"{DEFAULTS['max_length']}")
        return positions
    return asked


def rope_setting(value):
    """The experiment's backbone.rope_scaling for --rope-scaling TEXT (a mapping as it is):
    `none` keeps the folder's rotary unscaled; the trained length, when TEXT does not give
    it, is filled from the folder when the backbone is loaded (assemble.folder_backbone)."""
    from mtl_framework.architectures import rope_scaling

    if not isinstance(value, str):
        return value
    if value == "none":
        return "none"
    parsed = rope_scaling.parse(value, original_max_length=2)  # syntax only
    length = value.split(":")[2:]
    return {"type": parsed["type"], "factor": parsed["factor"],
            **({"original_max_length": int(length[0])} if length else {})}


def finetune(export_dir: str, task: str, output: str | None = None, data_root: str | None = None,
             task_specs: Iterable[str] = (), cache_dir: str | None = None, eval_split: str = "dev",
             eval_max_examples: int | None = None, eval_batch_size: int = 64,
             log: Callable[[str], Any] = print, **settings: Any) -> tuple[Run, dict[str, Any]]:
    """Train `task` from the backbone folder `export_dir` (a format `architectures.layout`
    knows: `formats.loadable()`), score it on `eval_split`.
    Returns (run, the evaluation line as recorded in RUN_DIR/evaluations.jsonl plus
    "start": `start_digests` of the run before its first update)."""
    from mtl_framework import architectures, formats
    from mtl_framework.config.registry import load_registry
    from mtl_framework.evaluation import dev as evaluation
    from mtl_framework.loop.run import Run

    found = architectures.layout(export_dir)  # refuse a folder it cannot start from first
    settings["max_length"] = fitting_length(export_dir, found, settings.get("max_length"), log)
    if formats.vocab_path(export_dir) is None:
        raise UserError(f"{os.path.join(export_dir, 'vocab.txt')}: not found (nor a "
                        "tokenizer.json); fine-tuning uses the vocab the weights were trained "
                        "with: copy it into that folder")
    spec = load_registry(task_specs).select([task])[0]  # an unknown task: refused before writing
    if eval_split not in (spec.files or {}):
        raise UserError(f"--eval-split {eval_split}: task {task!r} has no such split; its "
                        f"splits: {', '.join(spec.files or {}) or 'none'} ({spec.spec_path})")
    if data_root is None:  # named here, not as a key of the generated experiment
        data_root = default_data_root()
        if not os.path.isdir(data_root):
            raise UserError(f"no --data-root given, and the default {data_root} ("
                            f"{'$MTL_DATA_ROOT' if 'MTL_DATA_ROOT' in os.environ else './data'}) "
                            "is no folder: pass --data-root DIR (the folder holding the datasets)")
    elif not os.path.isdir(data_root):
        raise UserError(f"--data-root {data_root}: no such folder")
    output = output or os.path.join("runs", f"finetune-{task}")
    not_inside(output, export_dir, "--output", "the backbone folder being fine-tuned (its "
               "files would no longer be one export)")
    check_output(output)
    experiment = finetune_experiment(export_dir, task, data_root, task_specs, cache_dir, **settings)
    # The run is checked and built from a copy outside `output`: a refusal writes nothing there.
    with tempfile.TemporaryDirectory(prefix="mtl-finetune-") as scratch:
        draft = os.path.join(scratch, FINETUNE_YAML)
        write_yaml(draft, experiment)
        try:
            run = Run(draft, output=output, log=log, resume=False)
        except UserError as error:  # name the settings, not a file gone once this returns
            raise UserError(str(error).replace(
                draft, f"the fine-tune's settings ({FINETUNE_YAML}, not written)")) from None
        start = start_digests(run, task)
        write_record(output, experiment)  # the record of what ran
        run.train()
    results = run.evaluate(eval_split, batch_size=eval_batch_size, max_examples=eval_max_examples)
    try:
        line = evaluation.record(run.run_dir, run.step, eval_split, results,
                                 {"max_examples": eval_max_examples} if eval_max_examples else None)
    except UserError as error:  # a full disk: the scores are shown before the error's line
        if getattr(error, "line", None):
            log(evaluation.format_results(error.line))
        raise
    log(evaluation.format_results(line))
    return run, {**line, "start": start}


def write_yaml(path, experiment):
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(experiment, f, allow_unicode=True, sort_keys=False)


def write_record(output, experiment):
    """finetune.yaml into `output`, whole or not at all: a failed write (a full disk)
    leaves no file (nor a folder it made), which would refuse the retry as a run."""
    from mtl_framework.files import write_text_atomic

    made = not os.path.exists(output)
    try:
        os.makedirs(output, exist_ok=True)
    except OSError as error:
        raise UserError(f"--output {output}: cannot be made ({error.strerror or error}): "
                        "free space or give another folder") from None
    try:
        write_text_atomic(os.path.join(output, FINETUNE_YAML),
                          yaml.safe_dump(experiment, allow_unicode=True, sort_keys=False))
    except UserError:
        if made:
            with contextlib.suppress(OSError):
                os.rmdir(output)  # empty: the one file was never written
        raise


def check_output(output):
    """A fine-tune trains into a new run directory: one that holds a run (checkpoints, an
    experiment, an earlier fine-tune, or a training writing it now) is refused."""
    from mtl_framework.rundir import RunDir

    run = RunDir(output)
    if os.path.exists(output) and not os.path.isdir(output):
        raise UserError(f"--output {output}: exists and is not a folder: give a new folder")
    holder = run.lock_holder()
    if holder:
        raise UserError(f"--output {output}: `mtl train` (pid {holder}) is writing it: give "
                        "--output a new folder")
    held = [os.path.basename(path) for path in (run.file(FINETUNE_YAML), run.experiment_path,
                                                 run.checkpoints_path) if os.path.exists(path)]
    if held:
        raise UserError(f"--output {output}: already holds a run ({held[0]}); a fine-tune "
                        "starts fresh: give --output a new folder")
    from mtl_framework.plan import check_writable, not_a_run

    foreign = not_a_run(output)
    if foreign:
        raise UserError(f"--output {output}: holds {', '.join(foreign[:3])}"
                        f"{' ...' if len(foreign) > 3 else ''} but no run: a fine-tune would "
                        "replace or append to such files; give --output a new or empty folder")
    check_writable(output)


def start_digests(run, task):
    """{"head_init", "batch_order"}: SHA-256 of the task head's weights before the first
    update and of the row indices of the first epoch's batches."""
    import numpy as np

    head = hashlib.sha256()
    for variable in run.model.heads[task].weights:
        head.update(np.asarray(variable.numpy(), dtype="float32").tobytes())
    order = hashlib.sha256()
    for rows in run.mixture.streams[task].plan(0):
        order.update(np.asarray(rows, dtype="int64").tobytes() + b"|")
    return {"head_init": head.hexdigest(), "batch_order": order.hexdigest()}
