"""The mixed-value study's figure and tables, recomputed from its raw rows alone
(bench/mixed_value_design.md says what each number is and what was predicted).

    .venv/bin/python -m bench.mixed_value_report [--rows bench/results/mixed_value/rows.jsonl]
        [--output bench/results/mixed_value/report]

Writes OUTPUT.json, OUTPUT.md and OUTPUT.png: the gate (A's cells against their floors),
the primary figure P (B − A over the gated cells, 95% t-interval over complete seeds), every
per-cell paired interval for B−A, B−C, B−D, A−D, B4−A, B12−A, the task-count curve against
A, zero-shot Spearman per arm with B−A's paired bootstrap interval, and each prediction's
verdict; with the runner's compute.json beside the rows, each arm's compute. Only complete
seeds count: a seed enters a comparison when both arms have every cell of it.
"""
import argparse
import json
import math
from pathlib import Path

from bench import REPO
from bench.runs import interval

ROWS = REPO / "bench" / "results" / "mixed_value" / "rows.jsonl"
ZERO_SHOT = "zero-shot"
GATE_MARGIN = 0.05
PAIRS = (("B", "A"), ("B", "C"), ("B", "D"), ("A", "D"), ("B4", "A"), ("B12", "A"))
TASK_COUNT = {"A": 0, "B4": 4, "B12": 12, "B": 18}
TARGET_MIN_CELLS = 8  # fewer gated cells: P does not represent the suite
HALF_WIDTH_TARGET = 0.015


def read_rows(path):
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()
            if line.strip()]


def finetune_table(rows):
    """{(arm, target, budget): {seed: score}} of the fine-tune rows."""
    table = {}
    for r in rows:
        if r["budget"] != ZERO_SHOT:
            table.setdefault((r["arm"], r["target"], r["budget"]), {})[int(r["seed"])] = r["score"]
    return table


def cells_of(rows):
    """[(target, budget)] in the order first seen."""
    return list(dict.fromkeys((r["target"], r["budget"]) for r in rows if r["budget"] != ZERO_SHOT))


def gate(rows):
    """{(target, budget): {...}} A's mean and interval over its seeds against the floor
    (the rows' majority baseline; 0 where there is none)."""
    table, result = finetune_table(rows), {}
    floors = {}
    for r in rows:
        if r["arm"] == "A" and r["budget"] != ZERO_SHOT:
            floors[(r["target"], r["budget"])] = r.get("baseline") or 0.0
    for cell in cells_of(rows):
        scores = list(table.get(("A", *cell), {}).values())
        if not scores:
            continue
        mean, ci = interval(scores)
        floor = floors[cell]
        passed = mean >= floor + GATE_MARGIN and ci is not None and ci[0] > floor
        result[cell] = {"mean": mean, "ci95": ci, "floor": floor, "n": len(scores),
                        "passed": passed}
    return result


def complete_seeds(table, arms, cells):
    """Seeds at which every arm in `arms` has every cell."""
    seeds = None
    for arm in arms:
        for cell in cells:
            have = set(table.get((arm, *cell), {}))
            seeds = have if seeds is None else seeds & have
    return sorted(seeds or ())


def paired(table, first, second, cells):
    """Per seed, the mean over `cells` of first − second; (mean, ci, n, differences)."""
    seeds = complete_seeds(table, (first, second), cells)
    diffs = [sum(table[(first, *c)][s] - table[(second, *c)][s] for c in cells) / len(cells)
             for s in seeds]
    if not diffs:
        return {"mean": None, "ci95": None, "n": 0, "differences": []}
    mean, ci = interval(diffs)
    return {"mean": mean, "ci95": ci, "n": len(diffs), "differences": diffs, "seeds": seeds}


def half(ci):
    return None if ci is None else (ci[1] - ci[0]) / 2


def zero_shot(rows):
    """{set: {arm: score}, "B-A": {set: mean, ci95 (2.5/97.5 percentiles of the paired
    bootstrap differences)}}."""
    scores, boots = {}, {}
    for r in rows:
        if r["budget"] == ZERO_SHOT:
            scores.setdefault(r["target"], {})[r["arm"]] = r["score"]
            boots[(r["arm"], r["target"])] = r.get("bootstrap") or []
    differences = {}
    for name, by_arm in scores.items():
        if "A" in by_arm and "B" in by_arm:
            d = sorted(b - a for a, b in zip(boots[("A", name)], boots[("B", name)]))
            ci = [d[int(0.025 * (len(d) - 1))], d[int(math.ceil(0.975 * (len(d) - 1)))]] if d else None
            differences[name] = {"mean": by_arm["B"] - by_arm["A"], "ci95": ci}
    return {"scores": scores, "B-A": differences}


def summarise(rows):
    table, cells = finetune_table(rows), cells_of(rows)
    gates = gate(rows)
    gated = [c for c in cells if gates.get(c, {}).get("passed")]
    primary = paired(table, "B", "A", gated) if gated else paired(table, "B", "A", [])
    primary.update(cells=[list(c) for c in gated], half_width=half(primary["ci95"]))
    per_cell = []
    for first, second in PAIRS:
        for cell in cells:
            entry = paired(table, first, second, [cell])
            if entry["n"]:
                per_cell.append({"pair": f"{first}-{second}", "target": cell[0], "budget": cell[1],
                                 **{k: entry[k] for k in ("mean", "ci95", "n")}})
        for name, subset in (("gated cells", gated),
                             ("full", [c for c in gated if c[1] == "full"]),
                             ("1k", [c for c in gated if c[1] == "1k"])):
            entry = paired(table, first, second, subset) if subset else {"n": 0}
            if entry["n"]:
                per_cell.append({"pair": f"{first}-{second}", "target": name, "budget": "",
                                 **{k: entry[k] for k in ("mean", "ci95", "n")}})
    curve = []
    for arm, count in sorted(TASK_COUNT.items(), key=lambda item: item[1]):
        entry = {"mean": 0.0, "ci95": None, "n": None} if arm == "A" else paired(table, arm, "A", gated)
        if arm == "A" or entry["n"]:
            curve.append({"arm": arm, "tasks": count, **{k: entry[k] for k in ("mean", "ci95", "n")}})
    result = {"primary": primary, "gate": [{"target": c[0], "budget": c[1], **g}
                                           for c, g in gates.items()],
              "paired": per_cell, "curve": curve, "zero_shot": zero_shot(rows),
              "rows": len(rows), "commits": sorted({r.get("commit", "?") for r in rows}),
              "machines": sorted({str(r.get("machine")) for r in rows}),
              "cpu_hours": round(sum(r.get("cpu_s_share", 0) for r in rows
                                     if r["budget"] != ZERO_SHOT) / 3600, 2)}
    result["verdict"] = verdict(primary, len(gated), len(cells))
    result["predictions"] = predictions(result, gates)
    return result


def verdict(primary, gated, cells):
    if primary["ci95"] is None:
        return "not enough complete seeds for an interval"
    low, high = primary["ci95"]
    scope = "" if gated >= TARGET_MIN_CELLS else (
        f" (only {gated} of {cells} cells passed the gate: the suite is not represented)")
    if low > 0:
        return f"B beats A by {primary['mean']:+.4f} [{low:+.4f}, {high:+.4f}]{scope}"
    if high < 0:
        return f"B costs {primary['mean']:+.4f} [{low:+.4f}, {high:+.4f}] against A{scope}"
    return (f"no difference detected: B−A {primary['mean']:+.4f}, the effect lies in "
            f"[{low:+.4f}, {high:+.4f}]{scope}")


def _find(result, pair, target):
    return next((p for p in result["paired"] if p["pair"] == pair and p["target"] == target), None)


def predictions(result, gates):
    """Each prediction of the design note: (text, held: True/False/None when not measurable)."""
    p = result["primary"]
    ba_full, ba_1k = _find(result, "B-A", "full"), _find(result, "B-A", "1k")
    bc, ad = _find(result, "B-C", "gated cells"), _find(result, "A-D", "gated cells")
    b4, b12 = _find(result, "B4-A", "gated cells"), _find(result, "B12-A", "gated cells")
    ba = _find(result, "B-A", "gated cells")
    zs = result["zero_shot"]["B-A"].get("stsb_zh")
    out = [
        ("1. P > 0 and its interval excludes 0",
         None if p["ci95"] is None else p["ci95"][0] > 0),
        ("2. B−A larger at 1,000 examples than at full size",
         None if not (ba_full and ba_1k) else ba_1k["mean"] > ba_full["mean"]),
        ("3. B − C > 0 (point estimate)", None if not bc else bc["mean"] > 0),
        ("4. abs(A − D) < 0.01", None if not ad else abs(ad["mean"]) < 0.01),
        ("5. B4 − A ≤ 0 < B − A, B12 − A between",
         None if not (b4 and b12 and ba) else
         b4["mean"] <= 0 < ba["mean"] and min(b4["mean"], ba["mean"]) <= b12["mean"]
         <= max(b4["mean"], ba["mean"])),
        ("6. zero-shot stsb_zh: B − A ≥ 0.05", None if not zs else zs["mean"] >= 0.05),
        ("7. A learns all 12 cells (gate)",
         None if len(gates) < 12 else all(g["passed"] for g in gates.values())),
    ]
    return [{"prediction": text, "held": held} for text, held in out]


# ------------------------------------------------------------------ output


def signed(entry, scale=100):
    if not entry or entry.get("mean") is None:
        return "-"
    ci = entry.get("ci95")
    if ci is None:
        return f"{scale * entry['mean']:+.1f}"
    return f"{scale * entry['mean']:+.1f} [{scale * ci[0]:+.1f}, {scale * ci[1]:+.1f}]"


def markdown(result):
    p = result["primary"]
    width = "-" if p["half_width"] is None else f"{100 * p['half_width']:.2f}"
    lines = ["# Mixed value (bench/mixed_value.py; design: bench/mixed_value_design.md)", "",
             f"Rows: {result['rows']}; commits: {', '.join(result['commits'])}; machines: "
             f"{', '.join(result['machines'])}; fine-tune CPU hours: {result['cpu_hours']}.", "",
             f"**Primary figure P (B − A, mean over {len(p['cells'])} gated cells, 95% t-interval "
             f"over {p['n']} complete seeds):** {signed(p)} points (half-width {width}; "
             f"target ≤ {100 * HALF_WIDTH_TARGET:.1f}). Verdict: {result['verdict']}.", "",
             "The interval covers fine-tuning seeds only: each stage is a single run.", "",
             "## Gate: A's score (mean ± 95% interval over its seeds) against the floor", "",
             "| target | budget | A | floor | n | learned |", "|---|---|---|---|---|---|"]
    for g in result["gate"]:
        spread = "" if g["ci95"] is None else f" ± {(g['ci95'][1] - g['ci95'][0]) / 2:.3f}"
        lines.append(f"| {g['target']} | {g['budget']} | {g['mean']:.3f}{spread} | "
                     f"{g['floor']:.3f} | {g['n']} | {'yes' if g['passed'] else 'NO'} |")
    lines += ["", "## Paired differences x 100, 95% t-interval over complete seeds", "",
              "| pair | target | budget | difference | n |", "|---|---|---|---|---|"]
    for e in result["paired"]:
        lines.append(f"| {e['pair']} | {e['target']} | {e['budget']} | {signed(e)} | {e['n']} |")
    lines += ["", "## Task-count curve: arm − A over the gated cells, x 100", "",
              "| arm | supervised tasks | − A | n |", "|---|---|---|---|"]
    for e in result["curve"]:
        lines.append(f"| {e['arm']} | {e['tasks']} | {signed(e)} | {e['n'] or '-'} |")
    zs = result["zero_shot"]
    if zs["scores"]:
        arms = sorted({a for s in zs["scores"].values() for a in s})
        lines += ["", "## Zero-shot: Spearman of pooled-embedding cosine (x 100); B − A with a "
                      "paired bootstrap 95% interval over pairs", "",
                  "| set | " + " | ".join(arms) + " | B − A |", "|---" * (len(arms) + 2) + "|"]
        for name, by_arm in zs["scores"].items():
            cells = [f"{100 * by_arm[a]:.1f}" if a in by_arm else "-" for a in arms]
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {signed(zs['B-A'].get(name))} |")
    if result.get("compute"):
        lines += ["", "## Compute of each arm's export (D: stage 1 itself)", "",
                  "| arm | stage | updates | micro-batches | real tokens | batch size | wall s | CPU s |",
                  "|---|---|---|---|---|---|---|---|"]
        for arm, c in result["compute"].items():
            lines.append(f"| {arm} | {c['stage']} | {c['updates']} | {c['micro_batches']} | "
                         f"{c['tokens']:,} | {c['batch_size']} | {c.get('wall_s', '-')} | "
                         f"{c.get('cpu_s', '-')} |")
    lines += ["", "## Predictions of the design note", "", "| prediction | held |", "|---|---|"]
    for e in result["predictions"]:
        held = {True: "held", False: "FAILED", None: "not measurable yet"}[e["held"]]
        lines.append(f"| {e['prediction']} | {held} |")
    return "\n".join(lines) + "\n"


def plot(result, path):
    """Left: P and the per-cell B−A intervals; right: the task-count curve against A."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8), width_ratios=(2, 1))
    entries = [e for e in result["paired"] if e["pair"] == "B-A" and e["budget"]]
    p = result["primary"]
    labels = [f"{e['target']}\n{e['budget']}" for e in entries] + ["P\n(gated)"]
    means = [100 * e["mean"] for e in entries] + [100 * (p["mean"] or 0)]
    halves = [100 * (half(e["ci95"]) or 0) for e in entries] + [100 * (p["half_width"] or 0)]
    colors = ["tab:blue"] * len(entries) + ["tab:red"]
    for x, (m, h, c) in enumerate(zip(means, halves, colors)):
        left.errorbar([x], [m], yerr=[h], fmt="o", color=c, capsize=3)
    left.axhline(0, color="black", linewidth=0.8)
    left.set_xticks(range(len(labels)), labels, fontsize=7)
    left.set_ylabel("B − A (points)")
    left.set_title(f"B − A per cell and P, 95% t-interval over seeds (P: n={p['n']})", fontsize=10)
    curve = result["curve"]
    right.errorbar([e["tasks"] for e in curve], [100 * e["mean"] for e in curve],
                   yerr=[100 * (half(e["ci95"]) or 0) for e in curve], fmt="o-", capsize=3)
    for e in curve:
        right.annotate(e["arm"], (e["tasks"], 100 * e["mean"]), textcoords="offset points",
                       xytext=(4, 4), fontsize=8)
    right.axhline(0, color="black", linewidth=0.8)
    right.set_xlabel("supervised tasks in stage 2 (A: 0)")
    right.set_ylabel("arm − A over gated cells (points)")
    right.set_title("Task-count curve", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def report(rows_path, output):
    rows = read_rows(rows_path)
    if not rows:
        raise SystemExit(f"{rows_path}: no rows yet; run `python -m bench.mixed_value` first")
    result = summarise(rows)
    stages = Path(rows_path).parent / "compute.json"  # the runner's record of each stage
    if stages.exists():
        result["compute"] = json.loads(stages.read_text(encoding="utf-8"))["compute"]
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.with_suffix(".json").write_text(json.dumps(result, indent=1, ensure_ascii=False))
    output.with_suffix(".md").write_text(markdown(result), encoding="utf-8")
    plot(result, output.with_suffix(".png"))
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default=str(ROWS))
    parser.add_argument("--output", default=None, help="default: report beside the rows")
    args = parser.parse_args()
    output = args.output or Path(args.rows).parent / "report"
    result = report(args.rows, output)
    print(markdown(result))
    if result["primary"]["n"] == 0:
        print("(no complete seed of A and B yet)")


if __name__ == "__main__":
    main()
