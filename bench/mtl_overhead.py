"""Cost of the mixed multi-task update (MultiTaskModel.run_update), CPU, TF backend.

    .venv/bin/python -m bench.mtl_overhead [--quick] [--configs L4-H256-A4 small] [--mixtures 1 8 32 92]

(a) Update overhead. One optimizer update made of 8 single-task micro-batches
    of 4 x 128 tokens, each of a different task and head family
    (classification, matching, regression, mrc_span, multiple_choice,
    extraction_ner, extraction_relation, coreference; multiple_choice as
    1 question x 4 choices, so every micro-batch is 512 tokens) against one
    update made of one classification batch of 32 x 128 (the same 4,096
    tokens). Also 8 micro-batches of 4 x 128 all of one classification task:
    mixed / same-task isolates the heads' own cost, same-task / one batch the
    cost of splitting an update into micro-batches. Target: mixed <= 1.10x.
(b) Mixture size. For mixtures of 1, 8, 32 and 92 tasks (task i gets head
    family i mod 8, so 92 tasks = 92 heads): time to the first update
    (tracing included), time until every task's micro-step is traced, steady
    step time (every update = 8 micro-batches, one per family, cycling
    through the tasks; target flat within 15% across 8/32/92, on the pooled
    medians and paired by round (each mixture over the 8-task one in the same
    round: the machine's slow phases cancel); the 1-task
    mixture is all classification, so its step is cheaper by the heads'
    cost), peak RSS (ru_maxrss, target: memory grows only with the heads,
    reported beside the head parameter and optimizer-state bytes), and the
    number of traced functions.

Every model lives in its own subprocess (a JSON-lines worker), so peak RSS is
per mixture size; the parent interleaves the timed updates of the variants (a)
or of all workers (b) in rounds, rotating the order, one untimed settle update at
the start of each turn; medians of all timed updates. The machine is shared:
the JSON records the CPU time other processes took during the timed rounds,
per-round medians and the process CPU seconds of each update besides its wall
time. Shapes: a micro-step is traced once per trace group with every axis
unknown, so the timed functions are those of real training (any length).

Where the time goes, (a): `profile` times, interleaved, the classification
task's forward + backward alone (a plain GradientTape over the public
`MultiTaskModel.task_loss`, no accumulation), the model's own `micro_step` and
`run_update`, each as 8 x (4x128) and 1 x (32x128), and the optimizer update
alone (`apply_update`); `families` times each task's micro-step alone (the
heads' own cost). The forward_backward and run_update profile is repeated in a
worker on one thread (inter- and intra-op): there 8 x (4x128) and 1 x (32x128)
do the same arithmetic, so the gap on two threads is how much worse small ops
parallelise. Everything timed is the model's public step (run_update,
micro_step, apply_update; tracing_counts for the traces): no copy of its code.

Dropped (issue 26): the profile's `masked_accumulation (before)` row and the
`accumulation_only` table (the accumulation alone on fixed gradients, before
and now). Both timed copies of the step's accumulation, the older one
re-created and the current one rebuilt from private helpers, so they measured
the copies, not the model; results written before that (bench/results/) still
hold them.

Writes bench/results/mtl_overhead.json and .md (--quick: into a temporary
folder unless --output-dir says where); `--skip a|b --keep` re-measures one
part and keeps the other from the existing JSON.
"""
import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from bench import REPO, JsonWorker, child_env, write_results
from bench.backbone import COMMON, CONFIGS  # the same backbones as the throughput benchmark
from bench.load import cpu_model, machine_busy_seconds, proc_cpu_seconds

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

BENCH = REPO / "bench"
# (family, number of labels): sizes of real tasks (tnews, ocnli, cluener, duie2)
FAMILIES = [("classification", 15), ("matching", 3), ("regression", None), ("mrc_span", None),
            ("multiple_choice", None), ("extraction_ner", 10), ("extraction_relation", 48),
            ("coreference", 2)]
CHOICES = 4
MICRO_BATCH, LENGTH, TASKS_PER_UPDATE = 4, 128, 8
OPTIMIZER = {"name": "adamw", "lr": 1e-4, "warmup_steps": 100}
TARGETS = {"mixed_vs_one_batch": 1.10, "steady_flat_within": 0.15}


# --- worker side ---------------------------------------------------------------

def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def family_batch(family, num_labels, rows, length, rng, vocab):
    """A batch of `rows` x `length` tokens in docs/batches.md's layout for `family`
    (multiple_choice: rows / 4 questions x 4 choices); no padding, valid targets."""
    def ids(shape):
        x = rng.integers(5, vocab, shape).astype("int32")
        x[..., 0] = 2
        return x

    def spans(n, lo, hi):
        start = rng.integers(lo, hi - 8, n)
        return np.stack([start, start + rng.integers(0, 8, n)], -1).astype("int32")

    if family == "multiple_choice":
        b = max(rows // CHOICES, 1)
        token_ids = ids((b, CHOICES, length))
        return {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids),
                "choice_mask": np.ones((b, CHOICES), "float32"),
                "label": rng.integers(0, CHOICES, b).astype("int32")}
    token_ids = ids((rows, length))
    batch = {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids)}
    if family in ("classification", "matching"):
        batch["label"] = rng.integers(0, num_labels, rows).astype("int32")
    elif family == "regression":
        batch["label"] = rng.random(rows).astype("float32")
    elif family == "mrc_span":
        question = 24
        batch["segment_ids"][:, question:] = 1
        batch["context_mask"] = np.zeros_like(token_ids)
        batch["context_mask"][:, question:length - 1] = 1
        start_end = spans(rows, question, length - 1)
        batch["start"], batch["end"] = start_end[:, 0], start_end[:, 1]
        batch["window_id"] = np.arange(rows, dtype="int32")
    elif family == "extraction_ner":
        labels = np.zeros((rows, num_labels, 2, 2), "int32")
        labels[:, :, 0] = spans(rows * num_labels, 1, length - 1).reshape(rows, num_labels, 2)
        batch["entity_labels"] = labels
    elif family == "extraction_relation":
        entity = spans(rows * 2, 1, length - 1).reshape(rows, 2, 1, 2)
        head = np.zeros((rows, num_labels, 1, 2), "int32")
        tail = np.zeros_like(head)
        predicate = rng.integers(0, num_labels, rows)
        head[np.arange(rows), predicate, 0] = entity[:, :, 0, 0]  # (subject start, object start)
        tail[np.arange(rows), predicate, 0] = entity[:, :, 0, 1]
        batch.update(entity_labels=entity, head_labels=head, tail_labels=tail)
    elif family == "coreference":
        batch["span1"] = spans(rows, 1, length // 2)
        batch["span2"] = spans(rows, length // 2, length - 1)
        batch["label"] = rng.integers(0, num_labels, rows).astype("int32")
    else:
        raise ValueError(family)
    return batch


class Worker:
    """One MultiTaskModel with `num_tasks` heads (task i: family i mod 8); answers commands."""

    def __init__(self, config_name, num_tasks, extra_one_batch, seed=0):
        import keras
        import tensorflow as tf

        from mtl_framework import RoFormerV2Backbone
        from mtl_framework.families.heads import build_head
        from mtl_framework.step.model import MultiTaskModel
        from mtl_framework.step.optimizers import build_optimizer

        self.tf = tf
        self.rss_after_import = rss_bytes()
        start = time.perf_counter()
        keras.utils.set_random_seed(seed)
        self.config = dict(COMMON, **CONFIGS[config_name])
        hidden = self.config["hidden_size"]
        backbone = RoFormerV2Backbone(**self.config)
        backbone.build()
        self.tasks = {}  # name -> (family, num_labels)
        for i in range(num_tasks):
            family, labels = FAMILIES[i % len(FAMILIES)]
            if labels is not None:  # tasks past the first 8 vary their label counts, as real ones
                labels += (i // len(FAMILIES)) % 4
            self.tasks[f"t{i:02d}_{family}"] = (family, labels)
        if extra_one_batch:
            self.tasks["one_batch_classification"] = FAMILIES[0]
        heads = {name: build_head(family, labels, hidden, name=name)
                 for name, (family, labels) in self.tasks.items()}
        self.model = MultiTaskModel(backbone, heads, tasks_per_update=TASKS_PER_UPDATE)
        self.model.compile(optimizer=build_optimizer(OPTIMIZER, total_steps=10 ** 6))
        self.model.build_all()
        self.build_s = time.perf_counter() - start
        self.rss_after_build = rss_bytes()
        self.rng = np.random.default_rng(seed)
        # a small pool of batches per task, reused round robin (fresh NumPy each call,
        # as the mixture hands over)
        self.pool = {name: [family_batch(f, n, MICRO_BATCH, LENGTH, self.rng, self.config["vocab_size"])
                            for _ in range(2)] for name, (f, n) in self.tasks.items()
                     if name != "one_batch_classification"}
        if extra_one_batch:
            self.pool["one_batch_classification"] = [family_batch(
                "classification", FAMILIES[0][1], MICRO_BATCH * TASKS_PER_UPDATE, LENGTH, self.rng,
                self.config["vocab_size"]) for _ in range(2)]
        self.mixture_tasks = [n for n in self.tasks if n != "one_batch_classification"]
        self.by_family = [[n for n in self.mixture_tasks if self.tasks[n][0] == f] for f, _ in FAMILIES]
        self.by_family = [names for names in self.by_family if names]
        self.first_task = self.mixture_tasks[0]
        self.cursor = 0
        self.calls = 0

    def batch(self, name, length=LENGTH):
        self.calls += 1
        if length != LENGTH:  # a fresh batch of another length (targets inside it)
            family, labels = self.tasks[name]
            rows = len(self.pool[name][0]["token_ids"])
            rows *= CHOICES if family == "multiple_choice" else 1
            return family_batch(family, labels, rows, length, self.rng, self.config["vocab_size"])
        return self.pool[name][self.calls % 2]

    def mixture_update(self):
        """8 micro-batches: one per family present, cycling through each family's tasks;
        a 1-task mixture repeats its task."""
        names = []
        while len(names) < TASKS_PER_UPDATE:
            for family_tasks in self.by_family:
                names.append(family_tasks[self.cursor % len(family_tasks)])
            self.cursor += 1
        return [(n, self.batch(n)) for n in names[:TASKS_PER_UPDATE]]

    def variant(self, name):
        if name == "mixed":
            return self.mixture_update()
        if name == "same_task":
            return [(self.first_task, self.batch(self.first_task)) for _ in range(TASKS_PER_UPDATE)]
        if name == "one_batch":
            return [("one_batch_classification", self.batch("one_batch_classification"))]
        raise ValueError(name)

    def timed_update(self, micro):
        wall, cpu = time.perf_counter(), time.process_time()
        self.model.run_update(micro)
        return time.perf_counter() - wall, time.process_time() - cpu

    def traces(self):
        # one micro-step function per trace group (head class + settings), not per task
        traced = self.model.tracing_counts()
        counts = traced["micro_step"]
        return {"micro_step_functions": len(counts), "micro_step_traces": sum(counts.values()),
                "max_traces_per_function": max(counts.values(), default=0),
                "trace_groups": len(self.model.trace_groups),
                "apply_update_traces": traced["apply_update"]}

    def parameter_bytes(self):
        def nbytes(variables):
            return int(sum(np.prod(v.shape) * np.dtype(v.dtype).itemsize for v in variables))

        head = {t: nbytes(v) for t, v in self.model.head_variables.items()}
        mixture_heads = sum(b for t, b in head.items() if t != "one_batch_classification")
        return {"backbone_param_bytes": nbytes(self.model.backbone_variables),
                "head_param_bytes": mixture_heads,
                # each head parameter also has an accumulator and AdamW's two moment slots
                "head_state_bytes": 4 * mixture_heads}

    def profile_functions(self):
        """Functions over the first task: a tf.function of forward + backward only (a plain
        GradientTape over the model's task_loss, every gradient consumed, nothing
        accumulated); the model's micro-step; its whole update from NumPy (run_update)."""
        tf, model, task = self.tf, self.model, self.first_task
        variables = model.backbone_variables + model.head_variables[task]

        def forward_backward(batch):
            with tf.GradientTape() as tape:
                loss = model.task_loss(task, batch, training=True)
            grads = tape.gradient(loss, variables)
            # consume every gradient (a sum each) so none is pruned from the graph
            return loss + tf.add_n([tf.reduce_sum(g.values if isinstance(g, tf.IndexedSlices) else g)
                                    for g in grads]) * 0.0

        def run_update(batch):  # the whole update from NumPy, as fit runs it (incl. the optimizer)
            numpy_batch = {k: v.numpy() for k, v in batch.items()}
            model.run_update([(task, numpy_batch)])
            return tf.constant(0.0)

        return {"forward_backward": tf.function(forward_backward),
                "micro_step (now)": lambda batch: model.micro_step(task, batch)["loss"],
                "run_update (now)": run_update}

    def profile(self, rounds, names=None):
        tf = self.tf
        small = self.tf.nest.map_structure(tf.convert_to_tensor, self.pool[self.first_task][0])
        big = {k: tf.convert_to_tensor(v) for k, v in family_batch(
            "classification", FAMILIES[0][1], MICRO_BATCH * TASKS_PER_UPDATE, LENGTH, self.rng,
            self.config["vocab_size"]).items()}
        functions = self.profile_functions()
        functions = {k: f for k, f in functions.items() if names is None or k in names}
        for fn in functions.values():  # trace both shapes
            fn(small).numpy(), fn(big).numpy()
        self.model.apply_update()  # flush the accumulated warm-up gradients
        keys = [f"{name} {shape}" for name in functions for shape in ("8x(4x128)", "1x(32x128)")]
        times = {k: [] for k in keys + ["optimizer update"]}
        for r in range(rounds):
            for name in list(functions)[r % len(functions):] + list(functions)[:r % len(functions)]:
                fn = functions[name]
                for shape, batch, repeat in (("8x(4x128)", small, TASKS_PER_UPDATE), ("1x(32x128)", big, 1)):
                    if name.startswith("run_update"):  # one update of `repeat` micro-batches
                        numpy_batch = {k: v.numpy() for k, v in batch.items()}
                        wall, cpu = time.perf_counter(), time.process_time()
                        self.model.run_update([(self.first_task, numpy_batch)] * repeat)
                        times[f"{name} {shape}"].append((time.perf_counter() - wall,
                                                         time.process_time() - cpu))
                        continue
                    wall, cpu = time.perf_counter(), time.process_time()
                    for _ in range(repeat):
                        fn(batch).numpy()
                    times[f"{name} {shape}"].append((time.perf_counter() - wall, time.process_time() - cpu))
            wall, cpu = time.perf_counter(), time.process_time()
            self.model.apply_update()
            times["optimizer update"].append((time.perf_counter() - wall, time.process_time() - cpu))
        return {k: {"median_s": median([w for w, _ in v]), "median_cpu_s": median([c for _, c in v]),
                    "wall_s": [w for w, _ in v], "cpu_s": [c for _, c in v]} for k, v in times.items()}

    def family_steps(self, rounds):
        """Each mixture task's micro-step alone (one 4x128 micro-batch), interleaved."""
        tf = self.tf
        batches = {n: {k: tf.convert_to_tensor(v) for k, v in self.pool[n][0].items()}
                   for n in self.mixture_tasks}
        times = {n: [] for n in self.mixture_tasks}
        for _ in range(rounds):
            for n in self.mixture_tasks:
                wall, cpu = time.perf_counter(), time.process_time()
                self.model.micro_step(n, batches[n])["loss"].numpy()
                times[n].append((time.perf_counter() - wall, time.process_time() - cpu))
            self.model.apply_update()
        return {n: {"family": self.tasks[n][0], "num_labels": self.tasks[n][1],
                    "median_s": median([w for w, _ in v]), "median_cpu_s": median([c for _, c in v])}
                for n, v in times.items()}

    def handle(self, command):
        cmd = command["cmd"]
        if cmd == "info":
            return {"build_s": self.build_s, "rss_after_import": self.rss_after_import,
                    "rss_after_build": self.rss_after_build, "tasks": len(self.mixture_tasks),
                    "families": [f for f, _ in FAMILIES][:len(self.by_family)],
                    **self.parameter_bytes()}
        if cmd == "first":  # time to first update, then until every task is traced
            micro = self.mixture_update()
            seen = {task for task, _ in micro}
            first, _ = self.timed_update(micro)
            total, updates = first, 1
            while len(seen) < len(self.mixture_tasks):
                micro = self.mixture_update()
                seen.update(task for task, _ in micro)
                total += self.timed_update(micro)[0]
                updates += 1
            return {"first_update_s": first, "all_traced_s": total, "updates_to_trace_all": updates,
                    "rss_after_tracing": rss_bytes(), "peak_rss": peak_rss_bytes(), **self.traces()}
        if cmd == "profile":
            return self.profile(command["rounds"], command.get("names"))
        if cmd == "families":
            return self.family_steps(command["rounds"])
        if cmd == "run":
            out = []
            for _ in range(command.get("settle", 1)):
                self.model.run_update(self.variant(command["variant"]))
            for _ in range(command["updates"]):
                out.append(self.timed_update(self.variant(command["variant"])))
            return {"wall_s": [w for w, _ in out], "cpu_s": [c for _, c in out]}
        if cmd == "apply":  # the optimizer update alone (all variables, every head's included)
            times = []
            for _ in range(command["repeat"]):
                wall, cpu = time.perf_counter(), time.process_time()
                self.model.apply_update()
                times.append((time.perf_counter() - wall, time.process_time() - cpu))
            return {"variables": len(self.model.all_variables),
                    "median_s": median([w for w, _ in times]), "median_cpu_s": median([c for _, c in times])}
        if cmd == "stats":
            return {"peak_rss": peak_rss_bytes(), "rss": rss_bytes(), **self.traces(),
                    "skipped": sum(self.model.skipped.values())}
        raise ValueError(cmd)


def worker_main(config_name, num_tasks, extra_one_batch, threads=None):
    out = sys.stdout
    sys.stdout = sys.stderr  # keep TF/Keras chatter off the protocol
    if threads:  # before TF's runtime starts: every op and every op's inner work on `threads`
        import tensorflow as tf
        tf.config.threading.set_inter_op_parallelism_threads(threads)
        tf.config.threading.set_intra_op_parallelism_threads(threads)
    worker = Worker(config_name, num_tasks, extra_one_batch)
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        command = json.loads(line)
        if command["cmd"] == "quit":
            break
        out.write(json.dumps(worker.handle(command)) + "\n")
        out.flush()


# --- parent side ---------------------------------------------------------------


class Contention:
    """Cores used by processes other than ours (parent + workers) over the timed rounds."""

    def __init__(self):
        self.wall = self.foreign = 0.0
        self.per_round = []

    def measure(self, pids, fn):
        pids = [os.getpid()] + list(pids)
        wall, busy = time.perf_counter(), machine_busy_seconds()
        own = sum(proc_cpu_seconds(p) for p in pids)
        result = fn()
        wall = time.perf_counter() - wall
        foreign = max(0.0, machine_busy_seconds() - busy - (sum(proc_cpu_seconds(p) for p in pids) - own))
        self.wall += wall
        self.foreign += foreign
        self.per_round.append(round(foreign / max(wall, 1e-9), 3))
        return result

    def summary(self):
        return {"cores_used_by_others": round(self.foreign / max(self.wall, 1e-9), 3),
                "per_round": self.per_round}


class WorkerProcess(JsonWorker):
    def __init__(self, config_name, num_tasks, extra_one_batch, log_path, threads=None):
        command = [sys.executable, "-m", "bench.mtl_overhead", "--worker", config_name, str(num_tasks)]
        if extra_one_batch:
            command.append("--one-batch")
        if threads:
            command += ["--threads", str(threads)]
        super().__init__(command, log_path, child_env(CUDA_VISIBLE_DEVICES=""))
        self.started = time.perf_counter()
        self.read()
        self.ready_s = time.perf_counter() - self.started  # interpreter + TF import + build

    @property
    def pid(self):
        return self.process.pid

    def close(self):
        try:
            self.process.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
            self.process.stdin.flush()
        except OSError:
            pass
        self.process.wait(timeout=60)
        self.log.close()


def median(values):
    return statistics.median(values) if values else float("nan")


def summarize(runs):
    """runs: [{wall_s, cpu_s}] per round -> medians, per-round medians."""
    wall = [w for r in runs for w in r["wall_s"]]
    cpu = [c for r in runs for c in r["cpu_s"]]
    return {"median_s": median(wall), "min_s": min(wall), "median_cpu_s": median(cpu),
            "round_medians_s": [median(r["wall_s"]) for r in runs], "wall_s": wall, "cpu_s": cpu}


def interleave(items, rounds, updates, contention, log, label):
    """items: {key: (WorkerProcess, variant)}; rotating order every round."""
    keys = list(items)
    runs = {k: [] for k in keys}
    pids = {w.pid for w, _ in items.values()}
    for r in range(rounds):
        order = keys[r % len(keys):] + keys[:r % len(keys)]

        def one_round():
            for k in order:
                worker, variant = items[k]
                runs[k].append(worker.ask(cmd="run", variant=variant, updates=updates, settle=1))

        contention.measure(pids, one_round)
        log(f"{label} round {r + 1}/{rounds}: " + ", ".join(
            f"{k} {median(runs[k][-1]['wall_s']):.2f}s" for k in keys)
            + f" (others used {contention.per_round[-1]:.2f} cores)")
    return runs


def part_a(config_name, args, contention, log, workdir):
    worker = WorkerProcess(config_name, TASKS_PER_UPDATE, True, workdir / f"a_{config_name}.log")
    try:
        info = worker.ask(cmd="info")
        first = worker.ask(cmd="first")
        log(f"(a) {config_name}: built in {worker.ready_s:.0f}s, first update {first['first_update_s']:.1f}s")
        variants = {"mixed": (worker, "mixed"), "same_task": (worker, "same_task"),
                    "one_batch": (worker, "one_batch")}
        runs = interleave(variants, args.rounds_a, args.updates, contention, log, f"(a) {config_name}")
        stats = worker.ask(cmd="stats")
        families = worker.ask(cmd="families", rounds=args.rounds_profile)
        log(f"(a) {config_name} micro-step per task (CPU s): " + ", ".join(
            f"{v['family']} {v['median_cpu_s']:.3f}" for v in families.values()))
        profile = worker.ask(cmd="profile", rounds=args.rounds_profile)
        log(f"(a) {config_name} profile (CPU s): " + ", ".join(
            f"{k} {v['median_cpu_s']:.3f}" for k, v in profile.items()))
    finally:
        worker.close()
    # the same profile on one thread: what splitting the batch costs without parallelism
    worker = WorkerProcess(config_name, TASKS_PER_UPDATE, True, workdir / f"a_{config_name}_1thread.log",
                           threads=1)
    try:
        one_thread = worker.ask(cmd="profile", rounds=args.rounds_profile,
                                names=["forward_backward", "run_update (now)"])
        log(f"(a) {config_name} profile on 1 thread (CPU s): " + ", ".join(
            f"{k} {v['median_cpu_s']:.3f}" for k, v in one_thread.items()))
    finally:
        worker.close()
    out = {k: summarize(v) for k, v in runs.items()}
    one = out["one_batch"]
    ratios = {}
    for k in ("mixed", "same_task"):
        per_round = [a / b for a, b in zip(out[k]["round_medians_s"], one["round_medians_s"])]
        ratios[f"{k}/one_batch"] = {
            "median": out[k]["median_s"] / one["median_s"],
            "median_of_rounds": median(per_round), "per_round": per_round,
            "min": out[k]["min_s"] / one["min_s"], "cpu": out[k]["median_cpu_s"] / one["median_cpu_s"]}
    ratios["mixed/same_task"] = {"median": out["mixed"]["median_s"] / out["same_task"]["median_s"],
                                 "cpu": out["mixed"]["median_cpu_s"] / out["same_task"]["median_cpu_s"]}
    return {"config": config_name, "backbone": dict(COMMON, **CONFIGS[config_name]),
            "tokens_per_update": MICRO_BATCH * TASKS_PER_UPDATE * LENGTH,
            "variants": {"mixed": f"8 tasks x {MICRO_BATCH}x{LENGTH}, families {[f for f, _ in FAMILIES]}",
                         "same_task": f"8 micro-batches of {FAMILIES[0][0]} {MICRO_BATCH}x{LENGTH}",
                         "one_batch": f"1 batch of {FAMILIES[0][0]} "
                                      f"{MICRO_BATCH * TASKS_PER_UPDATE}x{LENGTH}"},
            "rounds": args.rounds_a, "updates_per_round": args.updates, "info": info,
            "first": first, "final": stats, "results": out, "ratios": ratios,
            "per_task_micro_step": families, "profile": profile, "profile_one_thread": one_thread,
            "target_met": {"wall": ratios["mixed/one_batch"]["median"] <= TARGETS["mixed_vs_one_batch"],
                           "cpu": ratios["mixed/one_batch"]["cpu"] <= TARGETS["mixed_vs_one_batch"]}}


def part_b(config_name, args, contention, log, workdir):
    workers, rows = {}, {}
    try:
        for n in args.mixtures:  # built and traced one at a time: tracing alone on the machine
            worker = WorkerProcess(config_name, n, False, workdir / f"b_{config_name}_{n}.log")
            workers[n] = worker
            info = worker.ask(cmd="info")
            first = worker.ask(cmd="first")
            rows[n] = {"tasks": n, "ready_s": worker.ready_s, "info": info, "first": first}
            log(f"(b) {config_name} {n} tasks: first update {first['first_update_s']:.1f}s, all traced "
                f"{first['all_traced_s']:.1f}s ({first['micro_step_traces']} traces), "
                f"peak RSS {first['peak_rss'] / 2 ** 20:.0f} MiB")
        runs = interleave({n: (w, "mixed") for n, w in workers.items()}, args.rounds_b,
                          args.updates, contention, log, f"(b) {config_name}")
        for n, worker in workers.items():
            rows[n]["final"] = worker.ask(cmd="stats")
            rows[n]["steady"] = summarize(runs[n])
            rows[n]["apply_update"] = worker.ask(cmd="apply", repeat=5)
    finally:
        for worker in workers.values():
            worker.close()
    base = rows[min(rows)]
    for row in rows.values():
        row["peak_rss_growth"] = row["final"]["peak_rss"] - base["final"]["peak_rss"]
        row["head_state_growth"] = row["info"]["head_state_bytes"] - base["info"]["head_state_bytes"]
        row["rss_after_build_growth"] = row["info"]["rss_after_build"] - base["info"]["rss_after_build"]
    spread = steady_spread(rows)
    big = [n for n in sorted(rows) if n >= TASKS_PER_UPDATE]
    per_task = None
    if len(big) > 1:  # peak RSS per extra task beyond 8, against the head state per extra task
        lo, hi = rows[big[0]], rows[big[-1]]
        extra = big[-1] - big[0]
        per_task = {"peak_rss_bytes": (hi["final"]["peak_rss"] - lo["final"]["peak_rss"]) / extra,
                    "head_state_bytes": (hi["info"]["head_state_bytes"]
                                         - lo["info"]["head_state_bytes"]) / extra,
                    "rss_after_build_bytes": (hi["info"]["rss_after_build"]
                                              - lo["info"]["rss_after_build"]) / extra,
                    "rss_after_tracing_bytes": (hi["first"]["rss_after_tracing"]
                                                - lo["first"]["rss_after_tracing"]) / extra,
                    "between": [big[0], big[-1]]}
    # what "memory grows only with the heads" rules out: graphs that grow with the tasks
    graphs = {n: (rows[n]["final"]["micro_step_functions"], rows[n]["final"]["micro_step_traces"])
              for n in big}
    return {"config": config_name, "backbone": dict(COMMON, **CONFIGS[config_name]),
            "rounds": args.rounds_b, "updates_per_round": args.updates,
            "rows": [rows[n] for n in sorted(rows)],
            "steady_spread_8_plus": spread, "memory_per_extra_task": per_task,
            "traced_graphs_constant_8_plus": len(set(graphs.values())) == 1,
            "target_met": {"wall": spread["median_s"] <= TARGETS["steady_flat_within"],
                           "cpu": spread["median_cpu_s"] <= TARGETS["steady_flat_within"],
                           "paired": spread["per_round_wall"] <= TARGETS["steady_flat_within"]}}


def steady_spread(rows):
    """Spread of the steady step over mixtures of 8+ tasks: of the pooled medians (wall, CPU),
    and paired: each mixture's wall time over the 8-task one's in the same round (the
    rounds interleave every mixture, so a slow phase of the shared machine cancels),
    median over rounds. rows: {tasks: row}; sets row["per_round_vs_8"]."""
    spread, big = {}, [n for n in rows if n >= TASKS_PER_UPDATE]
    for key in ("median_s", "median_cpu_s"):
        steady = [rows[n]["steady"][key] for n in big]
        spread[key] = max(steady) / min(steady) - 1 if steady else float("nan")
    base = rows.get(TASKS_PER_UPDATE)
    for row in rows.values():
        row["per_round_vs_8"] = median([a / b for a, b in zip(
            row["steady"]["round_medians_s"], base["steady"]["round_medians_s"])]) if base else None
    paired = [rows[n]["per_round_vs_8"] for n in big]
    spread["per_round_wall"] = max(paired) / min(paired) - 1 if base and paired else float("nan")
    return spread


def environment():
    import keras
    import tensorflow as tf

    env = {"cpu_count": os.cpu_count(), "python": platform.python_version(),
           "platform": platform.platform(), "tensorflow": tf.__version__, "keras": keras.__version__,
           "keras_backend": keras.backend.backend(),
           "oneDNN": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default (on)"),
           "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30, 1),
           "rss_measure": "resource.getrusage(RUSAGE_SELF).ru_maxrss per worker process "
                          "(psutil not installed)"}
    if model := cpu_model():
        env["cpu_model"] = model
    return env


def mib(b):
    return b / 2 ** 20


def markdown(report):
    env = report["environment"]
    used = "; ".join(f"{part} {c['cores_used_by_others']:.2f}" for part, c in report["contention"].items())
    lines = [f"Multi-task update cost. {env.get('cpu_model', 'CPU')}, {env['cpu_count']} cores "
             f"(shared: other processes used on average, during the timed rounds, {used} "
             f"of them), TF {env['tensorflow']}, "
             f"Keras {env['keras']}; AdamW, dropout 0.1, gradient_norm balancing, random token ids "
             f"(vocab 12000), no padding. Medians of interleaved updates.", ""]
    if report["a"]:
        lines += ["(a) One update of 4,096 tokens: 8 micro-batches of 4x128 from 8 tasks/head "
                  "families (mixed), 8 micro-batches of 4x128 of one classification task (same "
                  "task), one classification batch of 32x128 (one batch). Target mixed / one "
                  f"batch <= {TARGETS['mixed_vs_one_batch']:.2f}x.", "",
                  "Wall s / process CPU s per update; ratios wall / CPU.", "",
                  "| config | rounds x updates | mixed | same task | one batch | mixed / one batch "
                  "| same task / one batch | mixed / same task | target (wall / CPU) |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for a in report["a"]:
            res, rat = a["results"], a["ratios"]
            cells = [f"{res[k]['median_s']:.2f} / {res[k]['median_cpu_s']:.2f}"
                     for k in ("mixed", "same_task", "one_batch")]
            cells += [f"{rat[k]['median']:.2f}x / {rat[k]['cpu']:.2f}x"
                      for k in ("mixed/one_batch", "same_task/one_batch", "mixed/same_task")]
            met = a["target_met"]
            lines.append(f"| {a['config']} | {a['rounds']}x{a['updates_per_round']} | " + " | ".join(cells)
                         + f" | {'met' if met['wall'] else 'NOT met'} / "
                           f"{'met' if met['cpu'] else 'NOT met'} |")
        lines.append("")
        for a in report["a"]:
            prof, fam = a["profile"], a["per_task_micro_step"]
            lines += [f"Where the time goes, {a['config']} (process CPU s, median of "
                      f"{len(prof['optimizer update']['cpu_s'])} interleaved rounds; classification task; "
                      "forward_backward = forward + backward alone, no accumulation; these whole-step "
                      "medians move by ~10% between runs):", "",
                      "| step | 8 x (4x128) | 1 x (32x128) | ratio |", "|---|---|---|---|"]
            for threads, p in (("", prof), (", 1 thread", a.get("profile_one_thread"))):
                for name in ("forward_backward", "run_update (now)") if p else ():  # the rest: JSON
                    small = p[f"{name} 8x(4x128)"]["median_cpu_s"]
                    big = p[f"{name} 1x(32x128)"]["median_cpu_s"]
                    lines.append(f"| {name}{threads} | {small:.3f} | {big:.3f} | {small / big:.2f}x |")
            lines += [f"| optimizer update (once per update, in run_update) | "
                      f"{prof['optimizer update']['median_cpu_s']:.3f} | | |",

                      ""]
            acc = prof.get("accumulation_only")
            if acc:
                per_micro = prof["forward_backward 8x(4x128)"]["median_cpu_s"] / TASKS_PER_UPDATE
                lines += ["Accumulation alone on one 4x128 micro-batch's gradients (CPU ms, wall ms; "
                          f"a micro-step's forward + backward is {1e3 * per_micro:.0f} ms CPU): " + "; ".join(
                              f"{k} {1e3 * v['median_cpu_s']:.1f}, {1e3 * v['median_s']:.1f}"
                              for k, v in acc.items()) + ".", ""]
            lines += ["| task micro-step (4x128) | labels | CPU s | vs classification |", "|---|---|---|---|"]
            ref = next(iter(fam.values()))["median_cpu_s"]
            for v in fam.values():
                lines.append(f"| {v['family']} | {v['num_labels'] or '-'} | {v['median_cpu_s']:.3f} | "
                             f"{v['median_cpu_s'] / ref:.2f}x |")
            lines.append("")
    for b in report["b"]:
        lines += [f"(b) Mixture size, {b['config']}: every update 8 micro-batches of 4x128, one per "
                  "family (1 task: 8 of the classification task). First update includes tracing; "
                  "tasks past the first 8 add 0-3 labels to their family's count; "
                  "peak RSS per worker process; head state = head parameters + accumulator + 2 AdamW "
                  f"slots. Target: steady step flat within {100 * TARGETS['steady_flat_within']:.0f}% "
                  "over 8/32/92 tasks.", "",
                  "| tasks | first update s | all tasks traced s | traced functions | steady step s "
                  "(wall / CPU) | vs 8 tasks (wall / CPU) | optimizer update s (CPU) | peak RSS MiB | "
                  "RSS growth MiB | head params MiB | head state growth MiB |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        base = next((r for r in b["rows"] if r["tasks"] == TASKS_PER_UPDATE), b["rows"][0])
        for r in b["rows"]:
            f, st, bs = r["final"], r["steady"], base["steady"]
            lines.append(
                f"| {r['tasks']} | {r['first']['first_update_s']:.1f} | {r['first']['all_traced_s']:.1f} | "
                f"{f['micro_step_functions']} micro-step ({f['micro_step_traces']} traces) + "
                f"{f['apply_update_traces']} update | "
                f"{st['median_s']:.2f} / {st['median_cpu_s']:.2f} | "
                f"{st['median_s'] / bs['median_s']:.2f}x / {st['median_cpu_s'] / bs['median_cpu_s']:.2f}x | "
                f"{r['apply_update']['median_cpu_s']:.3f} ({r['apply_update']['variables']} variables) | "
                f"{mib(f['peak_rss']):.0f} | {mib(r['peak_rss_growth']):+.0f} | "
                f"{mib(r['info']['head_param_bytes']):.2f} | {mib(r['head_state_growth']):+.1f} |")
        sp, met = b["steady_spread_8_plus"], b["target_met"]
        lines += ["", f"Steady step spread over 8+ tasks: wall {100 * sp['median_s']:.1f}% "
                  f"({'met' if met['wall'] else 'NOT met'}), CPU {100 * sp['median_cpu_s']:.1f}% "
                  f"({'met' if met['cpu'] else 'NOT met'})."]
        if "per_round_wall" in sp:
            lines.append("Paired by round (each mixture's wall time over the 8-task one's in the same "
                         "round, median over rounds): " + ", ".join(
                             f"{r['tasks']} tasks {r['per_round_vs_8']:.3f}x" for r in b["rows"])
                         + f"; spread over 8+ tasks {100 * sp['per_round_wall']:.1f}% "
                         f"({'met' if met.get('paired') else 'NOT met'}).")
        per = b.get("memory_per_extra_task")
        if per:
            lines.append(f"Memory per extra task ({per['between'][0]} -> {per['between'][1]} tasks): "
                         "peak RSS "
                         f"{mib(per['peak_rss_bytes']):.1f} MiB, against head state "
                         f"{mib(per['head_state_bytes']):.2f} MiB. Current RSS per extra task: "
                         f"{mib(per['rss_after_build_bytes']):.2f} MiB after building the model (heads, "
                         f"accumulators, optimizer slots; nothing traced), "
                         f"{mib(per.get('rss_after_tracing_bytes', float('nan'))):.2f} MiB after the "
                         f"updates that ran every task once (every graph traced; allocator state "
                         f"included, so it can exceed the peak's growth).")
        if "traced_graphs_constant_8_plus" in b:
            lines.append("Traced micro-step functions and traces equal for every mixture of 8+ tasks: "
                         f"{'yes' if b['traced_graphs_constant_8_plus'] else 'NO'}.")
        lines.append("")
    lines.append(f"Run: `python -m bench.mtl_overhead{' --quick' if report['settings']['quick'] else ''}`; "
                 "measured: " + "; ".join(
                     f"{e['part']} {e['config']} {e['finished']}"
                     + (f" ({e['wall_seconds']:.0f} s)" if e.get("wall_seconds") else "")
                     for e in report["a"] + report["b"]) + ".")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="L4-H256-A4 only, mixtures 1/8/32, 2 rounds")
    parser.add_argument("--configs", nargs="+", choices=sorted(CONFIGS),
                        help="for (a); default both (quick: L4-H256-A4)")
    parser.add_argument("--mixture-config", default="L4-H256-A4", choices=sorted(CONFIGS),
                        help="backbone for (b)")
    parser.add_argument("--mixtures", nargs="+", type=int, help="default 1 8 32 92 (quick: 1 8 32)")
    parser.add_argument("--rounds-a", type=int)
    parser.add_argument("--rounds-b", type=int)
    parser.add_argument("--rounds-profile", type=int)
    parser.add_argument("--updates", type=int, default=2, help="timed updates per turn")
    parser.add_argument("--skip", choices=["a", "b"], action="append", default=[])
    parser.add_argument("--keep", action="store_true",
                        help="with --skip: keep the skipped part's results from the existing JSON")
    parser.add_argument("--output-dir", help="default bench/results (--quick: the worker-log folder, "
                                             "so a smoke check never overwrites the results)")
    parser.add_argument("--worker", nargs=2, metavar=("CONFIG", "TASKS"), help=argparse.SUPPRESS)
    parser.add_argument("--one-batch", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main(args.worker[0], int(args.worker[1]), args.one_batch, args.threads)
    args.configs = args.configs or (["L4-H256-A4"] if args.quick else list(CONFIGS))
    args.mixtures = sorted(args.mixtures or ([1, 8, 32] if args.quick else [1, 8, 32, 92]))
    args.rounds_a = args.rounds_a or (2 if args.quick else 8)
    args.rounds_b = args.rounds_b or (2 if args.quick else 6)
    args.rounds_profile = args.rounds_profile or (2 if args.quick else 5)

    import tempfile

    workdir = Path(tempfile.mkdtemp(prefix="bench_mtl_overhead_"))
    started = time.perf_counter()

    def log(message):
        print(f"[{time.perf_counter() - started:6.0f}s] {message}", flush=True)

    report = {"settings": {"quick": args.quick, "micro_batch": MICRO_BATCH, "length": LENGTH,
                           "tasks_per_update": TASKS_PER_UPDATE, "optimizer": OPTIMIZER,
                           "families": FAMILIES, "multiple_choice_choices": CHOICES,
                           "balancing": "gradient_norm", "mixtures": args.mixtures,
                           "worker_logs": str(workdir)},
              "targets": TARGETS, "a": [], "b": []}
    jobs = ([("a", c, part_a) for c in args.configs] if "a" not in args.skip else []) + (
        [("b", args.mixture_config, part_b)] if "b" not in args.skip else [])
    for part, config_name, run in jobs:  # each entry: its own contention and time stamp
        contention, start = Contention(), time.perf_counter()
        entry = run(config_name, args, contention, log, workdir)
        entry.update(part=part, contention=contention.summary(), wall_seconds=time.perf_counter() - start,
                     finished=time.strftime("%Y-%m-%d %H:%M:%S"))
        report[part].append(entry)
    out = Path(args.output_dir or (workdir if args.quick else BENCH / "results"))
    previous = out / "mtl_overhead.json"
    if args.keep and previous.exists():  # entries not measured now come from the existing JSON
        old = json.loads(previous.read_text(encoding="utf-8"))
        for part in ("a", "b"):
            measured = {e["config"] for e in report[part]}
            report[part] += [e for e in old.get(part, []) if e["config"] not in measured]
        report["a"].sort(key=lambda e: list(CONFIGS).index(e["config"]))
    report["contention"] = {f"{e['part']} {e['config']}": e["contention"] for e in report["a"] + report["b"]}
    report["environment"] = environment()
    report["wall_seconds"] = time.perf_counter() - started
    report["notes"] = [
        "Shared 2-core machine: other engineers' processes run at the same time; the contention "
        "entry gives the cores they used per round. Wall-time medians over interleaved rounds; "
        "cpu_s is this worker's process CPU time per update (all TF threads), less sensitive "
        "to the others' load."]
    write_results(out, "mtl_overhead", report, markdown(report))


if __name__ == "__main__":
    main()
