"""Where a training step's time goes, op type by op type (TF profiler), for our
backbone beside keras-hub's and the RoBERTa-like baseline: what is left beyond the
matrix multiplications, and what separates the systems.

    .venv/bin/python -m bench.backbone_profile [--config small] [--seq 128] [--steps 5]

The step is bench/backbone.py's (backbone -> [CLS] -> Dense(2), Adam, batch 32, real
cmrc2018 text). Each system is warmed up, then `--steps` steps run under
`tf.profiler.experimental`; the trace (XSpace) is read back and every TensorFlow op
event on the executor threads is summed by op type. Op time is summed over threads, so
on 2 cores it can exceed the wall time (two ops at once); shares are of op time.
Writes bench/results/backbone_profile.{json,md}.
"""
import argparse
import collections
import glob
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from bench import REPO
from bench.backbone import CONFIGS, DEFAULT_DATA, build_system, keras_hub_available, make_batches
from bench.load import cpu_model, cpu_seconds, machine_busy_seconds

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
BENCH = REPO / "bench"

MATMUL_TYPES = {"MatMul", "_MklMatMul", "_FusedMatMul", "_MklFusedMatMul", "BatchMatMul",
                "BatchMatMulV2", "BatchMatMulV3", "_MklBatchMatMulV2", "Einsum", "_MklEinsum"}
# Bookkeeping events on the executor threads that wrap ops rather than being ops.
NOT_OPS = {"ExecutorState::Process", "ParallelFor", "ExecutorDoneCallback"}


def op_times(logdir):
    """{op type: (picoseconds, events)} summed over every executor thread of the trace."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    path = sorted(glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True))[-1]
    space = xplane_pb2.XSpace()
    space.ParseFromString(Path(path).read_bytes())
    totals = collections.defaultdict(lambda: [0, 0])
    for plane in space.planes:
        names = {k: v.name for k, v in plane.event_metadata.items()}
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):
                continue
            for event in line.events:
                name = names.get(event.metadata_id, "")
                if name in NOT_OPS or ":" not in name:
                    continue
                entry = totals[name.rsplit(":", 1)[1]]
                entry[0] += event.duration_ps
                entry[1] += 1
    return totals


def profile(system, config, x, y, steps, warmup=3):
    import tensorflow as tf

    model = build_system(system, CONFIGS[config])
    for _ in range(warmup):
        model.train_on_batch(x, y)
    logdir = tempfile.mkdtemp(prefix=f"profile_{system}_")
    cpu, busy = cpu_seconds(), machine_busy_seconds()
    started = time.perf_counter()
    tf.profiler.experimental.start(logdir)
    for _ in range(steps):
        model.train_on_batch(x, y)
    tf.profiler.experimental.stop()
    wall = time.perf_counter() - started
    own_cpu, machine = cpu_seconds() - cpu, machine_busy_seconds() - busy
    totals = op_times(logdir)
    shutil.rmtree(logdir, ignore_errors=True)
    ms = {op: ps / 1e9 / steps for op, (ps, _) in totals.items()}
    total = sum(ms.values())
    matmul = sum(t for op, t in ms.items() if op in MATMUL_TYPES)
    return {"wall_ms_per_step_profiled": round(1000 * wall / steps, 1),
            "other_load": round(max(0.0, machine - own_cpu) / wall, 2),
            "op_ms_per_step": round(total, 1), "matmul_ms_per_step": round(matmul, 1),
            "matmul_share": round(matmul / total, 3),
            "ops": {op: {"ms_per_step": round(t, 2), "share": round(t / total, 4),
                         "events_per_step": totals[op][1] / steps}
                    for op, t in sorted(ms.items(), key=lambda kv: -kv[1])}}


def markdown(report, top=14):
    systems = report["systems"]
    lines = [f"Op time per training step by op type (TF profiler), {report['config']}/"
             f"{report['seq']}, batch 32, {report['steps']} profiled steps per system; "
             f"{report['machine']}. Op time is summed over the executor threads.", "",
             "| system | op ms/step | matmul ms/step | matmul share | beyond matmuls ms/step | "
             "profiled wall ms/step | other load |", "|---|---|---|---|---|---|---|"]
    for name, r in systems.items():
        lines.append(f"| {name} | {r['op_ms_per_step']:,.0f} | {r['matmul_ms_per_step']:,.0f} | "
                     f"{r['matmul_share']:.0%} | {r['op_ms_per_step'] - r['matmul_ms_per_step']:,.0f}"
                     f" | {r['wall_ms_per_step_profiled']:,.0f} | {r['other_load']} |")
    ops = collections.Counter()
    for r in systems.values():
        for op, entry in r["ops"].items():
            if op not in MATMUL_TYPES:
                ops[op] = max(ops[op], entry["ms_per_step"])
    names = list(systems)
    lines += ["", f"Beyond the matmuls: the {top} op types that cost most (ms per step):", "",
              "| op type | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for op, _ in ops.most_common(top):
        cells = [f"{systems[n]['ops'][op]['ms_per_step']:,.1f}" if op in systems[n]["ops"] else "-"
                 for n in names]
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    lines += ["", f"Run: `python -m bench.backbone_profile --config {report['config']} --seq "
              f"{report['seq']}`, {report['wall_seconds']:.0f} s."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="small", choices=sorted(CONFIGS))
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--output", default=str(BENCH / "results" / "backbone_profile.json"))
    args = parser.parse_args(argv)
    started = time.time()
    batches, labels, data = make_batches([args.seq], DEFAULT_DATA, tempfile.mkdtemp())
    x = dict(zip(("token_ids", "segment_ids"), batches[args.seq]))
    systems = ["ours"] + (["keras_hub"] if keras_hub_available() else []) + ["roberta_like"]
    report = {"benchmark": "op time per training step by op type (TF profiler)",
              "config": args.config, "seq": args.seq, "steps": args.steps, "data": data,
              "machine": f"{cpu_model()}, {os.cpu_count()} cores", "systems": {}}
    for system in systems:
        print(f"profiling {system} ...", flush=True)
        report["systems"][system] = profile(system, args.config, x, labels, args.steps)
    report["wall_seconds"] = round(time.time() - started, 1)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=1))
    output.with_suffix(".md").write_text(markdown(report))
    print(output.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
