"""MultiTaskModel: the shared backbone, one head per task, and the mixed update.

One optimizer update = `tasks_per_update` single-task micro-batches. Each
micro-batch's gradient is scaled by its balancing factor (gradient_norm:
1 / ||g over the backbone||, the head's gradient by the same factor), the
scaled gradients are summed in accumulators, and the optimizer applies them
once. Consequence: multiplying one task's loss by a constant does not change
the shared update under gradient_norm; emphasis comes from sampling rates.

Runs under `model.fit`: the dataset given to fit only counts updates; the
micro-batches come from `model.mixture` (anything with `next() -> (task, batch)`),
because single-task batches of different families have different structures.
Tracing: one tf.function per task for the micro-step (traced on the task's
first batch, reused after; length varies, so shapes are relaxed) and one for the update.

Under a tf.distribute strategy (built in its scope; see distributed.py) every worker
feeds the same global micro-batch; each replica takes its slice of the rows, and the
per-task gradient is all-reduced (SUM, i.e. the gradient of the global-batch loss)
BEFORE its backbone norm is taken, so N workers make the update of one process with
the combined batch. Mixed precision: losses and norms are float32; with
`loss_scale="dynamic"` (mixed_float16) each task's loss is multiplied by that task's
own scale and its gradients divided by it before the norm; a non-finite micro-batch
is skipped and halves its task's scale (a per-task scale: tasks' losses and loss
weights differ by orders of magnitude, and each gradient is normalised on its own).
"""
import keras
import numpy as np
import tensorflow as tf

from mtl_framework.distributed import shard_batch
from mtl_framework.heads import backbone_inputs

BALANCING = ("gradient_norm", "none", "loss_norm", "initial_loss")


class NonFiniteLossError(RuntimeError):
    pass


class MultiTaskModel(keras.Model):
    def __init__(self, backbone, heads, tasks_per_update=8, balancing="gradient_norm",
                 loss_weights=None, max_consecutive_bad=20, loss_scale=None, **kwargs):
        super().__init__(**kwargs)
        if balancing not in BALANCING:
            raise ValueError(f"balancing {balancing!r} is not one of {BALANCING}")
        if tasks_per_update < 1:
            raise ValueError(f"tasks_per_update must be >= 1, got {tasks_per_update}")
        self.backbone = backbone
        self.heads = dict(heads)
        self.task_names = list(self.heads)
        self.tasks_per_update = int(tasks_per_update)
        self.balancing = balancing
        self.loss_weights = {t: float((loss_weights or {}).get(t, 1.0)) for t in self.task_names}
        self.max_consecutive_bad = max_consecutive_bad
        if loss_scale not in (None, "dynamic"):
            raise ValueError(f"loss_scale must be None or 'dynamic', got {loss_scale!r}")
        self.dynamic_loss_scale = loss_scale == "dynamic"
        # Made in a strategy's scope: micro-steps then run per replica (see module doc).
        self.strategy = tf.distribute.get_strategy() if tf.distribute.has_strategy() else None
        self.mixture = None
        self.skipped = {t: 0 for t in self.task_names}
        self._consecutive_bad = {t: 0 for t in self.task_names}
        self._micro_steps = {}
        self._apply_update_fn = None
        self._reset_fn = None
        self.last_micro_logs = []

    # --- variables ------------------------------------------------------------

    def build_all(self):
        """Build backbone, heads, accumulators and the optimizer before fit.

        Variables cannot be created inside the traced steps, and a lazily built
        optimizer refuses variables it has not seen.
        """
        self.backbone.build()
        backbone_ids = {id(v) for v in self.backbone.trainable_variables}
        self.backbone_variables = list(self.backbone.trainable_variables)
        # Heads may hold backbone variables (the tied MLM embedding): count them once, as backbone.
        self.head_variables = {
            t: [v for v in h.trainable_variables if id(v) not in backbone_ids]
            for t, h in self.heads.items()}
        self.all_variables = self.backbone_variables + [
            v for t in self.task_names for v in self.head_variables[t]]
        # ON_READ: each replica accumulates its own copy, no communication; the optimizer
        # sums them across replicas when it applies (identical values here, see micro_step).
        self.accumulators = [
            tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False, name=f"accumulated_{i}",
                        synchronization=tf.VariableSynchronization.ON_READ,
                        aggregation=tf.VariableAggregation.SUM)
            for i, v in enumerate(self.all_variables)]
        index = {id(v): i for i, v in enumerate(self.all_variables)}
        self._head_slots = {t: [index[id(v)] for v in self.head_variables[t]] for t in self.task_names}
        self.initial_losses = {
            t: _replicated(0.0, f"initial_loss_{i}") for i, t in enumerate(self.task_names)}
        if self.dynamic_loss_scale:
            self.loss_scales = {t: _replicated(2.0 ** 15, f"loss_scale_{i}")
                                for i, t in enumerate(self.task_names)}
            self._finite_in_a_row = {t: _replicated(0, f"finite_in_a_row_{i}")
                                     for i, t in enumerate(self.task_names)}
        if self.optimizer is not None and not self.optimizer.built:
            self.optimizer.build(self.all_variables)
        self.built = True

    @property
    def state_variables(self):
        """Everything an exact resume needs besides the data positions."""
        variables = list(self.backbone.variables)
        for head in self.heads.values():
            variables += [v for v in head.variables if all(v is not b for b in self.backbone.variables)]
        variables += list(self.initial_losses.values())
        if self.dynamic_loss_scale:
            variables += list(self.loss_scales.values()) + list(self._finite_in_a_row.values())
        if self.optimizer is not None:
            variables += list(self.optimizer.variables)
        return variables

    # --- forward ---------------------------------------------------------------

    def task_outputs(self, task, batch, training=False):
        hidden = self.backbone(backbone_inputs(batch), training=training)
        if len(batch["token_ids"].shape) == 3:  # choices folded into the batch axis
            shape = tf.shape(batch["token_ids"])
            hidden = tf.reshape(hidden, tf.concat([shape, tf.shape(hidden)[-1:]], 0))
        return self.heads[task](hidden, batch, training=training)

    def task_loss(self, task, batch, training=False):
        outputs = self.task_outputs(task, batch, training=training)
        # mixed precision: heads compute in 16 bits, losses always in float32
        outputs = tf.nest.map_structure(
            lambda t: tf.cast(t, tf.float32) if t.dtype.is_floating else t, outputs)
        return self.heads[task].compute_task_loss(outputs, batch)

    # --- the mixed update --------------------------------------------------------

    def _micro_step_fn(self, task):
        if task in self._micro_steps:
            return self._micro_steps[task]
        head_slots = self._head_slots[task]
        head_variables = self.head_variables[task]
        weight = self.loss_weights[task]
        initial_loss = self.initial_losses[task]
        strategy = self.strategy

        def replica_step(batch):
            variables = self.backbone_variables + head_variables
            replicas = 1
            if strategy is not None:  # this replica's rows, weighted by their share
                context = tf.distribute.get_replica_context()
                replicas = context.num_replicas_in_sync
                batch, share = shard_batch(self.heads[task], batch,
                                           context.replica_id_in_sync_group, replicas)
            with tf.GradientTape() as tape:
                raw_loss = self.task_loss(task, batch, training=True)
                if strategy is not None:
                    raw_loss = raw_loss * share
                loss = raw_loss * weight
                if self.dynamic_loss_scale:
                    scaled_loss = loss * self.loss_scales[task]
            gradients = tape.gradient(scaled_loss if self.dynamic_loss_scale else loss, variables)
            # Embedding gradients come as IndexedSlices with repeated ids: densify
            # before taking norms (global_norm on slices ignores duplicates).
            gradients = [tf.zeros_like(v) if g is None else tf.cast(tf.convert_to_tensor(g), v.dtype)
                         for g, v in zip(gradients, variables)]
            if self.dynamic_loss_scale:
                gradients = [g / self.loss_scales[task] for g in gradients]
            if strategy is not None:  # the global gradient, before any norm is taken
                gradients, raw_loss, loss = context.all_reduce(
                    tf.distribute.ReduceOp.SUM, (gradients, raw_loss, loss))
            backbone_norm = tf.linalg.global_norm(gradients[: len(self.backbone_variables)])
            finite = tf.math.is_finite(loss) & tf.math.is_finite(backbone_norm) & tf.reduce_all(
                [tf.reduce_all(tf.math.is_finite(g)) for g in gradients[len(self.backbone_variables):]]
                or [tf.constant(True)])
            if self.balancing == "gradient_norm":
                scale = 1.0 / tf.maximum(backbone_norm, 1e-12)
            elif self.balancing == "loss_norm":  # d/dθ [L / stop_grad(L)]
                scale = 1.0 / tf.maximum(tf.abs(loss), 1e-12)
            elif self.balancing == "initial_loss":  # L / L(first batch of this task)
                first = tf.equal(initial_loss, 0.0) & finite
                initial_loss.assign(tf.where(first, loss, initial_loss))
                scale = 1.0 / tf.maximum(tf.abs(initial_loss), 1e-12)
            else:
                scale = tf.constant(1.0)
            if replicas > 1:  # every replica holds the reduced gradient; the optimizer sums them
                scale = scale / replicas
            if self.dynamic_loss_scale:
                self._update_loss_scale(task, finite)
            slots = list(range(len(self.backbone_variables))) + head_slots

            # `finite` covers every gradient (the backbone's through its norm), so a bad
            # micro-batch skips the accumulators and a good one costs one multiply-add
            # per variable (bench/mtl_overhead.py: masking every gradient cost ~8% of an update).
            def accumulate():
                for slot, gradient in zip(slots, gradients):
                    self.accumulators[slot].assign_add(gradient * tf.cast(scale, gradient.dtype))
                return tf.constant(True)

            tf.cond(finite, accumulate, lambda: tf.constant(False))
            return {"loss": raw_loss, "gradient_norm": backbone_norm, "finite": finite}

        def micro_step(batch):
            if strategy is None:
                return replica_step(batch)
            results = strategy.run(replica_step, args=(batch,))  # equal on every replica
            return {k: strategy.experimental_local_results(v)[0] for k, v in results.items()}

        self._micro_steps[task] = tf.function(micro_step, reduce_retracing=True)
        return self._micro_steps[task]

    def _update_loss_scale(self, task, finite):
        """Dynamic loss scaling (mixed_float16), per task: halve on a non-finite
        micro-batch, double after 2000 finite ones in a row (Keras LossScaleOptimizer's
        schedule, counted in this task's micro-batches)."""
        scale, in_a_row = self.loss_scales[task], self._finite_in_a_row[task]
        count = tf.where(finite, in_a_row + 1, 0)
        grow = count >= 2000
        factor = tf.where(finite, tf.where(grow, 2.0, 1.0), 0.5)
        scale.assign(tf.clip_by_value(scale * factor, 1.0, 2.0 ** 24))
        in_a_row.assign(tf.where(grow, 0, count))

    def _on_replicas(self, fn):
        return fn() if self.strategy is None else self.strategy.run(fn)

    def _zero_accumulators(self):
        for a in self.accumulators:
            a.assign(tf.zeros_like(a))

    def _apply_update(self):
        if self._apply_update_fn is None:
            def apply_local():  # per replica: Keras all-reduces (SUMs) the gradients itself
                self.optimizer.apply([a.read_value() for a in self.accumulators], self.all_variables)
                self._zero_accumulators()

            def apply_update():
                self._on_replicas(apply_local)
                self.backbone.update_residual_alpha(self.optimizer.iterations)
            self._apply_update_fn = tf.function(apply_update)
        self._apply_update_fn()

    def run_update(self, micro_batches):
        """One optimizer update from [(task, batch), ...]; returns per-micro-batch logs."""
        logs, good = [], 0
        for task, batch in micro_batches:
            result = self._micro_step_fn(task)({k: tf.convert_to_tensor(v) for k, v in batch.items()})
            result = {k: v.numpy().item() for k, v in result.items()}
            result["task"] = task
            if result["finite"]:
                good += 1
                self._consecutive_bad[task] = 0
            else:
                self.skipped[task] += 1
                self._consecutive_bad[task] += 1
                if self._consecutive_bad[task] >= self.max_consecutive_bad:
                    raise NonFiniteLossError(
                        f"task {task!r}: {self._consecutive_bad[task]} micro-batches in a row had a "
                        "non-finite loss or gradient; check its data/labels or lower the learning rate")
            logs.append(result)
        if good:
            self._apply_update()
        else:  # nothing finite to apply: drop the update rather than step on zeros
            if self._reset_fn is None:
                self._reset_fn = tf.function(lambda: self._on_replicas(self._zero_accumulators))
            self._reset_fn()
        self.last_micro_logs = logs
        return logs

    def make_train_function(self, force=False):
        if self.train_function is not None and not force:
            return self.train_function

        def train_function(iterator):
            next(iterator)  # the fit dataset only counts updates
            if self.mixture is None:
                raise RuntimeError("MultiTaskModel.mixture is not set: give it a task mixture "
                                   "(next() -> (task, batch)) before fit")
            logs = self.run_update([self.mixture.next() for _ in range(self.tasks_per_update)])
            finite = [log["loss"] for log in logs if log["finite"]]
            return {"loss": float(np.mean(finite)) if finite else float("nan"),
                    "tasks": float(len({log["task"] for log in logs}))}

        self.train_function = train_function
        return train_function


def _replicated(value, name):
    """A scalar every replica updates to the same value (computed from reduced quantities):
    kept per replica, read from the first, so updating it needs no communication."""
    return tf.Variable(value, trainable=False, name=name,
                       synchronization=tf.VariableSynchronization.ON_READ,
                       aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
