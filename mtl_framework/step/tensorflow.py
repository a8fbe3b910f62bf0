"""The TensorFlow step (step/__init__.py says what a Step provides): one tf.function per
trace group, traced once for any lengths and label counts; under a tf.distribute
strategy each replica computes on its slice of the micro-batch (step/model.py's module
doc: the mixed update, lanes, dropout seeds, strategies, loss scaling)."""
import os

import tensorflow as tf

from mtl_framework.families.heads import backbone_inputs
from mtl_framework.step.backend import BackendStep
from mtl_framework.step.distributed import shard_batch


class TensorFlowStep(BackendStep):
    """TensorFlow's half of MultiTaskModel (a base class of it)."""

    checks_after_update = False  # each micro-batch's log is read as it finishes

    def _current_strategy(self):
        """The tf.distribute strategy the model is made in (see distributed.py), or None."""
        return tf.distribute.get_strategy() if tf.distribute.has_strategy() else None

    @staticmethod
    def _on_gpu():
        return bool(tf.config.list_logical_devices("GPU"))

    def _accumulator(self, variable, name):
        # ON_READ: each replica accumulates its own copy, no communication; the optimizer
        # sums them across replicas when it applies (identical values here, see micro_step).
        return tf.Variable(tf.zeros(variable.shape, variable.dtype), trainable=False,
                           name=name,
                           synchronization=tf.VariableSynchronization.ON_READ,
                           aggregation=tf.VariableAggregation.SUM)

    def _state_variable(self, value, name, dtype="float32"):
        return _replicated(tf.constant(value, dtype), name)

    @staticmethod
    def _constant(value):
        return tf.constant(value, tf.float32)

    @staticmethod
    def _to_tensors(batch):
        return {k: tf.convert_to_tensor(v) for k, v in batch.items()}

    def _trimmed(self, rows):
        longest = tf.reduce_max(tf.reduce_sum(tf.cast(tf.not_equal(rows["token_ids"], 0), tf.int32), -1))
        longest = tf.maximum(longest, 1)  # rows of padding alone (a missing hard negative) keep one
        return {k: v[:, :longest] for k, v in rows.items()}

    def _packs_tokens(self):
        return True

    def _packed_rows(self, real, positions):
        return True  # T is found in the graph, which relaxes every axis

    def _read_slots(self, count, positions):
        return count

    def _drop_update(self):
        """Zero the accumulators without applying them (nothing finite in the update)."""
        if self._reset_fn is None:
            self._reset_fn = tf.function(lambda: self._on_replicas(self._zero_accumulators), autograph=False)
        self._reset_fn()

    def _check_lanes(self, lanes):
        return lanes

    def _default_lanes(self):
        return min(2, os.cpu_count() or 1)

    def make_train_function(self, force=False):
        if self.train_function is not None and not force:
            return self.train_function
        _quiet_retracing()

        def train_function(iterator):
            self._count_epoch_update()
            next(iterator)  # the fit dataset only counts updates
            return self.train_step_logs()

        self.train_function = train_function
        return train_function

    def _take_counts(self, n):
        """The numbers of the next n micro-batches (their dropout seeds), in order."""
        first = int(self.micro_batches_seen.numpy())
        self.micro_batches_seen.assign(first + n)
        return [tf.constant(first + i, tf.int64) for i in range(n)]

    def _launch(self, task, batch, count):
        """The task's traced step on `batch`. Without a strategy it changes no variable, so
        two can run at once (their results then go through _finish in order)."""
        key = self._micro_step_key(task, batch)
        if key not in self._micro_steps:
            self._micro_steps[key] = self._trace_micro_step(key[0], batch, packed=key[-1])
        return self._micro_steps[key](batch, self._own_head_values(task), self._task_state(task), count)

    def _task_state(self, task):
        """What the traced step reads of the task besides its weights (scalars)."""
        state = {"loss_weight": self._loss_weight_tensors[task],
                 **{k: tf.convert_to_tensor(v) for k, v in self.balancing.state(task).items()}}
        if self.dynamic_loss_scale:
            state["loss_scale"] = tf.convert_to_tensor(self.loss_scales[task])
            state["finite_in_a_row"] = tf.convert_to_tensor(self._finite_in_a_row[task])
        return state

    def _finish(self, task, results):
        """A launched step's gradients into the accumulators (the backbone's through one
        traced function, in micro-batch order; under a strategy the step added them) and
        the task's state; returns {loss, gradient_norm, normalized_gradient_norm, finite} and
        the head's signs."""
        if "backbone_gradients" in results:
            slot = self.balancing.accumulator_slot(task)  # None: the shared accumulators
            if slot not in self._accumulate_fns:
                targets = self.accumulators if slot is None else self.balancing.slot_accumulators(slot)

                def accumulate(gradients, scale, finite):
                    tf.cond(finite, lambda: _done(*[_add(a, g, scale) for a, g in zip(
                        targets, gradients)]), lambda: tf.constant(False))
                self._accumulate_fns[slot] = tf.function(accumulate, reduce_retracing=True, autograph=False)
            self._accumulate_fns[slot](results["backbone_gradients"], results["scale"],
                                       results["finite"])
        self._update_task_state(task, results)
        return {**{k: results[k] for k in ("loss", "gradient_norm", "normalized_gradient_norm",
                                            "finite")}, **results["signs"]}

    def _trace_micro_step(self, group, batch, packed=False):
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
            replicas, share = 1, None
            if strategy is not None:  # this replica's rows, weighted by their share
                context = tf.distribute.get_replica_context()
                replicas = context.num_replicas_in_sync
                batch, share = shard_batch(template, batch, context.replica_id_in_sync_group, replicas)
            raw_loss, loss, gradients, signs = self._gradients(template, batch, own_values, state,
                                                               count, share, packed)
            if strategy is not None:  # the global gradient, before any norm is taken
                gradients, raw_loss, loss = context.all_reduce(
                    tf.distribute.ReduceOp.SUM, (gradients, raw_loss, loss))
            results, scale = self._balanced(raw_loss, loss, gradients, n_backbone, state)
            results["signs"] = signs  # the whole batch's on every replica (rows_coupled)
            if replicas > 1:  # every replica holds the reduced gradient; the optimizer sums them
                scale = scale / replicas
            finite = results["finite"]
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
                     if k not in ("head_gradients", "signs")}
            local["signs"] = {name: strategy.experimental_local_results(v)[0]
                              for name, v in results["signs"].items()}
            local["head_gradients"] = results["head_gradients"]
            return local

        state_spec = tf.nest.map_structure(tf.TensorSpec.from_tensor, self._task_state(tasks[0]))
        # autograph=False (every tf.function here): control flow on tensors is written as
        # tf.cond / tf.while_loop already, and converting each Python call cost 2 s of a
        # contrastive run's 11 s first trace (bit-identical metrics.jsonl, BERT small)
        return tf.function(micro_step, autograph=False, input_signature=[
            _batch_spec(batch), self._own_spec(tasks), state_spec, tf.TensorSpec([], tf.int64)])

    def _gradients(self, template, batch, own_values, state, count, share=None, packed=False):
        """(raw loss, weighted loss, gradients, the head's signs) of one micro-batch with the task's weights
        `own_values` in the group's template head: the backbone's then the head's, each
        dense (a head's leaves the step; without a strategy the embedding's repeated rows
        are summed), in its variable's dtype, loss scaling undone. `share`: this
        replica's part of the global loss denominator; `packed`: the backbone packed
        (MultiTaskModel._packs_batch, part of the step's key)."""
        variables = self.backbone_variables + own_values

        def weighted(raw_loss):  # (raw, weighted, scaled) loss of this replica
            if share is not None:
                raw_loss = raw_loss * share
            loss = raw_loss * state["loss_weight"]
            return raw_loss, loss, loss * state["loss_scale"] if self.dynamic_loss_scale else loss

        if template.cached_chunk:
            raw_loss, loss, gradients, signs = self._cached_gradients(template, batch, count, weighted)
            gradients += [tf.zeros_like(v) for v in own_values]  # a contrastive head has none
        else:
            with tf.GradientTape() as tape:
                tape.watch(own_values)
                raw_loss, signs = self._loss_and_signs(
                    template, batch, True, self._head_values(template, own_values),
                    self._dropout_seeds(count), packed=packed)
                raw_loss, loss, scaled_loss = weighted(raw_loss)
            gradients = tape.gradient(scaled_loss, variables)
        gradients = [tf.zeros_like(v) if g is None else g for g, v in zip(gradients, variables)]
        n_backbone = len(self.backbone_variables)
        if share is None:  # a head's gradient goes out of the step: dense
            gradients = [_summed_rows(g) if isinstance(g, tf.IndexedSlices) and i < n_backbone
                         else tf.convert_to_tensor(g) for i, g in enumerate(gradients)]
        else:  # the all-reduce needs dense gradients
            gradients = [tf.convert_to_tensor(g) for g in gradients]
        gradients = [_map_values(lambda x, v=v: tf.cast(x, v.dtype), g)
                     for g, v in zip(gradients, variables)]
        if self.dynamic_loss_scale:
            gradients = [_map_values(lambda x: x / state["loss_scale"], g) for g in gradients]
        return raw_loss, loss, gradients, signs

    def _cached_gradients(self, template, batch, count, weighted):
        """(raw loss, weighted loss, backbone gradients, signs) by GradCache (Gao et al. 2021, as
        sentence-transformers' CachedMultipleNegativesRankingLoss): the texts go through
        the backbone `template.cached_chunk` rows at a time, (1) without a tape, keeping
        only their vectors; (2) the loss on all vectors gives d loss / d vectors; (3) each
        chunk again under a tape, its vectors' gradient pushed back into the weights and
        summed. Memory holds one chunk's activations, not the micro-batch's; the gradient
        is the plain step's (chunk c draws its dropout masks from seeds of its own, the
        same in (1) and (3)); the cost is a second forward pass over every text."""
        rows = backbone_inputs(batch)
        size = template.cached_chunk
        chunks = (tf.shape(rows["token_ids"])[0] + size - 1) // size

        def vectors_of(chunk):
            part = {k: v[chunk * size:(chunk + 1) * size] for k, v in rows.items()}
            return self._text_vectors(template, part, self._dropout_seeds(count, chunk))

        def embed(chunk, pieces):
            return chunk + 1, pieces.write(chunk, vectors_of(chunk))

        pieces = tf.TensorArray(tf.float32, size=chunks, infer_shape=False, element_shape=[None, None])
        _, pieces = tf.while_loop(lambda chunk, _: chunk < chunks, embed, (0, pieces),
                                  parallel_iterations=1)
        vectors = pieces.concat()
        with tf.GradientTape() as tape:
            tape.watch(vectors)
            shaped = tf.reshape(vectors, tf.concat([tf.shape(batch["token_ids"])[:2], [-1]], 0))
            raw_loss, signs = template.compute_task_loss_and_signs(shaped, batch)
            raw_loss, loss, scaled_loss = weighted(raw_loss)
        vector_gradients = tape.gradient(scaled_loss, vectors)
        variables = self.backbone_variables

        def push_back(chunk, sums):
            with tf.GradientTape() as tape:
                pushed = tf.reduce_sum(vectors_of(chunk) * vector_gradients[chunk * size:(chunk + 1) * size])
            gradients = tape.gradient(pushed, variables)
            return chunk + 1, [total if g is None else total + tf.convert_to_tensor(g)
                               for total, g in zip(sums, gradients)]

        _, gradients = tf.while_loop(lambda chunk, _: chunk < chunks, push_back,
                                     (0, [tf.zeros_like(v) for v in variables]), parallel_iterations=1)
        return raw_loss, loss, gradients, signs

    def _balanced(self, raw_loss, loss, gradients, n_backbone, state):
        """({loss, gradient_norm, finite, the balancing's and loss scale's new state}, the
        micro-batch's scale): the backbone norm, whether the loss and every gradient are
        finite, and the balancing's factor (balancing.py)."""
        backbone_norm = tf.linalg.global_norm(gradients[:n_backbone])
        finite = tf.math.is_finite(loss) & tf.math.is_finite(backbone_norm) & tf.reduce_all(
            [tf.reduce_all(tf.math.is_finite(g)) for g in gradients[n_backbone:]]
            or [tf.constant(True)])
        results = {"loss": raw_loss, "gradient_norm": backbone_norm, "finite": finite}
        scale, extra = self.balancing.scale(loss, backbone_norm, finite, state)
        results.update(extra)
        if self.dynamic_loss_scale:
            results.update(_next_loss_scale(state["loss_scale"], state["finite_in_a_row"], finite))
        return results, scale

    def _dropout_seeds(self, count, chunk=0):
        """Each dropout seed state mapped to its own value + [chunk, count * 1024]: micro-batch
        `count` draws its masks from its own seeds (1024 draws per layer each), whichever
        micro-steps ran before it or beside it; a cached-gradient step's chunks each from
        their own (the first word shifted by the chunk's number)."""
        count = tf.convert_to_tensor(count)
        offset = tf.stack([tf.cast(chunk, count.dtype), count * 1024])
        return [(state, tf.convert_to_tensor(state) + tf.cast(offset, state.dtype))
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

    def traced_outputs(self, task, batch):
        """The task's outputs (training=False) from one traced forward pass per trace group
        (evaluation: 92 tasks trace 10 forward passes, not 92)."""
        key = self._step_key(task, batch)
        if key not in self._forward_steps:
            _quiet_retracing()
            tasks = self.trace_groups[key[0]]
            template = self.heads[tasks[0]]

            def forward(batch, own_values):
                return self._outputs(template, batch, False, self._head_values(template, own_values))
            self._forward_steps[key] = tf.function(
                forward, autograph=False, input_signature=[_batch_spec(batch), self._own_spec(tasks)])
        return self._forward_steps[key](batch, self._own_head_values(task))

    def _on_replicas(self, fn):
        return fn() if self.strategy is None else self.strategy.run(fn)

    @staticmethod
    def gradient_gram(groups):
        return tf.stack([tf.stack([tf.add_n([tf.reduce_sum(tf.cast(a, tf.float64) * tf.cast(b, tf.float64))
                                            for a, b in zip(gi, gj)]) for gj in groups])
                         for gi in groups])

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
            self._apply_update_fn = tf.function(apply_update, autograph=False)
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


# --- encoding: a SentenceEncoder's forward pass (embedding/encode.py's Encoder) ---------------

def encoding_forward(model):
    """(token ids [n, L] -> vectors, the step lengths are rounded up to, batches computed at
    once) of a SentenceEncoder: one function traced for every shape, so batches pad to their
    longest text exactly; the backbone packed (its token-wise work on the real tokens alone,
    layers.Packing: 0.9x the CPU time at float32 on AFQMC's sorted batches); several batches
    computing at once on a CPU (encoding_lanes: one small batch leaves a core idle between
    its ops)."""
    @tf.function(autograph=False, input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def vectors(token_ids):
        return model({"token_ids": token_ids, "segment_ids": tf.zeros_like(token_ids)}, packed=True)

    return vectors, 1, encoding_lanes(not TensorFlowStep._on_gpu())


def encoding_lanes(on_cpu=True):
    """Batches encoded at once: one per core when each op has one thread
    (embedding/encode.py's ENCODING_THREADS), else 2 on a CPU of 2+ cores (as training's
    lanes), 1 on a GPU."""
    if not on_cpu:
        return 1
    cores = os.cpu_count() or 1
    threads = tf.config.threading.get_intra_op_parallelism_threads() or int(
        os.environ.get("TF_NUM_INTRAOP_THREADS") or 0)
    return cores if threads == 1 else min(2, cores)


def _quiet_retracing():
    """Each task's micro-step traces once on its first batch, and evaluation's relation and
    choice batches vary in two dims (one relaxed retrace per task): TF's generic "N calls
    triggered retracing" warning counts those as a problem."""
    tf.get_logger().setLevel("ERROR")


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
