"""The task mixture: which task each micro-batch comes from, and its batches.

Reads top to bottom as one training run uses it:

    streams, sizes = task_streams(features, mlm_features, 32, 0, MLM_TASK)  # sizes: examples
    rates = rates_from_config(sizes, "temperature")             # or task_rates(...)
    sampler = TaskSampler([rates[t] for t in streams], seed=42)
    mixture = Mixture(streams, sampler)
    task, batch = mixture.next()                                # batch: docs/batches.md
    state = mixture.state()          # JSON-able, in every checkpoint's trainer.json
    mixture.restore(state)           # the very same tasks and batches again, bit for bit

Nothing here imports TensorFlow; features come from cache.cached_features.
"""
import math

import numpy as np

METHODS = ("proportional", "temperature", "uniform", "fixed")
OPTIONS = ("temperature", "cap")  # what `sampling: {method, ...}` may set beside the method
# `sampling: {method: anneal, from: proportional, to: uniform, over: N}`: the rates move
# linearly from one method's to the other's over the first N updates (jiant's annealed
# sampling, T5's temperature schedule), then stay; temperature/cap apply to both ends.
ANNEAL = "anneal"
ANNEAL_KEYS = ("from", "to", "over")


# ---------------------------------------------------------------- rates


def example_count(features):
    """A task's size for the sampling rates: its examples (questions, documents, texts
    for mlm) that made it into the features, not its rows (mrc windows, mlm rows)."""
    report = features.report
    return max(0, report.examples - sum(report.dropped.values()))


def task_rates(sizes, method="proportional", temperature=1.0, cap=None, rates=None):
    """Normalised sampling rates {task: rate} in the order of `sizes`.

    sizes: {task: number of training examples} (questions, documents: not windows).
    rates: {task: rate} of the tasks whose rate was given explicitly (spec or
      experiment entry). Under `fixed` every task needs one and they are the
      mixture's weights, normalised. Under every other method a given rate PINS
      that task's share: the pinned tasks get exactly their rates, the others
      share the rest (1 - sum of pins) by the method:
    proportional: n_i / sum n (with `cap`: min(n_i, cap), T5's
      examples-proportional mixing).
    temperature: min(n_i, cap) ** (1 / T), normalised (T5; T = 1 is
      proportional, T -> inf uniform).
    uniform: equal shares.
    """
    names = list(sizes)
    if not names:
        raise ValueError("no tasks to sample from: the experiment lists no tasks")
    if method not in METHODS:
        raise ValueError(f"unknown sampling method {method!r}; "
                         f"expected one of: {', '.join(METHODS)}")
    rates = {t: r for t, r in (rates or {}).items() if r is not None and t in sizes}
    for t, r in rates.items():
        if not isinstance(r, (int, float)) or not np.isfinite(r) or r < 0:
            raise ValueError(f"task {t!r}: rate {r!r} is not a number >= 0")
    if method == "fixed":
        missing = [t for t in names if t not in rates]
        if missing:
            raise ValueError(
                f"sampling 'fixed' needs a rate for every task; missing for: "
                f"{', '.join(missing)} (add `rate:` to the task spec or the "
                "experiment's task entry)")
        return _normalised({t: float(rates[t]) for t in names}, method)
    pinned = sum(rates.values())
    if pinned > 1 + 1e-9:
        raise ValueError(f"pinned rates sum to {pinned:g} > 1: "
                         + ", ".join(f"{t}: {r:g}" for t, r in rates.items())
                         + "; lower them so they leave a share for the other tasks")
    free = [t for t in names if t not in rates]
    if not free:  # every task pinned: the pins are the mixture
        return _normalised(dict(rates), "pinned")
    if pinned >= 1 - 1e-9:
        raise ValueError(f"pinned rates sum to 1 ({', '.join(rates)}), leaving nothing for "
                         f"{', '.join(free)}: lower the pins or drop those tasks")
    rest = _normalised(_method_weights({t: sizes[t] for t in free}, method, temperature, cap),
                       method)
    return {t: float(rates[t]) if t in rates else (1.0 - pinned) * rest[t] for t in names}


def _method_weights(sizes, method, temperature, cap):
    if method == "uniform":
        return {t: 1.0 for t in sizes}
    weights = {t: float(n) for t, n in sizes.items()}
    if cap is not None:
        if cap <= 0:
            raise ValueError(f"sampling cap must be > 0, got {cap}")
        weights = {t: min(w, float(cap)) for t, w in weights.items()}
    if method == "temperature":
        if temperature <= 0:
            raise ValueError(f"sampling temperature must be > 0, got {temperature}")
        weights = _tempered(weights, temperature)
    return weights


# ln of the largest float64 (about 709.78), less a margin so that a sum of weights stays finite
LARGEST_EXPONENT = 700.0


def _tempered(weights, temperature):
    """{t: w ** (1 / T)}, or where that would overflow a float (a small T: 0.01 makes a
    size of 1,000 a 1e300), the same up to a common factor, computed in log space:
    exp(ln(w / max w) / T). Rates are normalised, so both give the same mixture; the
    first form is kept where it fits so that existing runs keep their rates bit for bit."""
    largest = max(weights.values())
    if largest <= 0 or math.log(largest) / temperature < LARGEST_EXPONENT:
        return {t: w ** (1.0 / temperature) for t, w in weights.items()}
    # ln(w / largest) <= 0: the exponent never overflows, even for a T near 0
    return {t: math.exp(math.log(w / largest) / temperature) if w > 0 else 0.0
            for t, w in weights.items()}


def _normalised(weights, method):
    for t, w in weights.items():
        if not np.isfinite(w) or w < 0:
            raise ValueError(f"task {t!r}: sampling weight {w} is not a number >= 0")
    total = sum(weights.values())
    if total <= 0:
        raise ValueError(f"all sampling weights are 0 ({method}): no task could "
                         "ever be picked; check the task sizes or rates")
    return {t: w / total for t, w in weights.items()}


def rates_from_config(sizes, sampling, fixed_rates=None):
    """task_rates from an experiment's `sampling` value: a method name or a
    mapping {method, temperature, cap}; fixed_rates: the explicitly given rates
    (spec or experiment entry), pinned under every method."""
    if isinstance(sampling, str):
        sampling = {"method": sampling}
    sampling = dict(sampling or {"method": "proportional"})
    method = sampling.pop("method", "proportional")
    unknown = set(sampling) - set(OPTIONS)
    if unknown:
        raise ValueError(f"unknown sampling option(s) {sorted(unknown)}; "
                         f"allowed: method, {', '.join(OPTIONS)}")
    return task_rates(sizes, method, rates=fixed_rates, **sampling)


def schedule_from_config(sizes, sampling, fixed_rates=None):
    """(start rates, end rates, over): the rates of update 0 and of update `over` on;
    equal, with over 0, for every method but anneal."""
    if isinstance(sampling, dict) and sampling.get("method") == ANNEAL:
        sampling = dict(sampling)
        ends = {key: sampling.pop(key, default) for key, default in
                (("from", "proportional"), ("to", "uniform"))}
        over = int(sampling.pop("over", 1))
        sampling.pop("method")
        start, end = (rates_from_config(sizes, {**sampling, "method": ends[k]}, fixed_rates)
                      for k in ("from", "to"))
        return start, end, over
    rates = rates_from_config(sizes, sampling, fixed_rates)
    return rates, rates, 0


def annealed(start, end, fraction):
    """{task: rate} a `fraction` (0..1) of the way from `start` to `end`."""
    fraction = min(max(float(fraction), 0.0), 1.0)
    return {t: (1 - fraction) * start[t] + fraction * end[t] for t in start}


def format_rates(rates, sizes=None, method=None, pinned=(), counted=None, end=None, over=0):
    """The effective mixture as a text table for the run log; pinned tasks are
    marked, and `counted` says what the size column counts. `end`: the rates an
    annealed mixture reaches at update `over` (a second column)."""
    names = list(rates)
    width = max(len("task"), *(len(str(t)) for t in names))
    lines = [f"sampling: {method}" if method else "sampling"]
    if counted:
        lines.append(f"sizes count {counted}")
    if pinned:
        lines.append("* = rate pinned by the spec or the experiment; the other tasks share the rest")
    header = f"{'task':<{width}}  {'size':>10}  {'rate':>8}"
    if end is not None and over:
        header += f"  {f'at update {over}':>16}"
        lines.append(f"rates move linearly from the first column to the second over {over} updates")
    lines.append(header)
    for t in names:
        n = "" if sizes is None or t not in sizes else f"{sizes[t]:,}"
        mark = " *" if t in pinned else ""
        line = f"{str(t):<{width}}  {n:>10}  {100 * rates[t]:7.3f}%"
        if end is not None and over:
            line += f"  {100 * end[t]:15.3f}%"
        lines.append(line + mark)
    return "\n".join(lines)


# ---------------------------------------------------------------- sampler


class TaskSampler:
    """Task indices drawn from the rates, reproducible from the seed.

    Draw k comes from block k // block_size, whose uniforms are generated by
    a NumPy generator seeded with (seed, block): the state is just the step
    counter, so a resumed run continues the very same sequence. Annealed
    (`end` rates, `over` draws): draw k uses the rates k / over of the way from
    `rates` to `end` (then `end`), a function of k alone, so resuming is exact too.
    """

    block_size = 1024

    def __init__(self, rates, seed=0, end=None, over=0):
        if isinstance(rates, dict):
            self.names = list(rates)
            rates, end = list(rates.values()), None if end is None else [end[t] for t in self.names]
        else:
            self.names = list(range(len(rates)))
        self.rates = _checked(rates)
        self.end = self.rates if end is None else _checked(end)
        self.over = int(over) if end is not None else 0
        self.cdf = _cdf(self.rates)
        self.seed = int(seed)
        self.step = 0
        self._block = (None, None)

    def rates_at(self, step):
        """The rates draw number `step` uses."""
        if not self.over:
            return self.rates
        fraction = min(step / self.over, 1.0)
        return (1 - fraction) * self.rates + fraction * self.end

    def _uniforms(self, block):
        if self._block[0] != block:
            rng = np.random.default_rng([self.seed, block])
            self._block = (block, rng.random(self.block_size))
        return self._block[1]

    def sample(self, n):
        """The next n task indices (int array)."""
        out = np.empty(n, dtype=np.int64)
        for i in range(n):
            block, offset = divmod(self.step + i, self.block_size)
            u = self._uniforms(block)[offset]
            cdf = _cdf(self.rates_at(self.step + i)) if self.over else self.cdf
            out[i] = np.searchsorted(cdf, u, side="right")
        self.step += n
        return out

    def __iter__(self):
        return self

    def __next__(self):
        return int(self.sample(1)[0])

    def get_state(self):
        return {"seed": self.seed, "step": self.step}

    def set_state(self, state):
        if int(state["seed"]) != self.seed:
            raise ValueError(
                f"sampler state was saved with seed {state['seed']}, this run "
                f"uses seed {self.seed}: resume with the run's own experiment")
        self.step = int(state["step"])
        return self


def _checked(rates):
    rates = np.asarray(rates, dtype=np.float64)
    if rates.ndim != 1 or not len(rates) or (rates < 0).any() or rates.sum() <= 0:
        raise ValueError(f"rates must be >= 0 with a positive sum, got {rates.tolist()}")
    return rates / rates.sum()


def _cdf(rates):
    cdf = np.cumsum(rates)
    cdf[-1] = 1.0  # uniforms are < 1: the last task with a rate is reachable
    return cdf


# ---------------------------------------------------------------- streams


class TaskStream:
    """Endless batches of one task's features, padded to each batch's longest row.

    Length buckets: each epoch shuffles the rows (seeded by (seed, epoch)),
    cuts the order into buffers of `batch_size * bucket_batches` rows, sorts
    each buffer by length and slices it into batches, then shuffles the batch
    order, so a batch holds rows of similar length and padding stays small.
    The whole plan is a function of (seed, epoch); the position is
    (epoch, index of the next batch), which is all `state()` needs. mlm masks
    come from an rng seeded by (seed, epoch, index): a restored stream repeats
    them exactly.
    """

    def __init__(self, features, batch_size, seed=0, bucket_batches=32, shuffle=True,
                 drop_remainder=False, pad_to=None):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if len(features) == 0:
            raise ValueError(f"task {features.meta.get('task')!r} has no feature rows to batch "
                             f"({features.report.summary()})")
        if drop_remainder and len(features) < batch_size:
            raise ValueError(f"task {features.meta.get('task')!r} has {len(features)} rows, "
                             f"fewer than one batch of {batch_size} with drop_remainder")
        self.features, self.batch_size, self.seed = features, batch_size, seed
        self.bucket_batches, self.shuffle = bucket_batches, shuffle
        self.drop_remainder, self.pad_to = drop_remainder, pad_to
        self.epoch, self.index = 0, 0
        self._plan = (None, None)

    def plan(self, epoch):
        """The epoch's batches: a list of row-index arrays."""
        if self._plan[0] == epoch:
            return self._plan[1]
        rng = np.random.default_rng([self.seed, epoch])
        n = len(self.features)
        order = rng.permutation(n) if self.shuffle else np.arange(n)
        lengths = self.features.lengths()
        buffer = self.batch_size * max(1, self.bucket_batches)
        batches = []
        for start in range(0, n, buffer):
            chunk = order[start:start + buffer]
            chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
            batches.extend(chunk[i:i + self.batch_size] for i in range(0, len(chunk), self.batch_size))
        if self.drop_remainder:
            batches = [b for b in batches if len(b) == self.batch_size]
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        self._plan = (epoch, batches)
        return batches

    def batches_per_epoch(self):
        return len(self.plan(self.epoch))

    def next_batch(self):
        batches = self.plan(self.epoch)
        if self.index >= len(batches):
            self.epoch, self.index = self.epoch + 1, 0
            batches = self.plan(self.epoch)
        rows = batches[self.index]
        rng = np.random.default_rng([self.seed, self.epoch, self.index, 1])
        self.index += 1
        return self.features.batch(rows, rng, self.pad_to)

    def __iter__(self):
        while True:
            yield self.next_batch()

    def state(self):
        state = {"epoch": self.epoch, "index": self.index, "seed": self.seed,
                 "batch_size": self.batch_size, "rows": len(self.features)}
        data = data_digest(self.features)
        return {**state, "data": data} if data else state

    def restore(self, state):
        """Continue from `state()`; refuses a state from other data or settings."""
        task = self.features.meta.get("task")
        for key, mine in (("seed", self.seed), ("batch_size", self.batch_size),
                          ("rows", len(self.features))):
            if key in state and state[key] != mine:
                raise ValueError(f"cannot resume task {task!r}: the saved "
                                 f"stream had {key}={state[key]}, this one {mine} (same data, "
                                 "seed and batch_size are needed to repeat the order)")
        data = data_digest(self.features)
        if state.get("data") and data and state["data"] != data:  # older checkpoints: none
            raise ValueError(f"cannot resume task {task!r}: its train files' content differs "
                             "from what the run trained on (rows edited in place)")
        self.epoch, self.index = int(state["epoch"]), int(state["index"])


def data_digest(features):
    """A short hash of the content of the files a task's features were read from (the
    feature cache's key: each file's SHA-256), or None for features without a key."""
    import hashlib
    import json

    data = (features.meta.get("key") or {}).get("data")
    if not data:
        return None
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def iterate_batches(features, batch_size, pad_to=None, seed=0, rows=None):
    """One pass over `rows` (default: every row) in their order (evaluation): no
    shuffling, no bucketing. A batch's rng (mlm masks) is seeded by its offset in `rows`."""
    rows = np.arange(len(features)) if rows is None else np.asarray(rows)
    for start in range(0, len(rows), batch_size):
        yield features.batch(rows[start:start + batch_size], np.random.default_rng([seed, start]),
                             pad_to)


# ---------------------------------------------------------------- round robin


class RoundRobin:
    """MLM batches taken from each task's text in turn (one stream state per task):
    one stream to the Mixture, so mlm's rate is one rate however many texts feed it."""

    def __init__(self, streams):
        self.streams, self.turn = streams, 0

    def next_batch(self):
        stream = self.streams[self.turn % len(self.streams)]
        self.turn += 1
        return stream.next_batch()

    def state(self):
        return {"turn": self.turn, "streams": [s.state() for s in self.streams]}

    def restore(self, state):
        if len(state["streams"]) != len(self.streams):
            raise ValueError(f"cannot resume mlm: the saved round robin had "
                             f"{len(state['streams'])} text streams, this one "
                             f"{len(self.streams)} (resume with the run's own experiment)")
        self.turn = state["turn"]
        for stream, s in zip(self.streams, state["streams"]):
            stream.restore(s)


# ---------------------------------------------------------------- mixture


class Mixture:
    """Task sampler + one batch stream per task: next() -> (task, batch).

    The sampler's index i is the i-th stream in `streams`' order (the order its
    rates were given in). `state()` is what every checkpoint's trainer.json keeps
    under "mixture": {"sampler": {seed, step}, "streams": {task: stream state}};
    that layout is read back by runs written long ago (tests/fixtures/run_format1),
    so it does not change.
    """

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
        if set(state["streams"]) != set(self.streams):
            raise ValueError(f"cannot resume: the saved mixture has tasks "
                             f"{sorted(state['streams'])}, this one {sorted(self.streams)} "
                             "(resume with the run's own experiment)")
        self.sampler.set_state(state["sampler"])
        for task, stream_state in state["streams"].items():
            self.streams[task].restore(stream_state)

    @classmethod
    def for_experiment(cls, experiment, streams, sizes, pinned, log=print):
        """The run's mixture: rates from the experiment's `sampling` (annealed ones counted
        in updates; the sampler counts micro-batches), `pinned` {task: rate} fixed under
        every method; the rates table logged. (Mixture, {task: start rate})."""
        from mtl_framework.errors import UserError

        try:
            rates, end, over = schedule_from_config(sizes, experiment.sampling, pinned or None)
        except ValueError as error:  # pins over 1, a bad rate, cap or temperature
            raise UserError(f"{experiment.path}: {error}") from None
        sampling = experiment.sampling
        method = sampling if isinstance(sampling, str) else sampling.get("method")
        log(format_rates(rates, sizes, method, pinned=set(pinned), end=end, over=over,
                         counted="examples (questions, documents), not windows or rows"))
        sampler = TaskSampler([rates[t] for t in streams], seed=experiment.seed,
                              end=[end[t] for t in streams] if over else None,
                              over=over * experiment.tasks_per_update)
        return cls(streams, sampler), rates


# ---------------------------------------------------------------- a run's streams


def task_streams(features, mlm=None, batch_size=32, seed=0, mlm_name=None):
    """({task: TaskStream}, {task: example_count}) of a run's tasks' train features
    ({task: features}, in run order), each stream seeded `seed + i`; with `mlm` (the mlm
    task's features, one per text source) also `mlm_name`'s RoundRobin over the sources
    that have rows, seeded `seed + 1000 + i`, sized by all its sources' examples.
    `mlm_name` is the experiment's MLM_TASK (config/experiment.py, its one place)."""
    if mlm is not None and mlm_name is None:
        raise ValueError("task_streams: name the mlm stream (mlm_name: the experiment's MLM_TASK)")
    streams, sizes = {}, {}
    for i, (task, task_features) in enumerate(features.items()):
        streams[task] = TaskStream(task_features, batch_size, seed=seed + i)
        sizes[task] = example_count(task_features)
    if mlm is not None:
        streams[mlm_name] = RoundRobin([TaskStream(f, batch_size, seed=seed + 1000 + i)
                                        for i, f in enumerate(mlm) if len(f)])
        sizes[mlm_name] = sum(example_count(f) for f in mlm)
    return streams, sizes
