"""MultiTaskModel: the shared backbone, one head per task, and the mixed update.

One optimizer update = `tasks_per_update` single-task micro-batches. Each
micro-batch's gradient is scaled by its balancing factor, normalisation × task weight
(balancing.py; gradient_norm: 1 / ||g over the backbone||, the head's gradient by the
same factor), the scaled gradients are summed in accumulators, and the optimizer
applies them once; the balancing's hooks run after each micro-step, before the apply
(pcgrad) and after it (adaptive weights). Consequence: multiplying one task's loss by a
constant does not change the shared update under gradient_norm; emphasis comes from
sampling rates.

Runs under `model.fit`: the dataset given to fit only counts updates; the
micro-batches come from `model.mixture` (anything with `next() -> (task, batch)`),
because single-task batches of different families have different structures.
Tracing: one tf.function per trace group, not per task, traced once. Heads of one class
and the same settings (TaskHead.trace_key; label counts and decoding options left out)
share a micro-step: the group's first head computes with the weights of the micro-batch's
task, passed in as arguments; the step returns the scaled gradients and the task's new
initial loss and loss scale, and `_finish` adds them to the accumulators and the task's
state (see Lanes). No op in any graph belongs to one task, so a new task of a
known family costs its head's variables and its share of the optimizer update, not a
trace (92 catalog tasks + MLM: 10 groups). Every axis of the signature is unknown (any
length, batch size, label count): one trace per group and batch layout.

The token embedding's gradient stays sparse (without a strategy): repeated ids' rows are
summed, so the backbone norm is the dense one, and only the used rows are accumulated.

Lanes (`parallel_micro_batches`, default 2 on a CPU with 2+ cores): without a strategy a
traced step changes no variable; it returns its gradients, and `_finish` accumulates them
in micro-batch order. So two steps can compute at once in threads, which uses 2 cores
better than one small micro-batch at a time (bench/mtl_overhead.py), and the update is
the one of one lane. Dropout draws from seeds numbered by micro-batch
(`micro_batches_seen`, checkpointed), not from Keras's shared seed state, so masks do not
depend on which step ran first. initial_loss balancing (any method with `ordered`) and
dynamic loss scaling read what the previous micro-step wrote: one lane.

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
import concurrent.futures
import contextlib
import os

import keras
import numpy as np
import tensorflow as tf

from mtl_framework.balancing import Balancing
from mtl_framework.distributed import shard_batch
from mtl_framework.families import family
from mtl_framework.heads import backbone_inputs, use_backbone_rotary
from mtl_framework.run_dir import layer_variable_names, optimizer_variable_names


class NonFiniteLossError(RuntimeError):
    """Too many non-finite micro-batches in a row; `task` names whose."""

    def __init__(self, message, task=None):
        super().__init__(message)
        self.task = task


class MultiTaskModel(keras.Model):
    def __init__(self, backbone, heads, tasks_per_update=8, balancing="gradient_norm",
                 loss_weights=None, max_consecutive_bad=20, loss_scale=None,
                 parallel_micro_batches=None, seed=0, **kwargs):
        super().__init__(**kwargs)
        if tasks_per_update < 1:
            raise ValueError(f"tasks_per_update must be >= 1, got {tasks_per_update}")
        self.backbone = backbone
        self.heads = dict(heads)
        use_backbone_rotary(self.heads.values(), backbone)  # pointers rotate as the backbone
        self.task_names = list(self.heads)
        self.tasks_per_update = int(tasks_per_update)
        self.balancing = Balancing(balancing, self.task_names, seed)  # balancing.py
        self.loss_weights = {t: float((loss_weights or {}).get(t, 1.0)) for t in self.task_names}
        self.max_consecutive_bad = max_consecutive_bad
        if loss_scale not in (None, "dynamic"):
            raise ValueError(f"loss_scale must be None or 'dynamic', got {loss_scale!r}")
        self.dynamic_loss_scale = loss_scale == "dynamic"
        self.parallel_micro_batches = parallel_micro_batches
        # Made in a strategy's scope: micro-steps then run per replica (see module doc).
        self.strategy = tf.distribute.get_strategy() if tf.distribute.has_strategy() else None
        self.mixture = None
        self.skipped = {t: 0 for t in self.task_names}
        self._consecutive_bad = {t: 0 for t in self.task_names}
        self._micro_steps = {}
        self._forward_steps = {}
        self._apply_update_fn = None
        self._accumulate_fns = {}
        self._reset_fn = None
        self._threads = None
        self.last_micro_logs = []
        # Updates the current Keras epoch may still run (None: steps_per_epoch decides); a
        # run's epochs end at its evaluation steps (trainer.Run, callbacks.EvaluationEpochs).
        self.epoch_updates_left = None

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
        # named initial_loss/<task> under every balancing: old checkpoints hold them
        self.initial_losses = {
            t: _replicated(0.0, f"initial_loss_{i}") for i, t in enumerate(self.task_names)}
        if self.dynamic_loss_scale:
            self.loss_scales = {t: _replicated(2.0 ** 15, f"loss_scale_{i}")
                                for i, t in enumerate(self.task_names)}
            self._finite_in_a_row = {t: _replicated(0, f"finite_in_a_row_{i}")
                                     for i, t in enumerate(self.task_names)}
        # Dropout seeds come from this count (see _dropout_seeds): a micro-step's masks do
        # not depend on which micro-steps ran before it, or at the same time.
        self.micro_batches_seen = _replicated(tf.constant(0, tf.int64), "micro_batches_seen")
        layers = list(self.backbone._flatten_layers()) + [
            layer for head in self.heads.values() for layer in head._flatten_layers()]
        self._seed_states = list({id(g.state): g.state for layer in layers
                                  for g in layer._seed_generators}.values())
        # not compiled (evaluation.checkpoint_model: predictions only): no optimizer
        if getattr(self, "optimizer", None) is not None and not self.optimizer.built:
            self.optimizer.build(self.all_variables)
        self.balancing.build(self)  # after the accumulators and initial losses it may use
        self._group_trace_steps()
        self.lanes = self._lanes()
        self.built = True

    @property
    def state_variables(self):
        """Everything an exact resume needs besides the data positions."""
        return list(self.named_state_variables.values())

    @property
    def named_state_variables(self):
        """state_variables by the names a checkpoint stores them under (run_dir.py).

        Names do not depend on what else the process built: Keras numbers auto-named
        layers and seed generators per process, so the backbone's variables are named
        from inside it, and each optimizer slot after the variable it belongs to."""
        named = layer_variable_names(self.backbone, "backbone")
        owned = {id(v) for v in named.values()}
        for task, head in self.heads.items():  # a head's layer is named after its task
            named.update((name, v) for name, v in layer_variable_names(head, task).items()
                         if id(v) not in owned)
        for task in self.task_names:
            named[f"initial_loss/{task}"] = self.initial_losses[task]
        named["micro_batches_seen"] = self.micro_batches_seen
        named.update(self.balancing.variables())  # none for the four old methods
        if self.dynamic_loss_scale:
            named.update({f"loss_scale/{t}": v for t, v in self.loss_scales.items()})
            named.update({f"finite_in_a_row/{t}": v for t, v in self._finite_in_a_row.items()})
        if getattr(self, "optimizer", None) is not None:
            named.update(optimizer_variable_names(self.optimizer, named))
        return named

    # --- forward ---------------------------------------------------------------

    def task_outputs(self, task, batch, training=False):
        return self._outputs(self.heads[task], batch, training)

    def task_loss(self, task, batch, training=False):
        return self._loss(self.heads[task], batch, training)

    def _outputs(self, head, batch, training, head_values=None, seeds=None):
        """The head on the backbone's output; with `head_values`, `head` computes with
        those weights in place of its own (as Keras's stateless_call); with `seeds`
        ([(seed state variable, value)]), dropout draws from those values and the seed
        states' own updates stay in the scope."""
        seeds = list(seeds or [])
        with _WeightsScope(seeds) if seeds else contextlib.nullcontext():
            hidden = self.backbone(backbone_inputs(batch), training=training)
            if family(head.family).choice_axis:  # choices folded into the batch axis
                shape = tf.shape(batch["token_ids"])
                hidden = tf.reshape(hidden, tf.concat([shape, tf.shape(hidden)[-1:]], 0))
            if head_values is None:
                return head(hidden, batch, training=training)
            # the innermost scope is the one read: it holds the seeds too
            with _WeightsScope(list(zip(head.trainable_variables, head_values)) + seeds):
                return head.call(hidden, batch, training=training)

    def _loss(self, head, batch, training, head_values=None, seeds=None):
        outputs = self._outputs(head, batch, training, head_values, seeds)
        # mixed precision: heads compute in 16 bits, losses always in float32
        outputs = tf.nest.map_structure(
            lambda t: tf.cast(t, tf.float32) if t.dtype.is_floating else t, outputs)
        return head.compute_task_loss(outputs, batch)

    # --- the mixed update --------------------------------------------------------

    def _group_trace_steps(self):
        """Tasks whose heads have equal trace keys (TaskHead.trace_key: same class and
        settings, any label count) share one traced micro-step."""
        self.trace_groups = {}
        for task in self.task_names:
            self.trace_groups.setdefault(self.heads[task].trace_key(), []).append(task)
        self._task_group = {task: key for key, tasks in self.trace_groups.items() for task in tasks}
        for tasks in self.trace_groups.values():
            ranks = {tuple(len(v.shape) for v in self.heads[t].trainable_variables) for t in tasks}
            if len(ranks) > 1:
                raise ValueError(f"heads of tasks {tasks} share a trace key but not their weights' "
                                 "layout; give their head class a finer trace_key")
        self._loss_weight_tensors = {t: tf.constant(w, tf.float32) for t, w in self.loss_weights.items()}

    def _lanes(self):
        """How many micro-steps run at once. Default: 2 on a CPU with 2+ cores, where 8
        small forward/backward passes use the cores less fully than one large pass
        (bench/mtl_overhead.py); 1 where a micro-step reads state that an earlier one of
        the same update writes (initial_loss, dynamic loss scale) or runs per replica."""
        ordered = self.strategy is not None or self.balancing.ordered or self.dynamic_loss_scale
        if self.parallel_micro_batches is None:
            on_gpu = bool(tf.config.list_logical_devices("GPU"))
            return 1 if ordered or on_gpu else min(2, os.cpu_count() or 1)
        lanes = int(self.parallel_micro_batches)
        if lanes < 1:
            raise ValueError(f"parallel_micro_batches must be >= 1, got {lanes}")
        if lanes > 1 and ordered:
            raise ValueError("parallel_micro_batches > 1 needs no tf.distribute strategy, no dynamic "
                             "loss scale and a balancing other than initial_loss (those micro-steps "
                             "read what the previous one wrote); set it to 1")
        return lanes

    def micro_step(self, task, batch):
        """One micro-batch of `task` (a dict of tensors): its scaled gradient is added to
        the accumulators; returns {loss, gradient_norm, normalized_gradient_norm, finite}
        as tensors."""
        return self._finish(task, self._launch(task, batch, self._take_counts(1)[0]))

    def _take_counts(self, n):
        """The numbers of the next n micro-batches (their dropout seeds), in order."""
        first = int(self.micro_batches_seen.numpy())
        self.micro_batches_seen.assign(first + n)
        return [tf.constant(first + i, tf.int64) for i in range(n)]

    def _step_key(self, task, batch):
        return self._task_group[task], _structure(batch)

    def _launch(self, task, batch, count):
        """The task's traced step on `batch`. Without a strategy it changes no variable, so
        two can run at once (their results then go through _finish in order)."""
        key = self._step_key(task, batch)
        if key not in self._micro_steps:
            self._micro_steps[key] = self._trace_micro_step(key[0], batch)
        return self._micro_steps[key](batch, self._own_head_values(task), self._task_state(task), count)

    def _task_state(self, task):
        """What the traced step reads of the task besides its weights (scalars)."""
        state = {"loss_weight": self._loss_weight_tensors[task], **self.balancing.state(task)}
        if self.dynamic_loss_scale:
            state["loss_scale"] = tf.convert_to_tensor(self.loss_scales[task])
            state["finite_in_a_row"] = tf.convert_to_tensor(self._finite_in_a_row[task])
        return state

    def _finish(self, task, results):
        """A launched step's gradients into the accumulators (the backbone's through one
        traced function, in micro-batch order; under a strategy the step added them) and
        the task's state; returns {loss, gradient_norm, normalized_gradient_norm, finite}."""
        if "backbone_gradients" in results:
            slot = self.balancing.accumulator_slot(task)  # None: the shared accumulators
            if slot not in self._accumulate_fns:
                targets = self.accumulators if slot is None else self.balancing.slot_accumulators(slot)

                def accumulate(gradients, scale, finite):
                    tf.cond(finite, lambda: _done(*[_add(a, g, scale) for a, g in zip(
                        targets, gradients)]), lambda: tf.constant(False))
                self._accumulate_fns[slot] = tf.function(accumulate, reduce_retracing=True)
            self._accumulate_fns[slot](results["backbone_gradients"], results["scale"],
                                       results["finite"])
        self._update_task_state(task, results)
        return {k: results[k] for k in ("loss", "gradient_norm", "normalized_gradient_norm", "finite")}

    def _trace_micro_step(self, group, batch):
        """The micro-step of one trace group, traced once for any lengths and label counts:
        the group's first head computes with the weights passed in (those of the task whose
        micro-batch this is). The gradients come back with their scale (the head's scaled,
        zero if not finite) and the task's new state; _finish accumulates them, so a task
        costs no graph ops at all (a switch over tasks cost ~3 MiB per task). Under a
        strategy the backbone's are accumulated here, per replica."""
        tasks = self.trace_groups[group]
        template = self.heads[tasks[0]]
        n_backbone = len(self.backbone_variables)
        strategy = self.strategy

        def replica_step(batch, own_values, state, count):
            replicas = 1
            if strategy is not None:  # this replica's rows, weighted by their share
                context = tf.distribute.get_replica_context()
                replicas = context.num_replicas_in_sync
                batch, share = shard_batch(template, batch, context.replica_id_in_sync_group, replicas)
            with tf.GradientTape() as tape:
                tape.watch(own_values)
                raw_loss = self._loss(template, batch, True, self._head_values(template, own_values),
                                      self._dropout_seeds(count))
                if strategy is not None:
                    raw_loss = raw_loss * share
                loss = raw_loss * state["loss_weight"]
                scaled_loss = loss * state["loss_scale"] if self.dynamic_loss_scale else loss
            gradients = tape.gradient(scaled_loss, self.backbone_variables + own_values)
            variables = self.backbone_variables + own_values
            gradients = [tf.zeros_like(v) if g is None else g for g, v in zip(gradients, variables)]
            if strategy is None:  # a head's gradient goes out of the step: dense
                gradients = [_summed_rows(g) if isinstance(g, tf.IndexedSlices) and i < n_backbone
                             else tf.convert_to_tensor(g) for i, g in enumerate(gradients)]
            else:  # the all-reduce below needs dense gradients
                gradients = [tf.convert_to_tensor(g) for g in gradients]
            gradients = [_map_values(lambda x, v=v: tf.cast(x, v.dtype), g)
                         for g, v in zip(gradients, variables)]
            if self.dynamic_loss_scale:
                gradients = [_map_values(lambda x: x / state["loss_scale"], g) for g in gradients]
            if strategy is not None:  # the global gradient, before any norm is taken
                gradients, raw_loss, loss = context.all_reduce(
                    tf.distribute.ReduceOp.SUM, (gradients, raw_loss, loss))
            backbone_norm = tf.linalg.global_norm(gradients[:n_backbone])
            finite = tf.math.is_finite(loss) & tf.math.is_finite(backbone_norm) & tf.reduce_all(
                [tf.reduce_all(tf.math.is_finite(g)) for g in gradients[n_backbone:]]
                or [tf.constant(True)])
            results = {"loss": raw_loss, "gradient_norm": backbone_norm, "finite": finite}
            scale, extra = self.balancing.scale(loss, backbone_norm, finite, state)
            results.update(extra)
            if replicas > 1:  # every replica holds the reduced gradient; the optimizer sums them
                scale = scale / replicas
            if self.dynamic_loss_scale:
                results.update(_next_loss_scale(state["loss_scale"], state["finite_in_a_row"], finite))

            # `finite` covers every gradient (the backbone's through its norm), so a bad
            # micro-batch skips the accumulators and a good one costs one multiply-add per
            # variable (bench/mtl_overhead.py: masking every gradient cost ~8% of an update).
            if strategy is None:
                results["backbone_gradients"], results["scale"] = gradients[:n_backbone], scale
            else:
                tf.cond(finite, lambda: _done(*[
                    _add(self.accumulators[slot], g, scale, fused=False)
                    for slot, g in enumerate(gradients[:n_backbone])]), lambda: tf.constant(False))
            results["head_gradients"] = [
                tf.where(finite, g * tf.cast(scale, g.dtype), tf.zeros_like(g))
                for g in gradients[n_backbone:]]
            return results

        def micro_step(batch, own_values, state, count):
            if strategy is None:
                return replica_step(batch, own_values, state, count)
            results = strategy.run(replica_step, args=(batch, own_values, state, count))
            # equal on every replica, except the head gradients: each replica adds its own
            local = {k: strategy.experimental_local_results(v)[0] for k, v in results.items()
                     if k != "head_gradients"}
            local["head_gradients"] = results["head_gradients"]
            return local

        state_spec = tf.nest.map_structure(tf.TensorSpec.from_tensor, self._task_state(tasks[0]))
        return tf.function(micro_step, input_signature=[
            _batch_spec(batch), self._own_spec(tasks), state_spec, tf.TensorSpec([], tf.int64)])

    def _dropout_seeds(self, count):
        """Each dropout seed state mapped to its own value + [0, count * 1024]: micro-batch
        `count` draws its masks from its own seeds (1024 draws per layer each), whichever
        micro-steps ran before it or beside it."""
        return [(state, tf.convert_to_tensor(state) + tf.stack([tf.zeros_like(count), count * 1024]))
                for state in self._seed_states]

    def _update_task_state(self, task, results):
        """Eagerly, after the traced step: the task's head gradient into its accumulators
        (per replica under a strategy), its initial loss and loss scale."""
        for slot, gradient in zip(self._head_slots[task], results["head_gradients"]):
            accumulator = self.accumulators[slot]
            if self.strategy is None:
                accumulator.assign_add(gradient)
            else:  # each replica's own copy (ON_READ, summed by the optimizer)
                for copy, value in zip(self.strategy.experimental_local_results(accumulator),
                                       self.strategy.experimental_local_results(gradient)):
                    copy.assign_add(value)
        self.balancing.after_micro_step(task, results)
        if "loss_scale" in results:
            self.loss_scales[task].assign(results["loss_scale"])
            self._finite_in_a_row[task].assign(results["finite_in_a_row"])

    def _own_head_values(self, task):
        """The current values of the task's own head weights, read here and passed to the
        group's traced step as arguments (their label axes relaxed across the group)."""
        return [tf.convert_to_tensor(v) for v in self.head_variables[task]]

    def _own_spec(self, tasks):
        """Per head weight, the spec the group's tasks share (None on the axes where they
        differ, e.g. the label axis)."""
        return [tf.TensorSpec([dims[0] if len(set(dims)) == 1 else None
                               for dims in zip(*(v.shape for v in variables))], variables[0].dtype)
                for variables in zip(*(self.head_variables[t] for t in tasks))]

    def _head_values(self, template, own_values):
        """Values for all of `template`'s trainable variables: `own_values` for its own,
        the backbone's current value for a tied one."""
        backbone = {id(v): v for v in self.backbone_variables}
        own = iter(own_values)
        return [backbone[id(v)].value if id(v) in backbone else next(own)
                for v in template.trainable_variables]

    def traced_outputs(self, task, batch):
        """The task's outputs (training=False) from one traced forward pass per trace group
        (evaluation: 92 tasks trace 10 forward passes, not 92)."""
        key = self._step_key(task, batch)
        if key not in self._forward_steps:
            tasks = self.trace_groups[key[0]]
            template = self.heads[tasks[0]]

            def forward(batch, own_values):
                return self._outputs(template, batch, False, self._head_values(template, own_values))
            self._forward_steps[key] = tf.function(
                forward, input_signature=[_batch_spec(batch), self._own_spec(tasks)])
        return self._forward_steps[key](batch, self._own_head_values(task))

    def _on_replicas(self, fn):
        return fn() if self.strategy is None else self.strategy.run(fn)

    def _zero_accumulators(self):
        for a in self.accumulators:
            a.assign(tf.zeros_like(a))

    def apply_update(self):
        """One optimizer update from what micro_step has accumulated since the last one
        (the balancing's before_apply first, as in run_update); the accumulators are zero
        after it. run_update ends with this; it is public for code that drives micro_step
        itself (bench/mtl_overhead.py times the optimizer update alone). A balancing that
        learns from the update's losses (after_update) only sees them through run_update."""
        self.balancing.before_apply(self)  # pcgrad: the tasks' gradients into the shared ones
        if self._apply_update_fn is None:
            def apply_local():  # per replica: Keras all-reduces (SUMs) the gradients itself
                self.optimizer.apply([a.read_value() for a in self.accumulators], self.all_variables)
                self._zero_accumulators()

            def apply_update():
                self._on_replicas(apply_local)
                self.backbone.update_residual_alpha(self.optimizer.iterations)
            self._apply_update_fn = tf.function(apply_update)
        self._apply_update_fn()

    def tracing_counts(self):
        """How often each traced function has been traced so far: {"micro_step": {key: n},
        "forward": {key: n}, "apply_update": n}, a key being (trace group, batch structure).
        One micro-step and one forward function per trace group (TaskHead.trace_key), each
        traced once whatever the lengths and label counts: the number of tasks adds none
        (tests/test_trace_groups.py, bench/mtl_overhead.py)."""
        def counts(functions):
            return {key: fn.experimental_get_tracing_count() for key, fn in functions.items()}

        apply = self._apply_update_fn
        return {"micro_step": counts(self._micro_steps), "forward": counts(self._forward_steps),
                "apply_update": apply.experimental_get_tracing_count() if apply else 0}

    def close(self):
        """Stops the threads that run micro-steps side by side (lanes > 1); a later
        run_update starts them again. trainer.Run.close calls it."""
        if self._threads is not None:
            self._threads.shutdown()
            self._threads = None

    def run_update(self, micro_batches):
        """One optimizer update from [(task, batch), ...]; returns per-micro-batch logs.
        With lanes > 1, up to that many traced micro-steps compute at once in threads; their
        gradients are accumulated in micro-batch order, so the update is the same."""
        tokens = [int(np.count_nonzero(batch["token_ids"])) for _, batch in micro_batches]
        micro_batches = [(task, {k: tf.convert_to_tensor(v) for k, v in batch.items()})
                         for task, batch in micro_batches]
        counts = self._take_counts(len(micro_batches))
        logs, pending = [], []
        if self.lanes > 1 and self._threads is None:
            self._threads = concurrent.futures.ThreadPoolExecutor(self.lanes, "micro_step")

        def finish_oldest():
            task, future = pending.pop(0)
            logs.append(self._check(task, self._finish(task, future.result())))
        try:
            for (task, batch), count in zip(micro_batches, counts):
                key = self._step_key(task, batch)
                if self.lanes > 1 and key in self._micro_steps:
                    if len(pending) == self.lanes:
                        finish_oldest()
                    pending.append((task, self._threads.submit(self._launch, task, batch, count)))
                else:  # one at a time; a first call traces, in this thread
                    while pending:
                        finish_oldest()
                    logs.append(self._check(task, self._finish(task, self._launch(task, batch, count))))
            while pending:
                finish_oldest()
        finally:
            concurrent.futures.wait([future for _, future in pending])
        if any(log["finite"] for log in logs):
            self.apply_update()
            self.balancing.after_update(logs, int(self.optimizer.iterations.numpy()))
        else:  # nothing finite to apply: drop the update rather than step on zeros
            self.balancing.before_apply(self)  # as apply_update would have
            if self._reset_fn is None:
                self._reset_fn = tf.function(lambda: self._on_replicas(self._zero_accumulators))
            self._reset_fn()
        for log, count in zip(logs, tokens):
            log["tokens"] = count  # real (non-padding) tokens: what the update computed on
        self.last_micro_logs = logs
        return logs

    def _check(self, task, result):
        """A micro-batch's log; counts a non-finite one, stops after too many in a row."""
        result = {k: v.numpy().item() for k, v in result.items()}
        result["task"] = task
        if result["finite"]:
            self._consecutive_bad[task] = 0
        else:
            self.skipped[task] += 1
            self._consecutive_bad[task] += 1
            if self._consecutive_bad[task] >= self.max_consecutive_bad:
                raise NonFiniteLossError(
                    f"task {task!r}: {self._consecutive_bad[task]} micro-batches in a row had a "
                    "non-finite loss or gradient; check its data/labels or lower the learning rate",
                    task=task)
        return result

    def make_train_function(self, force=False):
        if self.train_function is not None and not force:
            return self.train_function

        def train_function(iterator):
            if self.epoch_updates_left is not None:
                if self.epoch_updates_left <= 0:
                    raise StopIteration  # fit ends this epoch early, as when data runs out
                self.epoch_updates_left -= 1
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


class _WeightsScope(keras.StatelessScope):
    """Variables read as the given values inside, as in Layer.stateless_call, except that a
    value's static shape may be relaxed: one traced micro-step serves heads of every label
    count, so its head weights come as e.g. [H, None] (StatelessScope demands equal shapes)."""

    def __init__(self, mapping):
        super().__init__()
        self.state_mapping = {id(variable): value for variable, value in mapping}


def _structure(batch):
    """What a traced step's signature depends on: the batch's keys, dtypes and ranks."""
    return tuple(sorted((k, v.dtype.name, v.shape.rank) for k, v in batch.items()))


def _batch_spec(batch):
    """Every axis unknown: one trace serves all lengths, batch sizes and label counts."""
    return {k: tf.TensorSpec([None] * v.shape.rank, v.dtype) for k, v in batch.items()}


def _next_loss_scale(scale, finite_in_a_row, finite):
    """Dynamic loss scaling (mixed_float16), per task: halve on a non-finite micro-batch,
    double after 2000 finite ones in a row (Keras LossScaleOptimizer's schedule, counted
    in this task's micro-batches)."""
    count = tf.where(finite, finite_in_a_row + 1, 0)
    grow = count >= 2000
    factor = tf.where(finite, tf.where(grow, 2.0, 1.0), 0.5)
    return {"loss_scale": tf.clip_by_value(scale * factor, 1.0, 2.0 ** 24),
            "finite_in_a_row": tf.where(grow, 0, count)}


def _done(*updates):
    """A cond branch's result, once its variable updates have run."""
    with tf.control_dependencies([u for u in updates if u is not None]):
        return tf.constant(True)


def _summed_rows(slices):
    """An embedding gradient with each repeated id's rows summed: its norm is then the
    dense gradient's, and accumulating it touches only the rows the batch used."""
    ids, position = tf.unique(slices.indices)
    values = tf.math.unsorted_segment_sum(slices.values, position, tf.shape(ids)[0])
    return tf.IndexedSlices(values, ids, slices.dense_shape)


def _map_values(fn, gradient):
    if isinstance(gradient, tf.IndexedSlices):
        return tf.IndexedSlices(fn(gradient.values), gradient.indices, gradient.dense_shape)
    return fn(gradient)


def _add(accumulator, gradient, scale, fused=True):
    """accumulator += scale * gradient. `fused`: one kernel (SGD's apply op with step
    -scale) reads the gradient once; a multiply then assign_add writes and rereads it.
    The op takes a plain variable's handle, so a strategy's per-replica ones use the latter."""
    scale = tf.cast(scale, accumulator.dtype)
    if isinstance(gradient, tf.IndexedSlices):
        return accumulator.scatter_add(_map_values(lambda x: x * scale, gradient))
    if fused:
        return tf.raw_ops.ResourceApplyGradientDescent(var=accumulator.handle, alpha=-scale,
                                                       delta=gradient)
    return accumulator.assign_add(gradient * scale)


def _replicated(value, name):
    """A scalar every replica updates to the same value (computed from reduced quantities):
    kept per replica, read from the first, so updating it needs no communication."""
    return tf.Variable(value, trainable=False, name=name,
                       synchronization=tf.VariableSynchronization.ON_READ,
                       aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
