"""Where a whole `mtl train` spends its time, stage by stage (issue 52, point 1), CPU.

    .venv/bin/python -m bench.train_loop [--configs contrastive classification demo]
        [--precisions float32 auto] [--backends tensorflow jax] [--updates 60] [--quick]

Each (config, backend, precision) is a worker process that builds the run as `mtl train`
builds it (loop.run.Run on a checked experiment: plan, vocab, caches, streams, model) and
trains it through `Run.train` (Keras `fit` with the run's own callbacks). Every stage of an
update is timed in that process, exclusive of the stages it calls:

    batch assembly   the mixture's next() (stream reads, collation, padding)
    host transfer    the batch's arrays into tensors (MultiTaskModel._to_tensors)
    step             the traced micro-steps (_launch) and their accumulation (_finish)
    step results     the micro-step logs read back to the host (_check)
    optimizer        apply_update (the optimizer update, once per update)
    balancing        the balancing method's after_update
    logging          the run's callbacks: metrics.jsonl, TensorBoard, the progress bar, task logs
    evaluation       the dev evaluations the run makes (eval_every)
    checkpoints      checkpoint writes (checkpoint_every)
    run_update rest  run_update's own Python around the above
    fit              what is left of an update: Keras's fit loop and the update counter

Then the same model replays the batches the loop drew, update by update, through
`MultiTaskModel.run_update` alone (nothing traced any more); rounds alternate a block of
loop updates (`fit` again on the same run) and the replay of the same block, so a slow phase
of the shared machine hits both. The ratio of the loop's steady-state update time (updates
without an evaluation, a checkpoint or a new trace) to run_update's on the same batches is
the loop's overhead. Separately, a child `mtl train` process on a warm cache is timed from
its start to its first update (the first line of metrics.jsonl) and to its end.

Configs (real data, ../shared/data and the demo's bundled samples):
- contrastive: BERT small (L6/H384/A6), afqmc_sts (CoSENT on AFQMC pairs), batch 32,
  max_length 64, one micro-batch an update (what bench/embedding_speed's step times).
- classification: BERT small, tnews, batch 32, max_length 64, one micro-batch an update.
- demo: experiments/demo.yaml as it is (tiny RoFormerV2, 6 tasks, 4 micro-batches an
  update, eval every 60, checkpoints every 80).
The JAX backend runs in .venv-jax (no TensorFlow).

Writes bench/results/train_loop.json and .md (--quick: a temporary folder).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import REPO, child_env
from bench.main_job import marks_callback

SHARED = REPO.parent / "shared" / "data"
JAX_PYTHON = REPO / ".venv-jax" / "bin" / "python"
STAGES = ("batch assembly", "host transfer", "step", "step results", "optimizer", "balancing",
          "logging", "evaluation", "checkpoints", "run_update rest", "fit")
SMALL_BERT = "{architecture: bert, size: small, vocab_size: 8000}"
ONE_TASK = """\
name: train_loop_{config}
data_root: {data_root}
cache_dir: {cache}
backbone: {backbone}
tasks:
  - {{name: {task}}}
tasks_per_update: 1
batch_size: 32
max_length: 64
optimizer: {{name: adamw, lr: 0.0001, warmup_steps: 10}}
steps: {steps}
seed: 0
precision: {precision}
checkpoint_every: {checkpoint_every}
eval_every: {eval_every}
eval_batches: 4
"""
CONFIGS = {"contrastive": "afqmc_sts", "classification": "tnews", "demo": None}


def experiment_text(config, precision, steps, cache):
    """The experiment YAML of a config: checkpoints and evaluations at a user's pace (twice
    in `steps`), so their cost shows."""
    if config == "demo":
        demo = (REPO / "experiments" / "demo.yaml").read_text(encoding="utf-8")
        demo = demo.replace("data_root: demo/data", f"data_root: {REPO / 'experiments/demo/data'}")
        demo = demo.replace("precision: float32", f"precision: {precision}")
        return demo.replace("steps: 240", f"steps: {steps}") + f"cache_dir: {cache}\n"
    return ONE_TASK.format(config=config, data_root=SHARED, cache=cache, backbone=SMALL_BERT,
                           task=CONFIGS[config], steps=steps, precision=precision,
                           checkpoint_every=max(steps // 2, 1), eval_every=max(steps // 2, 1))


# --- the worker: one run, its stages timed ------------------------------------------------

class StageClock:
    """Exclusive wall and process-CPU seconds per stage: a stage entered inside another is
    taken out of the outer one's time."""

    def __init__(self):
        self.wall, self.cpu, self.stack = {}, {}, []

    def wrap(self, stage, fn):
        def timed(*args, **kwargs):
            self.stack.append([stage, time.perf_counter(), time.process_time(), 0.0, 0.0])
            try:
                return fn(*args, **kwargs)
            finally:
                name, wall0, cpu0, inner_wall, inner_cpu = self.stack.pop()
                wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
                self.wall[name] = self.wall.get(name, 0.0) + wall - inner_wall
                self.cpu[name] = self.cpu.get(name, 0.0) + cpu - inner_cpu
                if self.stack:
                    self.stack[-1][3] += wall
                    self.stack[-1][4] += cpu
        return timed

    def take(self):
        wall, cpu = self.wall, self.cpu
        self.wall, self.cpu = {}, {}
        return wall, cpu


def trace_total(model):
    def total(counts):
        if isinstance(counts, dict):
            return sum(total(v) for v in counts.values())
        return int(counts or 0)
    return total(model.tracing_counts())


def instrument(run, clock, drawn):
    """Times the stages of `run`'s updates in `clock`; the batches each update drew go to
    `drawn` (a list of lists)."""
    from mtl_framework.loop import callbacks
    from mtl_framework.loop import run as run_module

    model = run.model
    next_batch = model.mixture.next

    def draw():
        batch = next_batch()
        drawn[-1].append(batch)
        return batch
    model.mixture.next = clock.wrap("batch assembly", draw)
    model._to_tensors = clock.wrap("host transfer", model._to_tensors)
    model._launch = clock.wrap("step", model._launch)
    model._finish = clock.wrap("step", model._finish)
    model._check = clock.wrap("step results", model._check)
    model.apply_update = clock.wrap("optimizer", model.apply_update)
    model.balancing.after_update = clock.wrap("balancing", model.balancing.after_update)
    model.run_update = clock.wrap("run_update rest", model.run_update)
    logger = run_module.RunLogger
    for cls, method, stage in ((logger, "on_train_batch_end", "logging"),
                               (logger, "evaluate", "evaluation"),
                               (logger, "checkpoint", "checkpoints"),
                               (callbacks.TaskLogs, "on_train_batch_end", "logging"),
                               (callbacks.Progress, "on_train_batch_end", "logging"),
                               (callbacks.EvaluationEpochs, "on_epoch_begin", "logging")):
        original = getattr(cls, method)
        setattr(cls, method, clock.wrap(stage, original))


class UpdateClock:
    """fit's updates, each from one on_train_batch_begin to the next (the last to the end of
    fit): wall, CPU, the stages' share and whether it traced anything new. After every
    `block` updates, between two updates and outside their times, the block's batches are
    replayed through run_update alone (blocks: [{"loop": [...], "replay": [...]}])."""

    def __init__(self, run, clock, drawn, block):
        self.callback = marks_callback(self)
        self.run, self.clock, self.drawn, self.block = run, clock, drawn, block
        self.updates, self.blocks, self.open, self.load = [], [], None, other_cpu_seconds()

    def mark(self, last=False):
        now, cpu = time.perf_counter(), time.process_time()
        traces = trace_total(self.run.model)
        if self.open is not None:
            wall0, cpu0, traces0 = self.open
            stages, stage_cpu = self.clock.take()
            stages["fit"] = (now - wall0) - sum(stages.values())
            stage_cpu["fit"] = (cpu - cpu0) - sum(stage_cpu.values())
            self.updates.append({"wall": now - wall0, "cpu": cpu - cpu0, "stages": stages,
                                 "stage_cpu": stage_cpu, "traced": traces != traces0,
                                 "evaluated": "evaluation" in stages,
                                 "checkpointed": "checkpoints" in stages,
                                 "micro_batches": len(self.drawn[-1])})
            if len(self.updates) % self.block == 0 or last:
                self.replay_block()
        else:
            self.clock.take()  # what fit did before its first update
        if not last:
            self.drawn.append([])
            self.open = (time.perf_counter(), time.process_time(), trace_total(self.run.model))

    def replay_block(self):
        first = sum(len(b["loop"]) for b in self.blocks)
        loop, drawn = self.updates[first:], self.drawn[first:len(self.updates)]
        if not loop:
            return
        load = other_cpu_seconds()
        replayed = replay(self.run.model, drawn)
        self.clock.take()  # the replay's own stage times are not the loop's
        after = other_cpu_seconds()
        self.blocks.append({"loop": loop, "replay": replayed, "other_cpu_loop": load - self.load,
                            "other_cpu_replay": after - load})
        self.load = other_cpu_seconds()


def replay(model, drawn):
    """run_update alone on the loop's batches, one update each: [(wall, cpu)]."""
    out = []
    for update in drawn:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        model.run_update(list(update))
        out.append((time.perf_counter() - wall0, time.process_time() - cpu0))
    return out


def other_cpu_seconds():
    """CPU seconds all processes but this one have used so far (/proc/stat less ours)."""
    with open("/proc/stat") as f:
        fields = [float(x) for x in f.readline().split()[1:]]
    busy = (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")
    return busy - time.process_time()


def worker(config, precision, block, rounds, workdir):
    import keras

    from mtl_framework.loop.run import Run

    steps = block * (rounds + 1)  # a warm-up block (tracing), then `rounds` timed blocks
    path = Path(workdir) / f"{config}.yaml"
    path.write_text(experiment_text(config, precision, steps, Path(workdir) / "cache"),
                    encoding="utf-8")
    run = Run(str(path), output=str(Path(workdir) / "run"), log=lambda _: None)
    clock, drawn = StageClock(), []
    instrument(run, clock, drawn)
    updates = UpdateClock(run, clock, drawn, block)
    run.callbacks.append(updates.callback)
    run.train()
    return {"config": config, "precision": precision, "backend": keras.backend.backend(),
            "block": block, "rounds": rounds, "blocks": updates.blocks,
            "tasks_per_update": run.model.tasks_per_update}


# --- start-up: a child `mtl train` on a warm cache ----------------------------------------

def startup(config, precision, python, env, workdir, steps=3):
    """Seconds from a child `mtl train`'s start to its first metrics line, and to its end,
    on a cache the first (untimed) run warmed."""
    path = Path(workdir) / f"{config}_startup.yaml"
    path.write_text(experiment_text(config, precision, steps, Path(workdir) / "cache")
                    .replace(f"eval_every: {max(steps // 2, 1)}", "eval_every: 0"), encoding="utf-8")
    out = {}
    for attempt in ("warm-up", "timed"):
        run_dir = Path(workdir) / f"startup_{attempt}"
        start = time.perf_counter()
        child = subprocess.Popen([str(python), "-m", "mtl_framework", "train", str(path),
                                  "--output", str(run_dir)], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        first = None
        metrics = run_dir / "metrics.jsonl"
        while child.poll() is None:
            if first is None and metrics.exists() and metrics.stat().st_size:
                first = time.perf_counter() - start
            time.sleep(0.02)
        end = time.perf_counter() - start
        if child.returncode:
            raise SystemExit(f"mtl train failed ({config}, {precision}): {child.stderr.read()[-2000:]}")
        out = {"to_first_update_s": first if first is not None else end, "whole_s": end,
               "steps": steps}
    return out


# --- the parent -----------------------------------------------------------------------------

def summarize(result):
    """Medians over the timed blocks' steady updates (no trace, evaluation or checkpoint)."""
    timed = result["blocks"][1:] or result["blocks"]
    loop = [u for b in timed for u in b["loop"]]
    steady = [u for u in loop if not (u["traced"] or u["evaluated"] or u["checkpointed"])]
    replayed = [r for b in timed for r in b["replay"]]
    paired = [statistics.median([u["wall"] for u in b["loop"] if not (
        u["traced"] or u["evaluated"] or u["checkpointed"])] or [float("nan")])
        / statistics.median([w for w, _ in b["replay"]]) for b in timed]
    stages = {s: statistics.median([u["stages"].get(s, 0.0) for u in steady]) for s in STAGES}
    stage_cpu = {s: statistics.median([u["stage_cpu"].get(s, 0.0) for u in steady]) for s in STAGES}
    events = {name: [u["stages"][name] for u in loop if name in u["stages"]]
              for name in ("evaluation", "checkpoints")}
    loop_wall = statistics.median([u["wall"] for u in steady])
    replay_wall = statistics.median([w for w, _ in replayed])
    return {"steady_updates": len(steady), "loop_update_s": loop_wall,
            "loop_update_cpu_s": statistics.median([u["cpu"] for u in steady]),
            "run_update_s": replay_wall,
            "run_update_cpu_s": statistics.median([c for _, c in replayed]),
            "loop_over_run_update": loop_wall / replay_wall,
            "loop_over_run_update_paired": statistics.median(paired),
            "stages_s": stages, "stages_cpu_s": stage_cpu,
            "event_s": {k: statistics.median(v) if v else None for k, v in events.items()},
            "other_cpu_per_block_s": statistics.median(
                [b["other_cpu_loop"] + b["other_cpu_replay"] for b in timed])}


def markdown(report):
    lines = [f"# `mtl train`, stage by stage ({report['machine']})", "",
             f"{report['note']}", "",
             "Steady updates (no new trace, evaluation or checkpoint), medians; the same "
             "batches replayed through `run_update` alone in the same process, blocks "
             "alternated. Target: loop / run_update <= 1.10.", "",
             "| config | backend | precision | loop s/update | run_update s | loop / run_update "
             "(paired) | start to first update s | whole process s |",
             "|---|---|---|---|---|---|---|---|"]
    for e in report["entries"]:
        s, up = e["summary"], e.get("startup") or {}
        lines.append(f"| {e['config']} | {e['backend']} | {e['precision']} | "
                     f"{s['loop_update_s']:.3f} | {s['run_update_s']:.3f} | "
                     f"{s['loop_over_run_update']:.2f}x ({s['loop_over_run_update_paired']:.2f}x) | "
                     f"{up.get('to_first_update_s', float('nan')):.1f} | "
                     f"{up.get('whole_s', float('nan')):.1f} |")
    lines += ["", "Where a steady update's wall time goes (ms, median per stage):", "",
              "| config | backend | precision | " + " | ".join(STAGES) + " |",
              "|---|---|---|" + "---|" * len(STAGES)]
    for e in report["entries"]:
        st = e["summary"]["stages_s"]
        lines.append(f"| {e['config']} | {e['backend']} | {e['precision']} | "
                     + " | ".join(f"{1000 * st[s]:.1f}" for s in STAGES) + " |")
    lines += ["", "Occasional stages (s per occurrence): evaluation (eval_batches 4), checkpoint:", ""]
    for e in report["entries"]:
        ev = e["summary"]["event_s"]
        lines.append(f"- {e['config']} / {e['backend']} / {e['precision']}: evaluation "
                     f"{ev['evaluation'] or 0:.2f}, checkpoint {ev['checkpoints'] or 0:.2f}")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--precisions", nargs="+", default=["float32", "auto"])
    parser.add_argument("--backends", nargs="+", default=["tensorflow", "jax"])
    parser.add_argument("--block", type=int, default=20, help="updates per block")
    parser.add_argument("--rounds", type=int, default=3, help="timed blocks after the warm-up")
    parser.add_argument("--no-startup", action="store_true")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output-dir", default=None)
    parser.add_argument("--worker", nargs=2, metavar=("CONFIG", "PRECISION"))
    parser.add_argument("--json", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        with tempfile.TemporaryDirectory(prefix="train_loop-") as workdir:
            result = worker(*args.worker, args.block, args.rounds, workdir)
        Path(args.json).write_text(json.dumps(result), encoding="utf-8")
        return 0
    if args.quick:
        args.block, args.rounds = 6, 1
    out_dir = Path(args.output_dir or (tempfile.mkdtemp() if args.quick else REPO / "bench/results"))
    entries = []
    for backend in args.backends:
        python = JAX_PYTHON if backend == "jax" else Path(sys.executable)
        if not python.exists():
            print(f"{backend}: {python} is missing (make interop-jax): skipped", flush=True)
            continue
        env = child_env(KERAS_BACKEND=backend, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
        for config in args.configs:
            for precision in args.precisions:
                with tempfile.TemporaryDirectory(prefix="train_loop-") as workdir:
                    target = Path(workdir) / "result.json"
                    print(f"{config} / {backend} / {precision}: loop and replay ...", flush=True)
                    subprocess.run([str(python), "-m", "bench.train_loop", "--worker", config,
                                    precision, "--block", str(args.block), "--rounds",
                                    str(args.rounds), "--json", str(target)],
                                   env=env, check=True, cwd=REPO)
                    result = json.loads(target.read_text(encoding="utf-8"))
                    result["summary"] = summarize(result)
                    if not args.no_startup:
                        print(f"{config} / {backend} / {precision}: start-up ...", flush=True)
                        result["startup"] = startup(config, precision, python, env, workdir)
                    s = result["summary"]
                    print(f"  loop {s['loop_update_s']:.3f} s/update, run_update "
                          f"{s['run_update_s']:.3f}: {s['loop_over_run_update']:.2f}x", flush=True)
                    entries.append(result)
    report = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
              "note": "Timed on a shared machine: other_cpu_per_block_s in the JSON is the CPU "
                      "other processes used during each timed block; the ratios are taken in "
                      "one process, loop and replay alternated.",
              "entries": entries}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "train_loop.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    (out_dir / "train_loop.md").write_text(markdown(report), encoding="utf-8")
    print(f"wrote {out_dir / 'train_loop.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
