"""How many positions of the micro-batches a mixture draws are real tokens (issue 52,
points 2 and 4), on real data, no model: what packing can save.

    .venv/bin/python -m bench.real_tokens [--mixtures demo catalog] [--draws 600]

Each mixture is built as `mtl train` builds it (plan.plan_run, prepare_vocab,
train_streams: the project's featurizers and collation, each task's length buckets; the
mixture's sampler at the experiment's rates), and `--draws` micro-batches are drawn from
it as the run draws them. Each micro-batch is laid out as TensorFlow's training step gives
it to the backbone (step/model.py): [B, L] padded to the batch's longest; multiple_choice
and cloze with the choices folded into the rows ([B * C, L]); contrastive as two backbone
calls, the queries and the passages apart, each cut to its own longest text (_trimmed).

Per call, counted over the token ids (0 is padding):
- tokens: real tokens / positions (B x L): the share the packed backbone's token-wise
  layers compute, against the padded call (1 / it bounds their gain);
- attention: sum over rows of (real length)^2 / (B x L^2): the share of attention's
  score and context work that real tokens need, against [B, L] attention (per head,
  the same for every layer);
- attention in blocks: the same rows sorted by length and cut into blocks of
  `--block-rows` rows, each padded to its own longest (per-block [b, l_block] attention):
  real work / the blocks' work.

Then the same mixture is drawn again with its streams' length buckets off (each batch rows
in shuffled order, as a loader without buckets makes them: what the buckets already save).

Mixtures:
- demo: experiments/demo.yaml as `make demo` trains it (6 tasks, fixed rates, batch 32,
  max_length 64);
- catalog: one task of every family with real data in ../shared/data (CATALOG_TASKS; no
  extraction_event data there), equal fixed rates, batch 16, max_length 128, as
  bench/main_job.py's catalog mixture runs (its 8 tasks are a subset of these).
Per task, per mixture (all draws: real / positions summed) and weighted by the mixture's
rates (each task's mean real and padded positions per micro-batch times its rate; what
an update costs in expectation). The catalog also reports its MAIN_JOB_TASKS subset.

Writes bench/results/real_tokens.json and .md (--quick: 60 draws, a temporary folder).
"""
import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import REPO, write_results
from bench.main_job import CATALOG  # the same backbone and mixture settings

SHARED = REPO.parent / "shared" / "data"
# one task per family with data in ../shared/data (task_specs/, `verified: data`)
CATALOG_TASKS = {"tnews": "classification", "afqmc": "matching", "stsb_zh": "regression",
                 "cluener": "extraction_ner", "duie_spo": "extraction_relation",
                 "cmrc2018": "mrc_span", "c3_d": "multiple_choice", "chid": "cloze",
                 "cluewsc": "coreference", "afqmc_sts": "contrastive", "mlm": "mlm"}
# bench/main_job.py's catalog mixture (issue 52 point 5): 8 of the above, equal rates
MAIN_JOB_TASKS = ("tnews", "afqmc", "cluener", "cmrc2018", "c3_d", "cluewsc", "mlm", "afqmc_sts")
BLOCK_ROWS = 4


def experiment_path(mixture, workdir):
    """The experiment YAML of a mixture (the demo's own file, or the catalog's written to
    `workdir`)."""
    if mixture == "demo":
        return str(REPO / "experiments" / "demo.yaml")
    rate = 1 / len(CATALOG_TASKS)
    tasks = "\n".join(f"  - {{name: {task}, rate: {rate:.6f}}}" for task in CATALOG_TASKS)
    path = Path(workdir) / "catalog.yaml"
    path.write_text(CATALOG.format(data_root=SHARED, cache=Path(workdir) / "cache", tasks=tasks,
                                   steps=100, precision="float32"), encoding="utf-8")
    return str(path)


def build_mixture(path, log=print):
    """(Mixture, {task: rate}, {task: task type}) of an experiment, as Run.build makes its
    mixture (no model)."""
    from mtl_framework.loop.run import task_settings
    from mtl_framework.mixing.mixture import Mixture
    from mtl_framework.plan import MLM_TASK, plan_run
    from mtl_framework.prepare.pipeline import prepare_vocab, train_streams

    plan = plan_run(path)
    tokenizer, _ = prepare_vocab(plan, log)
    streams, sizes = train_streams(plan, tokenizer, log)
    _, pinned = task_settings(plan)
    mixture, rates = Mixture.for_experiment(plan.experiment, streams, sizes, pinned, log)
    types = {task.name: task.type for task in plan.tasks}
    types.setdefault(MLM_TASK, "mlm")
    return mixture, rates, types


def step_calls(task_type, token_ids):
    """The token ids [N, L] of each backbone call TensorFlow's training step makes for one
    micro-batch (step/model.py _outputs, _side_vectors, _trimmed)."""
    from mtl_framework.families import family

    if task_type == "contrastive":  # queries and passages apart, each cut to its longest
        return [trimmed(token_ids[:, 0]), trimmed(token_ids[:, 1:].reshape(-1, token_ids.shape[-1]))]
    if family(task_type).choice_axis:
        return [token_ids.reshape(-1, token_ids.shape[-1])]
    return [token_ids]


def trimmed(ids):
    longest = max(int(np.count_nonzero(ids, axis=1).max()), 1)
    return ids[:, :longest]


def call_counts(ids, block_rows=BLOCK_ROWS):
    """Real and computed positions of one [N, L] backbone call: tokens, attention work
    (length^2 per row) padded to L, and in blocks of `block_rows` rows sorted by length."""
    lengths = np.sort(np.count_nonzero(ids, axis=1))
    rows, length = ids.shape
    blocks = [lengths[i:i + block_rows] for i in range(0, rows, block_rows)]
    return {"rows": rows, "length": length, "real": int(lengths.sum()), "positions": rows * length,
            "attention_real": int((lengths.astype(np.int64) ** 2).sum()),
            "attention_padded": rows * length ** 2,
            "attention_blocked": int(sum(len(b) * int(b.max()) ** 2 for b in blocks))}


COUNTS = ("real", "positions", "attention_real", "attention_padded", "attention_blocked")


def fractions(totals):
    return {"tokens": totals["real"] / totals["positions"],
            "attention": totals["attention_real"] / totals["attention_padded"],
            "attention_in_blocks": totals["attention_real"] / totals["attention_blocked"],
            "blocks_over_padded_attention": totals["attention_blocked"] / totals["attention_padded"]}


def draw_calls(mixture, types, draws):
    """[(task, [{counts} per backbone call], [token ids per call])] of `draws` micro-batches."""
    drawn = []
    for _ in range(draws):
        task, batch = mixture.next()
        calls = step_calls(types[task], np.asarray(batch["token_ids"]))
        drawn.append((task, [call_counts(ids) for ids in calls], calls))
    return drawn


def without_buckets(mixture):
    """The mixture's task streams batching rows in shuffled order (buckets of one batch),
    from the start of a new epoch."""
    for stream in mixture.streams.values():
        for task_stream in getattr(stream, "streams", [stream]):  # mlm: a RoundRobin
            task_stream.bucket_batches, task_stream._plan = 0, (None, None)
            task_stream.epoch, task_stream.index = task_stream.epoch + 1, 0


def summarize(drawn, rates, types):
    per_task = {}
    for task, counts, _ in drawn:
        entry = per_task.setdefault(task, {"type": types[task], "micro_batches": 0,
                                           "lengths": [], **{k: 0 for k in COUNTS}})
        entry["micro_batches"] += 1
        for call in counts:
            entry["lengths"].append(call["length"])
            for k in COUNTS:
                entry[k] += call[k]
    for entry in per_task.values():
        lengths = entry.pop("lengths")
        entry["median_padded_length"] = float(np.median(lengths))
        entry["fractions"] = fractions(entry)
    whole = {k: sum(e[k] for e in per_task.values()) for k in COUNTS}
    return {"per_task": per_task, "drawn": fractions(whole),
            "by_rates": by_rates(per_task, rates),
            "rates": {t: round(float(r), 4) for t, r in rates.items()}}


def by_rates(per_task, rates, tasks=None):
    """Fractions of the expected micro-batch: each task's mean counts per micro-batch
    weighted by its rate (`tasks`: a subset, its rates renormalised)."""
    tasks = [t for t in (tasks or per_task) if t in per_task]
    weighted = {k: sum(rates[t] * per_task[t][k] / per_task[t]["micro_batches"] for t in tasks)
                for k in COUNTS}
    return fractions(weighted)


def markdown(report):
    lines = ["# Real tokens in the micro-batches a mixture draws", "",
             "Real data, the project's featurizers, collation and length buckets; each micro-batch "
             "laid out as TensorFlow's training step calls the backbone (contrastive: each side "
             "cut to its longest; choices folded into rows). tokens = real / padded positions "
             "(what packed token-wise layers compute); attention = sum of real length^2 / "
             "(rows x L^2); in blocks: rows sorted by length in blocks of "
             f"{report['settings']['block_rows']}, each padded to its longest. No timing.", ""]
    for name, entry in report["mixtures"].items():
        s = entry["summary"]
        lines += [f"## {name} ({entry['draws']} micro-batches drawn; {entry['settings']})", "",
                  "| task | type | rate | drawn | median L | tokens | attention | attention in blocks "
                  "| tokens without buckets |", "|---|---|---|---|---|---|---|---|---|"]
        loose = entry["without_buckets"]
        for task, e in sorted(s["per_task"].items(), key=lambda kv: kv[1]["fractions"]["tokens"]):
            f = e["fractions"]
            lines.append(f"| {task} | {e['type']} | {s['rates'][task]:.3f} | {e['micro_batches']} | "
                         f"{e['median_padded_length']:.0f} | {f['tokens']:.1%} | "
                         f"{f['attention']:.1%} | {f['attention_in_blocks']:.1%} | "
                         f"{loose['per_task'].get(task, {}).get('tokens', float('nan')):.1%} |")
        rows = [("all draws", s["drawn"], loose["drawn"]),
                ("weighted by rates", s["by_rates"], loose["by_rates"])]
        rows += [(label, fr, None) for label, fr in entry.get("subsets", {}).items()]
        for label, f, g in rows:
            lines.append(f"| **{label}** | | | | | **{f['tokens']:.1%}** | **{f['attention']:.1%}** | "
                         f"**{f['attention_in_blocks']:.1%}** | "
                         + (f"**{g['tokens']:.1%}** |" if g else "|"))
        lines.append("")
    lines += ["Bound on the token-wise layers' gain from packing (1 / tokens, weighted by rates): "
              + ", ".join(f"{n} {1 / e['summary']['by_rates']['tokens']:.2f}x"
                          for n, e in report["mixtures"].items()) + ".", "",
              f"Run: `python -m bench.real_tokens`, finished {report['finished']} "
              f"({report['wall_seconds']:.0f} s)."]
    return "\n".join(lines) + "\n"


def measure(mixture_name, draws, workdir, log):
    path = experiment_path(mixture_name, workdir)
    mixture, rates, types = build_mixture(path, log=log)
    drawn = draw_calls(mixture, types, draws)
    summary = summarize(drawn, rates, types)
    without_buckets(mixture)
    unbucketed = summarize(draw_calls(mixture, types, draws), rates, types)
    from mtl_framework.config.experiment import load_experiment

    exp = load_experiment(path)
    entry = {"experiment": os.path.relpath(path, REPO) if mixture_name == "demo" else "CATALOG",
             "draws": draws, "summary": summary, "without_buckets": {
                 "per_task": {t: e["fractions"] for t, e in unbucketed["per_task"].items()},
                 "drawn": unbucketed["drawn"], "by_rates": unbucketed["by_rates"]},
             "settings": f"batch {exp.batch_size}, max_length {exp.max_length}, "
                         f"tasks_per_update {exp.tasks_per_update}"}
    if mixture_name == "catalog":
        entry["subsets"] = {"bench/main_job.py's 8 tasks, equal rates": by_rates(
            summary["per_task"], {t: 1.0 for t in MAIN_JOB_TASKS}, MAIN_JOB_TASKS)}
    return entry


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mixtures", nargs="+", default=["demo", "catalog"], choices=["demo", "catalog"])
    parser.add_argument("--draws", type=int, default=600, help="micro-batches drawn per mixture")
    parser.add_argument("--quick", action="store_true", help="60 draws, a temporary folder")
    parser.add_argument("--output-dir")
    args = parser.parse_args(argv)
    draws = 60 if args.quick else args.draws
    started = time.perf_counter()

    def log(message):
        print(f"[{time.perf_counter() - started:6.0f}s] {message}", flush=True)

    with tempfile.TemporaryDirectory(prefix="real_tokens-") as workdir:
        mixtures = {name: measure(name, draws, workdir, log) for name in args.mixtures}
    report = {"settings": {"draws": draws, "block_rows": BLOCK_ROWS,
                           "catalog_tasks": CATALOG_TASKS, "main_job_tasks": list(MAIN_JOB_TASKS),
                           "not_in_catalog": "extraction_event: no event data in ../shared/data "
                                             "(duee1, duee_fin, ccks19_event are not there)"},
              "mixtures": mixtures, "wall_seconds": time.perf_counter() - started,
              "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    out = Path(args.output_dir or (tempfile.mkdtemp(prefix="bench_real_tokens_") if args.quick
                                   else REPO / "bench" / "results"))
    write_results(out, "real_tokens", report, markdown(report))


if __name__ == "__main__":
    main()
