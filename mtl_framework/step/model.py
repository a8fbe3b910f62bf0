"""MultiTaskModel: the shared backbone, one head per task, and the mixed update.

One optimizer update = `tasks_per_update` single-task micro-batches. Each
micro-batch's gradient is scaled by its balancing factor, normalisation × task weight
(balancing.py; gradient_norm: 1 / ||g over the backbone||, the head's gradient by the
same factor), the scaled gradients are summed in accumulators, and the optimizer
applies them once; the balancing's hooks run after each micro-step, before the apply
(pcgrad) and after it (adaptive weights). Consequence: multiplying one task's loss by a
constant does not change the shared update under gradient_norm; emphasis comes from
sampling rates.

Backends: this module is the update written once; its backend half (the traced
micro-step, accumulation, the optimizer's apply, what fit calls) is mtl_framework/step/
(TensorFlow's, described below, or JAX's: step/jax.py, docs/backends.md).

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

Packed (`packed`: True by default, the experiment's `backbone.packed`): where the backend
packs (TensorFlow; `_packs_tokens`), a training micro-batch of any family whose positions
are at most PACK_BELOW real tokens runs the backbone packed: embeddings, dense layers,
norms and dropout on its T real tokens alone, attention on the padded [B, L] layout
(layers.Packing); the packed and padded steps are traced apart (_micro_step_key). False:
nothing packs, the padded step. TEXTS_ALONE: only the contrastive passes pack, the step
of the checkpoints written before the option (assemble.resumed_packing: such a run
resumes bit for bit). The heads read the padded [B, L, H] as before, zeros at padding;
those that read all L positions (MLM's logits, the pointers' scores) keep padding out of
their losses (docs/backbone.md "Packed"). Dropout draws its masks over [T, H] instead
of [B, L, H]: other masks than the padded call's, of the same rate. Evaluation and
prediction (training=False) run padded, as before.

Read rows (with `packed` True): a training micro-batch whose head reads a few positions of the
backbone's output (TaskHead.read_positions: [CLS] for classification, matching,
regression, each choice's [CLS], MLM's masked tokens, the coreference spans' ends) gets
them as its batch's `read_positions` (_with_read_positions), and the backbone's last
layer computes its queries, attention output, norms and feed-forward at those rows alone
(keys and values at every token): a [CLS] head's last layer costs B rows instead of
B x L, MLM's vocabulary logits its masked tokens instead of every position. The same
function as the padded call (float64 gradients within 1e-9, tests/family_harness.py
run_read_rows_parity); the products round otherwise in float32 (other row counts, other
kernels), and the last layer's dropout draws over [B, R, H]. MLM's count of masked
tokens varies by batch: JAX pads it to eighths of the row (_read_slots), so it compiles a
few shapes, not one per count.

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

import keras
import numpy as np
from keras import ops

from mtl_framework.families import family
from mtl_framework.families.heads import backbone_inputs, use_backbone_rotary
from mtl_framework.mixing.balancing import Balancing
from mtl_framework.step import Step, WeightsScope, structure
from mtl_framework.step.variable_names import layer_variable_names, optimizer_variable_names

# MultiTaskModel's `packed`: every family, none, or the contrastive passes alone (see Packed).
TEXTS_ALONE = "texts_alone"
PACKED = (True, False, TEXTS_ALONE)
# A micro-batch packs where at most this share of its positions are real tokens: the
# backbone alone, BERT tiny and small, float32 and bfloat16, CPU, gained 1.19-1.29x at 71%,
# 0.97-1.11x at 83%, 0.93-1.04x at 94%: near 90% Packing's gathers cost what the padding
# does (bench/results/packed_step.md).
PACK_BELOW = 0.9


class NonFiniteLossError(RuntimeError):
    """Too many non-finite micro-batches in a row, or a run that ends in them; `task` names
    whose, `update` the update it stopped at where known (None: the one running)."""

    def __init__(self, message, task=None, update=None):
        super().__init__(message)
        self.task, self.update = task, update


class MultiTaskModel(Step, keras.Model):
    def __init__(self, backbone, heads, tasks_per_update=8, balancing="gradient_norm",
                 loss_weights=None, max_consecutive_bad=20, loss_scale=None,
                 parallel_micro_batches=None, seed=0, packed=True, **kwargs):
        super().__init__(**kwargs)
        if tasks_per_update < 1:
            raise ValueError(f"tasks_per_update must be >= 1, got {tasks_per_update}")
        self.backbone = backbone
        self.heads = dict(heads)
        use_backbone_rotary(self.heads.values(), backbone)  # pointers rotate as the backbone
        self._make_text_encoders()
        self.task_names = list(self.heads)
        self.tasks_per_update = int(tasks_per_update)
        self.balancing = Balancing(balancing, self.task_names, seed)  # balancing.py
        self.loss_weights = {t: float((loss_weights or {}).get(t, 1.0)) for t in self.task_names}
        self.max_consecutive_bad = max_consecutive_bad
        if loss_scale not in (None, "dynamic"):
            raise ValueError(f"loss_scale must be None or 'dynamic', got {loss_scale!r}")
        self.dynamic_loss_scale = loss_scale == "dynamic"
        self.parallel_micro_batches = parallel_micro_batches
        if packed not in PACKED:
            raise ValueError(f"packed must be one of {PACKED}, got {packed!r}")
        self.packed = packed  # see Packed in the module doc; read when a step is traced
        # Made in a strategy's scope: micro-steps then run per replica (see module doc).
        self.strategy = self._current_strategy()
        self.mixture = None
        self.skipped = {t: 0 for t in self.task_names}
        self._consecutive_bad = {t: 0 for t in self.task_names}
        self._micro_steps = {}
        self._forward_steps = {}
        self._traces = {}  # JAX: traces per jitted function (TensorFlow's functions count their own)
        self._apply_update_fn = None
        self._accumulate_fns = {}
        self._reset_fn = None
        self._threads = None
        self.last_micro_logs = []
        # Updates the current Keras epoch may still run (None: steps_per_epoch decides); a
        # run's epochs end at its evaluation steps (loop.run.Run, callbacks.EvaluationEpochs).
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
        self.accumulators = [self._accumulator(v, f"accumulated_{i}")
                             for i, v in enumerate(self.all_variables)]
        index = {id(v): i for i, v in enumerate(self.all_variables)}
        self._head_slots = {t: [index[id(v)] for v in self.head_variables[t]] for t in self.task_names}
        # named initial_loss/<task> under every balancing: old checkpoints hold them
        self.initial_losses = {
            t: self._state_variable(0.0, f"initial_loss_{i}") for i, t in enumerate(self.task_names)}
        if self.dynamic_loss_scale:
            self.loss_scales = {t: self._state_variable(2.0 ** 15, f"loss_scale_{i}")
                                for i, t in enumerate(self.task_names)}
            self._finite_in_a_row = {t: self._state_variable(0, f"finite_in_a_row_{i}", "int32")
                                     for i, t in enumerate(self.task_names)}
        # Dropout seeds come from this count (see _dropout_seeds): a micro-step's masks do
        # not depend on which micro-steps ran before it, or at the same time.
        self.micro_batches_seen = self._state_variable(0, "micro_batches_seen", "int64")
        layers = list(self.backbone._flatten_layers()) + [
            layer for head in self.heads.values() for layer in head._flatten_layers()]
        self._seed_states = list({id(g.state): g.state for layer in layers
                                  for g in layer._seed_generators}.values())
        # a model that is not compiled has no optimizer to build
        if getattr(self, "optimizer", None) is not None and not self.optimizer.built:
            self.optimizer.build(self.all_variables)
        self.balancing.build(self)  # after the accumulators and initial losses it may use
        self._group_trace_steps()
        self.lanes = self._lanes()
        self.built = True

    def _make_text_encoders(self):
        """Each `texts_alone` head's text encoder (TaskHead.text_encoder: the contrastive
        head's SentenceEncoder of this backbone), by the head's name: what _text_vectors
        calls. They own no variables (the backbone's are counted once, as backbone)."""
        alone = [head for head in self.heads.values() if head.texts_alone]
        names = [head.name for head in alone]
        if len(set(names)) < len(names):
            raise ValueError(f"texts_alone heads share a name ({sorted(names)}): name each "
                             "head after its task")
        self.text_encoders = {head.name: head.text_encoder(self.backbone) for head in alone}

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

    def _outputs(self, head, batch, training, head_values=None, seeds=None, backbone_values=None,
                 packed=False):
        """The head on the backbone's output; with `head_values`, `head` computes with
        those weights in place of its own (as Keras's stateless_call); with `seeds`
        ([(seed state variable, value)]), dropout draws from those values and the seed
        states' own updates stay in the scope; with `backbone_values` ([(variable,
        value)]: JAX's step differentiates them), the backbone reads those; `packed`: the
        backbone packed (a training micro-step of a batch `_packs_batch` picks)."""
        seeds = list(seeds or [])
        seeds = seeds + list(backbone_values or [])
        if head.texts_alone:
            return self._side_vectors(head, batch, training, seeds)
        with WeightsScope(seeds) if seeds else contextlib.nullcontext():
            hidden = self.backbone(backbone_inputs(batch), training=training, packed=packed)
            if family(head.family).choice_axis:  # choices folded into the batch axis
                hidden = ops.reshape(hidden, (*ops.shape(batch["token_ids"])[:-1], -1,
                                              hidden.shape[-1]))
            if head_values is None:
                return head(hidden, batch, training=training)
            # the innermost scope is the one read: it holds the seeds (and backbone) too
            with WeightsScope(list(zip(head.trainable_variables, head_values)) + seeds):
                return head.call(hidden, batch, training=training)

    def _text_vectors(self, head, rows, seeds, backbone_values=None, training=True):
        """A `texts_alone` head's outputs for texts, [N, L] rows -> [N, H] float32, the rows
        cut to their longest text and the backbone's token-wise work on their real tokens
        alone where the backend allows (_trimmed, _packs_tokens); the cached-gradient
        contrastive step runs a chunk of texts at a time through this."""
        rows = self._trimmed(rows)
        seeds = list(seeds) + list(backbone_values or [])
        with WeightsScope(seeds) if seeds else contextlib.nullcontext():
            return self.text_encoders[head.name](
                rows, training=training, packed=bool(self.packed) and self._packs_tokens())

    def _side_vectors(self, head, batch, training, seeds):
        """[B, K, H] of a `texts_alone` head's [B, K, L] batch: the queries (text 0 of each
        row) and the passages (the others) through the backbone apart, each side padded
        only to its own longest text where the backend allows: a query of 15 tokens is
        not run at its passage's 300 (sentence-transformers tokenizes each column apart)."""
        ids = batch["token_ids"]
        rows, texts, length = ops.shape(ids)

        def side(part):
            return {k: ops.reshape(batch[k][:, part], (-1, length)) for k in ("token_ids", "segment_ids")}

        # the seeds' scope around both: the second pass draws the masks after the first's
        with WeightsScope(seeds) if seeds else contextlib.nullcontext():
            queries = self._text_vectors(head, side(slice(0, 1)), [], training=training)
            passages = self._text_vectors(head, side(slice(1, None)), [], training=training)
        return ops.concatenate([ops.reshape(queries, (rows, 1, -1)),
                                ops.reshape(passages, (rows, texts - 1, -1))], axis=1)

    def _loss(self, head, batch, training, head_values=None, seeds=None, backbone_values=None,
              packed=False):
        return self._loss_and_signs(head, batch, training, head_values, seeds, backbone_values,
                                    packed)[0]

    def _loss_and_signs(self, head, batch, training, head_values=None, seeds=None,
                        backbone_values=None, packed=False):
        """(the loss, {name: scalar} of the head's `signs`: TaskHead.compute_task_loss_and_signs),
        what the steps differentiate and log."""
        outputs = self._outputs(head, batch, training, head_values, seeds, backbone_values, packed)
        # mixed precision: heads compute in 16 bits, losses always in float32
        outputs = keras.tree.map_structure(
            lambda t: ops.cast(t, "float32") if keras.backend.is_float_dtype(t.dtype) else t, outputs)
        return head.compute_task_loss_and_signs(outputs, batch)

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
        self._loss_weight_tensors = {t: self._constant(w) for t, w in self.loss_weights.items()}

    def _lanes(self):
        """How many micro-steps run at once. Default: 2 on a CPU with 2+ cores, where 8
        small forward/backward passes use the cores less fully than one large pass
        (bench/mtl_overhead.py); 1 where a micro-step reads state that an earlier one of
        the same update writes (initial_loss, dynamic loss scale) or runs per replica."""
        ordered = self.strategy is not None or self.balancing.ordered or self.dynamic_loss_scale
        if self.parallel_micro_batches is None:
            return 1 if ordered or self._on_gpu() else self._default_lanes()
        lanes = int(self.parallel_micro_batches)
        if lanes < 1:
            raise ValueError(f"parallel_micro_batches must be >= 1, got {lanes}")
        self._check_lanes(lanes)
        if lanes > 1 and ordered:
            raise ValueError("parallel_micro_batches > 1 needs no tf.distribute strategy, no dynamic "
                             "loss scale and a balancing other than initial_loss (those micro-steps "
                             "read what the previous one wrote); set it to 1")
        return lanes

    def micro_step(self, task, batch):
        """One micro-batch of `task` (a dict of tensors): its scaled gradient is added to
        the accumulators; returns {loss, gradient_norm, normalized_gradient_norm, finite} and
        the head's signs (TaskHead.signs) as tensors."""
        read = self._with_read_positions(task, batch)
        batch = batch if read is batch else self._to_tensors(read)
        return self._finish(task, self._launch(task, batch, self._take_counts(1)[0]))

    def _step_key(self, task, batch):
        return self._task_group[task], structure(batch)

    def _micro_step_key(self, task, batch):
        """_step_key and whether the micro-step packs (`_packs_batch`): one trace each."""
        return (*self._step_key(task, batch), self._packs_batch(batch))

    def _packs_batch(self, batch):
        """Whether a training micro-batch runs the backbone packed, and how (the backbone's
        `packed`: the backend's _packed_rows): where `packed` is True and at most
        PACK_BELOW of its positions are real tokens (a contrastive batch's passes decide
        for themselves: _text_vectors)."""
        if self.packed is not True:
            return False
        token_ids = np.asarray(batch["token_ids"])
        real = int(np.count_nonzero(token_ids))
        return real <= PACK_BELOW * token_ids.size and self._packed_rows(real, token_ids.size)

    def _with_read_positions(self, task, batch):
        """A training micro-batch with the positions its head reads (`read_positions`,
        TaskHead.read_positions) where `packed` is True: the step computes the backbone's
        last layer at those rows alone. A [CLS] head's last layer then runs B rows, not
        B x L; MLM's its masked tokens, their count padded with position 0 to the backend's
        _read_slots (the head's loss ignores a slot at [CLS])."""
        head = self.heads[task]
        if self.packed is not True or head.texts_alone:
            return batch
        positions = head.read_positions({k: np.asarray(v) for k, v in batch.items()})
        if positions is None:
            return batch
        if head.read_count_varies:
            count, length = positions.shape[-1], np.shape(batch["token_ids"])[-1]
            padding = [(0, 0)] * (positions.ndim - 1) + [(0, self._read_slots(count, length) - count)]
            positions = np.pad(positions, padding)
        return {**batch, "read_positions": positions}

    def _head_values(self, template, own_values, backbone_values=None):
        """Values for all of `template`'s trainable variables: `own_values` for its own,
        for a tied one the backbone's current value (or its value in `backbone_values`,
        [(variable, value)])."""
        backbone = {id(v): v for v in self.backbone_variables}
        given = {id(v): value for v, value in backbone_values or []}
        own = iter(own_values)
        return [(given[id(v)] if id(v) in given else backbone[id(v)].value)
                if id(v) in backbone else next(own) for v in template.trainable_variables]

    def close(self):
        """Stops the threads that run micro-steps side by side (lanes > 1); a later
        run_update starts them again. loop.run.Run.close calls it."""
        if self._threads is not None:
            self._threads.shutdown()
            self._threads = None

    def run_update(self, micro_batches):
        """One optimizer update from [(task, batch), ...]; returns per-micro-batch logs.
        With lanes > 1, up to that many traced micro-steps compute at once in threads; their
        gradients are accumulated in micro-batch order, so the update is the same."""
        tokens = [int(np.count_nonzero(batch["token_ids"])) for _, batch in micro_batches]
        micro_batches = [(task, self._to_tensors(self._with_read_positions(task, batch)))
                         for task, batch in micro_batches]
        counts = self._take_counts(len(micro_batches))
        logs, pending, unchecked = [], [], []
        if self.lanes > 1 and self._threads is None:
            self._threads = concurrent.futures.ThreadPoolExecutor(self.lanes, "micro_step")

        def finish_oldest():
            task, future = pending.pop(0)
            logs.append(self._check(task, self._finish(task, future.result())))
        try:
            for (task, batch), count in zip(micro_batches, counts):
                key = self._micro_step_key(task, batch)
                if self.lanes > 1 and key in self._micro_steps:
                    if len(pending) == self.lanes:
                        finish_oldest()
                    pending.append((task, self._threads.submit(self._launch, task, batch, count)))
                else:  # one at a time; a first call traces, in this thread
                    while pending:
                        finish_oldest()
                    result = self._finish(task, self._launch(task, batch, count))
                    if self.checks_after_update:
                        unchecked.append((task, result))
                    else:
                        logs.append(self._check(task, result))
            while pending:
                finish_oldest()
        finally:
            concurrent.futures.wait([future for _, future in pending])
        logs.extend(self._check(task, result) for task, result in unchecked)
        if any(log["finite"] for log in logs):
            self.apply_update()
            self.balancing.after_update(logs, int(self.optimizer.iterations.numpy()))
        else:  # nothing finite to apply: drop the update rather than step on zeros
            self.balancing.before_apply(self)  # as apply_update would have
            self._drop_update()
        for log, count in zip(logs, tokens):
            log["tokens"] = count  # real (non-padding) tokens: what the update computed on
        self.last_micro_logs = logs
        return logs

    def _check(self, task, result):
        """A micro-batch's log; counts a non-finite one, stops after too many in a row."""
        result = {k: np.asarray(v).item() for k, v in result.items()}
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

    def _count_epoch_update(self):
        """Before an update under fit: the epoch ends here when its updates are done."""
        if self.epoch_updates_left is not None:
            if self.epoch_updates_left <= 0:
                raise StopIteration  # fit ends this epoch early, as when data runs out
            self.epoch_updates_left -= 1

    def train_step_logs(self):
        """One update from the mixture (what fit's train function runs; the fit dataset only
        counts updates; make_train_function is the backend's): Keras's logs of it."""
        if self.mixture is None:
            raise RuntimeError("MultiTaskModel.mixture is not set: give it a task mixture "
                               "(next() -> (task, batch)) before fit")
        logs = self.run_update([self.mixture.next() for _ in range(self.tasks_per_update)])
        finite = [log["loss"] for log in logs if log["finite"]]
        return {"loss": float(np.mean(finite)) if finite else float("nan"),
                "tasks": float(len({log["task"] for log in logs}))}


