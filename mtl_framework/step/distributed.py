"""Training on several devices or machines with tf.distribute, and mixed precision.

    strategy = make_strategy("multi_worker")   # before any other TensorFlow op
    with strategy.scope(), precision_policy("mixed_bfloat16"):
        ...build backbone and heads...

Experiment key `distribution`:
  none          one process, no strategy
  mirrored      tf.distribute.MirroredStrategy over every local device (GPUs, else the CPU)
  multi_worker  tf.distribute.MultiWorkerMirroredStrategy, cluster from $TF_CONFIG

On KERAS_BACKEND=jax no strategy: `mirrored` is keras.distribution.DataParallel over the
local devices; `multi_worker` joins the processes $TF_CONFIG names (jax.distributed, CPU
collectives over gloo) and DataParallel spans every process's devices (step/jax.py).

How a micro-batch is split (MultiTaskModel under a strategy): every worker draws
the same task and the same global batch (same seed, same streams); each replica
computes on its own contiguous slice of the rows (`shard_batch`), weighting its
loss by its share of the global loss denominator (rows, or masked tokens for
mlm), so the per-replica gradients SUM to the gradient of the global-batch loss
(a loss that couples the rows, contrastive's, is computed whole on every replica).
"""
import contextlib
import importlib
import json
import os

import keras
import numpy as np

from mtl_framework.config.experiment import DISTRIBUTION, ExperimentError
from mtl_framework.config.precision import resolve_precision
from mtl_framework.families import family


class _Deferred:
    """TensorFlow on first use: on the JAX backend it is never imported."""

    def __getattr__(self, name):
        return getattr(importlib.import_module("tensorflow"), name)


tf = _Deferred()


def make_strategy(distribution="none"):
    """None (no strategy) or a tf.distribute strategy. MultiWorkerMirroredStrategy must be
    made before any other TensorFlow op runs in the process (it configures collectives).
    On JAX: keras.distribution.DataParallel over the local devices (`mirrored`) or over
    every process's devices (`multi_worker`, `join_jax_cluster`); returns None (the step
    places batches itself, step/jax.py)."""
    if distribution in (None, "none"):
        return None
    if keras.backend.backend() == "jax":
        return _jax_data_parallel(distribution)
    if distribution == "mirrored":
        return tf.distribute.MirroredStrategy()
    if distribution == "multi_worker":
        if not os.environ.get("TF_CONFIG"):
            raise ExperimentError("distribution: multi_worker needs $TF_CONFIG (the cluster and "
                                  "this worker's task); see docs/distributed.md")
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.AUTO)
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    raise ExperimentError(f"distribution must be one of {DISTRIBUTION}, got {distribution!r}")


def _jax_data_parallel(distribution):
    if distribution not in ("mirrored", "multi_worker"):
        raise ExperimentError(f"distribution must be one of {DISTRIBUTION}, got {distribution!r}")
    if distribution == "multi_worker":
        join_jax_cluster(os.environ.get("TF_CONFIG"))
    # fit's data only counts updates (update_counter): nothing for Keras to shard
    keras.distribution.set_distribution(keras.distribution.DataParallel(auto_shard_dataset=False))
    return None


def update_counter(updates, strategy=None):
    """What fit iterates: its elements are never read (the mixture draws the micro-batches),
    it only counts updates. On TensorFlow a repeated tf.data range (NumPy input made fit
    stall seconds per epoch, ../shared/PITFALLS.md), batched by the strategy's replicas; on
    JAX an endless generator with one element per data-parallel device."""
    if keras.backend.backend() != "tensorflow":
        rows = keras.distribution.distribution()
        rows = rows.device_mesh.shape[0] if rows is not None else 1

        def counter():
            while True:
                yield (np.zeros((rows,), "float32"),)
        return counter()
    steps = tf.data.Dataset.range(updates).repeat()
    if strategy is not None:  # a strategy distributes batches; fit's elements go unread
        steps = steps.batch(strategy.num_replicas_in_sync)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = \
            tf.data.experimental.AutoShardPolicy.OFF
        steps = steps.with_options(options)
    return steps


def jax_cluster(tf_config):
    """(coordinator address, number of processes, this process's id) from a $TF_CONFIG, the
    cluster spec the TensorFlow path reads: the processes in order `chief` then `worker`
    entries, process 0 (the chief task, else worker 0) coordinating from its address."""
    fix = "see docs/distributed.md"
    if not tf_config:
        raise ExperimentError("distribution: multi_worker needs $TF_CONFIG (the cluster and "
                              f"this worker's task); {fix}")
    try:
        config = json.loads(tf_config)
        cluster, task = config["cluster"], config["task"]
        addresses = list(cluster.get("chief", [])) + list(cluster.get("worker", []))
        offset = {"chief": 0, "worker": len(cluster.get("chief", []))}[task["type"]]
        process_id = offset + int(task.get("index", 0))
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ExperimentError('$TF_CONFIG must be JSON like {"cluster": {"worker": ["host:port", '
                              '...]}, "task": {"type": "worker", "index": 0}} (on JAX: chief and '
                              f'worker tasks only); {fix}') from None
    if not 0 <= process_id < len(addresses):
        raise ExperimentError(f"$TF_CONFIG: task {task['type']} {task.get('index', 0)} is not in "
                              f"its cluster ({len(addresses)} process(es)); {fix}")
    return addresses[0], len(addresses), process_id


def join_jax_cluster(tf_config):
    """Connects this process to the others (keras.distribution.initialize: jax.distributed,
    whose CPU collectives are gloo's by default), before JAX computes anything. Once per
    process: a second multi_worker run in it keeps the cluster it joined."""
    import jax

    if jax.distributed.is_initialized():
        return
    coordinator, processes, process_id = jax_cluster(tf_config)
    keras.distribution.initialize(coordinator, processes, process_id)


def jax_processes():
    """(this process's index, how many) on KERAS_BACKEND=jax; (0, 1) on TensorFlow."""
    if keras.backend.backend() != "jax":
        return 0, 1
    import jax

    return jax.process_index(), jax.process_count()


def describe_jax_distribution():
    """The run log's line for keras.distribution on JAX (None without one)."""
    distribution = keras.distribution.distribution()
    if distribution is None:
        return None
    line = f"keras.distribution.DataParallel over {len(keras.distribution.list_devices())} device(s)"
    index, count = jax_processes()
    if count > 1:
        line += (f", process {index} of {count}, " +
                 ("chief" if index == 0 else "worker (writes nothing to the run directory)"))
    return line


def worker_task(strategy=None):
    """(task_type, task_id) of this process in a multi-worker cluster ('chief' | 'worker', i),
    else (None, 0): one process (no strategy, or `mirrored`)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is not None and resolver.task_type:
        return resolver.task_type, int(resolver.task_id or 0)
    return None, 0


def is_chief(strategy=None):
    """The process that writes checkpoints and metrics: the `chief` task, else worker 0
    (on JAX process 0, which `jax_cluster` makes the chief task, else worker 0)."""
    if strategy is None:
        return jax_processes()[0] == 0
    task_type, task_id = worker_task(strategy)
    if task_type is None or task_type == "chief":
        return True
    resolver = getattr(strategy, "cluster_resolver", None)
    cluster = resolver.cluster_spec().as_dict() if resolver is not None else {}
    return task_type == "worker" and task_id == 0 and "chief" not in cluster


def loss_denominator(head, batch):
    """What the head's loss averages over, as its family says: masked tokens for mlm, rows
    for every other head (their losses are means over the batch of per-example losses)."""
    return family(head.family).loss_denominator(batch)


def shard_batch(head, batch, replica_id, num_replicas):
    """(this replica's rows of `batch`, its share of the global loss denominator).

    Rows [n*r/R, n*(r+1)/R) of the n rows; padding stays the global batch's (the
    backbone's output does not depend on it). A replica left without rows (n < R)
    computes on row 0 with share 0, so its gradient is exactly zero.

    A loss that couples the rows (contrastive: each row's positive is every other row's
    negative) is no sum over row slices: each replica computes it on the whole batch,
    share 1/R, so the replicas' gradients still SUM to the one-process gradient.
    """
    if family(head.family).rows_coupled:
        return batch, tf.constant(1.0 / num_replicas)
    n = tf.shape(batch["token_ids"])[0]
    replica_id = tf.cast(replica_id, tf.int32)
    start = n * replica_id // num_replicas
    end = n * (replica_id + 1) // num_replicas
    empty = tf.equal(start, end)
    start = tf.where(empty, 0, start)
    end = tf.where(empty, 1, end)
    local = {k: v[start:end] for k, v in batch.items()}
    total = loss_denominator(head, batch)
    share = loss_denominator(head, local) / tf.maximum(total, 1.0)
    return local, tf.where(empty, 0.0, share)


def check_same_on_every_worker(strategy, value, what):
    """Raise on every worker alike when workers hold different values of `value` (a number),
    e.g. the step they resumed from: they would otherwise wait for each other forever.
    `strategy` None: JAX's processes (one process: nothing to check)."""
    if strategy is None:
        if jax_processes()[1] > 1:
            from jax.experimental import multihost_utils

            values = multihost_utils.process_allgather(np.array(value, np.float64))
            if np.ptp(values) > 1e-6 * max(1.0, float(np.max(np.abs(values)))):
                _disagree(what, value, float(np.mean(values)))
        return
    per_replica = strategy.run(lambda: tf.constant([value, value * value], tf.float64))
    mean, mean_square = strategy.reduce("SUM", per_replica, axis=None).numpy() / \
        strategy.num_replicas_in_sync
    if mean_square - mean * mean > 1e-6 * max(1.0, mean_square):
        _disagree(what, value, mean)


def _disagree(what, value, mean):
    raise RuntimeError(
        f"the workers disagree on the {what} (this one: {value}, mean over workers: {mean:g}); "
        "every worker must see the chief's checkpoints: put the run directory on a shared "
        "filesystem or copy its checkpoints/ to each host before --resume")


# A model that only infers (mtl encode) keeps a mixed policy's 16-bit type for its weights
# too: nothing is trained, so float32 master weights only cost a cast of every weight per
# call (sentence-transformers' bfloat16 encoding casts the model alike).
INFERENCE_POLICIES = {"mixed_bfloat16": "bfloat16"}


def inference_precision(precision):
    """The policy to infer in for a model trained in `precision`."""
    return INFERENCE_POLICIES.get(precision, precision)


@contextlib.contextmanager
def precision_policy(precision="float32"):
    """Layers made inside take the Keras dtype policy `precision` (mixed_*: float32
    variables, 16-bit compute; `auto`: `resolve_precision`; an inference policy, e.g.
    bfloat16: 16-bit variables too); the global policy is restored on exit."""
    policy = precision if precision in INFERENCE_POLICIES.values() else resolve_precision(precision)[0]
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)
