"""A/B of one change at a time to our backbone's training step: each variant of
bench/variants.py (`SPEED_VARIANTS`) against ours as it is, same weights, same batch,
interleaved in rounds within one process, at every precision asked for.

    .venv/bin/python -m bench.speed_ab --variants exact_sum_tree --rounds 6 --steps 3
    .venv/bin/python -m bench.speed_ab --variants einsum_context_before --alternate 24

The step is bench/backbone.py's (backbone -> [CLS] -> Dense(2), Adam, batch 32, real
cmrc2018 text, dropout 0.1). Each round runs every model (order rotating), one untimed
settling step then `--steps` timed ones; a variant's gain is read per round (its median
step against ours' in the same round, so load that moves between rounds cancels) and
given as the median of those paired ratios with their range: a change is worth keeping
only when the gain clears that range. The CPU load of other processes is recorded
(this machine is shared). Under heavy load rounds drift too much: `--alternate N`
steps ours and a variant one step each in turn (ABBA), N pairs, and reads the median of
the per-pair ratios with its ~95% interval. Writes JSON and a markdown table (default
bench/results/speed_ab.{json,md}; --append adds rows to an existing report).
"""
import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench import REPO
from bench.backbone import (
    BATCH,
    CONFIGS,
    DEFAULT_DATA,
    LoadMeter,
    build_system,
    make_batches,
    time_steps,
)
from bench.load import cpu_model, load_average

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
OUTPUT = REPO / "bench" / "results" / "speed_ab.json"
PRECISIONS = ["float32", "mixed_bfloat16"]


def measure(variants, precisions, config, seq, rounds, steps, data_root, log):
    """{precision: {variant: record}} with "ours" as each precision's reference."""
    from bench.variants import SPEED_VARIANTS

    batches, labels, data = make_batches([seq], Path(data_root), tempfile.mkdtemp())
    ids, segments = batches[seq]
    x = {"token_ids": ids, "segment_ids": segments}
    tokens = BATCH * seq
    models = {}
    for precision in precisions:
        for name in ["ours"] + list(variants):
            variant = None if name == "ours" else {"backbone": SPEED_VARIANTS[name][0]}
            model = build_system("ours", CONFIGS[config], variant, precision)
            walls, _ = time_steps(model, x, labels, 2)  # trace + first allocation
            models[(precision, name)] = model
            log(f"built {precision} {name}: warm-up {walls[0]:.1f} s, {walls[1]:.2f} s")
    meter = LoadMeter(lambda: [os.getpid()])
    per_round = {key: [] for key in models}
    cpu_round = {key: [] for key in models}
    walls_all = {key: [] for key in models}
    foreign = []
    order = list(models)
    for r in range(rounds):
        for key in order[r % len(order):] + order[:r % len(order)]:
            with meter:
                walls, cpus = time_steps(models[key], x, labels, 1 + steps)
            foreign.append(meter.last)
            walls_all[key] += walls[1:]
            per_round[key].append(statistics.median(walls[1:]))
            cpu_round[key].append(statistics.median(cpus[1:]))
        log(f"round {r + 1}: " + ", ".join(f"{p[:5]} {n} {tokens / per_round[(p, n)][-1]:.0f}"
                                           for p, n in order)
            + f" tokens/s; other load {meter.last:.2f}")
    out = {}
    for precision in precisions:
        ours, ours_cpu = per_round[(precision, "ours")], cpu_round[(precision, "ours")]
        out[precision] = {}
        for name in ["ours"] + list(variants):
            mine = per_round[(precision, name)]
            paired = [a / b for a, b in zip(ours, mine)]  # > 1: the variant is faster
            paired_cpu = [a / b for a, b in zip(ours_cpu, cpu_round[(precision, name)])]
            out[precision][name] = {
                "tokens_per_s": round(tokens / statistics.median(walls_all[(precision, name)]), 1),
                "round_tokens_per_s": [round(tokens / t, 1) for t in mine],
                "step_s": [round(t, 4) for t in walls_all[(precision, name)]],
                "vs_ours_per_round": [round(v, 3) for v in paired],
                "vs_ours_median": round(statistics.median(paired), 3),
                "vs_ours_range": [round(min(paired), 3), round(max(paired), 3)],
                "round_cpu_s": [round(t, 4) for t in cpu_round[(precision, name)]],
                "vs_ours_cpu_median": round(statistics.median(paired_cpu), 3),
                "vs_ours_cpu_range": [round(min(paired_cpu), 3), round(max(paired_cpu), 3)],
            }
    return out, data, {"cores_used_by_others": round(meter.cores_used_by_others(), 2),
                       "per_turn_max": round(max(foreign), 2), "per_turn_min": round(min(foreign), 2)}


def median_interval(values, z=1.96):
    """The median's ~95% distribution-free interval: the order statistics k and n-k+1,
    k = floor((n - z sqrt(n)) / 2) (sign-test bounds; the range for small n)."""
    ordered = sorted(values)
    n = len(ordered)
    k = max(0, int((n - z * n ** 0.5) / 2))
    return [round(ordered[k], 3), round(ordered[n - 1 - k], 3)]


def alternate(variants, precisions, config, seq, pairs, data_root, log):
    """Ours and each variant stepped in turn, one step each, ABBA (so neither always goes
    first), `pairs` times: each pair's two steps ran seconds apart under the same load.
    {precision: {variant: record}}: the median of per-pair ratios with its ~95% interval."""
    from bench.variants import SPEED_VARIANTS

    batches, labels, data = make_batches([seq], Path(data_root), tempfile.mkdtemp())
    ids, segments = batches[seq]
    x = {"token_ids": ids, "segment_ids": segments}
    tokens = BATCH * seq
    meter = LoadMeter(lambda: [os.getpid()])
    out = {}
    for precision in precisions:
        out[precision] = {}
        ours = build_system("ours", CONFIGS[config], None, precision)
        time_steps(ours, x, labels, 2)
        for name in variants:
            model = build_system("ours", CONFIGS[config], {"backbone": SPEED_VARIANTS[name][0]},
                                 precision)
            time_steps(model, x, labels, 2)
            walls, cpus = {"ours": [], name: []}, {"ours": [], name: []}
            with meter:
                for i in range(pairs):
                    for key in (("ours", name) if i % 2 == 0 else (name, "ours")):
                        w, c = time_steps(ours if key == "ours" else model, x, labels, 1)
                        walls[key] += w
                        cpus[key] += c
            ratio = [a / b for a, b in zip(walls["ours"], walls[name])]  # > 1: variant faster
            ratio_cpu = [a / b for a, b in zip(cpus["ours"], cpus[name])]
            out[precision][name] = {
                "tokens_per_s": round(tokens / statistics.median(walls[name]), 1),
                "ours_tokens_per_s": round(tokens / statistics.median(walls["ours"]), 1),
                "step_s": [round(t, 4) for t in walls[name]],
                "ours_step_s": [round(t, 4) for t in walls["ours"]],
                "vs_ours_per_pair": [round(v, 3) for v in ratio],
                "vs_ours_median": round(statistics.median(ratio), 3),
                "vs_ours_range": median_interval(ratio),
                "vs_ours_cpu_median": round(statistics.median(ratio_cpu), 3),
                "vs_ours_cpu_range": median_interval(ratio_cpu),
                "other_load": round(meter.last, 2)}
            r = out[precision][name]
            log(f"{precision} {name}: vs ours {r['vs_ours_median']:.3f} {r['vs_ours_range']}, "
                f"CPU {r['vs_ours_cpu_median']:.3f} {r['vs_ours_cpu_range']}, other load "
                f"{meter.last:.2f}")
            del model
    return out, data, {"cores_used_by_others": round(meter.cores_used_by_others(), 2)}


def markdown(report):
    lines = [f"A/B of speed changes to our backbone's training step, {report['config']}/"
             f"{report['seq']}, batch {BATCH}; {report['machine']}. Each run: ours and the "
             "variants in one process, either interleaved in rounds (`vs ours`: the median "
             "over rounds of ours' round-median step / the variant's, range: min-max) or "
             "alternating single steps ABBA (`vs ours`: the median of per-pair ratios, "
             "range: its ~95% interval); > 1: the variant is faster. `CPU`: the same ratio "
             "of this process's CPU seconds per step (less moved by other processes' load "
             "than wall time). tokens/s: the variant's, by median step."]
    if report.get("note"):
        lines += ["", "Note: " + report["note"] + "."]
    lines += ["",
             "| run | precision | variant | tokens/s | vs ours (wall) | range | vs ours (CPU) "
             "| range | other load (cores) | what |", "|---|---|---|---|---|---|---|---|---|---|"]
    for i, run in enumerate(report["runs"], 1):
        for precision, rows in run["results"].items():
            for name, r in rows.items():
                if name == "ours" and "alternating" in run["how"]:
                    continue
                what = run["what"].get(name, "ours as committed at the run")
                lo, hi = r["vs_ours_range"]
                cpu = (f"{r['vs_ours_cpu_median']:.3f} | {r['vs_ours_cpu_range'][0]:.3f}-"
                       f"{r['vs_ours_cpu_range'][1]:.3f}" if "vs_ours_cpu_median" in r
                       else "- | -")  # runs before CPU times were recorded
                load = r.get("other_load", run["load"]["cores_used_by_others"])
                lines.append(f"| {i} | {precision} | {name} | {r['tokens_per_s']:,.0f} | "
                             f"{r['vs_ours_median']:.3f} | {lo:.3f}-{hi:.3f} | {cpu} | "
                             f"{load} | {what} |")
    lines += ["", "Runs: " + "; ".join(
        f"{i}: commit {run['commit']}, {run['how']}, {run['wall_seconds']:.0f} s"
        for i, run in enumerate(report["runs"], 1)) + "."]
    return "\n".join(lines) + "\n"


def commit():
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, cwd=REPO, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv=None):
    from bench.variants import SPEED_VARIANTS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="*", default=[], choices=sorted(SPEED_VARIANTS))
    parser.add_argument("--precisions", nargs="+", choices=PRECISIONS, default=PRECISIONS)
    parser.add_argument("--config", choices=sorted(CONFIGS), default="small")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per model per round")
    parser.add_argument("--alternate", type=int, metavar="PAIRS",
                        help="instead of rounds: PAIRS single steps of ours and of each "
                             "variant in turn (ABBA); ranges are the median's ~95%% interval")
    parser.add_argument("--output", default=str(OUTPUT))
    parser.add_argument("--append", action="store_true", help="add this run to --output's runs")
    parser.add_argument("--data-root", default=os.environ.get("MTL_SHARED_DATA", str(DEFAULT_DATA)))
    args = parser.parse_args(argv)
    started = time.perf_counter()

    def log(message):
        print(f"[{time.perf_counter() - started:6.0f}s] {message}", flush=True)

    load_before = load_average()
    if args.alternate:
        results, data, load = alternate(args.variants, args.precisions, args.config, args.seq,
                                        args.alternate, args.data_root, log)
    else:
        results, data, load = measure(args.variants, args.precisions, args.config, args.seq,
                                      args.rounds, args.steps, args.data_root, log)
    run = {"commit": commit(), "variants": args.variants, "precisions": args.precisions,
           "how": (f"alternating single steps, {args.alternate} pairs (ABBA); ranges: the "
                   "median's ~95% interval" if args.alternate else
                   f"{args.rounds} rounds x {args.steps} steps; ranges: min-max over rounds"),
           "what": {n: SPEED_VARIANTS[n][1] for n in args.variants},
           "results": results, "load": {**load, "load_average_before": load_before,
                                        "load_average_after": load_average()},
           "wall_seconds": round(time.perf_counter() - started, 1)}
    output = Path(args.output)
    report = (json.loads(output.read_text()) if args.append and output.exists() else
              {"benchmark": "A/B of speed changes to our backbone's training step",
               "config": args.config, "seq": args.seq, "data": data["source"],
               "machine": f"{cpu_model()}, {os.cpu_count()} cores", "runs": []})
    report["runs"].append(run)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    output.with_suffix(".md").write_text(markdown(report))
    for precision, rows in ({} if args.alternate else results).items():
        for name, r in rows.items():
            log(f"{precision} {name}: {r['tokens_per_s']:.0f} tokens/s, vs ours "
                f"{r['vs_ours_median']:.3f} ({r['vs_ours_range'][0]:.3f}-{r['vs_ours_range'][1]:.3f})"
                f", CPU {r['vs_ours_cpu_median']:.3f} ({r['vs_ours_cpu_range'][0]:.3f}-"
                f"{r['vs_ours_cpu_range'][1]:.3f})")
    log(f"other load {load}; wrote {output}")


if __name__ == "__main__":
    main()
