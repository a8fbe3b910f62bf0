"""`mtl train`: an experiment YAML -> a run directory.

run_dir/
  experiment.yaml       the resolved experiment (what ran)
  vocab.txt             the vocabulary the run used
  checkpoints/step-N/   state.npz (every model + optimizer variable) + trainer.json
                        (step, sampler and per-task stream positions), written atomically
  metrics.jsonl         one line per update: per-task loss, gradient norm, micro-batch count
  logs/                 TensorBoard scalars

Distributed runs (`distribution: mirrored | multi_worker`): every process builds the
same streams and model in the strategy's scope; only the chief (task `chief`, else
worker 0) writes the run directory; the other workers keep their vocab, metrics and
logs in a temporary folder, removed at the end, and resume from the chief's checkpoints.
"""
import contextlib
import json
import os
import shutil
import tempfile
import time
import uuid

import keras
import numpy as np
import tensorflow as tf
import yaml

from mtl_framework.backbone import RoFormerV2Backbone, backbone_config
from mtl_framework.cache import TaskStream, cached_features
from mtl_framework.distributed import (check_same_on_every_worker, is_chief, make_strategy,
                                      precision_policy)
from mtl_framework.experiment import load_experiment
from mtl_framework.export import checkpoint_dirs, head_metadata
from mtl_framework.heads import build_head
from mtl_framework.optimizers import build_optimizer
from mtl_framework.registry import load_registry
from mtl_framework.sampling import TaskSampler, format_rates, rates_from_config
from mtl_framework.tokenizer import Tokenizer
from mtl_framework.training import MultiTaskModel

MLM_TASK = "mlm"  # reserved task name: masked-LM over the mixture's own training texts
# Experiment keys holding paths relative to the experiment file; the run directory's
# copy stores them absolute so `mtl evaluate RUN_DIR` can rebuild the run from anywhere.
PATH_KEYS = ("data_root", "cache_dir", "vocab")
BACKBONE_PATH_KEYS = ("vocab", "checkpoint", "init")


def resolved_experiment(experiment, data_root):
    raw = {**experiment.raw, "data_root": os.path.abspath(data_root)}
    for key in PATH_KEYS:
        if raw.get(key):
            raw[key] = experiment.resolve_path(raw[key])
    if raw.get("task_specs"):
        raw["task_specs"] = [experiment.resolve_path(d) for d in raw["task_specs"]]
    if isinstance(raw.get("backbone"), dict):
        raw["backbone"] = dict(raw["backbone"])
        for key in BACKBONE_PATH_KEYS:
            if raw["backbone"].get(key):
                raw["backbone"][key] = experiment.resolve_path(raw["backbone"][key])
    return raw


class Mixture:
    """Task sampler + one batch stream per task: next() -> (task, batch)."""

    def __init__(self, streams, sampler):
        self.streams, self.sampler = streams, sampler
        self.names = list(streams)

    def next(self):
        task = self.names[next(self.sampler)]
        return task, self.streams[task].next_batch()

    def state(self):
        return {"sampler": self.sampler.get_state(),
                "streams": {t: s.state() for t, s in self.streams.items()}}

    def restore(self, state):
        self.sampler.set_state(state["sampler"])
        for task, stream_state in state["streams"].items():
            self.streams[task].restore(stream_state)


def prepare_vocab(experiment, registry, tasks, data_root, run_dir, log):
    """The experiment's vocab, or (from-scratch runs) one built from the tasks' train text."""
    given = experiment.backbone.get("vocab") or experiment.raw.get("vocab") or init_vocab(experiment)
    target = os.path.join(run_dir, "vocab.txt")
    if given and os.path.abspath(experiment.resolve_path(given)) != os.path.abspath(target):
        shutil.copyfile(experiment.resolve_path(given), target)
    elif not os.path.exists(target):
        from mtl_framework.prepare import cached_vocab  # counted in worker processes, cached

        size = experiment.backbone.get("vocab_size", 12000)
        cache_dir = experiment.resolve_path(experiment.raw.get("cache_dir"))
        shutil.copyfile(cached_vocab(tasks, data_root, size, cache_dir, log=log), target)
    return Tokenizer(target)


def init_vocab(experiment):
    """backbone.init's vocab.txt (a keras export's), or None without init."""
    init = experiment.backbone.get("init")
    if not init:
        return None
    path = os.path.join(experiment.resolve_path(init), "vocab.txt")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{experiment.path}: backbone.init has no vocab.txt ({path}): "
                                "give backbone.vocab, or init from a `mtl export --format keras` folder")
    return path


def build_backbone(experiment, tokenizer):
    spec = dict(experiment.backbone)
    if spec.get("init"):  # a keras export: dims from its config.json, weights from it
        from mtl_framework.export import init_backbone

        return init_backbone(experiment.resolve_path(spec["init"]), spec, tokenizer.vocab_size,
                             source=experiment.path)
    checkpoint = spec.pop("checkpoint", None)
    for key in ("vocab", "init"):
        spec.pop(key, None)
    if checkpoint:
        base = experiment.resolve_path(checkpoint)
        return RoFormerV2Backbone.from_bert4keras(os.path.join(base, "bert_config.json"),
                                                  os.path.join(base, "bert_model.ckpt"))
    size = spec.pop("size", None)
    spec["vocab_size"] = tokenizer.vocab_size
    return RoFormerV2Backbone(**backbone_config(size, **spec))


class RunLogger(keras.callbacks.Callback):
    """metrics.jsonl + TensorBoard per update; checkpoints every `every` updates."""

    def __init__(self, run, every, keep, start_step):
        super().__init__()
        self.run, self.every, self.keep, self.step = run, every, keep, start_step
        self.evaluated = None  # step of the last evaluation
        self.metrics = open(os.path.join(run.work_dir, "metrics.jsonl"), "a", encoding="utf-8")
        self.writer = tf.summary.create_file_writer(os.path.join(run.work_dir, "logs"))

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        self.run.step = self.step
        model = self.run.model
        record = {"step": self.step, "time": time.time(), "loss": (logs or {}).get("loss"),
                  "alpha": float(model.backbone.residual_alpha.numpy()),
                  "lr": float(keras.ops.convert_to_numpy(model.optimizer.learning_rate)),
                  "tasks": {}}
        for entry in model.last_micro_logs:
            task = record["tasks"].setdefault(entry["task"], {"loss": [], "gradient_norm": []})
            task["loss"].append(entry["loss"])
            task["gradient_norm"].append(entry["gradient_norm"])
        for name, stats in record["tasks"].items():
            stats["count"] = len(stats["loss"])  # micro-batches drawn: `mtl report` plots the mixture
            stats["rate"] = float(self.run.rates[name])  # the sampler's effective rate
            for key in ("loss", "gradient_norm"):
                stats[key] = float(np.mean(stats[key]))
        record["skipped"] = dict(model.skipped)
        self.metrics.write(json.dumps(record) + "\n")
        self.metrics.flush()
        with self.writer.as_default(step=self.step):
            tf.summary.scalar("loss", record["loss"] or 0.0)
            for name, stats in record["tasks"].items():
                tf.summary.scalar(f"{name}/loss", stats["loss"])
                tf.summary.scalar(f"{name}/gradient_norm", stats["gradient_norm"])
                tf.summary.scalar(f"{name}/sampling_rate", stats["rate"])
        if self.every and self.step % self.every == 0:
            self.run.save_checkpoint(self.step, self.keep)
        eval_every = self.run.experiment.eval_every
        if eval_every and self.step % eval_every == 0:
            self.evaluate()

    def evaluate(self):
        """Dev scores (first `eval_batches` batches per task) -> evaluations.jsonl + TensorBoard."""
        from mtl_framework import evaluation

        if not self.run.is_chief:  # the chief evaluates and records; the model is the same
            return
        exp = self.run.experiment
        results = self.run.evaluate("dev", max_examples=exp.eval_batches * exp.batch_size)
        line = evaluation.record(self.run.run_dir, self.step, "dev", results)
        with self.writer.as_default(step=self.step):
            for name, entry in results.items():
                if entry.get("score") is not None:
                    tf.summary.scalar(f"{name}/dev_score", entry["score"])
            if line["aggregate"] is not None:
                tf.summary.scalar("dev_aggregate", line["aggregate"])
        self.run.log("\n" + evaluation.format_results(line))
        self.evaluated = self.step

    def on_train_end(self, logs=None):
        self.run.save_checkpoint(self.step, self.keep)
        eval_every = self.run.experiment.eval_every
        if eval_every and self.evaluated != self.step:
            self.evaluate()  # the run always ends with its final dev scores
        self.metrics.close()
        self.writer.close()


class Run:
    def __init__(self, experiment_path, output=None, log=print, distribution=None):
        self.log = log
        self.experiment = experiment = load_experiment(experiment_path)
        # First of all: MultiWorkerMirroredStrategy must exist before any TensorFlow op runs.
        self.distribution = distribution or experiment.distribution
        self.strategy = make_strategy(self.distribution)
        self.is_chief = is_chief(self.strategy)
        self.run_dir = output or experiment.resolve_path(experiment.raw.get("output_dir")) or \
            os.path.join("runs", os.path.splitext(os.path.basename(experiment_path))[0])
        os.makedirs(self.run_dir, exist_ok=True)
        # Where this process writes: the run directory (chief) or a scratch folder.
        self.work_dir = self.run_dir if self.is_chief else tempfile.mkdtemp(prefix="mtl-worker-")
        if self.strategy is not None:
            log(f"distribution: {self.distribution}, "
                f"{self.strategy.num_replicas_in_sync} replica(s), "
                f"{'chief' if self.is_chief else 'worker (writes nothing to the run directory)'}")
        spec_dirs = [experiment.resolve_path(d) for d in experiment.task_specs]
        self.registry = load_registry(spec_dirs or None)
        self.data_root = experiment.resolve_path(experiment.raw.get("data_root")) or \
            os.environ.get("MTL_DATA_ROOT", "data")
        entries = {t["name"]: t for t in experiment.tasks}
        names = [n for n in entries if n != MLM_TASK]
        self.tasks = self.registry.select(names)
        self.tokenizer = prepare_vocab(experiment, self.registry, self.tasks, self.data_root,
                                       self.work_dir, log)
        with open(os.path.join(self.work_dir, "experiment.yaml"), "w", encoding="utf-8") as f:
            yaml.safe_dump(resolved_experiment(experiment, self.data_root), f,
                           allow_unicode=True, sort_keys=False)
        self.step = 0
        with self.strategy.scope() if self.strategy else contextlib.nullcontext():
            self.build(entries)

    @classmethod
    def load(cls, run_dir, log=print):
        """A finished or interrupted run, rebuilt from its experiment.yaml at its
        latest checkpoint (for evaluation; `train(resume=True)` goes on from it)."""
        path = os.path.join(run_dir, "experiment.yaml")
        if not os.path.exists(path):
            raise FileNotFoundError(f"{run_dir}: no experiment.yaml; is this a run directory "
                                    "written by `mtl train`?")
        run = cls(path, output=run_dir, log=log, distribution="none")  # one process evaluates
        if not run.restore_latest():
            raise FileNotFoundError(f"{run_dir}: no checkpoints/step-* folder to evaluate; "
                                    "train first (`mtl train EXPERIMENT --output RUN_DIR`)")
        return run

    def evaluate(self, split="dev", tasks=None, batch_size=None, max_examples=None):
        """{task: score entry} (see mtl_framework.evaluation) of the model as it is now."""
        from mtl_framework.evaluation import evaluate_tasks

        exp = self.experiment
        train = {name: stream.features for name, stream in self.mixture.streams.items()
                 if hasattr(stream, "features")}
        return evaluate_tasks(self.model, tasks or self.tasks, self.tokenizer, self.data_root,
                              split, batch_size or 2 * exp.batch_size, max_examples,
                              exp.resolve_path(exp.raw.get("cache_dir")), exp.max_length,
                              train, log=self.log)

    def build(self, entries):
        exp = self.experiment
        keras.utils.set_random_seed(exp.seed)
        cache_dir = exp.resolve_path(exp.raw.get("cache_dir"))
        streams, sizes, heads, loss_weights, fixed = {}, {}, {}, {}, {}
        with precision_policy(exp.precision):
            self.backbone = build_backbone(exp, self.tokenizer)
        self.backbone.build()
        hidden = self.backbone.config["hidden_size"]
        from mtl_framework.prepare import experiment_jobs, prepare  # cold caches: in workers

        prepare(experiment_jobs(exp, self.tasks), self.tokenizer, self.data_root, cache_dir,
                log=self.log)
        for i, task in enumerate(self.tasks):
            entry = entries.get(task.name) or entries.get(task.dataset) or {}
            length = min(task.max_length, exp.max_length)
            features = cached_features(task, "train", self.tokenizer, self.data_root, cache_dir,
                                       max_length=length, log=self.log)
            streams[task.name] = TaskStream(features, exp.batch_size, seed=exp.seed + i)
            sizes[task.name] = len(features)
            labels = task.resolve_labels(self.data_root) if task.labels or task.label_file else None
            kwargs = {"multi_label": True} if task.multi_label else {}
            with precision_policy(exp.precision):
                heads[task.name] = build_head(task.type, len(labels) if labels else None, hidden,
                                              name=task.name, **kwargs)
            loss_weights[task.name] = entry.get("loss_weight", task.loss_weight)
            rate = entry.get("rate", task.rate)
            if rate is not None:
                fixed[task.name] = rate
        if MLM_TASK in entries:
            streams[MLM_TASK], sizes[MLM_TASK] = self.mlm_stream(cache_dir)
            with precision_policy(exp.precision):
                heads[MLM_TASK] = build_head("mlm", self.tokenizer.vocab_size, hidden,
                                             name=MLM_TASK, embeddings=self.backbone.token_embedding)
            loss_weights[MLM_TASK] = entries[MLM_TASK].get("loss_weight", 1.0)
            if "rate" in entries[MLM_TASK]:
                fixed[MLM_TASK] = entries[MLM_TASK]["rate"]
        self.head_types = {**{t.name: t.type for t in self.tasks}, MLM_TASK: "mlm"}
        if exp.backbone.get("init"):  # heads of same-named tasks from a --with-heads export
            from mtl_framework.export import init_heads

            init_heads(exp.resolve_path(exp.backbone["init"]), heads, self.head_types,
                       self.backbone, log=self.log)
        rates = rates_from_config(sizes, exp.sampling, fixed or None)
        self.log(format_rates(rates, sizes, exp.sampling if isinstance(exp.sampling, str)
                              else exp.sampling.get("method")))
        self.rates = rates
        sampler = TaskSampler([rates[t] for t in streams], seed=exp.seed)
        self.mixture = Mixture(streams, sampler)
        self.model = MultiTaskModel(self.backbone, heads, exp.tasks_per_update, exp.balancing,
                                    loss_weights, loss_scale="dynamic"
                                    if exp.precision == "mixed_float16" else None)
        self.model.compile(optimizer=build_optimizer(exp.raw.get("optimizer"), exp.steps))
        self.model.build_all()
        self.model.mixture = self.mixture

    def mlm_stream(self, cache_dir):
        """MLM rows from the first task's train texts (all tasks' texts joined), masked per batch."""
        exp = self.experiment
        features = [cached_features(t, "train", self.tokenizer, self.data_root, cache_dir,
                                    max_length=min(exp.max_length, t.max_length), family="mlm",
                                    log=self.log) for t in self.tasks]
        streams = [TaskStream(f, exp.batch_size, seed=exp.seed + 1000 + i)
                   for i, f in enumerate(features) if len(f)]
        return _RoundRobin(streams), sum(len(f) for f in features)

    # --- checkpoints ----------------------------------------------------------

    def checkpoint_dirs(self):
        return checkpoint_dirs(self.run_dir)

    def save_checkpoint(self, step, keep):
        if not self.is_chief:  # every worker holds the same values; one writes them
            return
        root = os.path.join(self.run_dir, "checkpoints")
        final = os.path.join(root, f"step-{step:08d}")
        if os.path.exists(final):
            return
        temporary = os.path.join(root, f".tmp-{uuid.uuid4().hex}")
        os.makedirs(temporary)
        variables = self.model.state_variables
        np.savez(os.path.join(temporary, "state.npz"),
                 **{f"v{i:05d}": np.asarray(v.numpy()) for i, v in enumerate(variables)})
        with open(os.path.join(temporary, "trainer.json"), "w", encoding="utf-8") as f:
            json.dump({"step": step, "mixture": self.mixture.state(), "skipped": self.model.skipped,
                       "variables": [v.path if hasattr(v, "path") else v.name for v in variables],
                       "backbone": self.backbone.config,
                       "heads": head_metadata(self.model.heads, self.head_types, self.backbone)},
                      f, indent=1)
        os.replace(temporary, final)  # atomic: a killed run never leaves a half checkpoint
        for old in self.checkpoint_dirs()[:-keep]:
            shutil.rmtree(os.path.join(root, old), ignore_errors=True)

    def restore_latest(self):
        dirs = self.checkpoint_dirs()
        if not dirs:
            return 0
        path = os.path.join(self.run_dir, "checkpoints", dirs[-1])
        with open(os.path.join(path, "trainer.json"), encoding="utf-8") as f:
            state = json.load(f)
        values = np.load(os.path.join(path, "state.npz"))
        variables = self.model.state_variables
        if len(variables) != len(values.files):
            raise RuntimeError(f"{path}: checkpoint has {len(values.files)} variables, the model "
                               f"{len(variables)}: was the experiment changed since?")
        for i, v in enumerate(variables):
            v.assign(values[f"v{i:05d}"])
        self.mixture.restore(state["mixture"])
        self.model.skipped.update(state.get("skipped", {}))
        self.log(f"resumed from {path} (step {state['step']})")
        self.step = state["step"]
        return state["step"]

    def train(self, resume=False):
        # Each task's micro-step traces once on its first batch; TF's generic
        # "N calls triggered retracing" warning counts those as a problem.
        tf.get_logger().setLevel("ERROR")
        if not resume and self.checkpoint_dirs():
            raise FileExistsError(
                f"{self.run_dir} already holds checkpoints ({self.checkpoint_dirs()[-1]}): pass "
                "--resume to continue that run, or --output a new directory")
        start = self.restore_latest() if resume else 0
        if self.strategy is not None:
            check_same_on_every_worker(self.strategy, start, "step to start from")
        remaining = self.experiment.steps - start
        if remaining <= 0:
            self.log(f"nothing to do: the run already has {start} of {self.experiment.steps} steps")
            return self
        steps = tf.data.Dataset.range(remaining).repeat()
        if self.strategy is not None:  # a strategy distributes batches; fit's elements go unread
            steps = steps.batch(self.strategy.num_replicas_in_sync)
            options = tf.data.Options()
            options.experimental_distribute.auto_shard_policy = \
                tf.data.experimental.AutoShardPolicy.OFF
            steps = steps.with_options(options)
        logger = RunLogger(self, self.experiment.checkpoint_every,
                           self.experiment.keep_checkpoints, start)
        try:
            self.model.fit(steps, steps_per_epoch=remaining, epochs=1,
                           verbose=1 if self.log and self.is_chief else 0, callbacks=[logger])
        finally:
            if self.work_dir != self.run_dir:
                shutil.rmtree(self.work_dir, ignore_errors=True)
        return self


class _RoundRobin:
    """MLM batches taken from each task's text in turn (one stream state per task)."""

    def __init__(self, streams):
        self.streams, self.turn = streams, 0

    def next_batch(self):
        stream = self.streams[self.turn % len(self.streams)]
        self.turn += 1
        return stream.next_batch()

    def state(self):
        return {"turn": self.turn, "streams": [s.state() for s in self.streams]}

    def restore(self, state):
        self.turn = state["turn"]
        for stream, s in zip(self.streams, state["streams"]):
            stream.restore(s)
