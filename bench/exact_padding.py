"""What the backbone's exact_padding option costs and buys, on this CPU (issue 17 item 6).

    .venv/bin/python -m bench.exact_padding [--rounds 5] [--quick]

Same weights, exact_padding True (float64 softmax denominator) and False (float32
softmax):
- padding error: rows with random real lengths, the batch first padded to its
  longest row (`base`), then to 128 / 256 / 512; max |change| of the outputs at
  real tokens (0.0 = exact), for several bases (TF's reductions switch kernels
  with the key count, so the base matters);
- cost: one forward + backward (gradient of the summed output) per step, the two
  options interleaved round by round, median seconds; plus the size of the float64
  copy of the scores that exact padding makes per layer.
Writes bench/results/exact_padding.{json,md}. The machine is shared: the JSON records
the load average; compare the two options only within one run.
"""
import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from bench import REPO
from bench.load import cpu_model, load_average

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

MODEL = dict(vocab_size=3000, num_layers=4, hidden_size=256, num_heads=4, dropout=0.0)


def twins(config):
    import keras

    from mtl_framework import RoFormerV2Backbone

    keras.utils.set_random_seed(0)
    exact = RoFormerV2Backbone(**config, exact_padding=True)
    exact.build()
    plain = RoFormerV2Backbone(**config, exact_padding=False)
    plain.build()
    plain.set_weights(exact.get_weights())
    return {"exact": exact, "float32": plain}


def batch(lengths, total, vocab, seed=0):
    rng = np.random.default_rng(seed)
    ids = np.zeros((len(lengths), total), "int32")
    for row, n in enumerate(lengths):
        ids[row, :n] = rng.integers(1, vocab, n)
    return {"token_ids": ids, "segment_ids": np.zeros_like(ids)}


def padding_errors(models, bases, totals, rows=8):
    rng = np.random.default_rng(1)
    out = []
    for base in bases:
        lengths = [base] + list(rng.integers(3, base + 1, rows - 1))
        small = batch(lengths, base, MODEL["vocab_size"])
        real = small["token_ids"] > 0
        entry = {"base": base, "lengths": [int(n) for n in lengths]}
        for name, model in models.items():
            reference = np.asarray(model(small))
            entry[name] = {}
            for total in totals:
                wide = np.asarray(model(batch(lengths, total, MODEL["vocab_size"])))
                entry[name][str(total)] = float(np.abs(wide[:, :base][real] - reference[real]).max())
        out.append(entry)
    return out


def step_seconds(models, batch_size, length, rounds):
    import tensorflow as tf

    inputs = batch([length] * batch_size, length, MODEL["vocab_size"])
    steps = {}
    for name, model in models.items():
        @tf.function
        def step(inputs, model=model):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(model(inputs, training=True))
            return tape.gradient(loss, model.trainable_variables)
        step(inputs)  # trace
        steps[name] = step
    times = {name: [] for name in models}
    cpu = {name: [] for name in models}
    for _ in range(rounds):
        for name, step in steps.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            step(inputs)
            times[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)  # less moved by other users
    return {name: {"median_s": float(np.median(times[name])),
                   "median_cpu_s": float(np.median(cpu[name])),
                   "all_s": [round(x, 4) for x in times[name]],
                   "all_cpu_s": [round(x, 4) for x in cpu[name]]} for name in models}


def markdown(result):
    m = result["model"]
    lines = ["# exact_padding: cost and padding error on CPU", "",
             f"Backbone L{m['num_layers']}-H{m['hidden_size']}-A{m['num_heads']}, same weights both "
             f"ways; {result['cpu']}, load average {result['load_average'][0]} -> "
             f"{result['load_average'][1]} (shared machine).", "",
             "Padding error: max |change| of real-token outputs when the batch padded to its "
             "longest row (base) is padded further.", "",
             "| base | padded to | exact_padding=True | exact_padding=False |", "|---|---|---|---|"]
    for entry in result["padding_error"]:
        for total in entry["exact"]:
            lines.append(f"| {entry['base']} | {total} | {entry['exact'][total]:.2e} | "
                         f"{entry['float32'][total]:.2e} |")
    lines += ["", "Forward + backward, median of the interleaved rounds (wall s / process CPU s):",
              "", "| batch x length | True | False | True / False (wall / CPU) | "
              "float64 copy per layer |", "|---|---|---|---|---|"]
    for entry in result["speed"]:
        t, f = entry["exact"], entry["float32"]
        lines.append(f"| {entry['batch']} x {entry['length']} | {t['median_s']:.3f} / "
                     f"{t['median_cpu_s']:.3f} | {f['median_s']:.3f} / {f['median_cpu_s']:.3f} | "
                     f"{t['median_s'] / f['median_s']:.2f} / "
                     f"{t['median_cpu_s'] / f['median_cpu_s']:.2f} | "
                     f"{entry['float64_copy_mb_per_layer']:.1f} MB |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="two bases, one short speed case")
    parser.add_argument("--output-dir", default=str(REPO / "bench" / "results"))
    args = parser.parse_args()
    load_start = load_average()
    models = twins(MODEL)
    bases = [40, 64] if args.quick else [20, 40, 64, 100]
    totals = [128] if args.quick else [128, 256, 512]
    cases = [(8, 128)] if args.quick else [(16, 128), (4, 512)]
    errors = padding_errors(models, bases, totals)
    speed = []
    for batch_size, length in cases:
        entry = step_seconds(models, batch_size, length, args.rounds)
        entry.update(batch=batch_size, length=length, float64_copy_mb_per_layer=(
            batch_size * MODEL["num_heads"] * length * length * 8 / 2**20))
        speed.append(entry)
        print(entry, flush=True)
    result = {"model": MODEL, "padding_error": errors, "speed": speed, "cpu": cpu_model(),
              "load_average": [load_start, load_average()]}
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "exact_padding.json").write_text(json.dumps(result, indent=1))
    (out / "exact_padding.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
