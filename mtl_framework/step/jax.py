"""The JAX step (step/__init__.py says what a Step provides; TensorFlow is not imported).

A micro-step is one pure function of the variables' values, jitted once per trace group
and batch shape (JAX compiles per shape; TensorFlow's step relaxes every axis): the
backbone's trainable values and the task's own head values are differentiated
(jax.value_and_grad) with every variable read through a StatelessScope, as Keras's own
JAX trainer does with stateless_call; the step returns the loss, the backbone gradient's
norm, the balancing's scale and the accumulators with this micro-batch's scaled
gradients added, which `_finish` writes back in micro-batch order. The optimizer's
update is `optimizer.stateless_apply`, jitted once. The update is the TensorFlow one:
same per-task norm over the backbone, same balancing (balancing.py), same dropout seeds
per micro-batch number (the masks differ: the backends draw differently).

Several devices: `keras.distribution.DataParallel` (distribution: mirrored) replicates
the variables and `_to_tensors` shards each micro-batch's rows over the devices (whole
batches only when the rows divide evenly, else the batch is replicated); XLA then
computes each device's rows and sums the gradients, so the update is one process's.
Micro-steps run one at a time (`parallel_micro_batches` is TensorFlow's: JAX already
dispatches asynchronously).

Several processes (distribution: multi_worker, distributed.py): the mesh spans every
process's devices and each process runs the same micro-steps on the same global batch (same
seed, same streams); `_launch` places it, each process putting only its own devices' rows
(jax.make_array_from_callback), and XLA's collectives (gloo on CPU) sum the
gradients. A forward pass (evaluation) runs on the chief alone: `traced_outputs` then
computes on this process's copy of the replicated variables, on its own device.
"""
import jax
import jax.numpy as jnp
import keras
import numpy as np

from mtl_framework.families.heads import backbone_inputs
from mtl_framework.step.backend import BackendStep

# A packed micro-batch's rows (_packed_rows): T rounded up to eighths of its positions.
PACK_STEPS = 8
# Off: on the mixtures' length-bucketed micro-batches (~97% real) packing saves nothing
# and costs its gathers and compilations (docs/backends.md, bench/results/jax_packing.md);
# bench.jax_packing turns it on.
PACK_MICRO_BATCHES = False


def _in_eighths(count, positions):
    """`count` rounded up to the next of PACK_STEPS equal steps of `positions`."""
    step = -(-positions // PACK_STEPS)
    return -(-count // step) * step


class JaxStep(BackendStep):
    """JAX's half of MultiTaskModel (a base class of it)."""

    # The micro-batches' logs are read once all are launched: reading one waits for its
    # step, and JAX would otherwise queue the next only after it (GPU: one idle gap each).
    checks_after_update = True

    def _current_strategy(self):
        return None  # several devices: keras.distribution (see the module doc)

    @staticmethod
    def _on_gpu():
        return jax.default_backend() != "cpu"

    def _accumulator(self, variable, name):
        return keras.Variable(np.zeros(variable.shape, keras.backend.standardize_dtype(variable.dtype)),
                              trainable=False, name=name, autocast=False)

    def _state_variable(self, value, name, dtype="float32"):
        if dtype == "int64" and not jax.config.jax_enable_x64:
            dtype = "int32"  # JAX's integers are 32-bit unless x64 is on
        return keras.Variable(np.array(value, dtype), trainable=False, name=name, dtype=dtype,
                              autocast=False)

    @staticmethod
    def _constant(value):
        return jnp.float32(value)

    @staticmethod
    def _to_tensors(batch):
        if jax.process_count() > 1:  # placed where used: by _launch, or traced_outputs
            return {k: np.asarray(v) for k, v in batch.items()}
        distribution = keras.distribution.distribution()
        return {k: _placed(v, distribution) for k, v in batch.items()}

    def _trimmed(self, rows):
        return rows  # a trimmed length would be one more compiled shape per batch

    def _packs_tokens(self):
        return False  # T real tokens would be one more compiled shape per batch

    def _packed_rows(self, real, positions):
        """T rounded up to the next of PACK_STEPS equal steps of the batch's positions: a
        static shape of at most PACK_STEPS - 1 more compilations per batch shape (those at
        most PACK_BELOW real), at most 1 / PACK_STEPS of the positions computed in vain
        (bench/results/jax_packing.md)."""
        return _in_eighths(max(1, real), positions)

    def _read_slots(self, count, positions):
        """`count` rounded up to the next of PACK_STEPS equal steps of the row's positions,
        as _packed_rows rounds T: MLM's masked tokens (~15% of a row) then take one or two
        compiled shapes per batch length, not one per count."""
        return min(positions, _in_eighths(count, positions))

    def _check_lanes(self, lanes):
        if lanes > 1:
            raise ValueError("parallel_micro_batches > 1 runs TensorFlow micro-steps in threads; "
                             "on JAX (which dispatches asynchronously) set it to 1 or leave it out")
        return lanes

    def _default_lanes(self):
        return 1

    @staticmethod
    def gradient_gram(groups):
        # float64 in NumPy: JAX has none without x64
        flat = [np.concatenate([np.asarray(a.value, np.float64).ravel() for a in group])
                for group in groups]
        return np.array([[a @ b for b in flat] for a in flat])

    def _on_replicas(self, fn):
        return fn()

    # --- the micro-step --------------------------------------------------------------

    def _take_counts(self, n):
        """The numbers of the next n micro-batches (their dropout seeds), in order."""
        first = int(np.asarray(self.micro_batches_seen.value))
        self.micro_batches_seen.assign(first + n)
        return [np.int32(first + i) for i in range(n)]

    def _fixed_backbone_variables(self):
        """The backbone's variables read but not trained (residual_alpha): arguments of the
        traced functions, so their current values are read, never values of the trace."""
        if getattr(self, "_fixed_variables", None) is None:
            seeds = {id(s) for s in self._seed_states}
            trained = {id(v) for v in self.backbone_variables}
            self._fixed_variables = [v for v in self.backbone.variables
                                     if id(v) not in trained and id(v) not in seeds]
        return self._fixed_variables

    def _launch(self, task, batch, count):
        # a texts-alone head's passes stay padded (_packs_tokens): one step whatever packs
        packs = PACK_MICRO_BATCHES and not self.heads[task].texts_alone
        key = self._step_key(task, batch) + (packs and self._packs_batch(batch),)
        if key not in self._micro_steps:
            self._micro_steps[key] = self._trace_micro_step(key)
        slot = self.balancing.accumulator_slot(task)  # None: the shared accumulators
        n_backbone = len(self.backbone_variables)
        targets = self.accumulators[:n_backbone] if slot is None else \
            self.balancing.slot_accumulators(slot)
        heads = [self.accumulators[s] for s in self._head_slots[task]]
        distribution = keras.distribution.distribution()
        batch = {k: _placed(v, distribution) for k, v in batch.items()}  # several processes
        results, new_targets, new_heads = self._micro_steps[key](
            [v.value for v in self.backbone_variables],
            [v.value for v in self._fixed_backbone_variables()],
            self._own_head_values(task), [s.value for s in self._seed_states], batch,
            self._task_state(task), count, [a.value for a in targets], [a.value for a in heads])
        results["accumulated"] = list(zip(targets + heads, new_targets + new_heads))
        return results

    def _task_state(self, task):
        """What the traced step reads of the task besides its weights (scalars)."""
        state = {"loss_weight": self._loss_weight_tensors[task],
                 **{k: v.value for k, v in self.balancing.state(task).items()}}
        if self.dynamic_loss_scale:
            state["loss_scale"] = self.loss_scales[task].value
            state["finite_in_a_row"] = self._finite_in_a_row[task].value
        return state

    def _own_head_values(self, task):
        return [v.value for v in self.head_variables[task]]

    def _finish(self, task, results):
        """The step's accumulators written back, the task's state updated (micro-batch order)."""
        for accumulator, value in results.pop("accumulated"):
            accumulator.assign(value)
        self.balancing.after_micro_step(task, results)
        if "loss_scale" in results:
            self.loss_scales[task].assign(results["loss_scale"])
            self._finite_in_a_row[task].assign(results["finite_in_a_row"])
        return {**{k: results[k] for k in ("loss", "gradient_norm", "normalized_gradient_norm",
                                            "finite")}, **results["signs"]}

    def _trace_micro_step(self, key):
        tasks, packed = self.trace_groups[key[0]], key[-1]  # packed: False or a row count
        template = self.heads[tasks[0]]
        backbone, fixed_variables = self.backbone_variables, self._fixed_backbone_variables()
        n_backbone, seed_states = len(backbone), self._seed_states

        def step(trainable, fixed, own, seeds, batch, state, count, targets, head_sums):
            self._traces[key] = self._traces.get(key, 0) + 1  # runs only when JAX traces
            offset = jnp.stack([jnp.zeros_like(count), count * 1024])
            seeds = [(s, value + offset.astype(value.dtype)) for s, value in zip(seed_states, seeds)]

            def losses(trainable, own):
                values = list(zip(backbone, trainable)) + list(zip(fixed_variables, fixed))
                raw_loss, signs = self._loss_and_signs(
                    template, batch, True, self._head_values(template, own, values), seeds, values,
                    packed)
                loss = raw_loss * state["loss_weight"]
                scaled = loss * state["loss_scale"] if self.dynamic_loss_scale else loss
                return scaled, (raw_loss, loss, signs)

            if template.cached_chunk:
                raw_loss, loss, backbone_grads, signs = self._cached_gradients(
                    template, batch, trainable, fixed, seeds, state)
                own_grads = [jnp.zeros_like(v) for v in own]  # a contrastive head has none
            else:
                (_, (raw_loss, loss, signs)), (backbone_grads, own_grads) = jax.value_and_grad(
                    losses, argnums=(0, 1), has_aux=True)(trainable, own)
            gradients = [g.astype(v.dtype) for g, v in zip(backbone_grads + own_grads, trainable + own)]
            if self.dynamic_loss_scale:
                gradients = [g / state["loss_scale"].astype(g.dtype) for g in gradients]
            norm = jnp.sqrt(sum(jnp.sum(jnp.square(g.astype("float32"))) for g in gradients[:n_backbone]))
            finite = jnp.isfinite(loss) & jnp.isfinite(norm)
            for g in gradients[n_backbone:]:
                finite = finite & jnp.all(jnp.isfinite(g))
            results = {"loss": raw_loss, "gradient_norm": norm, "finite": finite, "signs": signs}
            scale, extra = self.balancing.scale(loss, norm, finite, state)
            results.update(extra)
            if self.dynamic_loss_scale:
                results.update(_next_loss_scale(state["loss_scale"], state["finite_in_a_row"], finite))
            targets = [jnp.where(finite, a + g * scale.astype(a.dtype), a)
                       for a, g in zip(targets, gradients[:n_backbone])]
            head_sums = [a + jnp.where(finite, g * scale.astype(g.dtype), jnp.zeros_like(g))
                         for a, g in zip(head_sums, gradients[n_backbone:])]
            return results, targets, head_sums

        return jax.jit(step)

    def _cached_gradients(self, template, batch, trainable, fixed, seeds, state):
        """(raw loss, weighted loss, backbone gradients, signs) by GradCache, as TensorFlow's
        step/tensorflow.py computes them: the texts in chunks of `template.cached_chunk`
        rows (the last padded with empty rows, whose vectors' gradient is zero) through
        the backbone without gradients (lax.map), the loss's gradient on all vectors,
        then each chunk's vector-Jacobian product summed (lax.scan), chunk c with the
        dropout seeds of TensorFlow's chunk c."""
        rows = backbone_inputs(batch)
        total, length = rows["token_ids"].shape
        size = template.cached_chunk
        chunks = -(-total // size)
        pad = chunks * size - total
        parts = {k: jnp.pad(v, ((0, pad), (0, 0))).reshape(chunks, size, length) for k, v in rows.items()}
        backbone, fixed_variables = self.backbone_variables, self._fixed_backbone_variables()

        def vectors_of(trainable, chunk, part):
            values = list(zip(backbone, trainable)) + list(zip(fixed_variables, fixed))
            chunk_seeds = [(s, value + jnp.stack([chunk, 0]).astype(value.dtype)) for s, value in seeds]
            return self._text_vectors(template, part, chunk_seeds, values)

        numbers = jnp.arange(chunks)
        vectors = jax.lax.map(lambda args: vectors_of(trainable, *args), (numbers, parts))
        vectors = vectors.reshape(chunks * size, -1)[:total]

        def losses(vectors):
            shaped = vectors.reshape(*batch["token_ids"].shape[:2], -1)
            raw_loss, signs = template.compute_task_loss_and_signs(shaped, batch)
            loss = raw_loss * state["loss_weight"]
            scaled = loss * state["loss_scale"] if self.dynamic_loss_scale else loss
            return scaled, (raw_loss, loss, signs)

        (_, (raw_loss, loss, signs)), vector_gradients = jax.value_and_grad(losses, has_aux=True)(vectors)
        vector_gradients = jnp.pad(vector_gradients, ((0, pad), (0, 0))).reshape(chunks, size, -1)

        def push_back(sums, args):
            chunk, part, pushed = args
            _, pull = jax.vjp(lambda values: vectors_of(values, chunk, part), trainable)
            return [total + g for total, g in zip(sums, pull(pushed)[0])], None

        sums, _ = jax.lax.scan(push_back, [jnp.zeros_like(v) for v in trainable],
                               (numbers, parts, vector_gradients))
        return raw_loss, loss, sums, signs

    # --- forward (evaluation) ------------------------------------------------------------

    def traced_outputs(self, task, batch):
        """The task's outputs (training=False) from one jitted forward pass per trace group
        and batch shape; with several processes, on this one alone (the module doc)."""
        alone = jax.process_count() > 1
        batch = {k: jnp.asarray(v) for k, v in batch.items()} if alone else self._to_tensors(batch)
        key = self._step_key(task, batch)
        if key not in self._forward_steps:
            template = self.heads[self.trace_groups[key[0]][0]]
            backbone, fixed_variables = self.backbone_variables, self._fixed_backbone_variables()

            def forward(trainable, fixed, own, batch):
                self._traces[("forward", key)] = self._traces.get(("forward", key), 0) + 1
                values = list(zip(backbone, trainable)) + list(zip(fixed_variables, fixed))
                return self._outputs(template, batch, False, self._head_values(template, own, values),
                                     None, values)
            self._forward_steps[key] = jax.jit(forward)
        values = ([v.value for v in self.backbone_variables],
                  [v.value for v in self._fixed_backbone_variables()], self._own_head_values(task))
        if alone:
            values = jax.tree.map(_local_copy, values)
        return self._forward_steps[key](*values, batch)

    # --- the optimizer's update ----------------------------------------------------------

    def _zero_accumulators(self):
        for a in self.accumulators:
            a.assign(jnp.zeros_like(a.value))

    def _drop_update(self):
        self._zero_accumulators()

    def apply_update(self):
        """One optimizer update from the accumulators (the balancing's before_apply first);
        the accumulators are zero after it (as TensorFlow's apply_update)."""
        self.balancing.before_apply(self)  # pcgrad: the tasks' gradients into the shared ones
        if self._apply_update_fn is None:
            def apply(optimizer_values, gradients, values):
                self._traces["apply_update"] = self._traces.get("apply_update", 0) + 1
                return self.optimizer.stateless_apply(optimizer_values, gradients, values)
            self._apply_update_fn = jax.jit(apply)
        values, optimizer_values = self._apply_update_fn(
            [v.value for v in self.optimizer.variables], [a.value for a in self.accumulators],
            [v.value for v in self.all_variables])
        for variable, value in zip(self.all_variables, values):
            variable.assign(value)
        for variable, value in zip(self.optimizer.variables, optimizer_values):
            variable.assign(value)
        self._zero_accumulators()
        self.backbone.update_residual_alpha(self.optimizer.iterations)

    def tracing_counts(self):
        """How often each jitted function has been traced (JAX traces once per batch shape)."""
        traces = getattr(self, "_traces", {})
        return {"micro_step": {k: traces.get(k, 0) for k in self._micro_steps},
                "forward": {k: traces.get(("forward", k), 0) for k in self._forward_steps},
                "apply_update": traces.get("apply_update", 0)}

    # --- Keras's fit ---------------------------------------------------------------------

    def make_train_function(self, force=False):
        """Keras's JAX fit calls train_function(state, data) -> (logs, state), state being
        the values of (trainable, non-trainable, optimizer, metrics) variables, and takes
        the variables' values away while an epoch runs (it writes them back at its end).
        Here an update runs on the variables themselves: they get the state's values back
        first, and the state returned is theirs after the update."""
        if self.train_function is not None and not force:
            return self.train_function

        def groups():
            return (self.trainable_variables, self.non_trainable_variables,
                    self.optimizer.variables, self.metrics_variables)

        def train_function(state, data):
            for variables, values in zip(groups(), state):
                for variable, value in zip(variables, values):
                    variable.assign(value)
            self._count_epoch_update()
            logs = self.train_step_logs()
            return logs, tuple([v.value for v in variables] for variables in groups())

        self.train_function = train_function
        return train_function


def _placed(value, distribution):
    """A batch array on the devices: its rows split over the data-parallel devices when
    they divide evenly, else the whole array on each. Each process puts only its own
    devices' parts (jax.device_put of host data would first compare it across processes)."""
    if isinstance(value, jax.Array):
        return value  # placed already
    if distribution is None:
        return jnp.asarray(value)
    value = np.asarray(value)
    layout = distribution.get_data_layout(value.shape)
    devices = distribution.device_mesh.shape[0]
    if value.shape[0] % devices:
        layout = keras.distribution.TensorLayout([None] * value.ndim, distribution.device_mesh)
    return jax.make_array_from_callback(value.shape, layout.backend_layout,
                                        lambda index: value[index])


def encoding_forward(model):
    """(token ids [n, L] -> vectors, the step lengths are rounded up to, batches computed at
    once) of a SentenceEncoder (embedding/encode.py's Encoder): Keras's predict_on_batch,
    compiled per shape, so lengths are rounded up to 8 and batches go one at a time."""
    def vectors(token_ids):
        return model.predict_on_batch({"token_ids": token_ids,
                                       "segment_ids": np.zeros_like(token_ids)})
    return vectors, 8, 1


def _local_copy(value):
    """This process's copy of a variable replicated over several processes' devices."""
    if value.is_fully_addressable:
        return value
    if not value.is_fully_replicated:
        raise ValueError("a forward pass on one process needs replicated variables "
                         "(keras.distribution.DataParallel's)")
    return value.addressable_data(0)


def _next_loss_scale(scale, finite_in_a_row, finite):
    """TensorFlow step's schedule (step/tensorflow.py): halve on a non-finite micro-batch,
    double after 2000 finite ones in a row."""
    count = jnp.where(finite, finite_in_a_row + 1, 0)
    grow = count >= 2000
    factor = jnp.where(finite, jnp.where(grow, 2.0, 1.0), 0.5)
    return {"loss_scale": jnp.clip(scale * factor, 1.0, 2.0 ** 24),
            "finite_in_a_row": jnp.where(grow, 0, count).astype(finite_in_a_row.dtype)}
