"""Training-step throughput of our RoFormerV2 against bert4keras, keras-hub and a
RoBERTa-like baseline of the same size (tokens/s, CPU, TF backend), and of ours on
the JAX backend (`--systems ... ours_jax`).

    .venv/bin/python -m bench.backbone --output bench/results/backbone.json [--quick]

Every system gets the same step on the same batch: backbone -> [CLS] ->
Dense(2) softmax, sparse CE on fixed random labels, Adam(1e-4), dropout 0.1
(no attention dropout: keras-hub has none), batch 32, one `train_on_batch` a
step. Token ids are real text (cmrc2018 question + context pairs, char vocab
of 12000 built from tnews + cmrc2018) when ../shared/data is there, random
ids otherwise (the JSON says which).

Systems run interleaved in rounds within one process (ours, keras-hub, the
baseline), with bert4keras (legacy tf-keras, TF_KERAS=1 TF_USE_LEGACY_KERAS=1)
in a persistent subprocess whose rounds sit between theirs, as are those of
`ours_jax` (bench/jax_train_worker.py: our backbone on KERAS_BACKEND=jax with
.venv-jax's python, `make interop-jax`; skipped with a note without it; jit-compiled,
as `mtl train` runs on JAX, where the TF systems run as tf.function graphs without
XLA); the order rotates every round. Warm-up steps (tracing, first allocation) are
discarded, and at seq 128 so is the first step of each system's turn in a round
(caches still hold the previous model). The JSON has per-step times, medians, ratios, the
CPU load of other processes during the run (this machine is shared), and an
ablation of the speed work on our backbone (bench/variants.py), including the
cost of the float64 softmax denominator. Writes a markdown summary beside the
JSON.
"""
import argparse
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import REPO, child_env
from bench.load import cpu_model, machine_busy_seconds, proc_cpu_seconds

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

BENCH = REPO / "bench"

CONFIGS = {
    "L4-H256-A4": dict(num_layers=4, hidden_size=256, num_heads=4, intermediate_size=1024),
    "small": dict(num_layers=6, hidden_size=384, num_heads=6, intermediate_size=1536),
}
COMMON = dict(vocab_size=12000, segment_vocab_size=2, dropout=0.1, attention_dropout=0.0)
BATCH = 32
SYSTEMS = ["ours", "bert4keras", "keras_hub", "roberta_like"]  # the default run
ALL_SYSTEMS = SYSTEMS + ["ours_jax", "matmul_floor"]
SYSTEM_NAMES = {
    "ours": "ours (mtl_framework RoFormerV2Backbone, Keras 3)",
    "ours_jax": "ours on JAX (the same backbone and step, KERAS_BACKEND=jax, jit-compiled)",
    "bert4keras": "bert4keras 0.11.5 roformer_v2 (tf-keras 2)",
    "keras_hub": "keras-hub RoformerV2Backbone (Keras 3)",
    "roberta_like": "RoBERTa-like baseline (Keras 3 stock layers)",
    "matmul_floor": "matmul floor (the step's dense and attention matmuls alone, every other "
                    "op left out: bench/matmul_floor.py)",
}
DEFAULT_DATA = REPO.parent / "shared" / "data"
JAX_PYTHON = REPO / ".venv-jax" / "bin" / "python"
# Every system runs at each of these precisions (--precisions); a system's key in the JSON is
# its name in float32 and name + BF16 under mixed_bfloat16 (float32 variables, bf16 compute).
PRECISIONS = ["float32", "mixed_bfloat16"]
BF16 = "@bf16"


def entry(system, precision):
    """The key of `system` at `precision` in a cell's records."""
    return system if precision == "float32" else system + BF16


def split_entry(key):
    """(system, precision) of a record key (`entry`)."""
    return (key[:-len(BF16)], "mixed_bfloat16") if key.endswith(BF16) else (key, "float32")


def entry_name(key):
    system, precision = split_entry(key)
    return SYSTEM_NAMES[system] + ("" if precision == "float32" else ", mixed_bfloat16")


# --- data --------------------------------------------------------------------

def real_texts(data_root):
    """(vocab texts, [(question, context)]) from tnews and cmrc2018, or None if absent."""
    tnews, cmrc = data_root / "tnews" / "train.json", data_root / "cmrc2018" / "train.json"
    if not (tnews.exists() and cmrc.exists()):
        return None
    with open(tnews, encoding="utf-8") as f:
        titles = [json.loads(line)["sentence"] for line in f]
    with open(cmrc, encoding="utf-8") as f:
        squad = json.load(f)
    pairs, texts = [], []
    for article in squad["data"]:
        for paragraph in article["paragraphs"]:
            texts.append(paragraph["context"])
            for qa in paragraph["qas"]:
                texts.append(qa["question"])
            if paragraph["qas"]:
                pairs.append((paragraph["qas"][0]["question"], paragraph["context"]))
    return titles + texts, pairs, [str(tnews), str(cmrc)]


def make_batches(seqs, data_root, workdir, seed=0):
    """{seq: (token_ids, segment_ids)}, labels, and a description of where they came from."""
    from mtl_framework.tokenizer import Tokenizer, build_vocab, count_units, write_vocab

    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, BATCH).astype("int32")
    found = real_texts(data_root) if data_root is not None else None
    batches, info = {}, {}
    if found is None:
        info = {"source": "random token ids", "reason": f"{data_root} not found",
                "vocab_size": COMMON["vocab_size"]}
        for seq in seqs:
            ids = rng.integers(5, COMMON["vocab_size"], (BATCH, seq)).astype("int32")
            ids[:, 0] = 2
            batches[seq] = (ids, np.zeros_like(ids))
        return batches, labels, info
    texts, pairs, files = found
    vocab = build_vocab(count_units(texts), max_size=COMMON["vocab_size"])
    vocab_path = Path(workdir) / "vocab.txt"
    write_vocab(vocab, vocab_path)
    tokenizer = Tokenizer(str(vocab_path))
    chosen = [pairs[i] for i in sorted(rng.choice(len(pairs), BATCH, replace=False))]
    info = {"source": "real text: cmrc2018 train (question, context) pairs, 32 picked at random "
                      "(seed 0)", "vocab": "char vocab built by mtl_framework.tokenizer from tnews "
                      "train + cmrc2018 train", "files": files, "vocab_size": len(vocab),
            "real_token_fraction": {}}
    for seq in seqs:
        ids = np.zeros((BATCH, seq), "int32")
        segments = np.zeros_like(ids)
        for row, (question, context) in enumerate(chosen):
            t, s = tokenizer.encode(question, context, max_length=seq)
            ids[row, :len(t)], segments[row, :len(s)] = t, s
        batches[seq] = (ids, segments)
        info["real_token_fraction"][str(seq)] = round(float((ids > 0).mean()), 4)
    return batches, labels, info


# --- systems -----------------------------------------------------------------

def classifier(backbone, compile_kwargs=None):
    """backbone -> [CLS] -> Dense(2, softmax), compiled with Adam and sparse CE."""
    import keras

    inputs = {"token_ids": keras.Input((None,), dtype="int32", name="token_ids"),
              "segment_ids": keras.Input((None,), dtype="int32", name="segment_ids")}
    sequence = backbone(inputs)
    # float32 like bert4keras's (built after its policy is reset) whatever the policy
    probs = keras.layers.Dense(2, activation="softmax", name="classifier",
                               dtype="float32")(sequence[:, 0])
    model = keras.Model(inputs, probs)
    # TensorFlow: a tf.function graph without XLA, as `mtl train` runs; JAX: jitted, as
    # `mtl train` runs there (step/jax.py), un-jitted JAX is op by op
    jit = keras.backend.backend() == "jax"
    model.compile(optimizer=keras.optimizers.Adam(1e-4), loss="sparse_categorical_crossentropy",
                  **{"jit_compile": jit, **(compile_kwargs or {})})
    return model


def build_system(system, config, variant=None, precision="float32"):
    """The system's classifier, its layers under the Keras dtype policy `precision`."""
    import keras

    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(precision)
    try:
        return _build_system(system, config, variant)
    finally:
        keras.config.set_dtype_policy(previous)


def _build_system(system, config, variant=None):
    import keras

    keras.utils.set_random_seed(0)
    cfg = {**COMMON, **config}
    if system == "ours":
        if variant is None:
            from mtl_framework import RoFormerV2Backbone
            return classifier(RoFormerV2Backbone(**cfg))
        from bench.variants import backbone_variant
        return classifier(backbone_variant(**variant["backbone"], **cfg), variant.get("compile"))
    if system == "keras_hub":
        import keras_hub

        return classifier(keras_hub.models.RoformerV2Backbone(
            vocabulary_size=cfg["vocab_size"], num_layers=cfg["num_layers"],
            num_heads=cfg["num_heads"], hidden_dim=cfg["hidden_size"],
            intermediate_dim=cfg["intermediate_size"],
            head_size=cfg["hidden_size"] // cfg["num_heads"], dropout=cfg["dropout"],
            num_segments=cfg["segment_vocab_size"]))
    if system == "roberta_like":
        from bench.roberta_baseline import RobertaLikeBackbone

        return classifier(RobertaLikeBackbone(**cfg))
    if system == "matmul_floor":
        from bench.matmul_floor import MatmulFloor

        return MatmulFloor(cfg, keras.config.dtype_policy().compute_dtype)
    raise ValueError(system)


def backbone_params(model):
    """Trainable parameters without the Dense(2) classifier (None: the matmul floor)."""
    if not hasattr(model, "get_layer"):
        return None
    head = model.get_layer("classifier").trainable_weights
    return int(sum(np.prod(w.shape) for w in model.trainable_weights)
               - sum(np.prod(w.shape) for w in head))






class LoadMeter:
    """CPU time used by other processes (not this one, not the systems' workers)."""

    def __init__(self, pids):
        self.pids = pids
        self.total_wall = 0.0
        self.total_foreign = 0.0

    def __enter__(self):
        self.wall = time.perf_counter()
        self.busy = machine_busy_seconds()
        self.own = sum(proc_cpu_seconds(p) for p in self.pids())
        return self

    def __exit__(self, *exc):
        wall = time.perf_counter() - self.wall
        own = sum(proc_cpu_seconds(p) for p in self.pids()) - self.own
        foreign = max(0.0, machine_busy_seconds() - self.busy - own)
        self.total_wall += wall
        self.total_foreign += foreign
        self.last = foreign / max(wall, 1e-9)

    def cores_used_by_others(self):
        return self.total_foreign / max(self.total_wall, 1e-9)


class Worker:
    """A system timed in a persistent subprocess (`python -m MODULE --serve`): one JSON
    request a line in, one JSON reply a line out; its models stay built between rounds."""

    def __init__(self, name, module, workdir, env, python=sys.executable):
        self.name = name
        self.log = open(Path(workdir) / f"{name}_worker.log", "w")
        self.process = subprocess.Popen(
            [str(python), "-m", module, "--serve"], env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, bufsize=1)
        self.environment = self._read()["environment"]

    def _read(self):
        while True:
            line = self.process.stdout.readline()
            if not line:
                self.log.flush()
                raise RuntimeError(f"{self.name} worker died; see its log: {self.log.name}")
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue  # stray print from a library

    def run(self, config_path, data_path, seq, steps, precision="float32"):
        self.process.stdin.write(json.dumps({"config": str(config_path), "data": str(data_path),
                                             "seq": seq, "steps": steps,
                                             "precision": precision}) + "\n")
        reply = self._read()
        if "error" in reply:
            raise RuntimeError(f"{self.name} worker: {reply['error']}")
        return reply

    def close(self):
        try:
            self.process.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
            self.process.stdin.close()
            self.process.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
        self.log.close()


def bert4keras_worker(workdir):
    """bench.bert4keras_train_worker in a legacy-Keras (tf-keras 2) process."""
    env = child_env(TF_KERAS="1", TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2",
                    CUDA_VISIBLE_DEVICES="")
    env.pop("KERAS_BACKEND", None)
    return Worker("bert4keras", "bench.bert4keras_train_worker", workdir, env)


def jax_worker(workdir):
    """bench.jax_train_worker: ours on KERAS_BACKEND=jax with .venv-jax's python."""
    env = child_env(KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="")
    return Worker("ours_jax", "bench.jax_train_worker", workdir, env, python=JAX_PYTHON)


# systems timed in a subprocess: how to start its worker
WORKERS = {"bert4keras": bert4keras_worker, "ours_jax": jax_worker}


def bert4keras_available():
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("bert4keras", "tf_keras"))


def keras_hub_available():
    import importlib.util

    return importlib.util.find_spec("keras_hub") is not None


# --- timing ------------------------------------------------------------------

def time_steps(model, x, y, steps):
    walls, cpus = [], []
    for _ in range(steps):
        wall, cpu = time.perf_counter(), time.process_time()
        model.train_on_batch(x, y)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return walls, cpus


def time_fit_steps(model, x, y, steps):
    """Steps under model.fit over a repeated, prefetched tf.data.Dataset (intervals
    between batch ends; the first interval, fit's own start-up, is dropped)."""
    import keras
    import tensorflow as tf

    marks = []

    class Marks(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            marks.append((time.perf_counter(), time.process_time()))

    dataset = tf.data.Dataset.from_tensors((x, y)).repeat().prefetch(2)
    start = (time.perf_counter(), time.process_time())
    model.fit(dataset, steps_per_epoch=steps + 1, epochs=1, verbose=0, shuffle=False,
              callbacks=[Marks()])
    marks = [start] + marks
    walls = [b[0] - a[0] for a, b in zip(marks[1:], marks[2:])]
    cpus = [b[1] - a[1] for a, b in zip(marks[1:], marks[2:])]
    return walls, cpus


def summarize(walls, cpus, tokens):
    median = statistics.median(walls)
    cpu = statistics.median(cpus)
    fastest = min(walls)
    return {"tokens_per_s": round(tokens / median, 1), "step_s_median": round(median, 4),
            "slow_step_fraction": round(sum(t > 1.4 * fastest for t in walls) / len(walls), 3),
            "tokens_per_cpu_s": round(tokens / cpu, 1) if cpu > 0 else None,
            "cpu_s_median": round(cpu, 4), "steps": len(walls),
            "step_s": [round(t, 4) for t in walls]}


class Deadline:
    def __init__(self, seconds):
        self.end = time.perf_counter() + seconds

    def left(self):
        return self.end - time.perf_counter()


def plan_steps(step_estimates, rounds, budget, max_steps, settle=0):
    """Timed steps per round so that rounds * (settle + steps) * sum(step times) fits the
    budget (at least 1)."""
    per_step = sum(step_estimates.values())
    return int(max(1, min(max_steps, budget // max(rounds * per_step, 1e-9) - settle)))


def run_cell(config_name, seq, models, workers, paths, batches, labels, args, meter, budget, log):
    """Interleaved rounds of every system on one (config, seq); returns per-system records.
    `models`: {entry: in-process model, or None for a system of `workers`}."""
    ids, segments = batches[seq]
    x = {"token_ids": ids, "segment_ids": segments}
    tokens = BATCH * seq
    warmup = 2 if seq <= 128 else 1
    warm, estimate = {}, {}
    cell_start = time.perf_counter()
    for system in models:  # warm-up: first step traces (new shape), discarded
        with meter:
            if split_entry(system)[0] in workers:
                name, precision = split_entry(system)
                reply = workers[name].run(paths[name, config_name], paths["data"], seq, warmup,
                                          precision)
                walls = reply["step_seconds"]
            else:
                walls, _ = time_steps(models[system], x, labels, warmup)
        warm[system] = [round(t, 3) for t in walls]
        estimate[system] = walls[-1]
        log(f"  warm-up {system}: {warm[system]} s")
    left = budget - (time.perf_counter() - cell_start)
    rounds, settle = rounds_for(args, seq), settle_steps(seq)
    steps = plan_steps(estimate, rounds, left, args.max_steps, settle)
    log(f"  {rounds} rounds x ({settle} settling + {steps} timed) steps "
        f"(budget {left:.0f} s left for this cell)")
    walls = {s: [] for s in models}
    cpus = {s: [] for s in models}
    per_round = {s: [] for s in models}
    settling = {s: [] for s in models}
    order = list(models)
    for r in range(rounds):
        rotated = order[r % len(order):] + order[:r % len(order)]
        for system in rotated:
            with meter:
                if split_entry(system)[0] in workers:
                    name, precision = split_entry(system)
                    reply = workers[name].run(paths[name, config_name], paths["data"], seq,
                                              settle + steps, precision)
                    w, c = reply["step_seconds"], reply["cpu_seconds"]
                else:
                    w, c = time_steps(models[system], x, labels, settle + steps)
            settling[system] += [round(t, 4) for t in w[:settle]]
            walls[system] += w[settle:]
            cpus[system] += c[settle:]
            per_round[system].append(statistics.median(w[settle:]))
        log(f"  round {r + 1}: " + ", ".join(
            f"{s} {tokens / per_round[s][-1]:.0f}" for s in order) + " tokens/s")
    records = {}
    for system in models:
        records[system] = {**summarize(walls[system], cpus[system], tokens),
                           "warmup_step_s": warm[system], "settling_step_s": settling[system],
                           "round_medians_s": [round(t, 4) for t in per_round[system]]}
    return records, rounds, steps


def settle_steps(seq):
    """Untimed steps at the start of each system's turn in a round: after another model
    ran, caches hold its weights; the first step back is slower (at seq 128 visibly)."""
    return 1 if seq <= 128 else 0


def rounds_for(args, seq):
    """Rounds per cell: more where steps are short (finer interleaving, less drift)."""
    if args.rounds:
        return args.rounds
    if args.quick:
        return 2
    return 5 if seq <= 128 else 3


def ratios(records):
    """ours over each other system at the same precision (keys `ours/other`, and
    `ours@bf16/other@bf16`), ours on JAX over ours on TensorFlow (`ours_jax/ours`: above 1,
    JAX faster), plus each system's mixed_bfloat16 over its float32 (`system@bf16/system`)."""
    out = {}
    for system in ALL_SYSTEMS:
        fast, slow = records.get(entry(system, "mixed_bfloat16")), records.get(system)
        if fast and slow:
            out[f"{entry(system, 'mixed_bfloat16')}/{system}"] = {
                "pooled_median": round(fast["tokens_per_s"] / slow["tokens_per_s"], 3)}
    for precision in PRECISIONS:
        out.update(_ratios_at(records, precision))
    return out


def _ratios_at(records, precision):
    out = {}
    pairs = [("ours", other) for other in ("bert4keras", "roberta_like", "keras_hub")]
    # the floor over a system: the most any change to that system's step could gain
    floors = [("matmul_floor", other) for other in ("ours", "bert4keras", "roberta_like")]
    for fast, slow in pairs + [("ours_jax", "ours")] + floors:
        fast, slow = entry(fast, precision), entry(slow, precision)
        if fast in records and slow in records:
            out[f"{fast}/{slow}"] = speed_ratio(records[fast], records[slow])
    return out


def speed_ratio(fast, slow):
    """tokens/s of `fast` over `slow` (records of one cell): pooled medians, per round
    (the rounds interleave them), and fastest step against fastest step."""
    paired = [b / a for a, b in zip(fast["round_medians_s"], slow["round_medians_s"])]
    return {"pooled_median": round(fast["tokens_per_s"] / slow["tokens_per_s"], 3),
            "per_round": [round(v, 3) for v in paired],
            "median_of_rounds": round(statistics.median(paired), 3),
            "best_step": round(min(slow["step_s"]) / min(fast["step_s"]), 3)}


# --- ablation ----------------------------------------------------------------

FIRST = dict(norm="autodiff", alpha="activations", matmul="autodiff")  # as first committed
ABLATION = [
    # name, backbone variant (bench/variants.py), compile kwargs, how timed, what it is
    ("original", dict(FIRST, attention="original"), None, "train_on_batch",
     "as first committed: strided q/k/v slices of [b,l,3,h,d], slice-and-stack rotary, "
     "einsum on token-major q/k, scores / sqrt(d), exact softmax and RMS norm autodiffed, "
     "residual scale a on the branch outputs"),
    ("+ pair-swap rotary", dict(FIRST, attention="pair_swap_rotary"), None, "train_on_batch",
     "rotary as x*cos + swap_pairs(x)*sin (reverse of a [.., d/2, 2] view), still slicing q/k/v"),
    ("+ head-major transpose + split", dict(FIRST, attention="head_major_split"), None,
     "train_on_batch", "one transpose to [3,b,h,l,d] and a split: no StridedSlice(Grad) left"),
    ("+ 1/sqrt(d) folded into q", dict(FIRST, attention="scale_q"), None, "train_on_batch",
     "scale the [l,d] rotary tables of q instead of the [b,h,l,l] scores"),
    ("+ custom-gradient exact softmax", dict(FIRST, attention="custom_softmax"), None,
     "train_on_batch",
     "forward unchanged (float64 denominator), backward y*(g - sum(g*y)) in float32"),
    ("+ RMS norm gradient written out",
     dict(attention="custom_softmax", alpha="activations", matmul="autodiff"), None,
     "train_on_batch", "r*(g - y*mean(g*y)) instead of autodiff through square/mean/rsqrt"),
    ("+ a on the output kernels", dict(attention="custom_softmax", matmul="autodiff"), None,
     "train_on_batch",
     "residual scale multiplies the [inner, hidden] kernels, not [b,l,h] activations"),
    ("+ input gradient via a transposed kernel copy = ours", dict(), None, "train_on_batch",
     "layers.dense: dX = dY @ copy(W^T) instead of MatMul(transpose_b=True), which oneDNN "
     "runs slower here: mtl_framework/layers.py now"),
    ("ours, pair swap by reverse (before)", dict(attention="reverse_pair_swap"), None,
     "train_on_batch", "rotary pair swap as a reverse of a [.., d/2, 2] view and its "
     "gradient, where ours multiplies by a [d, d] permutation (layers.apply_rotary)"),
    ("ours + XLA (jit_compile=True)", dict(), {"jit_compile": True}, "train_on_batch",
     "whole train step compiled by XLA"),
    ("ours, fit() on tf.data", dict(), None, "fit",
     "model.fit over a repeated, prefetched tf.data.Dataset instead of train_on_batch on NumPy"),
    ("ours, token-major einsum", dict(attention="token_major_einsum"), None, "train_on_batch",
     "q/k/v split on the last axis, kept [b,l,h,d], einsums transpose internally"),
    ("ours, float32 softmax", dict(attention="float32_softmax"), None, "train_on_batch",
     "what the float64 denominator costs (NOT padding-exact)"),
    ("ours, keras.ops.dot_product_attention", dict(attention="keras_dot_product_attention"),
     None, "train_on_batch",
     "Keras's attention op on [b,l,h,d] (float32 softmax: NOT padding-exact)"),
]
OURS_ROW = "+ input gradient via a transposed kernel copy = ours"
QUICK_ABLATION = ("original", OURS_ROW, "ours, float32 softmax")
ROTARY_AB = (OURS_ROW, "ours, pair swap by reverse (before)")


def softmax_summary(ablation):
    speed = {row["variant"]: row["tokens_per_s"] for row in ablation["rows"]}
    ours, f32 = speed[OURS_ROW], speed["ours, float32 softmax"]
    return {"seq": ablation["seq"], "ours_tokens_per_s": ours, "float32_tokens_per_s": f32,
            "cost": round(1 - ours / f32, 3)}


def run_ablation(config_name, seq, batches, labels, args, meter, budget, log, names=None):
    ids, segments = batches[seq]
    x = {"token_ids": ids, "segment_ids": segments}
    tokens = BATCH * seq
    rows = [r for r in ABLATION if names is None or r[0] in names]
    models, estimate, warm = {}, {}, {}
    start = time.perf_counter()
    for name, variant, compile_kwargs, how, _ in rows:
        model = build_system("ours", CONFIGS[config_name],
                             {"backbone": variant, "compile": compile_kwargs})
        t0 = time.perf_counter()
        with meter:
            walls, _ = time_steps(model, x, labels, 2)
        warm[name] = {"first_step_s": round(walls[0], 2)}
        estimate[name] = walls[-1]
        models[name] = (model, how)
        log(f"  ablation warm-up {name}: {walls[0]:.1f} s then {walls[1]:.2f} s "
            f"({time.perf_counter() - t0:.0f} s)")
    left = budget - (time.perf_counter() - start)
    rounds, settle = rounds_for(args, seq), settle_steps(seq)
    steps = plan_steps(estimate, rounds, left, args.max_steps, settle)
    log(f"  ablation: {rounds} rounds x ({settle} settling + {steps} timed) steps")
    walls = {n: [] for n in models}
    cpus = {n: [] for n in models}
    per_round = {n: [] for n in models}
    names = list(models)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            model, how = models[name]
            with meter:
                if how == "fit":  # its first step (with fit's start-up) is never timed
                    w, c = time_fit_steps(model, x, labels, steps)
                else:
                    w, c = time_steps(model, x, labels, settle + steps)
                    w, c = w[settle:], c[settle:]
            walls[name] += w
            cpus[name] += c
            per_round[name].append(statistics.median(w))
    out = []
    base = previous = None
    for name, variant, compile_kwargs, how, what in rows:
        s = summarize(walls[name], cpus[name], tokens)
        base = base or s["tokens_per_s"]
        chain = name == "original" or name.startswith("+ ")
        out.append({"variant": name, "what": what, "backbone": variant,
                    "compile": compile_kwargs or {}, "timed_by": how, **warm[name], **s,
                    "round_tokens_per_s": [round(tokens / t, 1) for t in per_round[name]],
                    "vs_original": round(s["tokens_per_s"] / base, 3),
                    "vs_previous_step": round(s["tokens_per_s"] / previous, 3)
                    if chain and previous else None})
        if chain:
            previous = s["tokens_per_s"]
    del models
    return out, rounds, steps


def padding_check():
    """Max change of real-token outputs when padding 60 -> 128/512 tokens, ours vs the
    float32-softmax variant (why ours keeps the float64 denominator)."""
    from bench.variants import backbone_variant

    rng = np.random.default_rng(1)
    ids = rng.integers(5, 12000, (8, 60)).astype("int32")
    for row, n in enumerate([60, 57, 41, 33, 20, 12, 7, 3]):
        ids[row, n:] = 0
    out = {}
    for variant in ("ours", "float32_softmax"):
        backbone = backbone_variant(attention=variant, **COMMON, **CONFIGS["L4-H256-A4"])
        ref = np.asarray(backbone({"token_ids": ids, "segment_ids": np.zeros_like(ids)}))
        worst = 0.0
        for length in (128, 512):
            padded = np.pad(ids, ((0, 0), (0, length - 60)))
            got = np.asarray(backbone({"token_ids": padded, "segment_ids": np.zeros_like(padded)}))
            worst = max(worst, float(np.abs(got[:, :60][ids > 0] - ref[ids > 0]).max()))
        out[variant] = worst
    return out


# --- report ------------------------------------------------------------------

def environment(workers):
    import keras
    import tensorflow as tf

    env = {"cpu_count": os.cpu_count(), "python": platform.python_version(),
           "platform": platform.platform(), "tensorflow": tf.__version__,
           "keras": keras.__version__, "keras_backend": keras.backend.backend(),
           "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads() or "default",
           "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads() or "default",
           "oneDNN": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default (on)")}
    if model := cpu_model():
        env["cpu_model"] = model
    try:
        import keras_hub
        env["keras_hub"] = keras_hub.__version__
    except ImportError:
        pass
    for name, worker in workers.items():  # bert4keras's under its first name, worker_*
        prefix = "worker_" if name == "bert4keras" else f"{name}_worker_"
        env.update({prefix + k: v for k, v in worker.environment.items()})
    return env


def markdown(report):
    lines = []
    env = report["environment"]
    lines.append(f"Training-step throughput, batch {BATCH}, tokens/s (median of interleaved "
                 f"steps; higher is better). {env.get('cpu_model', 'CPU')}, "
                 f"{env['cpu_count']} cores, TF {env['tensorflow']}, Keras {env['keras']}"
                 f", bert4keras {env.get('worker_bert4keras', '-')} on tf-keras "
                 f"{env.get('worker_tf_keras', '-')}, keras-hub {env.get('keras_hub', '-')}"
                 + (f", ours_jax on JAX {env['ours_jax_worker_jax']} (Keras "
                    f"{env['ours_jax_worker_keras']})" if "ours_jax_worker_jax" in env else "")
                 + ". "
                 f"Other processes used {report['contention']['cores_used_by_others']:.2f} "
                 f"of the {env['cpu_count']} cores on average during the run.")
    lines.append("")
    systems = [s for s in ALL_SYSTEMS
               if any(entry(s, p) in c["systems"] for c in report["cells"] for p in PRECISIONS)]
    precisions = [p for p in PRECISIONS
                  if any(entry(s, p) in c["systems"] for c in report["cells"] for s in systems)]
    # (ratio column, faster system, slower system): ours over each peer, JAX over TF (ours)
    columns = [(f"ours / {title}", "ours", other) for other, title in
               (("bert4keras", "bert4keras"), ("roberta_like", "RoBERTa-like"),
                ("keras_hub", "keras-hub"))]
    if "ours_jax" in systems:
        columns.append(("JAX / TF (ours)", "ours_jax", "ours"))
    if "matmul_floor" in systems:
        columns += [(f"floor / {title}", "matmul_floor", other) for other, title in
                    (("ours", "ours"), ("bert4keras", "bert4keras"),
                     ("roberta_like", "RoBERTa-like"))]
    header = "| config | seq | precision | steps | " + " | ".join(SYSTEM_NAMES[s].split(" (")[0]
                                                               for s in systems)
    header += "".join(f" | {title}" for title, _, _ in columns) + " |"
    lines += [header, "|" + "---|" * (4 + len(systems) + len(columns))]
    for cell in report["cells"]:
        for precision in precisions:
            row = (f"| {cell['config']} | {cell['seq']} | {precision} | "
                   f"{cell['rounds']}x{cell['steps_per_round']} | ")
            row += " | ".join(f"{cell['systems'][entry(s, precision)]['tokens_per_s']:,.0f}"
                              if entry(s, precision) in cell["systems"] else "-" for s in systems)
            for _, fast, slow in columns:
                r = cell["ratios"].get(f"{entry(fast, precision)}/{entry(slow, precision)}")
                row += f" | {r['pooled_median']:.2f}x" if r else " | -"
            lines.append(row + " |")
    if len(precisions) > 1:
        lines += ["", "mixed_bfloat16 over float32, each system (tokens/s ratio, same run):", ""]
        for cell in report["cells"]:
            lines.append(f"- {cell['config']}/{cell['seq']}: " + ", ".join(
                f"{s} {cell['ratios'][f'{entry(s, PRECISIONS[1])}/{s}']['pooled_median']:.2f}x"
                for s in systems if f"{entry(s, PRECISIONS[1])}/{s}" in cell["ratios"]))
    lines += ["", "The same ratios three ways (pooled median / median of per-round ratios / "
                  "fastest step vs fastest step):", "",
              "| config | seq | precision" + "".join(f" | {t}" for t, _, _ in columns) + " |",
              "|---|---|---|" + "---|" * len(columns)]
    for cell in report["cells"]:
        for precision in precisions:
            row = f"| {cell['config']} | {cell['seq']} | {precision}"
            for _, fast, slow in columns:
                r = cell["ratios"].get(f"{entry(fast, precision)}/{entry(slow, precision)}")
                row += (f" | {r['pooled_median']:.2f} / {r['median_of_rounds']:.2f} / "
                        f"{r['best_step']:.2f}" if r else " | -")
            lines.append(row + " |")
    lines.append("")
    slow = [f"{s} {cell['config']}/{cell['seq']}: {100 * r['slow_step_fraction']:.0f}%"
            for cell in report["cells"] for s, r in cell["systems"].items()
            if r["slow_step_fraction"] >= 0.2]
    if slow:
        lines.append("Steps over 1.4x the system's fastest step (the median moves with them): "
                     + ", ".join(slow) + ".")
    lines.append("Systems: " + "; ".join(f"{s}: {SYSTEM_NAMES[s]}" for s in systems) + "; "
                 + f"{BF16}: the same under Keras's mixed_bfloat16 policy.")
    lines.append(f"Step: backbone -> [CLS] -> Dense(2) softmax CE, Adam, dropout 0.1; "
                 f"data: {report['data']['source']}.")
    targets = report.get("targets", {})
    if targets:
        lines.append("Targets at seq 128: " + "; ".join(
            f"{k}: {'met' if v['met'] else 'NOT met'} ({v['ratio']:.2f}x)"
            for k, v in targets.items()) + ".")
    if report.get("ablation"):
        ab = report["ablation"]
        lines += ["", f"Ablation (ours, {ab['config']}, seq {ab['seq']}, {ab['rounds']} "
                      f"interleaved rounds x {ab['steps_per_round']} steps; each row one change "
                      "to our backbone or train step; the range is that of the round medians, "
                      "the run-to-run noise a step gain must clear):", "",
                  "| variant | tokens/s | range over rounds | vs original | step gain | what |",
                  "|---|---|---|---|---|---|"]
        for row in ab["rows"]:
            step = f"{row['vs_previous_step']:.2f}x" if row.get("vs_previous_step") else ""
            spread = row["round_tokens_per_s"]
            lines.append(f"| {row['variant']} | {row['tokens_per_s']:,.0f} | "
                         f"{min(spread):,.0f}-{max(spread):,.0f} | "
                         f"{row['vs_original']:.2f}x | {step} | {row['what']} |")
    if report.get("float64_softmax_cost"):
        lines += ["", "Cost of the float64 softmax denominator (padding-exact) against a float32 "
                      "softmax, same run: " + "; ".join(
                          f"seq {c['seq']}: {100 * c['cost']:+.1f}% "
                          f"({c['ours_tokens_per_s']:,.0f} vs {c['float32_tokens_per_s']:,.0f} "
                          "tokens/s)" for c in report["float64_softmax_cost"]["at"])
                  + " (positive: ours slower)."]
    if report.get("padding_check"):
        pc = report["padding_check"]
        lines += ["", "Padding exactness (max change of real-token outputs, 60 -> 128/512 "
                      f"positions): ours {pc['ours']:.1e}, float32 softmax "
                      f"{pc['float32_softmax']:.1e}."]
    lines.append("")
    command = report.get("command") or ("python -m bench.backbone"
                                        + (" --quick" if report["settings"]["quick"] else ""))
    lines.append(f"Run: `{command}`"
                 f", {report['wall_seconds']:.0f} s.")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=str(BENCH / "results" / "backbone.json"))
    parser.add_argument("--quick", action="store_true", help="L4 at seq 128 only, few steps")
    parser.add_argument("--configs", nargs="+", choices=sorted(CONFIGS))
    parser.add_argument("--seqs", nargs="+", type=int)
    parser.add_argument("--systems", nargs="+", choices=ALL_SYSTEMS, default=SYSTEMS,
                        help="default: every TensorFlow system; ours_jax: ours on JAX")
    parser.add_argument("--precisions", nargs="+", choices=PRECISIONS, default=PRECISIONS,
                        help="every system at each (default both, in one run)")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--max-steps", type=int, default=6, help="per system per round")
    parser.add_argument("--budget", type=float, help="seconds for all measurements "
                        "(default 760, quick 150); steps per round shrink to fit")
    parser.add_argument("--no-ablation", action="store_true")
    parser.add_argument("--ablation-config", choices=sorted(CONFIGS), default="L4-H256-A4")
    parser.add_argument("--ablation-rows", nargs="+", metavar="VARIANT",
                        help="only these ablation rows (their names in ABLATION); "
                             "`rotary`: ours against the reverse pair swap")
    parser.add_argument("--inter-op-threads", type=int, default=0,
                        help="TF inter-op thread pool size for every system (0: TF default)")
    parser.add_argument("--data-root", default=os.environ.get("MTL_SHARED_DATA", str(DEFAULT_DATA)))
    args = parser.parse_args(argv)
    args.configs = args.configs or (["L4-H256-A4"] if args.quick else list(CONFIGS))
    args.seqs = args.seqs or ([128] if args.quick else [128, 512])
    args.budget = args.budget or (150 if args.quick else 760)
    if args.quick:
        args.max_steps = min(args.max_steps, 2)

    started = time.perf_counter()
    if args.inter_op_threads:
        import tensorflow as tf

        tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)
        os.environ["BENCH_INTER_OP_THREADS"] = str(args.inter_op_threads)

    def log(message):
        print(f"[{time.perf_counter() - started:6.0f}s] {message}", flush=True)

    rows_asked = (ROTARY_AB if args.ablation_rows == ["rotary"] else args.ablation_rows)
    deadline = Deadline(args.budget)
    workdir = tempfile.mkdtemp(prefix="bench_backbone_")
    batches, labels, data_info = make_batches(args.seqs, Path(args.data_root), workdir)
    log(f"data: {data_info['source']}")
    systems = list(args.systems)
    notes = []
    if "bert4keras" in systems and not bert4keras_available():
        systems.remove("bert4keras")
        notes.append("bert4keras/tf-keras not installed: skipped (make interop)")
    if "keras_hub" in systems and not keras_hub_available():
        systems.remove("keras_hub")
        notes.append("keras-hub not installed: skipped (make interop)")
    if "ours_jax" in systems and not JAX_PYTHON.exists():
        systems.remove("ours_jax")
        notes.append(f"ours_jax: {JAX_PYTHON.relative_to(REPO)} is absent: skipped "
                     "(make interop-jax)")
    paths = {"data": Path(workdir) / "batches.npz"}
    np.savez(paths["data"], labels=labels, **{f"token_ids_{s}": b[0] for s, b in batches.items()},
             **{f"segment_ids_{s}": b[1] for s, b in batches.items()})
    workers = {name: start(workdir) for name, start in WORKERS.items() if name in systems}
    for name in args.configs:  # each worker's model config, as a file
        if "bert4keras" in workers:
            from mtl_framework.architectures.roformer_v2 import bert4keras
            from mtl_framework.architectures.roformer_v2.presets import backbone_config

            paths["bert4keras", name] = Path(workdir) / f"{name}.bert_config.json"
            paths["bert4keras", name].write_text(json.dumps(bert4keras.bert_config_from_config(
                backbone_config(**COMMON, **CONFIGS[name]))))
        if "ours_jax" in workers:  # CONFIGS' dims: the worker builds `build_system("ours", ..)`
            paths["ours_jax", name] = Path(workdir) / f"{name}.ours_config.json"
            paths["ours_jax", name].write_text(json.dumps(CONFIGS[name]))
    meter = LoadMeter(lambda: [os.getpid()] + [w.process.pid for w in workers.values()])
    in_process = [s for s in systems if s not in workers]

    # budget: the ablation keeps a reserve; the cells share the rest by weight (seq 128
    # cells get more steps per second of step time: the targets are set there)
    weight = {(c, s): (2.5 if c == "L4-H256-A4" else 4.0) * (1.0 if s <= 128 else 1.3 * s / 512)
              for c in args.configs for s in args.seqs}
    reserve = 0.0 if args.no_ablation else (60.0 if args.quick else 220.0)
    cells = []
    for config_name in args.configs:
        log(f"config {config_name}: building {', '.join(systems)}")
        models = {entry(s, p): build_system(s, CONFIGS[config_name], precision=p)
                  for p in args.precisions for s in in_process}
        params = {s: backbone_params(m) for s, m in models.items()}
        order = {entry(s, p): models.get(entry(s, p)) for p in args.precisions for s in systems}
        for seq in args.seqs:
            done = {(c["config"], c["seq"]) for c in cells}
            remaining = [k for k in weight if k not in done]
            share = weight[(config_name, seq)] / sum(weight[k] for k in remaining)
            budget = max(0.0, deadline.left() - reserve) * share
            log(f"config {config_name}, seq {seq} (budget {budget:.0f} s)")
            records, rounds, steps = run_cell(config_name, seq, order, workers, paths, batches,
                                              labels, args, meter, budget, log)
            for s in records:
                records[s]["backbone_params"] = params.get(s)
            cells.append({"config": config_name, "seq": seq, "batch": BATCH,
                          "tokens_per_step": BATCH * seq, "rounds": rounds,
                          "steps_per_round": steps, "systems": records,
                          "ratios": ratios(records),
                          "foreign_cores_last_round": round(meter.last, 2)})
            log("  " + ", ".join(f"{s} {r['tokens_per_s']:.0f}" for s, r in records.items())
                + " tokens/s; " + ", ".join(f"{k} {v['pooled_median']:.2f}x"
                                           for k, v in cells[-1]["ratios"].items()))
        del models, order
        gc.collect()

    ablation = softmax_cost = None
    if not args.no_ablation:
        config_name, seq = args.ablation_config, min(args.seqs)
        long_seq = max(args.seqs) if max(args.seqs) > seq and not args.quick else None
        keep = 50.0 if long_seq else 0.0  # for the float64-softmax check at the long length
        log(f"ablation on ours ({config_name}, seq {seq}, budget {deadline.left() - keep:.0f} s)")
        rows, rounds, steps = run_ablation(
            config_name, seq, batches, labels, args, meter,
            max(deadline.left() - keep, reserve / 2), log,
            rows_asked if rows_asked else QUICK_ABLATION if args.quick else None)
        ablation = {"config": config_name, "seq": seq, "rounds": rounds,
                    "steps_per_round": steps, "rows": rows}
        for row in rows:
            log(f"  {row['variant']}: {row['tokens_per_s']:.0f} tokens/s "
                f"({row['vs_original']:.2f}x original)")
        measured_softmax = "ours, float32 softmax" in {row["variant"] for row in rows}
        long_seq = long_seq if measured_softmax else None
        if long_seq:
            log(f"float64 softmax denominator at seq {long_seq}")
            pair = (OURS_ROW, "ours, float32 softmax")
            long_rows, rounds, steps = run_ablation(config_name, long_seq, batches, labels, args,
                                                    meter, max(deadline.left(), keep), log, pair)
            softmax_cost = {"config": config_name, "seq": long_seq, "rounds": rounds,
                            "steps_per_round": steps, "rows": long_rows}
        if measured_softmax:
            softmax_cost = {"note": "ours (float64 denominator, padding-exact) vs the same with "
                                    "a float32 softmax; cost = 1 - ours / float32",
                            "at": [softmax_summary(ablation)]
                            + ([softmax_summary(softmax_cost)] if softmax_cost else [])}
            log(f"  float64 softmax cost: {softmax_cost['at']}")
    padding = padding_check()
    log(f"padding check: {padding}")

    targets = {}
    for cell in cells:
        if cell["seq"] != 128:
            continue
        for (other, goal), precision in ((o, p) for o in (("bert4keras", 1.3), ("roberta_like", 1.2))
                                         for p in args.precisions):
            key = f"{entry('ours', precision)}/{entry(other, precision)}"
            r = cell["ratios"].get(key)
            if r:
                targets[f"{cell['config']} {precision}: ours >= {goal}x {other}"] = {
                    "ratio": r["pooled_median"], "goal": goal,
                    "met": r["pooled_median"] >= goal}
    report = {
        "benchmark": "training-step throughput (tokens/s = batch * seq / median step time)",
        "environment": environment(workers),
        "settings": {"quick": args.quick, "batch": BATCH, "seqs": args.seqs,
                     "configs": {c: {**COMMON, **CONFIGS[c]} for c in args.configs},
                     "rounds": args.rounds or "5 at seq <= 128, 3 at 512 (quick: 2)",
                     "max_steps_per_round": args.max_steps,
                     "budget_s": args.budget, "warmup": "2 steps at seq <= 128, 1 at 512 "
                     "(the first traces), discarded",
                     "step": "backbone -> [CLS] -> Dense(2) softmax, sparse CE on fixed random "
                             "labels, Adam(1e-4), train_on_batch on NumPy arrays",
                     "systems": {s: SYSTEM_NAMES[s] for s in systems},
                     "jit_compile": "TensorFlow systems: False (tf.function graph, as mtl train); "
                                    "ours_jax: True (jax.jit, as mtl train on JAX)",
                     "precisions": args.precisions},
        "data": data_info,
        "cells": cells,
        "targets": targets,
        "ablation": ablation,
        "float64_softmax_cost": softmax_cost,
        "padding_check": padding,
        "contention": {"cores_used_by_others": round(meter.cores_used_by_others(), 3),
                       "note": "mean CPU cores busy with other processes while timing "
                               "(from /proc/stat minus this process and the workers)"},
        "notes": notes,
        "wall_seconds": round(time.perf_counter() - started, 1),
        "command": " ".join(["python -m bench.backbone", *(sys.argv[1:] if argv is None else argv)]),
    }
    for worker in workers.values():
        worker.close()
    shutil.rmtree(workdir, ignore_errors=True)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    output.with_suffix(".md").write_text(markdown(report))
    log(f"wrote {output} and {output.with_suffix('.md')}")


if __name__ == "__main__":
    main()
