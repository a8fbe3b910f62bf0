"""The main job side by side (issue 52 point 5): `mtl train`'s steady-state tokens/s (real,
non-padding tokens) on the demo mixture and on an 8-family catalog mixture, float32 and
`auto`, against an older commit of this repository, bert4keras and a RoBERTa-like model of
the same size, all in one run, CPU.

    .venv/bin/python -m bench.main_job [--base /tmp/wt308386c] [--mixtures demo catalog]
        [--precisions float32 auto] [--block 8] [--rounds 3] [--quick]

Systems, per (mixture, precision) cell:
- now: `mtl train` of this checkout (loop.run.Run on the experiment, trained by Run.train:
  Keras fit, the run's own callbacks, batch assembly, balancing, logging);
- base: the same experiment trained by the checkout at --base (default a worktree of
  308386c: `git worktree add /tmp/wt308386c 308386c`), the same .venv, its package first
  on PYTHONPATH (the JSON records which mtl_framework each worker imported);
- bert4keras: bert4keras 0.11.5 `roformer_v2` of the run's backbone size (legacy tf-keras,
  bench/bert4keras_train_worker.py), one train_on_batch ([CLS] -> Dense(2), Adam) per
  micro-batch `now` drew: its token rows (every text of a pair, choice or contrastive
  batch is a row; rows that are all padding are left out), padded to the batch's longest
  row, as bert4keras's sequence_padding pads;
- roberta_like: bench/roberta_baseline.py's RoBERTa-like encoder of the same size, the same
  step on the same rows (bench/backbone.py's classifier).

Both `mtl train`s run in worker processes that stop at a gate every --block updates;
rounds run one block of each system in turn (order rotating), the baselines on the
micro-batches of `now`'s latest block, so a slow phase of the shared machine hits every
system. Tokens/s = real tokens / wall seconds of the block's updates (steady ones: no new
trace; no evaluation or checkpoint is made: eval_every 0). The first block of each run
(tracing) and a first pass of the baselines over the first block's batches are untimed.
`auto` is what this CPU settles it to (config/precision.py); the baselines run under that
Keras policy.

Full-length synthetic batches (random ids, every position a real token: packing cannot
help) compare the training step alone (bench/backbone.py's run_cell: ours, bert4keras,
RoBERTa-like) at the catalog backbone's size.

Writes bench/results/main_job.json and .md (--quick: a temporary folder). No GPU table
unless a device runs it: the JSON says when none was lent.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEMO_DIMS = dict(num_layers=2, hidden_size=128, num_heads=2, intermediate_size=512)
CATALOG_DIMS = dict(num_layers=4, hidden_size=256, num_heads=4, intermediate_size=1024)
# one task of each family issue 52 names: classification, matching, extraction, MRC,
# choice, coreference, MLM, contrastive; real data in ../shared/data
CATALOG_TASKS = {"tnews": "classification", "afqmc": "matching", "cluener": "extraction_ner",
                 "cmrc2018": "mrc_span", "c3_d": "multiple_choice", "cluewsc": "coreference",
                 "mlm": "mlm", "afqmc_sts": "contrastive"}
CATALOG = """\
name: main_job_catalog
data_root: {data_root}
cache_dir: {cache}
backbone: {{num_layers: 4, hidden_size: 256, num_heads: 4, intermediate_size: 1024,
           vocab_size: 8000}}
tasks:
{tasks}
sampling: fixed
tasks_per_update: 4
batch_size: 16
max_length: 128
optimizer: {{name: adamw, lr: 0.0005, warmup_steps: 10}}
steps: {steps}
seed: 0
precision: {precision}
checkpoint_every: {steps}
keep_checkpoints: 1
eval_every: 0
"""
SYSTEMS = ("now", "base", "bert4keras", "roberta_like")
TARGETS = {"base": 1.6, "bert4keras": 1.8, "roberta_like": 1.5}  # now / system, issue 52


def experiment_text(mixture, precision, steps, cache, data_root, repo):
    """The experiment a cell's `mtl train`s run: the demo as `make demo` runs it (its tasks,
    rates, model, batch and balancing) with no evaluation and one checkpoint at the end, or
    the catalog mixture (CATALOG_TASKS at equal fixed rates)."""
    if mixture == "demo":
        text = (repo / "experiments" / "demo.yaml").read_text(encoding="utf-8")
        replaced = {"data_root: demo/data": f"data_root: {repo / 'experiments/demo/data'}",
                    "precision: float32": f"precision: {precision}",
                    "steps: 240": f"steps: {steps}", "checkpoint_every: 80":
                    f"checkpoint_every: {steps}", "eval_every: 60": "eval_every: 0"}
        for old, new in replaced.items():
            if old not in text:
                raise SystemExit(f"experiments/demo.yaml: no `{old}` to replace")
            text = text.replace(old, new)
        return text + f"cache_dir: {cache}\n"
    rate = 1 / len(CATALOG_TASKS)
    tasks = "\n".join(f"  - {{name: {task}, rate: {rate}}}" for task in CATALOG_TASKS)
    return CATALOG.format(data_root=data_root, cache=cache, tasks=tasks, steps=steps,
                          precision=precision)


# --- the worker: one `mtl train`, stopped at a gate every block -------------------------------
# Runs as `python bench/main_job.py --worker ...` with the checkout under test first on
# PYTHONPATH, so it imports nothing from bench/ (a checkout's bench/ may differ).

def marks_callback(owner):
    """A Keras callback calling `owner.mark()` as each fit update begins and
    `owner.mark(last=True)` when fit ends: what the worker's Gate (and bench/train_loop) time
    an update between. Here: the worker imports nothing from bench/."""
    import keras

    class Marks(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            owner.mark()

        def on_train_end(self, logs=None):
            owner.mark(last=True)

    return Marks()


def trimmed_rows(batch):
    """A micro-batch's token and segment rows as a padded model sees them: [rows, length],
    all-padding rows (absent choices or texts) left out, cut to the longest row."""
    import numpy as np

    ids = np.asarray(batch["token_ids"])
    ids = ids.reshape(-1, ids.shape[-1])
    segments = np.asarray(batch.get("segment_ids", np.zeros_like(ids))).reshape(ids.shape)
    keep = (ids != 0).any(axis=1)
    ids, segments = ids[keep], segments[keep]
    length = int(np.max(np.nonzero(ids)[1])) + 1
    return ids[:, :length].astype("int32"), np.minimum(segments[:, :length], 1).astype("int32")


class Gate:
    """A Keras callback's marks around fit's updates: each update's wall and CPU seconds,
    real tokens and positions (from the micro-batches drawn during it) and whether it traced;
    every `block` updates it reports the block on `channel` and waits for a line on stdin.
    The wait is outside every update's time."""

    def __init__(self, run, block, channel, dump):
        self.callback = marks_callback(self)
        self.run, self.block, self.channel, self.dump = run, block, channel, dump
        self.updates, self.drawn, self.open, self.blocks = [], [], None, 0
        draw = run.model.mixture.next

        def next_batch():
            task, batch = draw()
            self.drawn.append((task, batch))
            return task, batch
        run.model.mixture.next = next_batch

    def traces(self):
        counts = getattr(self.run.model, "tracing_counts", None)
        if counts is None:
            return None

        def total(c):
            return sum(total(v) for v in c.values()) if isinstance(c, dict) else int(c or 0)
        return total(counts())

    def mark(self, last=False):
        import numpy as np

        now, cpu = time.perf_counter(), time.process_time()
        if self.open is not None:
            wall0, cpu0, traces0 = self.open
            ids = [np.asarray(b["token_ids"]) for _, b in self.drawn]
            traces = self.traces()
            self.updates.append({"wall": now - wall0, "cpu": cpu - cpu0,
                                 "tokens": int(sum(np.count_nonzero(i) for i in ids)),
                                 "positions": int(sum(i.size for i in ids)),
                                 "tasks": [t for t, _ in self.drawn],
                                 "traced": traces is not None and traces != traces0})
            self.save_batches()
        if self.open is None or len(self.updates) % self.block == 0 or last:
            self.report(last)
        self.drawn = []
        self.open = (time.perf_counter(), time.process_time(), self.traces())

    def save_batches(self):
        """The update's micro-batches as bench/bert4keras_train_worker reads them (one
        .npz each: token_ids_0, segment_ids_0, labels), under dump/block<k>/."""
        import numpy as np

        if not self.dump:
            return
        folder = Path(self.dump) / f"block{self.blocks}"
        folder.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(len(self.updates))
        for index, (task, batch) in enumerate(self.drawn):
            ids, segments = trimmed_rows(batch)
            name = f"{len(self.updates):04d}_{index}_{task}.npz"
            np.savez(folder / name, token_ids_0=ids,
                     segment_ids_0=segments, labels=rng.integers(0, 2, len(ids)).astype("int32"))

    def report(self, last):
        """The run's hello before its first update, then each block; waits for "go"."""

        if self.open is None:
            message = hello(self.run)
        else:
            message = {"block": self.blocks, "updates": self.updates, "last": last,
                       "policy": self.run.backbone.dtype_policy.name,
                       "batches": str(Path(self.dump) / f"block{self.blocks}") if self.dump
                       else None}
            self.updates, self.blocks = [], self.blocks + 1
        self.channel.write(json.dumps(message) + "\n")
        self.channel.flush()
        if not last and sys.stdin.readline().strip() != "go":
            raise SystemExit("main_job worker: told to stop")


def hello(run):
    """What the worker runs: which package, backend, backbone config and vocab."""
    import keras

    import mtl_framework

    config = run.backbone.get_config()
    return {"mtl_framework": str(Path(mtl_framework.__file__).parent),
            "policy": run.backbone.dtype_policy.name, "keras": keras.__version__,
            "backend": keras.backend.backend(),
            "backbone": {k: v for k, v in config.items()
                         if isinstance(v, (int, float, str, bool, type(None)))},
            "tasks_per_update": run.model.tasks_per_update}


def worker(experiment, output, block, dump):
    channel = os.fdopen(os.dup(1), "w")  # replies; anything the run prints goes to stderr
    os.dup2(2, 1)
    from mtl_framework.loop.run import Run

    run = Run(experiment, output=output, log=lambda _: None)
    gate = Gate(run, block, channel, dump)
    run.callbacks.append(gate.callback)
    run.train()
    return 0


# --- the parent ---------------------------------------------------------------------------------

class TrainWorker:
    """A gated `mtl train` of one checkout (`root`): `start()` waits for its hello, `block()`
    lets it run one block and returns the block's report."""

    def __init__(self, name, root, experiment, workdir, block, dump=None):
        from bench import JsonWorker

        env = {**os.environ, "PYTHONPATH": str(root), "KERAS_BACKEND": "tensorflow",
               "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
        command = [sys.executable, str(HERE / "main_job.py"), "--worker", str(experiment),
                   str(Path(workdir) / f"run_{name}"), "--block", str(block)]
        if dump:
            command += ["--dump", str(dump)]
        self.name = name
        self.process = JsonWorker(command, Path(workdir) / f"{name}.log", env, name, cwd=workdir)
        self.hello = None

    def start(self):
        self.hello = self.process.read()
        return self.hello

    def go(self):
        self.process.process.stdin.write("go\n")
        self.process.process.stdin.flush()

    def read(self):
        return self.process.read()

    def block(self):
        self.go()
        return self.read()

    def close(self):
        self.process.process.stdin.close()
        self.process.process.wait(timeout=120)
        self.process.log.close()


class Baselines:
    """bert4keras (a persistent legacy tf-keras worker) and the RoBERTa-like model (in this
    process), each a train_on_batch per micro-batch file; models built once per
    (backbone, policy)."""

    def __init__(self, workdir):
        from bench.backbone import bert4keras_worker

        self.workdir, self.bert4keras, self.models, self.files = Path(workdir), None, {}, {}
        self.bert4keras = bert4keras_worker(self.workdir)

    def config_path(self, dims):
        from mtl_framework.architectures.roformer_v2 import bert4keras
        from mtl_framework.architectures.roformer_v2.presets import backbone_config

        path = self.workdir / ("bert_config_" + "_".join(f"{v}" for v in dims.values()) + ".json")
        path.write_text(json.dumps(bert4keras.bert_config_from_config(backbone_config(**dims))))
        return path

    def batch(self, path):
        import numpy as np

        if path not in self.files:
            with np.load(path) as d:
                self.files[path] = ({"token_ids": d["token_ids_0"], "segment_ids": d["segment_ids_0"]},
                                    d["labels"])
        return self.files[path]

    def run(self, system, folder, dims, policy):
        """One pass over the micro-batches in `folder`: [{wall, cpu, tokens, positions}]."""
        import numpy as np

        steps = []
        for path in sorted(Path(folder).glob("*.npz")):
            x, labels = self.batch(path)
            if system == "bert4keras":
                reply = self.bert4keras.run(self.config_path(dims), path, 0, 1, policy)
                wall, cpu = reply["step_seconds"][0], reply["cpu_seconds"][0]
            else:
                wall, cpu = self.roberta_step(dims, policy, x, labels)
            steps.append({"wall": wall, "cpu": cpu, "tokens": int(np.count_nonzero(x["token_ids"])),
                          "positions": int(x["token_ids"].size)})
        return steps

    def roberta_step(self, dims, policy, x, labels):
        from bench.backbone import build_system, time_steps

        key = (tuple(dims.items()), policy)
        if key not in self.models:
            self.models[key] = build_system("roberta_like", dims, precision=policy)
        walls, cpus = time_steps(self.models[key], x, labels, 1)
        return walls[0], cpus[0]

    def pids(self):
        return [self.bert4keras.process.pid]

    def close(self):
        self.bert4keras.close()


def model_dims(backbone):
    """The size both baselines are built at: the run's backbone (its vocab included)."""
    keys = ("vocab_size", "num_layers", "hidden_size", "num_heads", "intermediate_size",
            "head_size", "segment_vocab_size", "dropout")
    return {**{k: backbone[k] for k in keys if k in backbone}, "attention_dropout": 0.0}


def steady(updates):
    """An update list's totals over the updates that traced nothing new."""
    kept = [u for u in updates if not u.get("traced")]
    return {"updates": len(kept), "traced": len(updates) - len(kept),
            "wall": sum(u["wall"] for u in kept), "cpu": sum(u["cpu"] for u in kept),
            "tokens": sum(u["tokens"] for u in kept),
            "positions": sum(u["positions"] for u in kept)}


def measure_cell(mixture, precision, context, log):
    """One (mixture, precision): warm-ups, then `rounds` rounds of one block of each system."""
    from bench import REPO

    args, workdir = context["args"], Path(tempfile.mkdtemp(dir=context["workdir"]))
    steps = args.block * (args.rounds + 1)
    workers = {}
    for name, root in (("now", REPO), ("base", Path(args.base))):
        experiment = workdir / f"{name}.yaml"
        experiment.write_text(experiment_text(mixture, precision, steps,
                                              args.cache_dir / name,
                                              args.data_root, REPO), encoding="utf-8")
        workers[name] = TrainWorker(name, root, experiment, workdir, args.block,
                                    dump=workdir / "batches" if name == "now" else None)
    hellos = {name: w.start() for name, w in workers.items()}
    dims, policy = model_dims(hellos["now"]["backbone"]), hellos["now"]["policy"]
    log(f"{mixture} / {precision} ({policy}): warm-up block of each `mtl train`, a first "
        "pass of each baseline")
    for w in workers.values():  # the warm-up blocks (untimed) side by side
        w.go()
    latest = [w.read() for w in workers.values()][0]["batches"]
    baselines = context["baselines"]
    for system in ("bert4keras", "roberta_like"):
        baselines.run(system, latest, dims, policy)
    meter = context["meter"]([w.process.process.pid for w in workers.values()])
    rounds = []
    for r in range(args.rounds):
        order = SYSTEMS[r % len(SYSTEMS):] + SYSTEMS[:r % len(SYSTEMS)]
        record = {}
        for system in order:
            with meter:
                if system in workers:
                    reply = workers[system].block()
                    latest = reply["batches"] or latest
                    record[system] = steady(reply["updates"])
                else:
                    record[system] = steady(baselines.run(system, latest, dims, policy))
            record[system]["other_cores"] = round(meter.last, 2)
        rounds.append(record)
        log(f"  round {r + 1}: " + ", ".join(f"{s} {tokens_per_s(record[s]):,.0f}" for s in SYSTEMS)
            + " tokens/s")
    for w in workers.values():
        w.close()  # its last block was the run's last: it ends on its own
    return {"mixture": mixture, "precision": precision, "policy": policy, "backbone": dims,
            "workers": hellos, "rounds": rounds, "summary": summarize_cell(rounds)}


def tokens_per_s(record):
    return record["tokens"] / record["wall"] if record["wall"] else float("nan")


def summarize_cell(rounds):
    """Per system: pooled tokens/s and real-token fraction; now over each other system,
    pooled (summed tokens over summed seconds) and the median of per-round ratios."""
    out, speed = {}, {}
    for system in SYSTEMS:
        total = {k: sum(r[system][k] for r in rounds) for k in ("tokens", "positions", "wall",
                                                                 "updates", "traced")}
        speed[system] = tokens_per_s(total)
        out[system] = {"tokens_per_s": round(speed[system], 1),
                       "real_token_fraction": round(total["tokens"] / total["positions"], 3),
                       "steps": total["updates"], "traced_left_out": total["traced"],
                       "round_tokens_per_s": [round(tokens_per_s(r[system]), 1) for r in rounds]}
    for system in SYSTEMS[1:]:
        paired = [tokens_per_s(r["now"]) / tokens_per_s(r[system]) for r in rounds]
        out[f"now/{system}"] = {
            "pooled": round(speed["now"] / speed[system], 3),
            "median_of_rounds": round(statistics.median(paired), 3),
            "per_round": [round(p, 3) for p in paired], "target": TARGETS[system]}
    return out



# --- full-length synthetic batches: the step alone -----------------------------------------

SYNTHETIC_CONFIG, SYNTHETIC_SEQ = "L4-H256-A4", 128  # bench/backbone.CONFIGS: the catalog's size


def measure_synthetic(policies, context, log):
    """bench/backbone.py's interleaved step cell (ours, bert4keras, RoBERTa-like) on random
    ids with every position a real token, at each policy."""
    import numpy as np

    from bench.backbone import (
        COMMON,
        CONFIGS,
        build_system,
        entry,
        make_batches,
        ratios,
        run_cell,
    )

    baselines, workdir = context["baselines"], context["workdir"]
    batches, labels, data = make_batches([SYNTHETIC_SEQ], None, workdir)
    paths = {"data": workdir / "synthetic.npz",
             ("bert4keras", SYNTHETIC_CONFIG): baselines.config_path(
                 {**COMMON, **CONFIGS[SYNTHETIC_CONFIG]})}
    ids, segments = batches[SYNTHETIC_SEQ]
    np.savez(paths["data"], labels=labels, **{f"token_ids_{SYNTHETIC_SEQ}": ids,
                                               f"segment_ids_{SYNTHETIC_SEQ}": segments})
    models = {}
    for policy in policies:
        for system in ("ours", "bert4keras", "roberta_like"):
            models[entry(system, policy)] = (None if system == "bert4keras" else build_system(
                system, CONFIGS[SYNTHETIC_CONFIG], precision=policy))
    settings = argparse.Namespace(rounds=context["args"].rounds, quick=False, max_steps=4)
    records, rounds, steps = run_cell(SYNTHETIC_CONFIG, SYNTHETIC_SEQ, models,
                                      {"bert4keras": baselines.bert4keras}, paths, batches,
                                      labels, settings, context["meter"]([]),
                                      context["args"].synthetic_budget, log)
    data["real_token_fraction"] = float((ids > 0).mean())
    return {"config": {**COMMON, **CONFIGS[SYNTHETIC_CONFIG]}, "seq": SYNTHETIC_SEQ,
            "batch": len(ids), "data": data, "rounds": rounds, "steps_per_round": steps,
            "systems": {k: {f: v[f] for f in ("tokens_per_s", "step_s_median", "round_medians_s")}
                        for k, v in records.items()},
            "ratios": ratios(records)}


# --- report ---------------------------------------------------------------------------------

def gpu_note():
    """The GPU table's status: this bench times CPUs; a GPU run is a device's to make."""
    import shutil

    if shutil.which("nvidia-smi") is None:
        return {"measured": False, "why": "no GPU device was lent to the session that ran "
                "this (no nvidia-smi on the machine): the GPU table is not measured"}
    return {"measured": False, "why": "a GPU is present but this bench times the CPU "
            "(CUDA_VISIBLE_DEVICES=''): the GPU table is not measured"}


def commit_of(root):
    """`git rev-parse HEAD` of a checkout, with `+dirty` where its tracked files differ."""
    def git(*args):
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                              text=True).stdout.strip()
    head = git("rev-parse", "--short=9", "HEAD")
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def markdown(report):
    lines = [f"# The main job side by side ({report['machine']})", "", report["note"], "",
             "Steady-state `mtl train` tokens/s (real tokens, updates that traced nothing "
             "new), pooled over the interleaved rounds; ratios: pooled / median of per-round "
             "ratios. Targets (issue 52): now / base >= 1.6, now / bert4keras >= 1.8, "
             "now / RoBERTa-like >= 1.5.", "",
             f"now = this checkout at {report['commits']['now']}; base = {report['commits']['base']}"
             f" ({report['commits']['base_why']}).", "",
             "| mixture | precision | now | base | bert4keras | RoBERTa-like | now / base | "
             "now / bert4keras | now / RoBERTa-like | real tokens (now; baselines' rows) | "
             "other processes, cores |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for cell in report["cells"]:
        s = cell["summary"]
        ratio = " | ".join(f"{s['now/' + k]['pooled']:.2f}x / {s['now/' + k]['median_of_rounds']:.2f}x"
                           f" ({'met' if s['now/' + k]['pooled'] >= s['now/' + k]['target'] else 'NOT met'})"
                           for k in SYSTEMS[1:])
        others = [r[k]["other_cores"] for r in cell["rounds"] for k in SYSTEMS]
        lines.append(f"| {cell['mixture']} | {cell['precision']} ({cell['policy']}) | "
                     + " | ".join(f"{s[k]['tokens_per_s']:,.0f}" for k in SYSTEMS) + f" | {ratio} | "
                     f"{s['now']['real_token_fraction']:.0%}; {s['bert4keras']['real_token_fraction']:.0%}"
                     f" | {statistics.median(others):.2f} ({min(others):.2f}-{max(others):.2f}) |")
    synthetic = report.get("synthetic")
    if synthetic:
        lines += ["", f"Full-length synthetic batches (random ids, {synthetic['batch']} x "
                      f"{synthetic['seq']}, every position real: packing cannot help), the "
                      f"training step alone (bench/backbone.py's cell, {SYNTHETIC_CONFIG}, "
                      f"{synthetic['rounds']} rounds x {synthetic['steps_per_round']} steps):", "",
                  "| system | tokens/s |", "|---|---|"]
        lines += [f"| {k} | {v['tokens_per_s']:,.0f} |" for k, v in synthetic["systems"].items()]
        lines += ["", "Ratios (pooled / median of rounds): " + "; ".join(
            f"{k} {v['pooled_median']:.2f}x / {v.get('median_of_rounds', v['pooled_median']):.2f}x"
            for k, v in synthetic["ratios"].items()) + "."]
    lines += ["", f"GPU: {report['gpu']['why']}.", "",
              f"Run: `{report['command']}`, {report['wall_seconds']:.0f} s; load average "
              f"{report['load_average']['start']} at the start, {report['load_average']['end']} "
              "at the end."]
    return "\n".join(lines) + "\n"



def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="/tmp/wt308386c",
                        help="the older checkout (a git worktree) `now` is compared with")
    parser.add_argument("--base-why", default="issue 52's reference commit",
                        help="why that commit (the report says it)")
    parser.add_argument("--mixtures", nargs="+", default=["demo", "catalog"],
                        choices=["demo", "catalog"])
    parser.add_argument("--precisions", nargs="+", default=["float32", "auto"])
    parser.add_argument("--block", type=int, default=8, help="updates per block")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--synthetic-budget", type=float, default=120.0,
                        help="seconds for the synthetic step cell (0: leave it out)")
    parser.add_argument("--data-root", default=None, help="default ../shared/data")
    parser.add_argument("--cache-dir", type=Path,
                        default=Path(tempfile.gettempdir()) / "main_job-cache",
                        help="feature caches (one per checkout), kept between runs: start-up "
                             "is not timed, a warm cache only shortens it")
    parser.add_argument("--quick", action="store_true", help="2 rounds of 3 updates")
    parser.add_argument("--output-dir", default=None)
    parser.add_argument("--worker", nargs=2, metavar=("EXPERIMENT", "OUTPUT"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--dump", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(*args.worker, args.block, args.dump)
    return compare(args, argv)


def compare(args, argv):
    from bench import REPO, write_results
    from bench.backbone import LoadMeter
    from bench.load import cpu_model, load_average
    from mtl_framework.config.precision import resolve_precision

    if args.quick:
        args.block, args.rounds, args.synthetic_budget = 3, 2, min(args.synthetic_budget, 30)
    args.data_root = Path(args.data_root or REPO.parent / "shared" / "data")
    started, load_start = time.perf_counter(), load_average()
    commits = {"now": commit_of(REPO), "base": commit_of(args.base), "base_why": args.base_why}

    def log(message):
        print(f"[{time.perf_counter() - started:5.0f}s] {message}", flush=True)

    workdir = Path(tempfile.mkdtemp(prefix="main_job-"))
    baselines = Baselines(workdir)
    context = {"args": args, "workdir": workdir, "baselines": baselines}
    context["meter"] = lambda pids: LoadMeter(lambda: [os.getpid(), *baselines.pids(), *pids])
    try:
        cells = [measure_cell(m, p, context, log) for m in args.mixtures for p in args.precisions]
        policies = list(dict.fromkeys(resolve_precision(p)[0] for p in args.precisions))
        synthetic = (measure_synthetic(policies, context, log) if args.synthetic_budget else None)
    finally:
        baselines.close()
    report = {"machine": f"{cpu_model() or 'unknown CPU'}, {os.cpu_count()} cores",
              "note": "Timed on a shared machine (others' processes ran): each ratio is taken "
                      "in one run, blocks of every system interleaved, and the CPU other "
                      "processes used during each block is recorded (other_cores).",
              "commits": commits,
              "settings": {"block": args.block, "rounds": args.rounds,
                           "catalog_tasks": CATALOG_TASKS, "demo": "experiments/demo.yaml "
                           "with eval_every 0 and one checkpoint, at the end"},
              "cells": cells, "synthetic": synthetic, "gpu": gpu_note(),
              "load_average": {"start": load_start, "end": load_average()},
              "wall_seconds": round(time.perf_counter() - started, 1),
              "command": " ".join(["python -m bench.main_job",
                                   *(sys.argv[1:] if argv is None else argv)])}
    out = Path(args.output_dir) if args.output_dir else (
        workdir if args.quick else REPO / "bench" / "results")
    write_results(out, "main_job", report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
