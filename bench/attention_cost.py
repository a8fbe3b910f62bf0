"""What attention costs in a training update on real micro-batches (issue 52, point 4),
TensorFlow CPU; and the contrastive step's packed / padded ratio against its bound.

    .venv/bin/python -m bench.attention_cost [--rounds 8] [--updates 1] [--quick]
    .venv/bin/python -m bench.attention_cost --breakdown --skip contrastive --precisions float32
        (the padded call beside no attention, a float32 softmax sum, no attention dropout;
        written to a temporary folder, not bench/results)

Attention. The micro-batches are the ones bench/real_tokens.py draws (the project's
featurizers, collation, length buckets and sampler; each backbone call as TensorFlow's
step makes it): BERT small (L6/H384/A6) on the catalog mixture's draws of
bench/main_job.py's 8 tasks (batch 16, max_length 128; chid's cloze micro-batches, 112
rows of 121 tokens, are left out with the other tasks main_job does not train), BERT
tiny (L2/H128/A2, the demo's dims) on the demo's (batch 32, max_length 64). One update = `--micro-batches`
micro-batches: each backbone call packed as the step runs it (token-wise work on the
real tokens, attention on the padded [B, L]: layers.Packing), [CLS] -> Dense(2),
cross-entropy, its gradients accumulated; then one AdamW apply. The
heads' own work (MLM's vocabulary logits, the pointers) is left out, so attention's share
of a real update is at most the one here. Variants of the same model and batches, each
its own traced step:
- padded: the backbone as it trains now (bert/layers.py);
- no_attention: each layer's context is its value projection, plus 0 x (q + k) so
  that the query and key projections stay computed and differentiated (scores, softmax,
  weights x values and the pad / pack around them left out): padded - no_attention is
  what attention costs;
- blocks (a prototype): each call's rows sorted by length and cut into --blocks blocks
  (16 rows: blocks of 4), attention per block [b, l_block] padded to the block's own
  longest (gathered from the packed tokens, the context scattered back): what attention
  on packed rows would cost;
- unpacked: the backbone's padded call (packed=False: every layer on all B x L positions),
  what the step ran before every family packed.
float32 and mixed_bfloat16 (this CPU's `auto` where it multiplies bfloat16 natively).

Contrastive. A one-task `mtl train` run (loop.run.Run, BERT small, afqmc_sts: CoSENT on
AFQMC pairs, batch 32, max_length 64: bench/train_loop.py's contrastive config) built
twice, backbone.packed true and false; `MultiTaskModel.run_update` on the same drawn
micro-batches. padded / packed against 1 / (the real-token fraction of those batches as
the padded step computes them: each side cut to its longest); issue 52 asks for 90% of it.

Every timing: the variants of a cell run in turn within each round (order rotating), so a
slow phase of the shared machine hits all of them; medians per variant, and the median of
each round's ratio. The machine is shared: the JSON records the CPU other processes used
in each round and the load average.

Writes bench/results/attention_cost.json and .md (--quick: a temporary folder).
"""
import argparse
import math
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import (
    REPO,
    real_tokens,  # the mixtures' micro-batches, drawn as the step sees them
    write_results,
)
from bench.load import cpu_model, cpu_seconds, load_average, machine_busy_seconds

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

SIZES = {"small": dict(num_layers=6, hidden_size=384, num_heads=6, intermediate_size=1536),
         "tiny": dict(num_layers=2, hidden_size=128, num_heads=2, intermediate_size=512)}
MIXTURE_OF = {"small": "catalog", "tiny": "demo"}
PRECISIONS = ("float32", "mixed_bfloat16")
VARIANTS = ("padded", "no_attention", "blocks", "unpacked")
# --breakdown: what inside attention costs (the padded call with one part changed)
BREAKDOWN = ("padded", "no_attention", "float32_softmax", "no_attention_dropout")
BLOCKS = 4  # blocks of rows per backbone call (16 rows: blocks of 4)
VOCAB = 8000
CONTRASTIVE = """\
name: attention_cost_contrastive
data_root: {data_root}
backbone: {{architecture: bert, size: small, vocab_size: 8000, packed: {packed}}}
tasks:
  - {{name: afqmc_sts}}
tasks_per_update: 1
batch_size: 32
max_length: 64
optimizer: {{name: adamw, lr: 0.0001, warmup_steps: 10}}
steps: 100
seed: 0
precision: {precision}
"""


# --- the attention variants -----------------------------------------------------------

def block_layout(packing, blocks):
    """The rows of a packed call sorted by length and cut into `blocks` blocks of equal row
    count: per block, its rows' positions in the packed list [b, l_block] (T at padding),
    l_block its longest row, and their key bias [b, 1, 1, l_block] (-1e9 at padding)."""
    import tensorflow as tf

    slots = tf.reshape(packing.slots, (packing.batch, packing.length))
    real = slots < tf.shape(packing.indices)[0]
    lengths = tf.reduce_sum(tf.cast(real, tf.int32), axis=1)
    order = tf.argsort(lengths, stable=True)
    size = (packing.batch + blocks - 1) // blocks
    layout = []
    for block in range(blocks):
        chosen = order[tf.minimum(block * size, packing.batch):tf.minimum((block + 1) * size,
                                                                           packing.batch)]
        longest = tf.reduce_max(tf.concat([tf.gather(lengths, chosen), [0]], 0))
        positions = tf.gather(slots, chosen)[:, :longest]
        bias = tf.where(tf.gather(real, chosen)[:, :longest], 0.0, -1e9)
        layout.append((positions, bias[:, None, None, :]))
    return layout


def attend_in_blocks(layer, q, k, v, packing, training):
    """Attention of packed q, k, v [T, H] per block of rows (`block_layout`, made by the
    first layer and kept on the packing), the context [T, H] in packed order (each block's
    real positions scattered back)."""
    import tensorflow as tf

    from mtl_framework.layers import attend

    if not hasattr(packing, "blocks"):
        packing.blocks = block_layout(packing, layer.blocks)
    total = tf.shape(q)[0]
    padded = [tf.concat([x, tf.zeros((1, x.shape[-1]), x.dtype)], 0) for x in (q, k, v)]
    contexts, targets = [], []
    for positions, bias in packing.blocks:
        qb, kb, vb = (layer.heads(tf.gather(x, positions)) for x in padded)
        qb = qb * (1.0 / math.sqrt(layer.head_size))
        context = attend(qb, kb, vb, bias, layer.exact_padding, layer.attention_dropout, training)
        contexts.append(tf.reshape(context, (-1, q.shape[-1])))
        targets.append(tf.reshape(positions, (-1,)))
    # padding positions all land on row T, dropped
    summed = tf.math.unsorted_segment_sum(tf.concat(contexts, 0), tf.concat(targets, 0), total + 1)
    return summed[:-1]


def bench_layer_class():
    """BertLayer whose attention is the module's `VARIANT` when its step is traced."""
    from keras import ops

    from mtl_framework.architectures.bert.layers import BertLayer

    class VariantLayer(BertLayer):
        variant, blocks = "padded", BLOCKS  # unpacked: the padded call's layer, as padded

        def call(self, x, attention_bias, training=False, packing=None):
            if self.variant in ("padded", "unpacked"):
                return super().call(x, attention_bias, training=training, packing=packing)
            if self.variant in ("float32_softmax", "no_attention_dropout"):
                return self.padded_call_without(x, attention_bias, training, packing)
            q, k, v = self.query(x), self.key(x), self.value(x)
            if self.variant == "no_attention":  # q and k still computed (and differentiated)
                context = v + (q + k) * ops.cast(self.zero, q.dtype)
            else:
                context = attend_in_blocks(self, q, k, v, packing, training)
            attended = self.dropout(self.attention_output(context), training=training)
            x = self.attention_norm(x + attended)
            hidden = self.activation(self.intermediate(x))
            return self.output_norm(x + self.dropout(self.output_dense(hidden), training=training))

        def padded_call_without(self, x, attention_bias, training, packing):
            """The padded call with a float32 softmax sum (exact_padding off) or without
            dropout on the attention weights (rate 0), as its step is traced."""
            exact, rate = self.exact_padding, self.attention_dropout.rate
            if self.variant == "float32_softmax":
                self.exact_padding = False
            else:
                self.attention_dropout.rate = 0.0
            try:
                return super().call(x, attention_bias, training=training, packing=packing)
            finally:
                self.exact_padding, self.attention_dropout.rate = exact, rate

    return VariantLayer


class Cell:
    """One backbone size and precision: the model, and a traced micro-step per variant."""

    def __init__(self, size, precision, blocks, variants=VARIANTS, seed=0):
        import keras
        import tensorflow as tf

        from mtl_framework.architectures.bert.backbone import BertBackbone

        keras.config.set_dtype_policy(precision)
        keras.utils.set_random_seed(seed)
        self.backbone = BertBackbone(vocab_size=VOCAB, **SIZES[size])
        self.backbone.build()
        self.head = keras.layers.Dense(2, dtype="float32")
        self.head.build((None, SIZES[size]["hidden_size"]))
        keras.config.set_dtype_policy("float32")
        self.layer_class = bench_layer_class()
        self.layer_class.blocks = blocks
        self.layer_class.zero = tf.Variable(0.0, trainable=False)  # not folded away
        for layer in self.backbone.transformer_layers:
            layer.__class__ = self.layer_class
        self.weights = self.backbone.trainable_variables + self.head.trainable_variables
        self.sums = [tf.Variable(tf.zeros_like(w), trainable=False) for w in self.weights]
        self.optimizer = keras.optimizers.AdamW(1e-4)
        self.optimizer.build(self.weights)
        backbone, head, sums, weights = self.backbone, self.head, self.sums, self.weights

        def micro(token_ids, packed):
            with tf.GradientTape() as tape:
                inputs = {"token_ids": token_ids, "segment_ids": tf.zeros_like(token_ids)}
                hidden = backbone(inputs, training=True, packed=packed)
                logits = head(tf.cast(hidden[:, 0], "float32"))
                labels = token_ids[:, 0] % 2
                loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
                    labels, logits, from_logits=True))
            for total, grad in zip(sums, tape.gradient(loss, weights)):
                if grad is not None:  # None: query and key, unused by no_attention
                    total.assign_add(tf.convert_to_tensor(grad))
            return loss

        def apply():
            self.optimizer.apply([tf.convert_to_tensor(s) for s in sums], weights)
            for s in sums:
                s.assign(tf.zeros_like(s))

        signature = [tf.TensorSpec([None, None], tf.int32)]
        self.steps = {}
        for variant in variants:
            self.layer_class.variant = variant  # read when the step is traced
            self.steps[variant] = tf.function(
                lambda ids, packed=variant != "unpacked": micro(ids, packed), input_signature=signature)
        self.apply = tf.function(apply)

    def blocks_parity(self, calls):
        """The blocks prototype's outputs and gradients against the padded call's (no
        dropout), on every call: the largest difference at real tokens over the outputs'
        largest, and over the gradients' largest."""
        import tensorflow as tf

        outputs, grads = [], []
        for ids in calls:
            inputs = {"token_ids": ids, "segment_ids": tf.zeros_like(ids)}
            real = tf.cast(tf.not_equal(ids, 0), "float32")[..., None]
            per_variant = {}
            for variant in ("padded", "blocks"):
                self.layer_class.variant = variant
                with tf.GradientTape() as tape:
                    hidden = tf.cast(self.backbone(inputs, training=False, packed=True), "float32") * real
                    loss = tf.reduce_sum(hidden * tf.sin(tf.range(hidden.shape[-1], dtype="float32")))
                per_variant[variant] = (hidden, tape.gradient(loss, self.backbone.trainable_variables))
            (a, ga), (b, gb) = per_variant["padded"], per_variant["blocks"]
            outputs.append(float(tf.reduce_max(tf.abs(a - b)) / tf.reduce_max(tf.abs(a))))
            scale = max(float(tf.reduce_max(tf.abs(tf.convert_to_tensor(g)))) for g in ga if g is not None)
            grads.append(max(float(tf.reduce_max(tf.abs(tf.convert_to_tensor(x) - tf.convert_to_tensor(y))))
                             for x, y in zip(ga, gb) if x is not None) / scale)
        self.layer_class.variant = "padded"
        return {"outputs": max(outputs), "gradients": max(grads)}

    def update(self, variant, calls):
        """One update: every call's micro-step, then the optimizer: (wall s, CPU s)."""
        self.layer_class.variant = variant  # a first call traces with it
        wall, cpu = time.perf_counter(), cpu_seconds()
        for ids in calls:
            loss = self.steps[variant](ids)
        self.apply()
        float(loss)
        return time.perf_counter() - wall, cpu_seconds() - cpu


# --- timing -----------------------------------------------------------------------------

class Rounds:
    """Interleaved rounds of named runs, each `repeats` times a round: medians, paired
    ratios (of each round's medians), the machine's load."""

    def __init__(self, repeats=1):
        self.repeats = repeats
        self.times, self.rounds, self.other_cpu, self.loads = {}, [], [], [load_average()]

    def round(self, runs, index):
        """runs: {name: fn() -> (wall, cpu)}, run in an order rotated by `index`."""
        names = list(runs)
        names = names[index % len(names):] + names[:index % len(names)]
        busy, own = machine_busy_seconds(), cpu_seconds()
        this = {}
        for name in names:
            timed = [runs[name]() for _ in range(self.repeats)]
            self.times.setdefault(name, []).extend(timed)
            this[name] = statistics.median(wall for wall, _ in timed)
        self.rounds.append(this)
        self.other_cpu.append(round(machine_busy_seconds() - busy - (cpu_seconds() - own), 1))
        self.loads.append(load_average())

    def median(self, name, cpu=False):
        return statistics.median(t[1 if cpu else 0] for t in self.times[name])

    def paired(self, a, b):
        return statistics.median(r[a] / r[b] for r in self.rounds)

    def ratio(self, a, b):
        """a / b four ways: median wall (paired by round: the median of each round's
        ratio), median process CPU seconds (what other processes' load moves least), and
        the fastest update of each (the one least slowed by them)."""
        fastest = {n: min(wall for wall, _ in self.times[n]) for n in (a, b)}
        return {"wall_paired": round(self.paired(a, b), 4),
                "wall": round(self.median(a) / self.median(b), 4),
                "cpu": round(self.median(a, cpu=True) / self.median(b, cpu=True), 4),
                "fastest": round(fastest[a] / fastest[b], 4)}


def attention_cells(args, log):
    variants = BREAKDOWN if args.breakdown else VARIANTS
    entries = []
    for size in args.sizes:
        with tempfile.TemporaryDirectory(prefix="attention_cost-") as workdir:
            path = real_tokens.experiment_path(MIXTURE_OF[size], workdir)
            mixture, rates, types = real_tokens.build_mixture(path, log=lambda _: None)
            drawn = []
            while len(drawn) < args.micro_batches:  # the catalog's draws of main_job's tasks
                drawn += [d for d in real_tokens.draw_calls(mixture, types, 1)
                          if MIXTURE_OF[size] == "demo" or d[0] in real_tokens.MAIN_JOB_TASKS]
        calls = [ids for _, _, task_calls in drawn for ids in task_calls]
        counts = [c for _, task_counts, _ in drawn for c in task_counts]
        totals = {k: sum(c[k] for c in counts) for k in counts[0] if k not in ("rows", "length")}
        import tensorflow as tf

        tensors = [tf.constant(ids, tf.int32) for ids in calls]
        for precision in args.precisions:
            cell = Cell(size, precision, args.blocks, variants)
            parity = cell.blocks_parity(tensors) if "blocks" in variants else None
            log(f"{size} / {precision}: blocks against padded attention: {parity}")
            for variant in variants:  # trace, then one steady update untimed
                start = time.perf_counter()
                cell.update(variant, tensors)
                log(f"{size} / {precision} / {variant}: traced in {time.perf_counter() - start:.1f} s")
                cell.update(variant, tensors)
            rounds = Rounds(args.updates)
            for r in range(args.rounds):
                rounds.round({v: (lambda v=v: cell.update(v, tensors)) for v in variants}, r)
                log(f"{size} / {precision}: round {r + 1}: " + ", ".join(
                    f"{v} {t:.2f} s" for v, t in rounds.rounds[-1].items()))
            without = rounds.ratio("no_attention", "padded")
            entries.append({
                "size": size, "config": SIZES[size], "precision": precision,
                "mixture": MIXTURE_OF[size], "exact_padding": bool(cell.backbone.exact_padding),
                "micro_batches": [{"task": task, "calls": [list(ids.shape) for ids in ids_list]}
                                  for task, _, ids_list in drawn],
                "real_token_fractions": real_tokens.fractions(totals),
                "median_s": {v: round(rounds.median(v), 4) for v in variants},
                "median_cpu_s": {v: round(rounds.median(v, cpu=True), 4) for v in variants},
                "attention_share": {k: round(1 - r, 4) for k, r in without.items()},
                "over_padded": {v: rounds.ratio(v, "padded") for v in variants[1:]},
                **({"blocks_over_padded": rounds.ratio("blocks", "padded"), "blocks_parity": parity,
                    "unpacked_over_packed": rounds.ratio("unpacked", "padded")}
                   if variants == VARIANTS else {}),
                "times": rounds.times, "rounds": rounds.rounds, "other_cpu_s": rounds.other_cpu,
                "load_average": rounds.loads})
            log(f"{size} / {precision}: attention {entries[-1]['attention_share']} of an update; "
                f"over padded {entries[-1]['over_padded']}")
    return entries


def contrastive_cells(args, log):
    from mtl_framework.loop.run import Run

    entries = []
    for precision in args.precisions:
        with tempfile.TemporaryDirectory(prefix="attention_cost-") as workdir:
            runs = {}
            for packed in ("true", "false"):
                path = Path(workdir) / f"contrastive_{packed}.yaml"
                path.write_text(CONTRASTIVE.format(data_root=REPO.parent / "shared" / "data",
                                                   packed=packed, precision=precision), encoding="utf-8")
                runs[packed] = Run(str(path), output=str(Path(workdir) / f"run_{packed}"),
                                   log=lambda _: None)
            mixture = runs["true"].mixture
            batches = [mixture.next() for _ in range(args.contrastive_batches)]
            counts = [real_tokens.call_counts(ids) for _, b in batches for ids in (
                trimmed_side(b["token_ids"][:, 0]), trimmed_side(b["token_ids"][:, 1]))]
            totals = {k: sum(c[k] for c in counts) for k in counts[0] if k not in ("rows", "length")}

            def update(packed):
                def run():
                    wall, cpu = time.perf_counter(), cpu_seconds()
                    for batch in batches:
                        runs[packed].model.run_update([batch])
                    return time.perf_counter() - wall, cpu_seconds() - cpu
                return run
            for packed in runs:
                update(packed)()  # traces
            rounds = Rounds()  # each run: --contrastive-batches updates
            for r in range(args.rounds):
                rounds.round({"packed": update("true"), "padded": update("false")}, r)
                log(f"contrastive / {precision}: round {r + 1}: " + ", ".join(
                    f"{v} {t:.2f} s" for v, t in rounds.rounds[-1].items()))
            fraction = totals["real"] / totals["positions"]
            speedups = rounds.ratio("padded", "packed")
            speedup = speedups["wall_paired"]
            entries.append({
                "precision": precision, "micro_batches": len(batches),
                "policy": runs["true"].model.dtype_policy.name if hasattr(
                    runs["true"].model, "dtype_policy") else precision,
                "real_token_fraction": round(fraction, 4), "bound": round(1 / fraction, 3),
                "median_s": {v: round(rounds.median(v), 4) for v in ("packed", "padded")},
                "median_cpu_s": {v: round(rounds.median(v, cpu=True), 4) for v in ("packed", "padded")},
                "padded_over_packed": speedups,
                "of_bound": {k: round(r * fraction, 3) for k, r in speedups.items()},
                "times": rounds.times,
                "rounds": rounds.rounds, "other_cpu_s": rounds.other_cpu, "load_average": rounds.loads})
            log(f"contrastive / {precision}: padded / packed {speedup:.2f}x, bound {1 / fraction:.2f}x")
            for run in runs.values():
                run.close()
    return entries


def trimmed_side(ids):
    from bench.real_tokens import trimmed

    return trimmed(np.asarray(ids))


def markdown(report):
    env = report["environment"]
    lines = ["# What attention costs in a training update, on real micro-batches", "",
             f"{env['cpu_model']}, {env['cpu_count']} cores shared with other engineers' jobs "
             f"(load average {report['load_average'][0]} at the start, "
             f"{report['load_average'][1]} at the end), TensorFlow {env['tensorflow']}. "
             "Variants of one cell ran in turn each round (order rotating). Each ratio three "
             "ways: wall time paired by round / process CPU time / fastest update; under this "
             "load a single wall time moves 2x from one update to the next, so read the three "
             "together.", "",
             "## Attention's share of an update", "",
             "| backbone | mixture | precision | real tokens | attention work real | update s "
             "(CPU s) | attention share | blocks / padded | blocks' parity: outputs, gradients "
             "| unpacked / packed |", "|---|---|---|---|---|---|---|---|---|---|"]

    def three(r, percent=False):
        keys = ("wall_paired", "cpu", "fastest")
        return " / ".join(f"{r[k]:.0%}" if percent else f"{r[k]:.2f}" for k in keys)
    for e in report["attention"]:
        f = e["real_token_fractions"]
        lines.append(f"| BERT {e['size']} | {e['mixture']} | {e['precision']} | {f['tokens']:.1%} | "
                     f"{f['attention']:.1%} | {e['median_s']['padded']:.2f} "
                     f"({e['median_cpu_s']['padded']:.2f}) | {three(e['attention_share'], True)} | "
                     f"{three(e['blocks_over_padded'])} | {e['blocks_parity']['outputs']:.1e}, "
                     f"{e['blocks_parity']['gradients']:.1e} | {three(e['unpacked_over_packed'])} |")
    lines += ["", "## The contrastive step: padded / packed against 1 / (real-token fraction)", "",
              "| precision | micro-batches | real tokens | bound | packed s (CPU s) | padded s (CPU s) "
              "| padded / packed | of the bound |", "|---|---|---|---|---|---|---|---|"]
    for e in report["contrastive"]:
        m, c = e["median_s"], e["median_cpu_s"]
        cells = (e["precision"], str(e["micro_batches"]), f"{e['real_token_fraction']:.1%}",
                 f"{e['bound']:.2f}x", f"{m['packed']:.2f} ({c['packed']:.2f})",
                 f"{m['padded']:.2f} ({c['padded']:.2f})", three(e["padded_over_packed"]),
                 three(e["of_bound"], True))
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"Run: `python -m bench.attention_cost`, finished {report['finished']} "
              f"({report['wall_seconds']:.0f} s)."]
    return "\n".join(lines) + "\n"


def breakdown_markdown(report):
    lines = ["| backbone | precision | variant / padded: wall paired / CPU / fastest |", "|---|---|---|"]
    for e in report["attention"]:
        for variant, r in e["over_padded"].items():
            lines.append(f"| BERT {e['size']} | {e['precision']} | {variant}: {r['wall_paired']:.2f} / "
                         f"{r['cpu']:.2f} / {r['fastest']:.2f} |")
    return "\n".join(lines) + "\n"


def tree_state():
    """The commit and the package files changed beside it (the tree is shared: another
    engineer's uncommitted step is what ran)."""
    import subprocess

    def git(*args):
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()
    return {"commit": git("rev-parse", "HEAD"),
            "changed": git("status", "--short", "mtl_framework").splitlines()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=list(PRECISIONS))
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--updates", type=int, default=1, help="updates per variant per round")
    parser.add_argument("--micro-batches", type=int, default=4, help="micro-batches per update")
    parser.add_argument("--contrastive-batches", type=int, default=4)
    parser.add_argument("--blocks", type=int, default=BLOCKS, help="blocks of rows per call")
    parser.add_argument("--skip", nargs="*", default=[], choices=["attention", "contrastive"])
    parser.add_argument("--quick", action="store_true", help="tiny, float32, 2 rounds")
    parser.add_argument("--breakdown", action="store_true",
                        help="what inside attention costs (BREAKDOWN's variants; JSON only)")
    parser.add_argument("--output-dir")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.precisions, args.rounds = ["tiny"], ["float32"], 2
    started = time.perf_counter()

    def log(message):
        print(f"[{time.perf_counter() - started:6.0f}s] {message}", flush=True)

    import keras
    import tensorflow as tf

    loads = [load_average()]
    attention = attention_cells(args, log) if "attention" not in args.skip else []
    contrastive = contrastive_cells(args, log) if "contrastive" not in args.skip else []
    loads.append(load_average())
    report = {"settings": {"sizes": SIZES, "mixture_of": MIXTURE_OF, "rounds": args.rounds,
                           "updates_per_round": args.updates,
                           "micro_batches": args.micro_batches, "blocks": args.blocks,
                           "contrastive_batches": args.contrastive_batches, "quick": args.quick},
              "environment": {"cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
                              "tensorflow": tf.__version__, "keras": keras.__version__},
              "tree": tree_state(),
              "attention": attention, "contrastive": contrastive, "load_average": loads,
              "wall_seconds": time.perf_counter() - started,
              "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
              "notes": ["A shared machine: other_cpu_s is the CPU other processes used in each "
                        "round; read the ratios, taken within one round, not the absolute times."]}
    out = Path(args.output_dir or (tempfile.mkdtemp(prefix="bench_attention_cost_")
                                   if args.quick or args.breakdown else REPO / "bench" / "results"))
    write_results(out, "attention_cost", report,
                  breakdown_markdown(report) if args.breakdown else markdown(report))


if __name__ == "__main__":
    main()
