"""Loss balancing: how each task's micro-batch gradient is scaled into the shared update.

The RoFormerV2 write-up's update is ∇ = Σ_k λ_k g_k / ||g_k||: a gradient NORMALISATION
(here 1/||g_k||) times a task WEIGHT λ_k. Both are methods in one table, `METHODS`:

    normalize (per micro-batch, from its loss and backbone gradient norm):
        none, gradient_norm, loss_norm, initial_loss
    weights (per task, updated after each optimizer step from the update's logs):
        fixed, loss_rate, dwa, uncertainty, rlw, gradnorm, pcgrad

An experiment's `balancing:` is a name (`gradient_norm`, `dwa`, ...: NAMES gives its pair)
or a mapping `{normalize: gradient_norm, weights: dwa, temperature: 2, window: 10}` whose
other keys are the two methods' options. `Balancing` is the pair the model uses:

    scale = normalize.scale(loss, norm, state) * weights.scale(loss, norm, state)   # traced
    after_micro_step(task, results)   # eager: e.g. initial_loss keeps its first loss
    before_apply()                    # eager: pcgrad projects the tasks' gradients
    after_update(logs, update)        # eager: adaptive weights change for the next update

Every method's state is Keras variables named for the checkpoint (`variables()`:
`balancing/<method>/<field>/<task>`, saved and restored by name, run_dir.py); updates are
float64 NumPy on their values, so a resumed run computes the very same weights.
`loss_weight` (spec or experiment entry) multiplies the loss before any of this, as it
always has (so under gradient_norm it changes nothing in the shared update).
docs/balancing.md: the table of formulas, papers, LibMTL names, costs and memory.
"""
import importlib
import os
import re

import numpy as np


class _Deferred:
    """A module imported on first use: the experiment schema reads this table before
    `mtl train` imports Keras and its backend (a refused experiment costs no start-up)."""

    def __init__(self, name):
        self.name = name

    def __getattr__(self, name):
        return getattr(importlib.import_module(self.name), name)


ops = _Deferred("keras.ops")  # traced scales: the backend's ops (TensorFlow's or JAX's)


class BalancingError(ValueError):
    """A balancing setting that cannot be used (unknown key, over the memory budget);
    `key`: the `balancing:` key at fault, for the message's line."""

    def __init__(self, message, key=None):
        super().__init__(message)
        self.key = key


class Method:
    """One balancing method: a normalisation (`kind = "normalize"`) or task weights."""

    name = None
    kind = "weights"
    options = {}      # config key -> default
    libmtl = "-"      # LibMTL's name for it
    paper = "-"
    cost = "none"     # per update, beyond the plain accumulation
    memory = "none"   # beyond the accumulators every method has
    promise = ""
    ordered = False   # a micro-step reads what the previous one wrote: one lane
    default_normalize = "none"  # what the plain name `balancing: NAME` pairs it with

    def __init__(self, tasks, seed=0, **options):
        self.tasks, self.seed = list(tasks), int(seed)
        for key, default in self.options.items():
            value = options.get(key, default)
            setattr(self, key, value if value is None else float(value))
        self._variables = {}

    # --- state ------------------------------------------------------------------

    def per_task(self, field, value=0.0):
        """{task: scalar variable} named `balancing/<method>/<field>/<task>`."""
        keras = importlib.import_module("keras")  # on first use, as `ops` above
        made = {}
        for i, task in enumerate(self.tasks):
            made[task] = keras.Variable(float(value), trainable=False, dtype="float32",
                                        name=f"balancing_{self.name}_{field}_{i}")
            self._variables[f"balancing/{self.name}/{field}/{task}"] = made[task]
        return made

    def build(self, model):
        """Create the method's variables (the model's are built; `model` for its sizes)."""

    def variables(self):
        """{checkpoint name: variable}: everything an exact resume needs."""
        return dict(self._variables)

    def state(self, task):
        """The scalar variables the traced step reads for a micro-batch of `task` (the step
        takes their values as its backend does)."""
        return {}

    # --- the update ---------------------------------------------------------------

    def scale(self, loss, norm, finite, state):
        """Traced: (the micro-batch's scale, {extra results for after_micro_step})."""
        return ops.convert_to_tensor(1.0), {}

    def after_micro_step(self, task, results):
        """Eager, after each micro-batch in micro-batch order."""

    def accumulator_slot(self, task):
        """Which backbone accumulators a task's gradient goes to: None = the shared ones."""
        return None

    def check_memory(self, backbone_variables, tasks_per_update):
        """Bytes this method adds in proportion to the backbone (refused over budget)."""
        return 0

    def before_apply(self, model):
        """Eager, before the optimizer applies the accumulators."""

    def after_update(self, logs, update):
        """Eager, after optimizer update number `update` (1-based); logs: the update's
        micro-batches [{task, loss, gradient_norm, finite}]."""

    def weights(self):
        """{task: λ_k} as the next update will use them (metrics.jsonl)."""
        return {}


def task_means(logs, key):
    """{task: mean of `key` over the update's finite micro-batches of that task}."""
    values = {}
    for log in logs:
        if log["finite"]:
            values.setdefault(log["task"], []).append(float(log[key]))
    return {task: float(np.mean(v)) for task, v in values.items()}


# ------------------------------------------------------------------ normalisations


class NoNormalisation(Method):
    """`none`: g_k as it is (LibMTL's EW: the plain sum of the task losses' gradients)."""
    name, kind, libmtl = "none", "normalize", "EW"
    promise = "the plain sum of gradients: a task's loss scale is its emphasis"


class GradientNorm(Method):
    """`gradient_norm`: g_k / ||g_k|| over the whole backbone (the RoFormerV2 write-up's
    per-task normalisation; NOT GradNorm, Chen et al. 2018, which is `gradnorm`). The
    task's head gradient is scaled by the same factor. No LibMTL counterpart."""
    name, kind, libmtl = "gradient_norm", "normalize", "- (not GradNorm)"
    paper = "RoFormerV2 write-up (Su 2022)"
    cost = "one norm per micro-batch"
    promise = "the shared update is invariant to each task's loss scale"

    def scale(self, loss, norm, finite, state):
        return 1.0 / ops.maximum(norm, 1e-12), {}


class LossNorm(Method):
    """`loss_norm`: d/dθ [L_k / stop_gradient(L_k)], i.e. g_k / |L_k|."""
    name, kind = "loss_norm", "normalize"
    promise = "invariant to a task's loss scale (a multiplicative one)"

    def scale(self, loss, norm, finite, state):
        return 1.0 / ops.maximum(ops.abs(loss), 1e-12), {}


class InitialLoss(Method):
    """`initial_loss`: g_k / L_k(first finite micro-batch of task k). Its state is the
    model's `initial_loss/<task>` variables (their names predate this module)."""
    name, kind = "initial_loss", "normalize"
    memory = "one scalar per task"
    promise = "invariant to a task's loss scale; relative progress per task"
    ordered = True

    def build(self, model):
        self.initial = model.initial_losses

    def state(self, task):
        return {"initial_loss": self.initial[task]}

    def scale(self, loss, norm, finite, state):
        initial = state["initial_loss"]
        initial = ops.where(ops.logical_and(ops.equal(initial, 0.0), finite), loss, initial)
        return 1.0 / ops.maximum(ops.abs(initial), 1e-12), {"initial_loss": initial}

    def after_micro_step(self, task, results):
        self.initial[task].assign(results["initial_loss"])


# ------------------------------------------------------------------ task weights


class WeightMethod(Method):
    """Task weights λ_k held in variables `balancing/<name>/weight/<task>` (start: 1),
    read by the traced step; subclasses set them in `after_update`."""

    def build(self, model):
        self.weight = self.per_task("weight", 1.0)

    def state(self, task):
        return {"weight": self.weight[task]}

    def scale(self, loss, norm, finite, state):
        return state["weight"], {}

    def weights(self):
        return {t: float(v.numpy()) for t, v in self.weight.items()}

    def set_weights(self, values):
        for task, value in values.items():
            self.weight[task].assign(np.float32(value))


class FixedWeights(Method):
    """`fixed`: λ_k = 1 (a task's `loss_weight` still multiplies its loss)."""
    name, libmtl = "fixed", "EW"
    promise = "nothing changes during training"


class LossRate(WeightMethod):
    """`loss_rate`, the RoFormerV2 write-up's weights: λ_k ← λ_k · exp(-η · dL_k/dt).

    L_k is the task's loss smoothed over updates (m_k ← β m_k + (1-β) L_k, first value
    L_k), and dL_k/dt is taken on log m_k (its relative change per update), so the
    weights do not depend on a task's loss scale; summed over the run,
    λ_k = (m_k(0) / m_k(t))^η before the weights are rescaled to mean 1 (which keeps the
    step size of `none`/`gradient_norm`). A task absent from an update keeps its m_k.
    Default normalisation: gradient_norm, the write-up's ∇ = Σ_k λ_k g_k/||g_k||.
    No LibMTL counterpart (its closest is DWA)."""
    name, libmtl = "loss_rate", "- (closest: DWA)"
    paper = "RoFormerV2 write-up (Su 2022)"
    options = {"eta": 1.0, "beta": 0.9}
    cost = "O(tasks) per update"
    memory = "2 scalars per task"
    promise = "weights invariant to each task's loss scale; more weight to tasks learning faster"
    default_normalize = "gradient_norm"

    def build(self, model):
        super().build(model)
        self.smoothed = self.per_task("smoothed_loss")

    def after_update(self, logs, update):
        losses = task_means(logs, "loss")
        log_weights = {}
        for task in self.tasks:
            old = float(self.smoothed[task].numpy())
            new = old
            if task in losses and losses[task] > 0:
                new = losses[task] if old <= 0 else self.beta * old + (1 - self.beta) * losses[task]
                self.smoothed[task].assign(np.float32(new))
                new = float(np.float32(new))
            rate = np.log(new) - np.log(old) if old > 0 and new > 0 else 0.0
            log_weights[task] = np.log(float(self.weight[task].numpy())) - self.eta * rate
        self.set_weights(_mean_one(log_weights))


class DynamicWeightAverage(WeightMethod):
    """`dwa` (Liu, Johns & Davison 2019, "End-to-End Multi-Task Learning with Attention";
    LibMTL DWA): λ_k = K · softmax_k(r_k / T), r_k = L̄_k(w-1) / L̄_k(w-2), the ratio of
    the task's mean loss over the last two windows of `window` updates (LibMTL: the
    last two epochs; tasks here do not share epochs). λ = 1 until two windows are done;
    a task with no micro-batch in a window keeps its previous mean. T = 2 as LibMTL."""
    name, libmtl = "dwa", "DWA"
    paper = "Liu, Johns & Davison, CVPR 2019"
    options = {"temperature": 2.0, "window": 10}
    cost = "O(tasks) per update"
    memory = "5 scalars per task"
    promise = "weights invariant to each task's loss scale; more weight to slower tasks"

    def build(self, model):
        super().build(model)
        self.total, self.count = self.per_task("window_loss_sum"), self.per_task("window_count")
        self.last, self.before = self.per_task("last_window_mean"), self.per_task("previous_window_mean")

    def after_update(self, logs, update):
        for log in logs:
            if log["finite"]:
                self.total[log["task"]].assign_add(np.float32(log["loss"]))
                self.count[log["task"]].assign_add(1.0)
        if update % int(self.window):
            return
        for task in self.tasks:
            count = float(self.count[task].numpy())
            mean = float(self.total[task].numpy()) / count if count else float(self.last[task].numpy())
            self.before[task].assign(self.last[task])
            self.last[task].assign(np.float32(mean))
            self.total[task].assign(0.0)
            self.count[task].assign(0.0)
        last = np.array([float(self.last[t].numpy()) for t in self.tasks])
        before = np.array([float(self.before[t].numpy()) for t in self.tasks])
        if (before > 0).all() and (last > 0).all():
            logits = (last / before) / self.temperature
            weights = len(self.tasks) * _softmax(logits)
            self.set_weights(dict(zip(self.tasks, weights)))


class Uncertainty(WeightMethod):
    """`uncertainty` (Kendall, Gal & Cipolla 2018; LibMTL UW): minimise
    Σ_k L_k / (2 exp(s_k)) + s_k / 2 with a learned log-variance s_k per task (start
    -0.5 as LibMTL), so λ_k = 1 / (2 exp(s_k)). s_k takes one SGD step of rate `lr` per
    update on that objective, from the task's mean loss in the update:
    s_k ← s_k - lr · (1 - L_k exp(-s_k)) / 2 (LibMTL trains s with the model's
    optimizer; here the backbone's AdamW is left alone). Fixed point s_k = log L_k:
    λ_k → 1/(2 L_k), i.e. loss_norm reached slowly."""
    name, libmtl = "uncertainty", "UW"
    paper = "Kendall, Gal & Cipolla, CVPR 2018"
    options = {"lr": 0.05, "initial": -0.5}
    cost = "O(tasks) per update"
    memory = "2 scalars per task"
    promise = "at its fixed point, invariant to a task's loss scale (λ_k L_k = 1/2)"

    def build(self, model):
        super().build(model)
        self.log_variance = self.per_task("log_variance", self.initial)
        self.set_weights({t: 0.5 * np.exp(-self.initial) for t in self.tasks})

    def after_update(self, logs, update):
        losses = task_means(logs, "loss")
        for task, loss in losses.items():
            s = float(self.log_variance[task].numpy())
            s -= self.lr * (1.0 - loss * np.exp(-s)) / 2.0
            self.log_variance[task].assign(np.float32(s))
        self.set_weights({t: 0.5 * np.exp(-float(self.log_variance[t].numpy())) for t in self.tasks})


class RandomLossWeighting(WeightMethod):
    """`rlw` (Lin et al. 2021, "Reasonable Effectiveness of Random Weighting"; LibMTL
    RLW): λ = K · softmax(z), z ~ N(0, I), drawn anew for every update from a generator
    seeded by (seed, update) (LibMTL's weights sum to 1; here to K, so their mean is
    EW's 1)."""
    name, libmtl = "rlw", "RLW"
    paper = "Lin et al., arXiv 2021 (TMLR 2022)"
    cost = "O(tasks) per update"
    memory = "1 scalar per task"
    promise = "unbiased in expectation: E[λ_k] = 1; no task favoured"

    def build(self, model):
        super().build(model)
        self.draw(0)

    def draw(self, update):
        z = np.random.default_rng([self.seed, update]).standard_normal(len(self.tasks))
        self.set_weights(dict(zip(self.tasks, len(self.tasks) * _softmax(z))))

    def after_update(self, logs, update):
        self.draw(update)


class GradNorm(WeightMethod):
    """`gradnorm` (Chen et al. 2018, "GradNorm"; LibMTL GradNorm, alpha 1.5):
    G_k = λ_k ||n_k g_k||, r_k = (L_k / L_k(0)) / mean_j (L_j / L_j(0)), and λ descends
    Σ_k |G_k - target_k| with the targets held constant, then Σ λ_k = K.

    n_k g_k is the task's backbone gradient as the update takes it before its weight:
    under `none` the raw gradient (the paper, LibMTL), under `gradient_norm` g_k/||g_k||
    (so G_k = λ_k), under `loss_norm` g_k/|L_k|: the magnitudes balanced are those the
    update sums. The norms are taken on ALL backbone (shared) variables, as LibMTL does
    by default (the paper suggests the last shared layer), mean over the task's
    micro-batches in the update; a task absent from the update keeps its last norm and
    loss. The step on λ_k is the L1 term's sign times `lr` · ||n_k g_k|| / mean ||n g||
    (the paper uses Adam on λ, whose first steps are sign-like; so it does not depend on
    the overall gradient scale) and stops at the target (no overshoot: with norms 100x
    apart a fixed step jumped across it every update). The targets are
    mean_j(G_j) · r_k^α rescaled to sum Σ_j G_j: the renormalisation to Σ λ = K undoes
    their common scale anyway, and without it the clamped steps settle away from
    G_k ∝ r_k^α. With steady norms and losses the weights reach the paper's balance
    λ_k = K (r_k^α / ||n_k g_k||) / Σ_j (r_j^α / ||n_j g_j||) and stay there.
    The λ also scale the task's head gradient (the paper's Σ_k λ_k L_k; LibMTL weights
    only the shared gradient)."""
    name, libmtl = "gradnorm", "GradNorm"
    paper = "Chen et al., ICML 2018"
    options = {"alpha": 1.5, "lr": 0.025}
    cost = "O(tasks) per update (norms come with every micro-step)"
    memory = "4 scalars per task"
    promise = "equal training rates: the gradient magnitudes the update sums pulled toward " \
              "∝ r_k^α"

    def build(self, model):
        super().build(model)
        self.initial_loss, self.last_loss = self.per_task("initial_loss"), self.per_task("last_loss")
        self.last_norm = self.per_task("last_norm")  # ||n_k g_k||, normalised as the update

    def after_update(self, logs, update):
        losses, norms = task_means(logs, "loss"), task_means(logs, "normalized_gradient_norm")
        for task, loss in losses.items():
            if float(self.initial_loss[task].numpy()) <= 0:
                self.initial_loss[task].assign(np.float32(loss))
            self.last_loss[task].assign(np.float32(loss))
            self.last_norm[task].assign(np.float32(norms[task]))
        seen = [t for t in self.tasks if float(self.initial_loss[t].numpy()) > 0
                and float(self.last_norm[t].numpy()) > 0]
        if len(seen) < 2:
            return
        value = lambda variables: np.array([float(variables[t].numpy()) for t in seen])
        weight, norm = value(self.weight), value(self.last_norm)
        ratio = value(self.last_loss) / value(self.initial_loss)
        ratio = ratio / ratio.mean()
        magnitude = weight * norm
        target = magnitude.mean() * ratio ** self.alpha
        target = target * magnitude.sum() / target.sum()
        step = self.lr * norm / norm.mean()
        weight = weight - np.clip(weight - target / norm, -step, step)  # stops at the target
        weight = np.maximum(weight, 1e-3)
        weights = {t: float(self.weight[t].numpy()) for t in self.tasks}
        weights.update(zip(seen, weight))
        total = sum(weights.values())
        self.set_weights({t: len(self.tasks) * w / total for t, w in weights.items()})


class PCGrad(Method):
    """`pcgrad` (Yu et al. 2020, "Gradient Surgery for Multi-Task Learning"; LibMTL
    PCGrad): each task's backbone gradient of the update, g_i, is projected off every
    other task's g_j it conflicts with (g_i·g_j < 0: g_i ← g_i - (g_i·g_j)/||g_j||² g_j,
    j ≠ i in a random order per i, drawn from (seed, update): Algorithm 1), and the
    projected gradients are summed. Heads are not shared: their gradients are summed as
    they come. With two tasks no conflict survives; with three or more a projected g_i
    can conflict again with a g_j it was projected off earlier (the paper's promise is
    for two tasks).

    It needs each task's backbone gradient at once: one backbone-sized accumulator per
    task present in an update, at most min(tasks, tasks_per_update) of them. That memory
    is computed before anything is built and refused in one line when it exceeds
    `max_memory` (bytes, or a string like "512MiB"; default: half the machine's RAM).
    The projection runs on the Gram matrix of the tasks' gradients (one pass over them),
    since each projected g_i is a combination of the g_j."""
    name, libmtl = "pcgrad", "PCGrad"
    paper = "Yu et al., NeurIPS 2020"
    options = {"max_memory": None}
    cost = "a Gram matrix of the update's task gradients (tasks² dot products over the backbone)"
    memory = "min(tasks, tasks_per_update) × backbone size"
    promise = "2 tasks: neither projected gradient conflicts with the other task's, nor the " \
              "sum with either; 3+ tasks: conflicts can remain"

    def __init__(self, tasks, seed=0, max_memory=None):
        super().__init__(tasks, seed)
        self.max_memory = parse_bytes(max_memory)

    def check_memory(self, backbone_variables, tasks_per_update):
        """Bytes of the per-task accumulators; BalancingError (one line) over the budget.
        Called by the trainer as soon as the backbone exists (before any feature is
        built), and again by `build`."""
        slots = min(len(self.tasks), tasks_per_update)
        need = slots * sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize
                           for v in backbone_variables)
        budget = self.max_memory if self.max_memory is not None else _half_the_ram()
        where = "max_memory" if self.max_memory is not None else "half this machine's RAM"
        if need > budget:
            raise BalancingError(
                f"pcgrad needs {_human(need)} for {slots} task gradient accumulators of the "
                f"backbone, over {where} ({_human(budget)}): lower tasks_per_update or the "
                "backbone size, or raise balancing.max_memory")
        return need

    def build(self, model):
        variables = model.backbone_variables
        self.memory_bytes = self.check_memory(variables, model.tasks_per_update)
        if model.strategy is not None:
            raise BalancingError("pcgrad needs distribution: none (its per-task accumulators "
                                 "are not replicated)")
        self.slots = min(len(self.tasks), model.tasks_per_update)
        self.task_accumulators = [
            [model.gradient_buffer(v, f"pcgrad_{s}_{i}") for i, v in enumerate(variables)]
            for s in range(self.slots)]
        self.shared = model.accumulators[:len(variables)]
        self._slot_of = {}
        self._combine_fn = None

    def accumulator_slot(self, task):
        if task not in self._slot_of:
            self._slot_of[task] = len(self._slot_of)
        return self._slot_of[task]

    def slot_accumulators(self, slot):
        return self.task_accumulators[slot]

    def before_apply(self, model):
        order = sorted(self._slot_of.items(), key=lambda item: item[1])  # (task, slot)
        self._slot_of = {}
        if not order:
            return
        slots = [s for _, s in order]
        gram = np.asarray(model.gradient_gram([self.task_accumulators[s] for s in slots]),
                          np.float64)
        update = int(model.optimizer.iterations.numpy()) + 1
        orders = pcgrad_orders(len(slots), np.random.default_rng([self.seed, update]))
        coefficients = pcgrad_coefficients(gram, orders)
        self._combine(slots, coefficients)

    def _combine(self, slots, coefficients):
        """shared += Σ_j c_j g_j (float32, as the accumulators); every slot used is zeroed."""
        for j, slot in enumerate(slots):
            c = np.float32(coefficients[j])
            for shared, g in zip(self.shared, self.task_accumulators[slot]):
                shared.assign_add(g * c)
                g.assign(ops.zeros_like(ops.convert_to_tensor(g)))


def pcgrad_orders(k, rng):
    """Each task's random order of the OTHER tasks (PCGrad's Algorithm 1: T_j in B minus
    T_i): one permutation of all k drawn per task, the task itself left out."""
    return [[int(j) for j in rng.permutation(k) if j != i] for i in range(k)]


def pcgrad_coefficients(gram, orders):
    """Coefficients c with Σ_i PCGrad(g_i) = Σ_j c_j g_j, from the Gram matrix G (G_ij =
    g_i·g_j) and each task's order of the others (pcgrad_orders): each projected g_i is
    held as a row of coefficients over the originals, so its dot product with g_j is
    (row @ G)_j. A task is never projected off its own gradient (LibMTL's loop visits
    j = i too, which changes g_i once it conflicts with its original: 3+ tasks)."""
    k = len(gram)
    rows = np.eye(k)
    for i in range(k):
        for j in orders[i]:
            dot = rows[i] @ gram[:, j]
            if dot < 0 and gram[j, j] > 0:
                rows[i, j] -= dot / gram[j, j]
    return rows.sum(axis=0)


# ------------------------------------------------------------------ the table

METHODS = {cls.name: cls for cls in (
    NoNormalisation, GradientNorm, LossNorm, InitialLoss,
    FixedWeights, LossRate, DynamicWeightAverage, Uncertainty, RandomLossWeighting, GradNorm,
    PCGrad)}
NORMALIZE = tuple(n for n, c in METHODS.items() if c.kind == "normalize")
WEIGHTS = tuple(n for n, c in METHODS.items() if c.kind == "weights")
# `balancing: NAME` -> (normalize, weights). The four old names keep their meaning.
NAMES = {**{n: (n, "fixed") for n in NORMALIZE},
         **{n: (METHODS[n].default_normalize, n) for n in WEIGHTS if n != "fixed"}}
KEYS = ("normalize", "weights")


def resolve(config):
    """(normalize name, weights name, options) from `balancing:`'s value; BalancingError
    (one line, the key named) for anything unknown."""
    if isinstance(config, str):
        if config not in NAMES:
            raise BalancingError(f"balancing must be one of {', '.join(NAMES)} (or "
                                 f"{{normalize: ..., weights: ..., <options>}}), got {config!r}")
        return (*NAMES[config], {})
    if not isinstance(config, dict):
        raise BalancingError(f"balancing must be a name or a mapping, got {config!r}")
    config = dict(config)
    normalize = config.pop("normalize", "gradient_norm")
    weights = config.pop("weights", "fixed")
    if normalize not in NORMALIZE:
        raise BalancingError(f"balancing.normalize must be one of {', '.join(NORMALIZE)}, "
                             f"got {normalize!r}", "normalize")
    if weights not in WEIGHTS:
        raise BalancingError(f"balancing.weights must be one of {', '.join(WEIGHTS)}, "
                             f"got {weights!r}", "weights")
    allowed = {**METHODS[normalize].options, **METHODS[weights].options}
    for key, value in config.items():
        if key not in allowed:
            known = ", ".join(list(KEYS) + list(allowed))
            raise BalancingError(f"unknown balancing key {key!r} for {normalize} x {weights}; "
                                 f"known: {known}", key)
        if key == "max_memory":
            try:
                parse_bytes(value)
            except BalancingError as error:
                raise BalancingError(str(error), key) from None
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not np.isfinite(value) or (value <= 0 and key != "initial"):
            raise BalancingError(f"balancing.{key} must be a number > 0, got {value!r}", key)
    return normalize, weights, config


def markdown_table():
    """The table as docs/balancing.md shows it (tests/test_balancing.py keeps them equal)."""
    rows = ["| `balancing` | kind | paper | LibMTL | options (defaults) | cost | memory | promises |",
            "|---|---|---|---|---|---|---|---|"]
    for name, cls in METHODS.items():
        options = ", ".join(f"{k} {v}" for k, v in cls.options.items()) or "-"
        rows.append(f"| `{name}` | {cls.kind} | {cls.paper} | {cls.libmtl} | {options} | {cls.cost} | "
                    f"{cls.memory} | {cls.promise} |")
    return "\n".join(rows)


def describe(config):
    """`normalize x weights` for the run log."""
    normalize, weights, options = resolve(config)
    text = f"balancing: {normalize} x {weights}"
    return text + (" (" + ", ".join(f"{k}={v}" for k, v in options.items()) + ")" if options else "")


class Balancing:
    """The pair the model uses: scale = normalize × weights; state, hooks and variables
    of both."""

    def __init__(self, config, tasks, seed=0):
        normalize, weights, options = resolve(config)
        pick = lambda name: {k: v for k, v in options.items() if k in METHODS[name].options}
        self.normalize = METHODS[normalize](tasks, seed, **pick(normalize))
        self.weighting = METHODS[weights](tasks, seed, **pick(weights))
        self.methods = (self.normalize, self.weighting)
        self.ordered = any(m.ordered for m in self.methods)
        self.config = config

    def build(self, model):
        for method in self.methods:
            method.build(model)

    def variables(self):
        return {name: v for m in self.methods for name, v in m.variables().items()}

    def state(self, task):
        return {k: v for m in self.methods for k, v in m.state(task).items()}

    def scale(self, loss, norm, finite, state):
        (a, first), (b, second) = (m.scale(loss, norm, finite, state) for m in self.methods)
        # the backbone gradient's norm as the update takes it before the task weight (gradnorm)
        return a * b, {**first, **second, "normalized_gradient_norm": norm * a}

    def after_micro_step(self, task, results):
        for method in self.methods:
            method.after_micro_step(task, results)

    def accumulator_slot(self, task):
        return self.weighting.accumulator_slot(task)

    def check_memory(self, backbone_variables, tasks_per_update):
        return sum(m.check_memory(backbone_variables, tasks_per_update) for m in self.methods)

    def slot_accumulators(self, slot):
        return self.weighting.slot_accumulators(slot)

    def before_apply(self, model):
        self.weighting.before_apply(model)

    def after_update(self, logs, update):
        for method in self.methods:
            method.after_update(logs, update)

    def weights(self):
        return self.weighting.weights()


# ------------------------------------------------------------------ helpers


def _softmax(x):
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max())
    return e / e.sum()


def _mean_one(log_weights):
    """exp(log weights) rescaled to mean 1 (shifted in log space first: no overflow)."""
    names = list(log_weights)
    values = np.array([log_weights[t] for t in names], np.float64)
    weights = np.exp(values - values.max())
    return dict(zip(names, weights * len(names) / weights.sum()))


_UNITS = {"": 1, "b": 1, "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "kib": 2 ** 10,
          "mib": 2 ** 20, "gib": 2 ** 30}


def parse_bytes(value):
    """None, a number of bytes or a string like "512MiB" / "2 GB" -> bytes (int)."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return int(value)
    match = re.fullmatch(r"\s*([0-9.]+)\s*([a-zA-Z]*)\s*", str(value))
    if not match or match.group(2).lower() not in _UNITS:
        raise BalancingError(f"balancing.max_memory must be bytes or a size like 512MiB or "
                             f"2GB, got {value!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def _half_the_ram():
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError, AttributeError):
        return 2 ** 31


def _human(n):
    return f"{n / 2 ** 20:,.1f} MiB"
