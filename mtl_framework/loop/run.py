"""`mtl train`: an experiment YAML -> a run directory. The training loop, at the end of
the core's five stages, each a module:

    plan      plan.plan_run           the checked experiment: tasks, files, vocab, run directory
    prepare   prepare/pipeline.py     the vocab and feature caches -> train streams (+ mixing/)
    assemble  assemble.py             backbone, heads, optimizer (also from a checkpoint: resume,
                                      evaluate, predict, export; from a folder: finetune)
    step      step/                   one update: micro-batches, per-task gradients, balancing
    loop      here                    fit, callbacks, checkpoints, evaluations

run_dir/
  experiment.yaml       the resolved experiment (what ran)
  vocab.txt             the vocabulary the run used
  checkpoints/step-N/   state.npz (every model + optimizer variable, by name) + trainer.json
                        (step, sampler and per-task stream positions), written atomically
                        (the layout, names and faults: mtl_framework/rundir/run_dir.py)
  checkpoints/best-step-N/  keep_best's checkpoint (best dev score so far), never rotated
  metrics.jsonl         one line per update: per-task loss, gradient norm, micro-batch count
                        (a contrastive task's in-batch accuracy, chance loss, mean cosine too)
  provenance.jsonl      one line per start or resume: our version, commit, TF/Keras versions
  logs/                 TensorBoard scalars

Distributed runs (`distribution: mirrored | multi_worker`): every process builds the
same streams and model in the strategy's scope; only the chief (task `chief`, else
worker 0) writes the run directory; the other workers keep their vocab, metrics and
logs in a temporary folder, removed at the end, and resume from the chief's checkpoints.

Python: `Run(experiment, callbacks=[...]).train()`, `experiment` a path or an
experiment.Experiment; the callbacks see per-task losses, rates and dev scores in
Keras's `logs` (callbacks.py), a Keras epoch being `eval_every` updates. `Run.close()`
(or `with Run(...) as run:`) stops the run's micro-step threads when a process trains
many runs one after another.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
import time
import warnings
from typing import TYPE_CHECKING

import keras
import numpy as np

from mtl_framework import assemble
from mtl_framework.config.experiment import keep_best_settings
from mtl_framework.config.precision import AS_NAMED
from mtl_framework.errors import UserError
from mtl_framework.loop.callbacks import (
    EPOCH_CUT_WARNING,
    SIGNS,
    BestTracker,
    EvaluationEpochs,
    NotLearning,
    Progress,
    TaskLogs,
    TaskMeans,
)
from mtl_framework.loop.scalar_log import ScalarLog
from mtl_framework.mixing.mixture import Mixture
from mtl_framework.plan import MLM_TASK, check_fallback, check_run_dir, plan_run
from mtl_framework.prepare.cache import CacheNotes
from mtl_framework.prepare.pipeline import prepare_vocab, train_streams
from mtl_framework.rundir import RunDir
from mtl_framework.rundir.checkpoint import read_trainer
from mtl_framework.rundir.records import TEMPORARY, warn
from mtl_framework.rundir.run_dir import checkpoint_step, set_aside
from mtl_framework.rundir.trained_on import matched_task, task_labels, vocab_record
from mtl_framework.step.distributed import (
    check_same_on_every_worker,
    describe_jax_distribution,
    is_chief,
    make_strategy,
    update_counter,
)
from mtl_framework.step.model import NonFiniteLossError
from mtl_framework.step.variable_names import head_metadata
from mtl_framework.tokenizer import is_tokenizer_json, vocab_bytes

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any

    from mtl_framework.config.experiment import Experiment
    from mtl_framework.plan import Plan


def task_settings(plan):
    """({task: loss weight}, {task: pinned rate}): the experiment's entry for the task (by
    name, else by dataset) over the task spec's own values; the reserved mlm task's from
    its entry alone."""
    loss_weights, pinned = {}, {}
    for task in plan.tasks:
        entry = plan.entries.get(task.name) or plan.entries.get(task.dataset) or {}
        loss_weights[task.name] = entry.get("loss_weight", task.loss_weight)
        rate = entry.get("rate", task.rate)
        if rate is not None:
            pinned[task.name] = rate
    if MLM_TASK in plan.entries:
        entry = plan.entries[MLM_TASK]
        loss_weights[MLM_TASK] = entry.get("loss_weight", 1.0)
        if "rate" in entry:
            pinned[MLM_TASK] = entry["rate"]
    return loss_weights, pinned


class RunLogger(keras.callbacks.Callback):
    """metrics.jsonl + TensorBoard per update; checkpoints every `every` updates."""

    def __init__(self, run, every, keep, start_step):
        super().__init__()
        self.run, self.every, self.keep, self.step = run, every, keep, start_step
        self.evaluated = None  # step of the last evaluation
        self.bad_since = {}  # task -> update of the first of its skipped micro-batches in a row
        self.metrics = run.work.open_metrics()
        self.writer = ScalarLog(run.work.logs_path)
        if not self.writer.available:
            run.log("TensorBoard logs: not written (no tensorboard package in this environment)")

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        model = self.run.model
        alpha = getattr(model.backbone, "residual_alpha", None)  # RoFormerV2's alone
        record = {"step": self.step, "time": time.time(), "loss": (logs or {}).get("loss"),
                  # .numpy(): float() fails on the MirroredVariable a strategy holds
                  "alpha": 1.0 if alpha is None else float(alpha.numpy()),
                  "lr": float(keras.ops.convert_to_numpy(model.optimizer.learning_rate)),
                  "tasks": {}}
        # annealed sampling moves the rates: those of this update's first draw
        self.run.rates = self.run.current_rates(-model.tasks_per_update)
        signs = TaskMeans()  # the heads' signs (TaskHead.signs), of the finite micro-batches
        signs.add(model.last_micro_logs)
        for entry in model.last_micro_logs:
            task = record["tasks"].setdefault(entry["task"], {"loss": [], "gradient_norm": [],
                                                              "tokens": 0})
            task["loss"].append(entry["loss"])
            task["gradient_norm"].append(entry["gradient_norm"])
            task["tokens"] += entry.get("tokens", 0)
        for name, stats in record["tasks"].items():
            stats["count"] = len(stats["loss"])  # micro-batches drawn: `mtl report` plots the mixture
            stats["rate"] = float(self.run.rates[name])  # the sampler's effective rate
            for key in ("loss", "gradient_norm"):
                stats[key] = float(np.mean(stats[key]))
            for key in model.heads[name].signs:  # in-batch accuracy, chance loss, cosine
                if not math.isnan(signs.mean(name, key)):
                    stats[key] = signs.mean(name, key)
        record["tokens"] = sum(stats["tokens"] for stats in record["tasks"].values())
        record["rates"] = {name: float(rate) for name, rate in self.run.rates.items()}
        record["skipped"] = dict(model.skipped)
        weights = model.balancing.weights()
        if weights:  # adaptive task weights (balancing.py), as the next update uses them
            record["balancing_weights"] = weights
        for entry in model.last_micro_logs:
            if entry["finite"]:
                self.bad_since.pop(entry["task"], None)
            else:
                if entry["task"] not in self.bad_since and self.run.is_chief:  # said once a run
                    warn(f"update {self.step}: a micro-batch of {entry['task']} had a "
                               "non-finite loss or gradient and was skipped "
                               f"({model.skipped.get(entry['task'], 0)} skipped so far; "
                               "metrics.jsonl counts them)")
                self.bad_since.setdefault(entry["task"], self.step)
        self.metrics.write(json.dumps(record) + "\n")
        self.metrics.flush()
        # the update a Ctrl-C reports (cli/train.py) is the last one metrics.jsonl holds
        self.run.step = self.step
        scalars = {"loss": record["loss"] or 0.0}
        for name, stats in record["tasks"].items():
            scalars.update({f"{name}/loss": stats["loss"], f"{name}/gradient_norm":
                            stats["gradient_norm"], f"{name}/sampling_rate": stats["rate"]})
            scalars.update({f"{name}/{key}": stats[key] for key in SIGNS if key in stats})
        self.writer.write(self.step, scalars)
        eval_every, steps = self.run.experiment.eval_every, self.run.experiment.steps
        if eval_every and (self.step % eval_every == 0 or self.step == steps):
            self.evaluate()  # before this step's checkpoint, which keeps keep_best's state
        if self.every and self.step % self.every == 0:
            self.checkpoint()

    def evaluate(self):
        """Dev scores (first `eval_batches` batches per task) -> evaluations.jsonl + TensorBoard."""
        from mtl_framework.evaluation import dev as evaluation

        if not self.run.is_chief:  # the chief evaluates and records; the model is the same
            return
        exp = self.run.experiment
        results = self.run.evaluate("dev", max_examples=exp.eval_batches * exp.batch_size)
        line = evaluation.record(self.run.run_dir, self.step, "dev", results)
        scalars = {f"{name}/dev_score": entry["score"] for name, entry in results.items()
                   if entry.get("score") is not None}
        if line["aggregate"] is not None:
            scalars["dev_aggregate"] = line["aggregate"]
        self.writer.write(self.step, scalars)
        self.run.log("\n" + evaluation.format_results(line))
        self.evaluated = self.step
        self.run.last_evaluation = line
        tracker = self.run.best
        if tracker is None:
            return
        if tracker.update(self.step, line) and "keep_best" in exp.raw:
            self.run.save_best(self.step)
        if tracker.exhausted():
            self.run.log(f"stopping at update {self.step} of {exp.steps}: {tracker.stop_reason()}")
            self.run.model.stop_training = True

    def checkpoint(self, final=False):
        """A checkpoint, unless a task is in a run of skipped (non-finite) micro-batches:
        the state then may be what made them non-finite (the next checkpoint catches up;
        after the last update none does: said on stderr, naming the newest one kept)."""
        if self.bad_since and final:
            tasks = ", ".join(sorted(self.bad_since))
            kept = self.run.checkpoint_dirs()
            newest = (f"the newest checkpoint is {self.run.run.checkpoint_path(kept[-1])}"
                      if kept else "the run has no checkpoint")
            overflow = (" (under mixed_float16, loss-scale overflows while the scale settles)"
                        if self.run.experiment.precision == "mixed_float16" else "")
            if self.run.is_chief:
                warn(f"the final update {self.step} has no checkpoint: the last micro-batches of "
                     f"{tasks} were non-finite and skipped{overflow}; {newest}: `mtl train "
                     "... --resume` trains the updates after it again")
            return
        if self.bad_since:
            self.run.log(f"warning: no checkpoint at step {self.step}: the last micro-batches of "
                         f"{', '.join(sorted(self.bad_since))} were non-finite (skipped)")
            return
        self.run.save_checkpoint(self.step, self.keep)

    def non_finite_end(self):
        """The error of a run whose last micro-batches of a task were all skipped as
        non-finite: it ends at this update, a refusal (Run.non_finite_stop's line)."""
        tasks = sorted(self.bad_since, key=lambda t: (self.bad_since[t], t))
        model = self.run.model
        also = f" (also {', '.join(tasks[1:])})" if len(tasks) > 1 else ""
        return NonFiniteLossError(
            f"task {tasks[0]!r}{also}: its last {model._consecutive_bad[tasks[0]]} micro-batch(es) "
            "had a non-finite loss or gradient when training ended; check its data/labels or "
            "lower the learning rate", task=tasks[0], update=self.step)

    def on_train_end(self, logs=None):
        eval_every = self.run.experiment.eval_every
        if eval_every and self.evaluated != self.step:
            self.evaluate()  # the run always ends with its final dev scores
        if self.bad_since and not self.run.model.dynamic_loss_scale:
            # the last update's state may be what made them non-finite: no final checkpoint
            # of it, and no exit 0 (mixed_float16's loss-scale skips are routine: not here)
            self.metrics.close()
            self.writer.close()
            raise self.non_finite_end()
        self.checkpoint(final=True)
        best = self.run.best
        if self.step < self.run.experiment.steps and not (best and best.exhausted()):
            self.run.log(f"stopped at update {self.step} of {self.run.experiment.steps} by a "
                         "callback (model.stop_training)")
        self.metrics.close()
        self.writer.close()


class Run:
    """A training run: `Run(EXPERIMENT, output, callbacks=[...]).train(resume=...)`, EXPERIMENT
    a YAML path or an `Experiment` (Experiment.from_dict / from_yaml), checked alike.

    Everything checkable is checked first (plan.plan_run: the experiment, tasks,
    data and label files, vocab; with `resume` True/False also the run directory), then
    the model is built; nothing is written to the run directory until `train` starts
    and holds the run's lock (`Run.load`, which evaluates, writes nothing at all).
    `plan`: a Plan already made (`mtl train` makes it before importing TensorFlow) in
    place of the four arguments it was made from (experiment_path, output, data_root,
    resume)."""

    def __init__(self, experiment: Experiment | str | None, output: str | None = None,
                 log: Callable[[str], Any] = print, distribution: str | None = None,
                 data_root: str | None = None, resume: bool | None = None, plan: Plan | None = None,
                 callbacks: Iterable[keras.callbacks.Callback] | None = None) -> None:
        self.log = log
        self.eval_cache_notes = CacheNotes(log)  # one "dev features from cache" line per run
        self.callbacks = list(callbacks or [])  # Keras callbacks for fit, after the run's own
        plan = plan or plan_run(experiment, output, data_root, resume)
        self.plan, self.experiment, experiment = plan, plan.experiment, plan.experiment
        self.run, self.run_dir, self.data_root, self.registry, self.tasks = \
            plan.run, plan.run_dir, plan.data_root, plan.registry, plan.tasks
        self.lock = None  # taken by `train` before its first write (run_dir.RunLock)
        # First TensorFlow work: MultiWorkerMirroredStrategy must exist before any op runs.
        self.distribution = distribution or experiment.distribution
        if self.distribution == "multi_worker" and experiment.raw.get("patience"):
            raise UserError(f"{experiment.where('patience')}: patience stops on the chief's "
                            "evaluations, which the other workers do not see: not with "
                            "distribution multi_worker (keep_best alone is fine)")
        self.strategy = make_strategy(self.distribution)
        self.is_chief = is_chief(self.strategy)
        # Where this process writes: the run directory (chief) or a scratch folder.
        self.work_dir = self.run_dir if self.is_chief else tempfile.mkdtemp(prefix="mtl-worker-")
        self.work = RunDir(self.work_dir)  # where this process writes its records
        if self.strategy is not None:
            log(f"distribution: {self.distribution}, "
                f"{self.strategy.num_replicas_in_sync} replica(s), "
                f"{'chief' if self.is_chief else 'worker (writes nothing to the run directory)'}")
        elif keras.distribution.distribution() is not None:  # JAX: DataParallel (distributed.py)
            log(f"distribution: {self.distribution}, {describe_jax_distribution()}")
        policy, why = plan.precision
        if why != AS_NAMED:  # auto, the run's record or $MTL_PRECISION chose
            log(f"precision: {policy} ({why})")
        for note in plan.notes:  # what a record could not check, or mapped
            log(note)
        self.tokenizer, self.vocab_path = prepare_vocab(plan, log)  # plan -> prepare
        self.step = 0
        self.weights_from = None  # the checkpoint restored, "training" once trained; None: initial
        self.last_evaluation = None  # the latest evaluations.jsonl line of this process
        settings = keep_best_settings(experiment)
        self.best = settings and BestTracker(settings["metric"], settings["mode"],
                                             experiment.raw.get("patience"))
        with self.strategy.scope() if self.strategy else contextlib.nullcontext():
            self.build()

    @classmethod
    def load(cls, run_dir: str, log: Callable[[str], Any] = print, data_root: str | None = None,
             split: str | None = None, tasks: Iterable[str] | None = None) -> Run:
        """A finished or interrupted run, rebuilt whole (optimizer and mixture too) from its
        experiment.yaml at its newest readable checkpoint; writes nothing. `split` and
        `tasks` (names) are checked before the model is built: the split's files must
        exist, the names must be the run's. (`mtl evaluate` reads less: evaluation.py.)"""
        from mtl_framework.plan import missing_files

        path = RunDir(run_dir).experiment_file()
        if not RunDir(run_dir).checkpoint_names():
            raise UserError(f"{run_dir}: no checkpoints/step-* folder to evaluate; "
                            "train first (`mtl train EXPERIMENT --output RUN_DIR`)")
        plan = plan_run(path, output=run_dir, data_root=data_root)
        # each spec's labels against the ones the newest checkpoint's heads record
        newest = RunDir(run_dir).checkpoint_path(plan.checkpoints[-1])
        trainer, source = read_trainer(newest) or {}, os.path.join(newest, "trainer.json")
        notes = []
        plan.tasks = [matched_task(task, (trainer.get("heads") or {}).get(task.name, {}),
                                   plan.data_root, source, notes.append) for task in plan.tasks]
        for note in dict.fromkeys(notes) if log else ():  # an older run's line: once
            log(note)
        unknown = sorted(set(tasks or []) - {t.name for t in plan.tasks})
        if unknown:
            raise UserError(f"{run_dir}: the run has no task(s) {unknown}; its tasks: "
                            f"{', '.join(t.name for t in plan.tasks)}")
        # a task without the split is scored as "no such split", not refused
        chosen = [t for t in plan.tasks if (not tasks or t.name in tasks) and split in t.files]
        problems = missing_files(chosen, plan.data_root, split, "pass --data-root DIR") \
            if split else []
        if problems:
            raise UserError("\n".join(problems))
        run = cls(path, log=log, distribution="none", plan=plan)  # one process evaluates
        if not run.restore_latest():
            raise UserError(f"{run_dir}: no readable checkpoint to evaluate")
        return run

    def write_run_files(self):
        """experiment.yaml and vocab.txt into the run directory: called by `train` once
        every check has passed and the lock is held, so a refused command leaves the
        directory as it was."""
        target = self.work.vocab_path
        temporary = f"{target}{TEMPORARY}{os.getpid()}"
        try:
            os.makedirs(self.work_dir, exist_ok=True)
            self.work.write_experiment(self.plan.resolved)
            self.work.append_provenance(self.step)  # self.step: where this start resumes
            if os.path.abspath(self.vocab_path) != os.path.abspath(target):
                with open(temporary, "wb") as f:  # whole or not at all
                    f.write(vocab_bytes(self.vocab_path))  # a tokenizer.json's as vocab.txt
                os.replace(temporary, target)
                if is_tokenizer_json(self.vocab_path):
                    self.log(f"vocab: the {self.tokenizer.vocab_size} tokens of "
                             f"{self.vocab_path} (model.vocab, in id order) written as {target}")
        except OSError as error:  # disk full, a read-only run directory
            if os.path.exists(temporary):
                os.remove(temporary)
            raise UserError(f"{self.work_dir}: cannot write the run's files "
                            f"({error.strerror or error}): free space or train into another "
                            "--output") from None

    def evaluate(self, split: str = "dev", tasks: Iterable[str] | None = None,
                 batch_size: int | None = None, max_examples: int | None = None) -> dict[str, dict]:
        """{task: score entry} (see mtl_framework.evaluation.dev) of the model as it is now;
        `tasks`: task names (or TaskSpecs) of this run, all of them when None."""
        from mtl_framework.evaluation.dev import evaluate_tasks

        exp = self.experiment
        train = {name: stream.features for name, stream in self.mixture.streams.items()
                 if hasattr(stream, "features")}
        return evaluate_tasks(self.model, self.scored_tasks(tasks), self.tokenizer, self.data_root,
                              split, batch_size or 2 * exp.batch_size, max_examples,
                              exp.resolve_path(exp.raw.get("cache_dir")), exp.max_length,
                              train, log=self.eval_cache_notes)

    def encode(self, texts, side=None, task=None, batch_size=32):
        """Sentence embeddings (float32 [n, H]) from the backbone as it is now, pooled and
        normalised as its contrastive tasks train it (embedding/encode.py); `side` "query" /
        "passage" adds that task's prefix. A Run that has neither trained nor restored a
        checkpoint in this process encodes with the run's newest checkpoint (said in one
        line), not its initial weights; without a checkpoint it refuses."""
        from mtl_framework.embedding.encode import Encoder
        from mtl_framework.saving.trained import Trained

        if getattr(self, "model", None) is None:
            self.build()
        if self.weights_from is None:
            self.restore_weights()
        heads = {name: {"family": head.family, "config": head.get_config()}
                 for name, head in self.model.heads.items()}
        trained = Trained.of_model(self.backbone, self.vocab_path, heads, self.experiment,
                                   str(self.run_dir))
        return Encoder(trained, task=task, log=self.log).encode(texts, side, task, batch_size)

    def scored_tasks(self, tasks=None):
        """The run's TaskSpecs named by `tasks` (names or specs; None: all), in run order."""
        if tasks is None:
            return self.tasks
        names = [t if isinstance(t, str) else t.name for t in tasks]
        known = [t.name for t in self.tasks]
        unknown = [n for n in names if n not in known]
        if unknown:
            raise UserError(f"evaluate: the run has no task(s) {unknown}; its tasks: "
                            f"{', '.join(known)}")
        return [t for t in self.tasks if t.name in names]

    def build(self):
        """plan -> prepare -> assemble: the vocab, the train streams and the mixture, the
        backbone and heads (assemble.py), the model with its optimizer."""
        exp, plan = self.experiment, self.plan
        keras.utils.set_random_seed(exp.seed)
        self.backbone = assemble.experiment_backbone(exp, self.tokenizer.vocab_size)
        with_mlm = MLM_TASK in plan.entries
        task_names = [t.name for t in self.tasks] + ([MLM_TASK] if with_mlm else [])
        assemble.check_balancing_memory(exp, self.backbone, task_names)  # before any feature
        streams, sizes = train_streams(plan, self.tokenizer, self.log)
        heads = assemble.task_heads(exp, self.tasks, self.backbone, self.data_root, with_mlm,
                                    self.log)
        # what every checkpoint records it was trained on (rundir/trained_on.py)
        self.trained_on = {"labels": task_labels(self.tasks, self.data_root),
                           "vocab": vocab_record(self.vocab_path)}
        loss_weights, pinned = task_settings(plan)
        self.mixture, self.rates = Mixture.for_experiment(exp, streams, sizes, pinned, self.log)
        self.model = assemble.training_model(exp, self.backbone, heads, loss_weights, self.log)
        self.model.mixture = self.mixture

    def current_rates(self, offset=0):
        """{task: rate} the sampler draws its next micro-batch (+ offset) with."""
        sampler = self.mixture.sampler
        step = max(0, sampler.step + offset)
        return dict(zip(self.mixture.names, map(float, sampler.rates_at(step))))

    # --- checkpoints ----------------------------------------------------------

    def checkpoint_dirs(self):
        return self.run.checkpoint_names()

    def save_checkpoint(self, step, keep):
        state = self.checkpoint_state(step)
        if state:
            self.run.write_checkpoint(step, *state, keep)

    def save_best(self, step):
        """checkpoints/best-step-N: the state at keep_best's best evaluation so far."""
        state = self.checkpoint_state(step)
        if state:
            path = self.run.write_best(step, *state)
            self.log(f"best {self.best.name} so far ({self.best.best:.4f}): kept as "
                     f"{os.path.relpath(path, self.run_dir)}")

    def checkpoint_state(self, step):
        """(arrays, trainer.json entries) of the state now; None on a worker or when a value
        is non-finite (never a checkpoint of such a state: resuming it could not recover)."""
        if not self.is_chief:  # every worker holds the same values; one writes them
            return None
        arrays = {name: np.asarray(v.numpy())
                  for name, v in self.model.named_state_variables.items()}
        broken = [n for n, a in arrays.items() if a.dtype.kind == "f" and not np.isfinite(a).all()]
        if broken:
            self.log(f"warning: no checkpoint at step {step}: non-finite values in "
                     f"{', '.join(broken[:3])}{'...' if len(broken) > 3 else ''}")
            return None
        trainer = {"mixture": self.mixture.state(), "skipped": self.model.skipped,
                   "record": self.plan.record,  # what a resume must match (plan.py)
                   "backbone": self.backbone.config, "vocab": self.trained_on["vocab"],
                   "packed": self.model.packed,  # how the step computed (a resume's default)
                   "heads": head_metadata(self.model.heads, self.backbone,
                                          self.trained_on["labels"])}
        if self.best is not None:
            trainer["best"] = self.best.state()
        return arrays, trainer

    def restore_weights(self):
        """The newest readable checkpoint's model state alone (the mixture and step stay as
        they are): what `encode` uses in a Run that has not trained."""
        checkpoint = self.run.latest_checkpoint(log=self.log)
        if checkpoint is None:
            raise UserError(f"{self.run_dir}: no checkpoint to encode with, and this Run has not "
                            "trained: its weights are the initial ones; call run.train() first "
                            "(or encode a folder with Encoder(FOLDER))")
        assemble.load_state(self.model, checkpoint)
        self.weights_from = checkpoint.path
        self.log(f"encoding with {checkpoint.path} (step {checkpoint.trainer['step']}), the run's "
                 "newest checkpoint: this Run has not trained")

    def restore_latest(self):
        """Restore the newest readable checkpoint (a damaged newer one is named and moved
        aside, so its steps are trained again); returns its step, 0 without any."""
        checkpoint = self.run.latest_checkpoint(log=self.log)
        if checkpoint is None:
            return 0
        if checkpoint.damaged:  # plan.py checked the newest; this older one is what resumes
            check_fallback(self.plan, checkpoint.path, checkpoint.trainer)
        assemble.load_state(self.model, checkpoint)
        if checkpoint.damaged and self.lock is not None:  # only the run's writer moves files
            set_aside(checkpoint.damaged, self.log)
        state = checkpoint.trainer
        try:
            self.mixture.restore(state["mixture"])
        except ValueError as error:  # the train data changed since the checkpoint
            raise UserError(f"{checkpoint.path}: {error}: restore the data the run trained "
                            "on, or train into a new --output") from None
        self.model.skipped.update(state.get("skipped", {}))
        self.model.packed = assemble.resumed_packing(self.experiment, state)
        if self.best is not None:
            self.best.restore(state.get("best"))
        self.log(f"resumed from {checkpoint.path} (step {state['step']})")
        self.step, self.weights_from = state["step"], checkpoint.path
        return state["step"]

    def release(self):
        """Let another process write the run directory."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def close(self) -> None:
        """Let go of what the run holds besides memory: the run directory's lock and the
        threads that run micro-steps side by side. `with Run(...) as run:` closes it on the
        way out; a closed run can still train and evaluate (the threads start again)."""
        self.release()
        self.model.close()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def train(self, resume: bool = False) -> Run:
        try:
            return self._train(resume)
        finally:
            self.release()  # on every way out: another process may write the run now

    def _train(self, resume):
        if self.is_chief:  # before writing anything (again: cheap, and it may have changed)
            self.plan.checkpoints = self.checkpoint_dirs()
            said = len(self.plan.notes)
            check_run_dir(self.plan, resume)
            for note in self.plan.notes[said:]:
                self.log(note)
            os.makedirs(self.run_dir, exist_ok=True)
            self.lock = self.run.lock()  # one writer per run directory
            self.run.remove_leftovers(self.log)
        if resume and self.strategy is None:  # JAX's processes restore in step: agree first
            check_same_on_every_worker(None, self.run.newest_step(),
                                       "step to start from")
        start = self.restore_latest() if resume else 0
        check_same_on_every_worker(self.strategy, start, "step to start from")  # one process: no-op
        remaining = self.experiment.steps - start
        if remaining <= 0:  # a resume that does nothing writes nothing
            self.log(f"nothing to do: the run already has {start} of {self.experiment.steps} steps")
            return self
        if self.best is not None and self.best.exhausted():
            self.log(f"nothing to do: the run stopped at update {start}: "
                     f"{self.best.stop_reason()} (raise patience with --set to go on)")
            return self
        if self.is_chief:
            if self.lock is not None:
                self.run.remove_best_after(start, self.log)
            self.run.trim_records(start, self.log)  # each step once after a resume
            self.write_run_files()
        steps = update_counter(remaining, self.strategy)
        self.weights_from = "training"  # from here on the weights are this process's
        logger = RunLogger(self, self.experiment.checkpoint_every,
                           self.experiment.keep_checkpoints, start)
        # A Keras epoch: eval_every updates, so an epoch's logs hold its evaluation.
        epoch = self.experiment.eval_every or self.experiment.steps
        callbacks = [logger, EvaluationEpochs(self, epoch), TaskLogs(self), NotLearning(self),
                     *self.callbacks]
        verbose = 1 if self.log and self.is_chief else 0
        if verbose and not any(isinstance(c, keras.callbacks.ProgbarLogger) for c in callbacks):
            callbacks.insert(0, Progress(self))  # first: its bar's line ends before evaluations print
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=EPOCH_CUT_WARNING)
                self.model.fit(steps, steps_per_epoch=epoch,
                               epochs=math.ceil(self.experiment.steps / epoch),
                               initial_epoch=start // epoch, verbose=verbose,
                               callbacks=callbacks,
                               shuffle=False)  # the mixture draws the batches; nothing to shuffle
        except NonFiniteLossError as error:
            raise UserError(self.non_finite_stop(error, logger)) from None
        finally:
            if self.work_dir != self.run_dir:
                shutil.rmtree(self.work_dir, ignore_errors=True)
        return self

    def non_finite_stop(self, error, logger):
        """The stop's one line: the task, and the newest checkpoint from before its first
        skipped micro-batch (the stop itself writes none)."""
        update = error.update or logger.step + 1  # raised within an update, or at the end
        since = logger.bad_since.get(error.task, update)
        before = [d for d in self.checkpoint_dirs() if checkpoint_step(d) < since]
        good = (f"the newest checkpoint before it is "
                f"{self.run.checkpoint_path(before[-1])}" if before
                else "no checkpoint was written before it")
        return (f"{self.run_dir}: training stopped at update {update}: {error} "
                f"(first skipped in update {since}; {good}, no checkpoint of the non-finite "
                "state was written)")
