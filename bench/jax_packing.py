"""Packing on JAX (issue 52, point 3): the update time of `mtl train`'s micro-batches with
the backbone padded against packed, and what packing costs in compilations, JAX on CPU.

    KERAS_BACKEND=jax .venv-jax/bin/python -m bench.jax_packing [--sizes tiny small]
        [--precisions float32 auto] [--mixtures demo unbucketed] [--updates 100] [--quick]

JAX compiles a micro-step per batch shape; a packed one also per row count, so JAX's
step packs T real tokens into T rounded up to eighths of the batch's positions
(step/jax.py PACK_STEPS: at most 7 more compilations per shape, at most 1/8 of the
positions computed in vain), and only micro-batches at most step.model.PACK_BELOW real.

The demo mixture (experiments/demo.yaml: 6 tasks of 5 families, batch 32, max_length 64),
as `mtl train` builds it (loop.run.Run); `demo`: drawn as the run draws it (length
buckets: ~98% real tokens, bench/results/real_tokens.md), `unbucketed`: its streams'
length buckets off (~72% real, bench.real_tokens.without_buckets). Sizes: `tiny`, the
demo's own RoFormerV2 (L2/H128/A2); `small`, BERT L6/H384/A6. Precisions float32 and
`auto` (mixed_bfloat16 where the CPU has AMX / AVX512-BF16, else float32).

Per (size, precision, mixture), two runs are built (`backbone.packed: false` and the
default) and `--updates` updates drawn once; three ways of running them: `padded` (the
padded run: JAX as shipped, step/jax.py PACK_MICRO_BATCHES off), `default` (the packed run
with TensorFlow's rule: a micro-batch packs where at most PACK_BELOW of it is real) and
`packed` (PACK_BELOW 1: every micro-batch packs, its rows rounded up as above). Two
passes over the same updates, each update run the three ways in a rotating order
(interleaved: a slow phase of the shared machine hits all): the first compiles (counted:
new micro-step traces, and JAX's own compile durations, /jax/core/compile/*), the second
runs compiled (the steady state: median update wall and process CPU seconds). Reported
with the machine's load.

Writes bench/results/jax_packing.json and .md (--quick: a temporary folder).
"""
import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import REPO, write_results
from bench.load import cpu_model, load_average, machine_busy_seconds

SIZES = {"tiny": None,  # the demo's own backbone
         "small": {"architecture": "bert", "size": "small", "vocab_size": 5000, "dropout": 0.1}}
MODES = ("padded", "default", "packed")
MIXTURES = ("demo", "unbucketed")


def build_run(size, precision, packed, workdir):
    """The run `mtl train experiments/demo.yaml` would build with `size`'s backbone,
    `precision` and `backbone.packed`, nothing trained (its feature cache under workdir)."""
    import yaml

    from mtl_framework.loop.run import Run

    experiment = yaml.safe_load((REPO / "experiments" / "demo.yaml").read_text(encoding="utf-8"))
    experiment["data_root"] = str(REPO / "experiments" / "demo" / "data")
    experiment["cache_dir"] = str(Path(workdir) / "cache")
    experiment["backbone"] = {**(SIZES[size] or experiment["backbone"]), "packed": packed}
    experiment["precision"] = precision
    name = f"{size}_{precision}_{'packed' if packed else 'padded'}"
    path = Path(workdir) / f"{name}.yaml"
    path.write_text(yaml.safe_dump(experiment), encoding="utf-8")
    return Run(str(path), output=str(Path(workdir) / name), log=lambda _: None)


def draw_updates(run, updates, mixture):
    """`updates` updates of `tasks_per_update` micro-batches from the run's mixture."""
    from bench.real_tokens import without_buckets

    if mixture == "unbucketed":
        without_buckets(run.model.mixture)
    per_update = run.model.tasks_per_update
    return [[run.model.mixture.next() for _ in range(per_update)] for _ in range(updates)]


class CompileClock:
    """JAX's compile durations (tracing, lowering, XLA), summed while `running` is set."""

    def __init__(self):
        import jax

        self.seconds = 0.0
        jax.monitoring.register_event_duration_secs_listener(self.heard)

    def heard(self, event, duration, **_):
        if event.startswith("/jax/core/compile/"):
            self.seconds += duration


def packed_share(model, drawn, pack_below):
    """(micro-batches packed / all, rows computed in vain / positions of the packed ones)."""
    from mtl_framework.step import model as step_model

    shipped, step_model.PACK_BELOW = step_model.PACK_BELOW, pack_below
    try:
        packed, spare, positions, count = 0, 0, 0, 0
        for update in drawn:
            for task, batch in update:
                count += 1
                rows = not model.heads[task].texts_alone and model._packs_batch(batch)
                if rows:
                    ids = np.asarray(batch["token_ids"])
                    packed, positions = packed + 1, positions + ids.size
                    spare += rows - np.count_nonzero(ids)
        return packed / count, spare / positions if positions else 0.0
    finally:
        step_model.PACK_BELOW = shipped


def run_mode(model, update, pack_below):
    """(wall, CPU) seconds of one update on `model` with PACK_BELOW `pack_below`, packing
    where the run's `backbone.packed` asks."""
    from mtl_framework.step import jax as step_jax
    from mtl_framework.step import model as step_model

    shipped, step_model.PACK_BELOW = step_model.PACK_BELOW, pack_below
    step_jax.PACK_MICRO_BATCHES = model.packed is True  # off as shipped (step/jax.py)
    try:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        logs = model.run_update(list(update))
        float(np.asarray(logs[-1]["loss"]))  # JAX dispatches asynchronously: wait
        return time.perf_counter() - wall0, time.process_time() - cpu0
    finally:
        step_model.PACK_BELOW, step_jax.PACK_MICRO_BATCHES = shipped, False


def micro_step_traces(model):
    return sum(model.tracing_counts()["micro_step"].values())


def measure(size, precision, mixture, updates, workdir, clock):
    from mtl_framework.step import model as step_model

    runs = {packed: build_run(size, precision, packed, workdir) for packed in (False, True)}
    models = {"padded": runs[False].model, "default": runs[True].model, "packed": runs[True].model}
    pack_below = {"padded": step_model.PACK_BELOW, "default": step_model.PACK_BELOW, "packed": 1.0}
    drawn = draw_updates(runs[False], updates, mixture)
    every = [np.asarray(b["token_ids"]) for update in drawn for _, b in update]
    result = {"size": size, "precision": precision, "mixture": mixture, "updates": updates,
              "policy": runs[True].backbone.dtype_policy.name,
              "real_fraction": float(sum(np.count_nonzero(i) for i in every) / sum(i.size for i in every)),
              "shapes": len({(t, i.shape) for update in drawn for t, b in update
                             for i in [np.asarray(b["token_ids"])]}),
              "modes": {mode: {"compiles": 0, "compile_seconds": 0.0, "first_pass_seconds": 0.0,
                               "walls": [], "cpus": []} for mode in MODES}}
    for mode in MODES:
        share, spare = packed_share(models[mode], drawn, pack_below[mode]) if mode != "padded" \
            else (0.0, 0.0)
        result["modes"][mode].update(packed_share=share, spare_rows=spare)
    busy0, started = machine_busy_seconds(), time.perf_counter()
    for number, update in enumerate(drawn):  # pass 1: every shape compiles
        for mode in MODES[number % 3:] + MODES[:number % 3]:
            entry, model = result["modes"][mode], models[mode]
            traces0, compile0 = micro_step_traces(model), clock.seconds
            wall, _ = run_mode(model, update, pack_below[mode])
            entry["compiles"] += micro_step_traces(model) - traces0
            entry["compile_seconds"] += clock.seconds - compile0
            entry["first_pass_seconds"] += wall
    for number, update in enumerate(drawn):  # pass 2: compiled, the steady state
        for mode in MODES[number % 3:] + MODES[:number % 3]:
            wall, cpu = run_mode(models[mode], update, pack_below[mode])
            result["modes"][mode]["walls"].append(wall)
            result["modes"][mode]["cpus"].append(cpu)
    result["seconds"] = time.perf_counter() - started
    result["others_cpu_seconds"] = machine_busy_seconds() - busy0
    for mode, entry in result["modes"].items():
        entry["wall_median"] = statistics.median(entry.pop("walls"))
        entry["cpu_median"] = statistics.median(entry.pop("cpus"))
    padded = result["modes"]["padded"]
    for entry in result["modes"].values():
        entry["speedup_wall"] = padded["wall_median"] / entry["wall_median"]
        entry["speedup_cpu"] = padded["cpu_median"] / entry["cpu_median"]
    for run in runs.values():
        run.close()
    print(result, flush=True)
    return result


def markdown(report):
    lines = ["# Packing on JAX (CPU)", "",
             f"CPU: {report['cpu']} ({report['cores']} cores, shared: load average "
             f"{report['load_before']} before, {report['load_after']} after). JAX "
             f"{report['jax']}, Keras {report['keras']}. The demo mixture's micro-batches (batch 32, "
             "max_length 64, 4 per update), each update run padded, packed by TensorFlow's rule "
             "(`default`: micro-batches at most PACK_BELOW real) and every micro-batch packed (`packed`), "
             "interleaved; pass 1 compiles, pass 2 is the steady state (medians). Packed rows: "
             "T rounded up to eighths of the batch's positions (step/jax.py PACK_STEPS).", "",
             "| size | precision | mixture | real tokens | shapes | way | micro-batches packed | "
             "rows in vain | compiles | compile s | pass 1 s | update ms (wall) | update ms (CPU) | "
             "padded / way (wall) | (CPU) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["results"]:
        for mode, e in r["modes"].items():
            lines.append(
                f"| {r['size']} | {r['precision']} | {r['mixture']} | {r['real_fraction']:.1%} | "
                f"{r['shapes']} | {mode} | {e['packed_share']:.0%} | {e['spare_rows']:.1%} | "
                f"{e['compiles']} | {e['compile_seconds']:.1f} | {e['first_pass_seconds']:.1f} | "
                f"{1000 * e['wall_median']:.1f} | {1000 * e['cpu_median']:.1f} | "
                f"{e['speedup_wall']:.2f}x | {e['speedup_cpu']:.2f}x |")
    lines += ["", "rows in vain: packed rows past T over the packed micro-batches' positions; "
              "shapes: distinct (task, [B, L]) of the drawn micro-batches (padded compiles one "
              "micro-step per trace group and shape); `default` and `packed` run one model, so "
              "a step one compiled the other reuses: their sum is packing's count. Others' CPU "
              "seconds during each "
              "measurement: " + ", ".join(f"{r['size']}/{r['precision']}/{r['mixture']} "
                                          f"{r['others_cpu_seconds']:.0f}" for r in report["results"]),
              "", f"Run: `KERAS_BACKEND=jax .venv-jax/bin/python -m bench.jax_packing "
              f"{report['argv']}`, finished {report['finished']}."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    import jax
    import keras

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--precisions", nargs="+", default=["float32", "auto"])
    parser.add_argument("--mixtures", nargs="+", default=list(MIXTURES), choices=MIXTURES)
    parser.add_argument("--updates", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="tiny, float32, demo, 3 updates")
    parser.add_argument("--output-dir", default=None)
    parser.add_argument("--workdir", default=None, help="runs and the feature cache (kept)")
    args = parser.parse_args(argv)
    if keras.backend.backend() != "jax":
        raise SystemExit("error: KERAS_BACKEND: bench.jax_packing measures JAX: run it with "
                         "KERAS_BACKEND=jax .venv-jax/bin/python")
    if args.quick:
        args.sizes, args.precisions, args.mixtures, args.updates = ["tiny"], ["float32"], ["demo"], 3
    output = Path(args.output_dir or (tempfile.mkdtemp() if args.quick else REPO / "bench" / "results"))
    workdir = args.workdir or tempfile.mkdtemp(prefix="jax_packing-")
    Path(workdir).mkdir(parents=True, exist_ok=True)
    clock = CompileClock()
    report = {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
              "jax": jax.__version__, "keras": keras.__version__, "load_before": load_average(),
              "argv": " ".join(argv if argv is not None else __import__("sys").argv[1:]),
              "results": []}
    for size in args.sizes:
        for precision in args.precisions:
            for mixture in args.mixtures:
                report["results"].append(measure(size, precision, mixture, args.updates, workdir, clock))
    report["load_after"] = load_average()
    report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    write_results(output, "jax_packing", report, markdown(report))
    return report


if __name__ == "__main__":
    main()
