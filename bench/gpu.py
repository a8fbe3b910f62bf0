"""Training-step throughput on one GPU with JAX (no TensorFlow): our RoFormerV2 against
keras-hub's RoformerV2Backbone and two BERT/RoBERTa-like encoders of the same size, at
`base`, seq 128 and 512, bfloat16 mixed precision; tokens/s and model FLOPs utilisation.
Plus one mixed multi-task update against a single-task step, where mtl_framework's
training step runs on JAX.

On the GPU machine (Python 3.12, JAX with CUDA, no Keras, no TensorFlow, no network), with
the wheels of `bash bench/gpu_wheels.sh` in .whl/ and `.whl` carried, one line:

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:. KERAS_BACKEND=jax PYTHONUNBUFFERED=1 && python3 -m bench.gpu --output $OUT/gpu.json

(about 5-8 minutes on an H100, most of it XLA compilation: 8 training steps for the table,
9 micro-step functions for the multi-task part; `--budget-s` (default 480) skips what would
not fit and says so: `--no-table` or `--seqs 512 --no-multitask` then measure the rest). On a CPU, `--quick` runs a tiny model for 2 timed steps per system (a smoke test:
`KERAS_BACKEND=jax python -m bench.gpu --quick --output /tmp/gpu.json`).

The step: backbone -> [CLS] -> Dense(2) softmax, sparse cross-entropy on fixed random
labels, AdamW(1e-4), dropout 0.1, one jitted function (`jax.jit` of Keras's
`stateless_call` + `jax.value_and_grad` + `optimizer.stateless_apply`, state donated):
forward, backward and the optimizer update. Batches of 16,384 tokens (128 x 128, 32 x 512),
random token ids in [5, 12000) with [CLS] = 2 first and no padding. Each step is timed to
`jax.block_until_ready` of everything it returns; medians over rounds that interleave the
systems (order rotated each round) after warm-up steps (compilation) that are not timed.

Systems:
  ours          mtl_framework RoFormerV2Backbone (exact_padding=False: the float32 softmax
                a GPU run picks)
  keras_hub     keras-hub RoformerV2Backbone (its RMS norms have a scale; no biases)
  roberta_like  bench/roberta_baseline.py: learned positions, LayerNorm, biases, GELU FFN
                from stock Keras layers
  keras_hub_bert  keras-hub BertBackbone (BERT-base layout, plus its pooler)

Model FLOPs per step (PaLM, Chowdhery et al. 2022, appendix B; the same formula for every
system, from its own dims): 6 * N * T + 12 * L * inner * s * T, with T = tokens in the
batch, s = sequence length, L layers, inner = heads * head_size, and N the parameters that
multiply activations (per layer 4 * hidden * inner + 2 * hidden * ffn, plus the Dense(2)
head); embedding lookups, norms, biases, softmax and the BERT pooler are not counted.
MFU = model FLOPs / step time / peak, the peak being the datasheet's dense bf16 rate for
the device `jax.devices()[0].device_kind` names (`PEAK_BF16`; H100 SXM and H200: 989.4
TFLOP/s); the JSON also gives the rate of one large bf16 matrix product measured in the
same run, and MFU against it.

The multi-task part (`multitask`): a `base` MultiTaskModel with one head of each of 8
families (bench/mtl_overhead.py's tasks and batches), timed as `run_update` of 8
micro-batches of 16 x 128, one per family ("mixed"), of 8 micro-batches of 16 x 128 of one
classification task ("same_task"), and of one 128 x 128 classification batch ("one_batch",
the single-task step); the same 16,384 tokens each. It needs mtl_framework's training
step to run under KERAS_BACKEND=jax without TensorFlow; where it does not, the JSON and the
table say "not available" with the reason (the exception), and no number.

Writes the JSON to --output and a markdown table beside it (same name, .md), after each
sequence length and at the end.
"""  # noqa: E501 - the device command is one line, to be copied as it is
import argparse
import json
import os
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "jax")

import numpy as np  # noqa: E402

VOCAB = 12000
BASE = dict(num_layers=12, hidden_size=768, num_heads=12, intermediate_size=3072)
TINY = dict(num_layers=2, hidden_size=64, num_heads=2, intermediate_size=128)
# tokens per step 16,384 at every length (batch x seq)
CELLS = {128: 128, 512: 32}
QUICK_CELLS = {16: 4, 32: 2}
SYSTEMS = ["ours", "keras_hub", "roberta_like", "keras_hub_bert"]
SYSTEM_NAMES = {
    "ours": "ours (mtl_framework RoFormerV2Backbone)",
    "keras_hub": "keras-hub RoformerV2Backbone",
    "roberta_like": "RoBERTa-like (bench/roberta_baseline.py, stock Keras layers)",
    "keras_hub_bert": "keras-hub BertBackbone",
}
# Datasheet dense bf16 tensor-core peaks (no sparsity), TFLOP/s, matched on device_kind.
PEAK_BF16 = [
    ("H200", 989.4),        # NVIDIA H200 (SXM): same GH100 chip and clocks as H100 SXM
    ("GH200", 989.4),
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.4),        # "NVIDIA H100 80GB HBM3" = H100 SXM5
    ("A100", 312.0),
    ("L40S", 362.05),
]


def log(message):
    print(f"[gpu {time.strftime('%H:%M:%S')}] {message}", flush=True)


def peak_tflops(device_kind):
    for key, peak in PEAK_BF16:
        if key.lower() in device_kind.lower():
            return key, peak
    return None, None


# --- FLOPs -------------------------------------------------------------------

def matmul_params(config, classes=2):
    """Parameters that multiply activations: q, k, v, o and the two FFN kernels per
    layer, plus the classifier."""
    hidden, inner = config["hidden_size"], config["num_heads"] * config["head_size"]
    per_layer = 4 * hidden * inner + 2 * hidden * config["intermediate_size"]
    return config["num_layers"] * per_layer + hidden * classes


def step_flops(config, batch, seq):
    tokens = batch * seq
    inner = config["num_heads"] * config["head_size"]
    return (6 * matmul_params(config) * tokens
            + 12 * config["num_layers"] * inner * seq * tokens)


# --- systems -----------------------------------------------------------------

def build_backbone(system, config, max_length):
    cfg = dict(vocab_size=VOCAB, segment_vocab_size=2, dropout=0.1, **config)
    if system == "ours":
        from mtl_framework import RoFormerV2Backbone

        return RoFormerV2Backbone(**cfg, attention_dropout=0.0, exact_padding=False), False
    if system == "roberta_like":
        from bench.roberta_baseline import RobertaLikeBackbone

        return RobertaLikeBackbone(**cfg, max_length=max_length, attention_dropout=0.1), False
    import keras_hub

    if system == "keras_hub":
        return keras_hub.models.RoformerV2Backbone(
            vocabulary_size=VOCAB, num_layers=cfg["num_layers"], num_heads=cfg["num_heads"],
            hidden_dim=cfg["hidden_size"], intermediate_dim=cfg["intermediate_size"],
            head_size=cfg["head_size"], dropout=cfg["dropout"], num_segments=2), False
    if system == "keras_hub_bert":
        return keras_hub.models.BertBackbone(
            vocabulary_size=VOCAB, num_layers=cfg["num_layers"], num_heads=cfg["num_heads"],
            hidden_dim=cfg["hidden_size"], intermediate_dim=cfg["intermediate_size"],
            dropout=cfg["dropout"], max_sequence_length=max_length, num_segments=2), True
    raise ValueError(system)


def classifier(backbone, needs_padding_mask):
    """backbone -> [CLS] -> Dense(2, softmax) as one functional model."""
    import keras

    inputs = {"token_ids": keras.Input((None,), dtype="int32", name="token_ids"),
              "segment_ids": keras.Input((None,), dtype="int32", name="segment_ids")}
    if needs_padding_mask:
        inputs["padding_mask"] = keras.Input((None,), dtype="int32", name="padding_mask")
    sequence = backbone(inputs)
    if isinstance(sequence, dict):
        sequence = sequence["sequence_output"]
    probs = keras.layers.Dense(2, activation="softmax", name="classifier",
                               dtype="float32")(sequence[:, 0])
    return keras.Model(inputs, probs)


class Trainer:
    """One system's model, optimizer and state, and its jitted training step."""

    def __init__(self, system, config, max_length):
        import jax
        import keras

        keras.utils.set_random_seed(0)
        self.config = config
        backbone, self.needs_padding_mask = build_backbone(system, config, max_length)
        self.model = classifier(backbone, self.needs_padding_mask)
        self.params = int(sum(np.prod(v.shape) for v in self.model.trainable_variables))
        self.optimizer = keras.optimizers.AdamW(1e-4)
        self.optimizer.build(self.model.trainable_variables)
        self.state = ([v.value for v in self.model.trainable_variables],
                      [v.value for v in self.model.non_trainable_variables],
                      [v.value for v in self.optimizer.variables])
        model, optimizer = self.model, self.optimizer

        def loss_fn(trainable, non_trainable, x, y):
            probs, non_trainable = model.stateless_call(trainable, non_trainable, x,
                                                        training=True)
            loss = keras.ops.mean(keras.losses.sparse_categorical_crossentropy(y, probs))
            return loss, non_trainable

        grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

        def step(state, x, y):
            trainable, non_trainable, optimizer_variables = state
            (loss, non_trainable), grads = grad_fn(trainable, non_trainable, x, y)
            trainable, optimizer_variables = optimizer.stateless_apply(
                optimizer_variables, grads, trainable)
            return (trainable, non_trainable, optimizer_variables), loss

        self.step_fn = jax.jit(step, donate_argnums=0)

    def inputs(self, ids):
        x = {"token_ids": ids, "segment_ids": np.zeros_like(ids)}
        if self.needs_padding_mask:
            x["padding_mask"] = (ids != 0).astype("int32")
        return x

    def steps(self, x, y, n, losses=None):
        """n steps, each timed to block_until_ready of all it returns; seconds each
        (their losses appended to `losses`, read after the clock stops)."""
        import jax

        times = []
        for _ in range(n):
            start = time.perf_counter()
            self.state, loss = self.step_fn(self.state, x, y)
            jax.block_until_ready((self.state, loss))
            times.append(time.perf_counter() - start)
            if losses is not None:
                losses.append(float(loss))
        return times


def make_batch(batch, seq, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, VOCAB, (batch, seq)).astype("int32")
    ids[:, 0] = 2
    labels = rng.integers(0, 2, batch).astype("int32")
    return ids, labels


def measure_matmul(quick):
    """TFLOP/s of one n x n x n bf16 matrix product (median of 10 after 3 warm-ups),
    fresh random inputs: the ceiling this run's device reaches through XLA."""
    import jax
    import jax.numpy as jnp

    n = 1024 if quick else 8192
    key_a, key_b = jax.random.split(jax.random.key(0))
    a = jax.random.normal(key_a, (n, n), jnp.bfloat16)
    b = jax.random.normal(key_b, (n, n), jnp.bfloat16)
    matmul = jax.jit(jnp.matmul)
    for _ in range(3):
        matmul(a, b).block_until_ready()
    times = []
    for _ in range(10):
        start = time.perf_counter()
        matmul(a, b).block_until_ready()
        times.append(time.perf_counter() - start)
    return {"n": n, "tflops": float(f"{2 * n ** 3 / statistics.median(times) / 1e12:.4g}")}


# --- the backbone table --------------------------------------------------------

def run_cell(seq, batch, trainers, args, deadline, results):
    ids, labels = make_batch(batch, seq)
    tokens = batch * seq
    active, losses = {}, {s: [] for s in trainers}
    for system, trainer in trainers.items():
        # the time this system's compilation took at the last length, half again (longer
        # sequences compile a little longer), or --reserve-s where it has not compiled yet
        need = max(args.reserve_s, 1.5 * args.compile_s.get(system, 0.0))
        if deadline.left() < need:
            results[system] = {"skipped": f"budget: {deadline.left():.0f} s left, "
                                          f"about {need:.0f} s needed"}
            log(f"seq {seq}: {system} skipped (budget)")
            continue
        x = trainer.inputs(ids)
        start = time.perf_counter()
        try:
            warm = trainer.steps(x, labels, args.warmup, losses[system])
        except Exception as error:  # noqa: BLE001 - recorded, the other systems go on
            results[system] = {"error": f"{type(error).__name__}: {error}"}
            log(f"seq {seq}: {system} failed: {error}")
            traceback.print_exc()
            continue
        results[system] = {"warmup_s": [round(t, 3) for t in warm],
                           "compile_and_warmup_s": round(time.perf_counter() - start, 1)}
        args.compile_s[system] = results[system]["compile_and_warmup_s"]
        active[system] = x
        log(f"seq {seq}: {system} compiled + {args.warmup} warm-up steps in "
            f"{time.perf_counter() - start:.1f} s (last {warm[-1] * 1e3:.1f} ms)")
    times = {s: [] for s in active}
    order = list(active)
    for r in range(args.rounds):
        for system in order[r % len(order):] + order[:r % len(order)]:
            times[system] += trainers[system].steps(active[system], labels, args.steps,
                                                    losses[system])
    for system in active:
        trainer = trainers[system]
        median = statistics.median(times[system])
        flops = step_flops(trainer.config, batch, seq)
        record = results[system]
        record.update({
            "batch": batch, "seq": seq, "tokens": tokens, "step_s_median": round(median, 5),
            "step_s_min": round(min(times[system]), 5), "steps_timed": len(times[system]),
            "step_s": [round(t, 5) for t in times[system]],
            "tokens_per_s": round(tokens / median, 1), "model_tflop_per_step": flops / 1e12,
            "achieved_tflops": round(flops / median / 1e12, 2),
            "loss_first_last": [round(losses[system][0], 4), round(losses[system][-1], 4)],
            "loss_finite": bool(np.isfinite(losses[system]).all()),
        })
        if args.peak:
            record["mfu"] = round(flops / median / (args.peak * 1e12), 4)
        if args.matmul_tflops:
            record["mfu_vs_measured_matmul"] = round(flops / median / (args.matmul_tflops * 1e12), 4)
        log(f"seq {seq}: {system} {record['tokens_per_s']:.0f} tokens/s, "
            f"{record['achieved_tflops']} TFLOP/s" + (f", MFU {record['mfu']:.1%}"
                                                      if args.peak else ""))


# --- the multi-task update -----------------------------------------------------

def multitask(args, config, deadline):
    """Mixed 8-family update vs one single-task step through MultiTaskModel.run_update, or
    {"available": False, "reason": ...} where mtl_framework cannot run it here."""
    import keras

    if keras.backend.backend() != "jax":
        return {"available": False, "reason": f"backend is {keras.backend.backend()}, not jax"}
    # 9 traced functions to compile (8 families' micro-steps + the single-task one), each
    # about as long as a backbone's training step: ours' compile time at the shortest length
    per_compile = min((args.compile_s.get("ours") or 30.0), 60.0)
    need = 9 * per_compile + 30
    if deadline.left() < need:
        return {"available": None, "skipped": f"budget: {deadline.left():.0f} s left, about "
                                              f"{need:.0f} s needed (9 compilations)"}
    try:
        import jax

        from bench.mtl_overhead import FAMILIES, OPTIMIZER, family_batch
        from mtl_framework import RoFormerV2Backbone
        from mtl_framework.families.heads import build_head
        from mtl_framework.step.model import MultiTaskModel
        from mtl_framework.step.optimizers import build_optimizer
    except Exception as error:  # noqa: BLE001 - the reason is the result
        return {"available": False, "reason": f"{type(error).__name__}: {error}",
                "where": "import"}
    rows, length, micro = (2, 64, 8) if args.quick else (16, 128, 8)
    tasks = {f"t{i}_{family}": (family, labels) for i, (family, labels) in enumerate(FAMILIES)}
    tasks["single_classification"] = FAMILIES[0]
    rng = np.random.default_rng(0)
    mixed_tasks = [n for n in tasks if n != "single_classification"]
    pool = {n: family_batch(tasks[n][0], tasks[n][1], rows, length, rng, VOCAB)
            for n in mixed_tasks}
    one = family_batch("classification", FAMILIES[0][1], rows * micro, length, rng, VOCAB)
    variants = {
        "mixed": [(n, pool[n]) for n in mixed_tasks][:micro],
        "same_task": [(mixed_tasks[0], pool[mixed_tasks[0]])] * micro,
        "one_batch": [("single_classification", one)],
    }
    try:
        keras.utils.set_random_seed(0)
        backbone = RoFormerV2Backbone(vocab_size=VOCAB, segment_vocab_size=2, dropout=0.1,
                                      attention_dropout=0.0, exact_padding=False, **config)
        backbone.build()
        heads = {name: build_head(family, labels, config["hidden_size"], name=name)
                 for name, (family, labels) in tasks.items()}
        model = MultiTaskModel(backbone, heads, tasks_per_update=micro)
        model.compile(optimizer=build_optimizer(OPTIMIZER, total_steps=10 ** 6))
        model.build_all()

        def update(micro_batches):
            start = time.perf_counter()
            model.run_update(micro_batches)
            jax.block_until_ready([v.value for v in model.trainable_variables])
            return time.perf_counter() - start

        warm = {}
        for name, micro_batches in variants.items():
            start = time.perf_counter()
            for _ in range(args.warmup):
                update(micro_batches)
            warm[name] = round(time.perf_counter() - start, 1)
            log(f"multitask: {name} compiled + warm-up in {warm[name]} s")
        times = {name: [] for name in variants}
        order = list(variants)
        for r in range(args.rounds):
            for name in order[r % len(order):] + order[:r % len(order)]:
                times[name] += [update(variants[name]) for _ in range(args.steps)]
    except Exception as error:  # noqa: BLE001 - the reason is the result
        traceback.print_exc()
        return {"available": False, "reason": f"{type(error).__name__}: {error}",
                "where": "building or running MultiTaskModel.run_update"}
    tokens = rows * length * micro
    out = {"available": True, "tokens_per_update": tokens,
           "micro_batches": {"mixed": f"{micro} x ({rows} x {length}), one task per family: "
                             + ", ".join(f for f, _ in FAMILIES[:micro]),
                             "same_task": f"{micro} x ({rows} x {length}), one classification task",
                             "one_batch": f"1 x ({rows * micro} x {length}), classification"},
           "compile_and_warmup_s": warm, "variants": {}}
    for name, t in times.items():
        median = statistics.median(t)
        out["variants"][name] = {"update_s_median": round(median, 5), "updates_timed": len(t),
                                 "tokens_per_s": round(tokens / median, 1),
                                 "update_s": [round(x, 5) for x in t]}
    one = out["variants"]["one_batch"]["update_s_median"]
    out["mixed_over_one_batch"] = round(out["variants"]["mixed"]["update_s_median"] / one, 3)
    out["same_task_over_one_batch"] = round(
        out["variants"]["same_task"]["update_s_median"] / one, 3)
    out["mixed_over_same_task"] = round(out["variants"]["mixed"]["update_s_median"]
                                        / out["variants"]["same_task"]["update_s_median"], 3)
    log(f"multitask: mixed / one batch = {out['mixed_over_one_batch']}")
    return out


# --- report --------------------------------------------------------------------

class Deadline:
    def __init__(self, seconds):
        self.end = time.perf_counter() + seconds

    def left(self):
        return self.end - time.perf_counter()


def environment():
    import jax
    import keras

    device = jax.devices()[0]
    info = {"python": platform.python_version(), "jax": jax.__version__,
            "keras": keras.__version__, "keras_backend": keras.backend.backend(),
            "platform": device.platform, "device_kind": device.device_kind,
            "device_count": jax.device_count(), "host": platform.node()}
    try:
        import keras_hub

        info["keras_hub"] = keras_hub.__version__
    except Exception as error:  # noqa: BLE001
        info["keras_hub"] = f"not importable: {type(error).__name__}: {error}"
    info["tensorflow_imported"] = "tensorflow" in sys.modules
    return info


def markdown(result):
    env = result["environment"]
    lines = [f"# GPU training step, JAX ({env['device_kind']})", "",
             f"JAX {env['jax']}, Keras {env['keras']}, keras-hub {env.get('keras_hub')}, "
             f"precision {result['precision']}, config {result['config_name']} "
             f"({result['config']}); TensorFlow imported: {env['tensorflow_imported']}. "
             + (f"Peak for MFU: {result['peak']['name']} "
                f"{result['peak']['datasheet_bf16_tflops']} TFLOP/s (datasheet, dense bf16); "
                if result["peak"]["name"] else "No datasheet peak for this device: no MFU; ")
             + f"one {result['matmul']['n']}^3 bf16 matmul measured "
             f"{result['matmul']['tflops']} TFLOP/s here.", "",
             f"Model FLOPs per step: {result['flops_formula']}.", "",
             "| seq | batch | system | params | step ms (median) | tokens/s | TFLOP/s | MFU | "
             "vs ours |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for seq, cell in result["cells"].items():
        ours = cell.get("ours", {}).get("tokens_per_s")
        for system, r in cell.items():
            if "tokens_per_s" not in r:
                why = r.get("skipped") or r.get("error")
                lines.append(f"| {seq} | | {system} | | not measured: {why} | | | | |")
                continue
            mfu = f"{r['mfu']:.1%}" if "mfu" in r else "n/a"
            ratio = f"{ours / r['tokens_per_s']:.2f}x" if ours else ""
            lines.append(f"| {seq} | {r['batch']} | {system} | {r['params']:,} | "
                         f"{r['step_s_median'] * 1e3:.1f} | {r['tokens_per_s']:,.0f} | "
                         f"{r['achieved_tflops']} | {mfu} | {ratio} |")
    lines += ["", "`vs ours`: ours' tokens/s over the system's.", "", "## Multi-task update", ""]
    mt = result["multitask"]
    if mt.get("available"):
        lines += ["| update | micro-batches | ms (median) | tokens/s |", "| --- | --- | --- | --- |"]
        for name, v in mt["variants"].items():
            lines.append(f"| {name} | {mt['micro_batches'][name]} | "
                         f"{v['update_s_median'] * 1e3:.1f} | {v['tokens_per_s']:,.0f} |")
        lines += ["", f"mixed / one batch: {mt['mixed_over_one_batch']}x; same task / one "
                  f"batch: {mt['same_task_over_one_batch']}x; mixed / same task: "
                  f"{mt['mixed_over_same_task']}x."]
    else:
        lines.append("Not measured: " + (mt.get("reason") or mt.get("skipped", ""))
                     + (f" (in {mt['where']})" if mt.get("where") else ""))
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", help="JSON path (the .md goes beside it); default "
                                          "bench/results/gpu.json, which --quick never replaces")
    parser.add_argument("--quick", action="store_true",
                        help="tiny model, short sequences, 2 timed steps (CPU smoke test)")
    parser.add_argument("--systems", nargs="+", default=SYSTEMS, choices=SYSTEMS)
    parser.add_argument("--seqs", nargs="+", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None, help="timed steps per round")
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--budget-s", type=float, default=None,
                        help="skip cells (and say so) once this much time has gone")
    parser.add_argument("--reserve-s", type=float, default=None,
                        help="start a system's cell only with this much budget left")
    parser.add_argument("--no-multitask", action="store_true")
    parser.add_argument("--no-table", action="store_true",
                        help="only the multi-task part (no backbone table)")
    args = parser.parse_args(argv)
    if args.output is None and args.quick:
        parser.error("--quick needs --output: a smoke test must not replace bench/results/gpu.json")
    args.output = args.output or str(Path(__file__).resolve().parent / "results" / "gpu.json")
    args.budget_s = args.budget_s or (3600.0 if args.quick else 480.0)
    deadline = Deadline(args.budget_s)
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.steps = args.steps or (2 if args.quick else 8)
    args.warmup = args.warmup or (1 if args.quick else 3)
    args.reserve_s = args.reserve_s if args.reserve_s is not None else (0 if args.quick else 60)
    args.compile_s = {}  # system -> seconds its last compilation (+ warm-up) took

    import keras

    if keras.backend.backend() != "jax":
        sys.exit(f"bench.gpu runs on JAX: KERAS_BACKEND is {keras.backend.backend()!r}; "
                 "set KERAS_BACKEND=jax")
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    env = environment()
    log(f"{env['device_kind']} ({env['platform']}), JAX {env['jax']}, Keras {env['keras']}, "
        f"keras-hub {env['keras_hub']}")
    peak_name, peak = peak_tflops(env["device_kind"]) if env["platform"] == "gpu" else (None, None)
    args.peak = peak
    matmul = measure_matmul(args.quick)
    args.matmul_tflops = matmul["tflops"] if env["platform"] == "gpu" else None
    log(f"bf16 matmul {matmul['n']}^3: {matmul['tflops']} TFLOP/s; datasheet peak {peak}")

    config_name = "tiny" if args.quick else "base"
    config = dict(TINY if args.quick else BASE)
    config["head_size"] = config["hidden_size"] // config["num_heads"]
    cells = QUICK_CELLS if args.quick else CELLS
    if args.seqs:
        tokens = 64 if args.quick else 16384
        cells = {s: max(1, tokens // s) for s in args.seqs}
    max_length = max(512, *cells)
    trainers = {}
    build_errors = {}
    if args.no_table:
        cells = {}
    for system in (args.systems if cells else []):
        try:
            trainers[system] = Trainer(system, config, max_length)
            log(f"built {system}: {trainers[system].params:,} parameters")
        except Exception as error:  # noqa: BLE001 - recorded, the others go on
            traceback.print_exc()
            build_errors[system] = f"{type(error).__name__}: {error}"
    result = {
        "benchmark": "bench/gpu.py", "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "environment": env, "precision": "mixed_bfloat16", "config_name": config_name,
        "config": config, "systems": {s: SYSTEM_NAMES[s] for s in args.systems},
        "flops_formula": "6 * N * T + 12 * L * inner * s * T (N = matmul parameters: "
                         "L * (4 * hidden * inner + 2 * hidden * ffn) + hidden * 2; T = tokens "
                         "per step; s = sequence length; inner = heads * head_size)",
        "matmul_params": matmul_params(config),
        "peak": {"name": peak_name, "datasheet_bf16_tflops": peak},
        "matmul": matmul,
        "timing": {"warmup_steps": args.warmup, "rounds": args.rounds,
                   "steps_per_round": args.steps, "budget_s": args.budget_s,
                   "batch_data": "random ids in [5, 12000), [CLS] = 2 first, no padding"},
        "cells": {},
    }
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    result["multitask"] = {"available": None, "skipped": "not reached"}
    for seq, batch in cells.items():
        cell = {s: {"error": e} for s, e in build_errors.items()}
        run_cell(seq, batch, trainers, args, deadline, cell)
        for system, record in cell.items():
            if system in trainers:
                record["params"] = trainers[system].params
        result["cells"][str(seq)] = cell
        write(result, output, deadline, args)  # what is done so far survives a time-out
    del trainers
    result["multitask"] = ({"available": None, "skipped": "--no-multitask"} if args.no_multitask
                           else multitask(args, config, deadline))
    print(write(result, output, deadline, args))


def write(result, output, deadline, args):
    """The JSON and its markdown table; returns the table."""
    result["wall_s"] = round(args.budget_s - deadline.left(), 1)
    result["environment"]["tensorflow_imported"] = "tensorflow" in sys.modules
    output.write_text(json.dumps(result, indent=1) + "\n")
    table = markdown(result)
    output.with_suffix(".md").write_text(table)
    return table


if __name__ == "__main__":
    main()
