"""Every family packed (issue 52, point 2): the update time of a mixed classification +
spans + MRC micro-batch set with the backbone padded against packed, CPU.

    .venv/bin/python -m bench.packed_step [--sizes tiny small] [--precisions float32 auto]
        [--updates 4] [--rounds 5] [--quick]

Real data (../shared/data): tnews (classification), cluener (extraction_ner: the
EfficientGlobalPointer), cmrc2018 (mrc_span: the GlobalPointer over 128-token windows),
batch 32, max_length 128, one micro-batch of each task an update (tasks_per_update 3), as
`mtl train` collates them (each batch padded to its longest row). BERT `tiny` (L2/H128/A2,
bench.runs.TINY_BACKBONE's dims in BERT) and `small` (L6/H384/A6), vocab 8000, float32
and `auto` (mixed_bfloat16 on a CPU with AMX / AVX512-BF16).

Per (size, precision), two runs are built as `mtl train` builds them (loop.run.Run): one
with `backbone.packed: false` (every padded position through every layer) and one with
the default, run two ways: `packed`, every micro-batch packed (token-wise layers on the
real tokens alone, attention padded; step.model.PACK_BELOW set to 1 for its blocks), and
`default`, a micro-batch packed only where at most PACK_BELOW of its positions are real
tokens (what `mtl train` does). The same `--updates` updates of micro-batches, drawn
once from the mixture, go through `MultiTaskModel.run_update` each way; after a traced
warm-up, `--rounds` rounds run the three blocks in a rotating order, so a slow phase of
the shared machine hits all. Reported: the median update time of each (wall and process
CPU: the machine is shared, CPU time is the steadier), the padded / packed ratios of the
medians and the median of the rounds' paired ratios, each task's real-token fraction
(non-padding positions over the batch's B x L), the load of the machine.

`--sweep` instead times the backbone alone (forward and backward of BERT's output at
[CLS]; dropout 0.1) on synthetic batches of 32 rows x 128 positions whose real-token
fraction is 50, 70, 83 or 94% (token ids drawn at random), padded against packed, CPU
seconds, 4 interleaved repeats: where packing starts to pay (step.model.PACK_BELOW). Its
rows replace the `sweep` entry of the results file (the update timings stay).

Writes bench/results/packed_step.json and .md (--quick: a temporary folder).
"""
import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import REPO, write_results
from bench.load import cpu_model, load_average, machine_busy_seconds

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SHARED = REPO.parent / "shared" / "data"
TASKS = {"tnews": "classification", "cluener": "extraction_ner", "cmrc2018": "mrc_span"}
SIZES = {"tiny": "{architecture: bert, num_layers: 2, hidden_size: 128, num_heads: 2, "
                 "intermediate_size: 512, vocab_size: 8000, packed: %s}",
         "small": "{architecture: bert, size: small, vocab_size: 8000, packed: %s}"}
EXPERIMENT = """\
name: packed_step
data_root: {data_root}
cache_dir: {cache}
backbone: {backbone}
tasks: [tnews, cluener, cmrc2018]
sampling: uniform
tasks_per_update: 3
batch_size: 32
max_length: 128
optimizer: {{name: adamw, lr: 0.0001}}
steps: 1000
seed: 0
precision: {precision}
"""
MODES = ("padded", "packed", "default")


def build_run(size, precision, packed, workdir):
    """The run `mtl train` would build (nothing trained yet), its runs and feature cache
    under `workdir` (the cache shared by every size and precision)."""
    from mtl_framework.loop.run import Run

    name = f"{size}_{precision}_{'packed' if packed else 'padded'}"
    path = Path(workdir) / f"{name}.yaml"
    path.write_text(EXPERIMENT.format(data_root=SHARED, cache=Path(workdir) / "cache",
                                      backbone=SIZES[size] % str(packed).lower(),
                                      precision=precision), encoding="utf-8")
    return Run(str(path), output=str(Path(workdir) / name), log=lambda _: None)


def draw_updates(run, updates):
    """`updates` updates of micro-batches from the run's mixture, one of each task each
    (the uniform sampler's order reshuffled so every update holds the three families)."""
    by_task = {task: [] for task in TASKS}
    while min(len(v) for v in by_task.values()) < updates:
        task, batch = run.model.mixture.next()
        by_task[task].append(batch)
    return [[(task, by_task[task][i]) for task in TASKS] for i in range(updates)]


def real_fractions(drawn):
    """Per task: real tokens / padded positions over its batches, and its mean B x L."""
    out = {}
    for task in TASKS:
        batches = [batch for update in drawn for t, batch in update if t == task]
        ids = [np.asarray(b["token_ids"]) for b in batches]
        out[task] = {"real_fraction": float(sum(np.count_nonzero(i) for i in ids)
                                            / sum(i.size for i in ids)),
                     "batch_shape_mean": [float(np.mean([i.shape[0] for i in ids])),
                                          float(np.mean([i.shape[1] for i in ids]))]}
    every = [np.asarray(b["token_ids"]) for update in drawn for _, b in update]
    out["all"] = {"real_fraction": float(sum(np.count_nonzero(i) for i in every)
                                         / sum(i.size for i in every))}
    return out


def timed_block(model, drawn, pack_below=None):
    """(median wall, median CPU) seconds of an update over the block's updates; `pack_below`:
    step.model.PACK_BELOW for the block (None: as shipped)."""
    from mtl_framework.step import model as step_model

    shipped = step_model.PACK_BELOW
    step_model.PACK_BELOW = shipped if pack_below is None else pack_below
    try:
        return timed_updates(model, drawn)
    finally:
        step_model.PACK_BELOW = shipped


def timed_updates(model, drawn):
    walls, cpus = [], []
    for update in drawn:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        model.run_update(list(update))
        walls.append(time.perf_counter() - wall0)
        cpus.append(time.process_time() - cpu0)
    return statistics.median(walls), statistics.median(cpus)


def measure(size, precision, updates, rounds, workdir):
    runs = {packed: build_run(size, precision, packed, workdir) for packed in (False, True)}
    models = {"padded": runs[False].model, "packed": runs[True].model, "default": runs[True].model}
    pack_below = {"padded": None, "packed": 1.0, "default": None}
    assert models["packed"].packed is True and models["padded"].packed is False
    drawn = draw_updates(runs[False], updates)
    for mode in MODES:  # trace every task's step, each way
        timed_block(models[mode], drawn, pack_below[mode])
    samples = {mode: [] for mode in MODES}
    busy = []
    for round_ in range(rounds):
        order = MODES[round_ % 3:] + MODES[:round_ % 3]
        busy0, own0 = machine_busy_seconds(), time.process_time()
        for mode in order:
            samples[mode].append(timed_block(models[mode], drawn, pack_below[mode]))
        busy.append(machine_busy_seconds() - busy0 - (time.process_time() - own0))
    for run in runs.values():
        run.model.close()
    median = {mode: {"wall": statistics.median(s[0] for s in samples[mode]),
                     "cpu": statistics.median(s[1] for s in samples[mode])} for mode in MODES}
    from mtl_framework.step.model import PACK_BELOW

    def ratios(mode):
        return {"wall": median["padded"]["wall"] / median[mode]["wall"],
                "cpu": median["padded"]["cpu"] / median[mode]["cpu"],
                "paired_cpu": statistics.median(a[1] / b[1] for a, b in zip(samples["padded"],
                                                                            samples[mode]))}
    return {"size": size, "precision": precision, "pack_below": PACK_BELOW,
            "compute_dtype": models["packed"].backbone.dtype_policy.compute_dtype,
            "tokens": real_fractions(drawn), "samples": samples, "median": median,
            "padded_over": {mode: ratios(mode) for mode in ("packed", "default")},
            "others_cpu_seconds_per_round": busy}


def sweep(size, precision, fractions=(0.5, 0.7, 0.85, 0.95), batch=32, length=128, repeats=4):
    """Backbone-only CPU seconds, padded against packed, by real-token fraction (--sweep)."""
    import keras
    import tensorflow as tf

    from mtl_framework import architectures
    from mtl_framework.step.distributed import precision_policy

    dims = {"tiny": dict(num_layers=2, hidden_size=128, num_heads=2, intermediate_size=512),
            "small": {}}[size]
    with precision_policy(precision):
        keras.utils.set_random_seed(0)
        config = architectures.backbone_config("bert", "small" if size == "small" else None,
                                               vocab_size=8000, dropout=0.1, **dims)
        backbone = architectures.build_backbone(config)
        backbone.build()
    probe = tf.random.stateless_normal((1, config["hidden_size"]), (1, 2))

    def step_of(packed):
        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
        def step(ids):
            with tf.GradientTape() as tape:
                hidden = backbone({"token_ids": ids, "segment_ids": tf.zeros_like(ids)},
                                  training=True, packed=packed)
                loss = tf.reduce_sum(tf.cast(hidden[:, 0], tf.float32) * probe)
            return loss, [tf.convert_to_tensor(g)
                          for g in tape.gradient(loss, backbone.trainable_variables)]
        return step

    steps, rng, rows = {False: step_of(False), True: step_of(True)}, np.random.default_rng(0), []
    for fraction in fractions:
        lengths = np.clip(rng.normal(fraction * length, 0.1 * length, batch).astype(int), 3, length)
        lengths[0] = length
        ids = np.zeros((batch, length), np.int32)
        for row, n in enumerate(lengths):
            ids[row, :n] = rng.integers(5, 8000, n)
        cpu = {False: [], True: []}
        for packed in (False, True):
            steps[packed](ids)  # trace
        for repeat in range(repeats):
            for packed in ((False, True) if repeat % 2 == 0 else (True, False)):
                cpu0 = time.process_time()
                steps[packed](ids)[0].numpy()
                cpu[packed].append(time.process_time() - cpu0)
        padded, packed = statistics.median(cpu[False]), statistics.median(cpu[True])
        rows.append({"size": size, "precision": precision, "fraction": float((ids != 0).mean()),
                     "padded_cpu": padded, "packed_cpu": packed,
                     "padded_over_packed": padded / packed})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def markdown(report):
    lines = ["# Every family packed: padded against packed update time", ""]
    if report.get("results"):
        lines += update_table(report)
    if report.get("sweep"):
        lines += sweep_table(report["sweep"])
    return "\n".join(lines + [""])


def update_table(report):
    lines = [f"{report['cpu']}, {report['cores']} cores, load average before / after "
             f"{report['load_before']} / {report['load_after']}; {report['updates']} updates a "
             f"block, {report['rounds']} rounds of interleaved padded / packed blocks. One update "
             "= one micro-batch each of tnews (classification), cluener (extraction_ner) and "
             "cmrc2018 (mrc_span), batch 32, max_length 128, real data; BERT, "
             "`bench/packed_step.py`.", "",
             "| size | precision | s / update, CPU (wall): padded, packed, default | padded / "
             "packed: CPU, paired CPU, wall | padded / default: CPU, paired CPU, wall | real "
             "tokens: all, tnews, cluener, cmrc2018 |", "|---|---|---|---|---|---|"]
    for r in report["results"]:
        m, t = r["median"], r["tokens"]
        lines.append(
            f"| {r['size']} | {r['precision']} ({r['compute_dtype']}) | "
            + ", ".join(f"{m[mode]['cpu']:.3f} ({m[mode]['wall']:.3f})" for mode in MODES) + " | "
            + " | ".join(", ".join(f"{r['padded_over'][mode][k]:.2f}x"
                                   for k in ("cpu", "paired_cpu", "wall"))
                         for mode in ("packed", "default")) + " | "
            + ", ".join(f"{t[k]['real_fraction']:.0%}" for k in ("all", *TASKS)) + " |")
    lines += ["", f"`default` packs a micro-batch where at most {report['results'][0]['pack_below']}"
              " of its positions are real tokens (step.model.PACK_BELOW).", "",
              "Others' CPU seconds per round (the shared machine's load): "
              + "; ".join(f"{r['size']} {r['precision']}: "
                          + ", ".join(f"{x:.0f}" for x in r["others_cpu_seconds_per_round"])
                          for r in report["results"])]
    return lines


def sweep_table(sweep_):
    lines = ["", "## The backbone alone by real-token fraction (`--sweep`)", "",
             f"{sweep_['cpu']}, load average {sweep_['load_before']} / {sweep_['load_after']} "
             f"{sweep_.get('note', '')}; "
             "BERT forward + backward, 32 x 128, CPU seconds (median of 4 interleaved).", "",
             "| size | precision | real tokens | padded s | packed s | padded / packed |",
             "|---|---|---|---|---|---|"]
    return lines + [f"| {r['size']} | {r['precision']} | {r['fraction']:.0%} | "
                    f"{r['padded_cpu']:.3f} | {r['packed_cpu']:.3f} | "
                    f"{r['padded_over_packed']:.2f}x |" for r in sweep_["rows"]]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--precisions", nargs="+", default=["float32", "auto"])
    parser.add_argument("--updates", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="tiny, float32, 2 updates, 2 rounds")
    parser.add_argument("--output-dir", default=None)
    parser.add_argument("--workdir", default=None, help="runs and the feature cache (kept)")
    parser.add_argument("--sweep", action="store_true",
                        help="the backbone alone by real-token fraction (see the module doc)")
    args = parser.parse_args(argv)
    if args.sweep:
        folder = Path(args.output_dir or REPO / "bench" / "results")
        path = folder / "packed_step.json"
        report = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"results": []}
        report["sweep"] = {"cpu": cpu_model(), "load_before": load_average(),
                           "rows": [row for size in args.sizes for precision in args.precisions
                                    for row in sweep(size, precision)]}
        report["sweep"]["load_after"] = load_average()
        write_results(folder, "packed_step", report, markdown(report))
        return report
    if args.quick:
        args.sizes, args.precisions, args.updates, args.rounds = ["tiny"], ["float32"], 2, 2
    output = Path(args.output_dir or (tempfile.mkdtemp() if args.quick else REPO / "bench" / "results"))
    workdir = args.workdir or tempfile.mkdtemp(prefix="packed_step-")
    report = {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
              "load_before": load_average(), "updates": args.updates, "rounds": args.rounds,
              "results": []}
    for size in args.sizes:
        for precision in args.precisions:
            report["results"].append(measure(size, precision, args.updates, args.rounds, workdir))
    report["load_after"] = load_average()
    write_results(output, "packed_step", report, markdown(report))
    return report


if __name__ == "__main__":
    main()
