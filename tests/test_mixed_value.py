"""The pure parts of the mixed-value study (bench/mixed_value.py, bench/mixed_value_report.py,
bench/zero_shot.py): row keys and what a restart skips, the 1,000-example subsets, the
paired intervals against numbers worked by hand, Spearman with ties, and the report on a
small synthetic rows file."""
import json
import math

import pytest

from bench import mixed_value as mv
from bench import mixed_value_report as report
from bench import zero_shot


def row(arm, seed, target, budget, score, baseline=0.5):
    return {"arm": arm, "seed": seed, "target": target, "budget": budget, "score": score,
            "baseline": baseline, "metric": "accuracy", "cpu_s_share": 60.0, "commit": "abc",
            "machine": "test cpu"}


# ------------------------------------------------------------------ rows and resuming


def test_row_key_and_round_trip(tmp_path):
    path = tmp_path / "rows.jsonl"
    assert mv.read_rows(path) == []
    mv.append_row(path, row("A", 3, "tnews", "1k", 0.41))
    mv.append_row(path, {**row("B", 0, "stsb_zh", mv.ZERO_SHOT, 0.2), "seed": "0"})
    rows = mv.read_rows(path)
    assert [mv.row_key(r) for r in rows] == [("A", 3, "tnews", "1k"),
                                            ("B", 0, "stsb_zh", mv.ZERO_SHOT)]


def test_groups_run_primary_seeds_first_and_restart_skips_done_arms():
    groups = mv.finetune_groups(["t1", "t2"])
    assert len(groups) == 8 * 2 * 2 + 3 * 2 * 2
    assert groups[0] == ("primary", 0, "full", "t1", ("A", "B"))
    assert groups[3] == ("primary", 0, "1k", "t2", ("A", "B"))
    assert groups[32] == ("secondary", 0, "full", "t1", ("C", "D", "B4", "B12"))
    assert {g[1] for g in groups[:32]} == set(range(8))
    done = {("A", 0, "t1", "full"), ("B", 0, "t1", "full"), ("C", 0, "t1", "full")}
    assert mv.missing_arms(groups[0], done) == []
    assert mv.missing_arms(groups[1], done) == ["A", "B"]
    assert mv.missing_arms(groups[32], done) == ["D", "B4", "B12"]


def test_subset_of_a_line_file_is_fixed_and_of_the_size(tmp_path):
    source = tmp_path / "train.txt"
    source.write_text("".join(f"line {i}\n" for i in range(50)) + "\n", encoding="utf-8")
    mv.subset_file(source, tmp_path / "a.txt", 10)
    mv.subset_file(source, tmp_path / "b.txt", 10)
    lines = (tmp_path / "a.txt").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 10 and len(set(lines)) == 10
    assert (tmp_path / "a.txt").read_text() == (tmp_path / "b.txt").read_text()
    assert lines == sorted(lines, key=lambda line: int(line.split()[1]))  # file order kept


def test_subset_of_a_squad_file_keeps_questions_with_their_paragraphs(tmp_path):
    data = {"version": "v1", "data": [
        {"paragraphs": [{"context": f"c{a}{p}",
                         "qas": [{"id": f"{a}-{p}-{q}", "question": "?"} for q in range(3)]}
                        for p in range(2)]} for a in range(4)]}
    source = tmp_path / "train.json"
    source.write_text(json.dumps(data), encoding="utf-8")
    mv.subset_file(source, tmp_path / "small.json", 5)
    small = json.loads((tmp_path / "small.json").read_text(encoding="utf-8"))
    kept = [(p["context"], qa["id"]) for a in small["data"] for p in a["paragraphs"]
            for qa in p["qas"]]
    assert len(kept) == 5
    assert all(context == f"c{qid[0]}{qid[2]}" for context, qid in kept)
    assert all(p["qas"] for a in small["data"] for p in a["paragraphs"])


# ------------------------------------------------------------------ arithmetic


def test_paired_interval_matches_a_hand_computation():
    # B − A per seed: 0.01, 0.03, 0.02, 0.04, 0.00 (one cell). Mean 0.02; SD = sqrt(0.001 / 4)
    # = 0.0158114; t(0.975, 4) = 2.776; half-width = 2.776 * 0.0158114 / sqrt(5) = 0.019630.
    a = {s: 0.5 + 0.1 * s for s in range(5)}
    table = {("A", "t", "full"): a,
             ("B", "t", "full"): {s: a[s] + d for s, d in enumerate([0.01, 0.03, 0.02, 0.04, 0.0])}}
    entry = report.paired(table, "B", "A", [("t", "full")])
    assert entry["n"] == 5
    assert entry["mean"] == pytest.approx(0.02)
    assert entry["ci95"][1] - entry["mean"] == pytest.approx(0.019630, abs=2e-6)


def test_paired_uses_only_seeds_complete_for_both_arms_and_every_cell():
    table = {("A", "t", "full"): {0: 0.5, 1: 0.5, 2: 0.5}, ("B", "t", "full"): {0: 0.6, 1: 0.7},
             ("A", "u", "full"): {0: 0.2, 1: 0.2, 2: 0.2}, ("B", "u", "full"): {0: 0.2, 2: 0.4}}
    entry = report.paired(table, "B", "A", [("t", "full"), ("u", "full")])
    assert entry["seeds"] == [0] and entry["mean"] == pytest.approx(0.05)
    assert entry["ci95"] is None


def test_rankdata_and_spearman_with_ties():
    assert zero_shot.rankdata([3.0, 1.0, 2.0, 2.0]).tolist() == [4.0, 1.0, 2.5, 2.5]
    # x ranks 1..5; y ranks 1, 2.5, 2.5, 4, 5: rho = Pearson of the ranks, worked by hand:
    # deviations x: -2 -1 0 1 2; y: -2 -0.5 -0.5 1 2; sum xy = 4+0.5+0+1+4 = 9.5;
    # sum x^2 = 10; sum y^2 = 4+0.25+0.25+1+4 = 9.5; rho = 9.5 / sqrt(95) = 0.974679.
    assert zero_shot.spearman([1, 2, 3, 4, 5], [0, 1, 1, 7, 9]) == pytest.approx(0.974679, abs=1e-6)
    assert zero_shot.spearman([1, 1, 1], [1, 2, 3]) == 0.0


def test_bootstrap_resamples_pair_up_across_exports():
    gold = [0, 1, 2, 3, 4, 5, 6, 7]
    first = zero_shot.bootstrap_spearman(gold, gold, resamples=20)
    second = zero_shot.bootstrap_spearman([-g for g in gold], gold, resamples=20)
    assert [round(a + b, 5) for a, b in zip(first, second)] == [0.0] * 20


def test_read_pairs_layouts(tmp_path):
    (tmp_path / "a.txt").write_text("x\ty\t1\nbad line\nu\tv\t0.5\n", encoding="utf-8")
    (tmp_path / "b.tsv").write_text("id\ts1\ts2\tlabel\n7\tx\ty\t1\n", encoding="utf-8")
    (tmp_path / "c.jsonl").write_text('{"label": 0, "text1": "p", "text2": "q"}\n', encoding="utf-8")
    assert zero_shot.read_pairs(tmp_path / "a.txt", "a_b_label") == (["x", "u"], ["y", "v"], [1.0, 0.5])
    assert zero_shot.read_pairs(tmp_path / "b.tsv", "id_a_b_label_header") == (["x"], ["y"], [1.0])
    assert zero_shot.read_pairs(tmp_path / "c.jsonl", "jsonl") == (["p"], ["q"], [0.0])


# ------------------------------------------------------------------ the report


def synthetic_rows():
    """A learns t1 at both budgets (0.7 vs floor 0.5) and not t2/1k (at its floor); B = A +
    0.02 + a seed wobble on every cell; 4 seeds for A and B, 3 for B4 (A − 0.01)."""
    rows = []
    for seed in range(4):
        wobble = [0.004, -0.004, 0.002, -0.002][seed]
        for target, budget, a in (("t1", "full", 0.7), ("t1", "1k", 0.65), ("t2", "full", 0.6),
                                  ("t2", "1k", 0.5)):
            a_score = a + 0.001 * seed
            rows.append(row("A", seed, target, budget, a_score))
            rows.append(row("B", seed, target, budget, a_score + 0.02 + wobble))
            if seed < 3:
                rows.append(row("B4", seed, target, budget, a_score - 0.01))
    for arm, score in (("A", 0.3), ("B", 0.4)):
        rows.append({**row(arm, 0, "stsb_zh", report.ZERO_SHOT, score), "metric": "spearman_cosine",
                     "bootstrap": [score + 0.01 * i for i in range(5)]})
    return rows


def test_report_from_synthetic_rows(tmp_path):
    rows_path = tmp_path / "rows.jsonl"
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in synthetic_rows()), encoding="utf-8")
    (tmp_path / "compute.json").write_text(json.dumps({"compute": {"A": {
        "stage": "stage2_A", "updates": 400, "micro_batches": 1600, "tokens": 2500000,
        "batch_size": 23, "wall_s": 900, "cpu_s": 1700}}}), encoding="utf-8")
    result = report.report(rows_path, tmp_path / "out" / "report")
    gates = {(g["target"], g["budget"]): g["passed"] for g in result["gate"]}
    assert gates == {("t1", "full"): True, ("t1", "1k"): True, ("t2", "full"): True,
                     ("t2", "1k"): False}
    primary = result["primary"]
    assert primary["n"] == 4 and len(primary["cells"]) == 3
    # per seed, the wobble is the same on every cell: d_s = 0.02 + wobble
    d = [0.024, 0.016, 0.022, 0.018]
    sd = math.sqrt(sum((x - 0.02) ** 2 for x in d) / 3)
    assert primary["mean"] == pytest.approx(0.02)
    assert primary["half_width"] == pytest.approx(3.182 * sd / 2)
    assert result["verdict"].startswith("B beats A by +0.0200")
    curve = {e["arm"]: e for e in result["curve"]}
    assert curve["B4"]["mean"] == pytest.approx(-0.01) and curve["B4"]["n"] == 3
    assert curve["B"]["mean"] == pytest.approx(0.02)
    zs = result["zero_shot"]["B-A"]["stsb_zh"]
    assert zs["mean"] == pytest.approx(0.1) and zs["ci95"] == pytest.approx([0.1, 0.1])
    held = {p["prediction"][:2]: p["held"] for p in result["predictions"]}
    assert held["1."] is True and held["6."] is True and held["7."] is None
    assert held["3."] is None  # no arm C rows
    markdown = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert "| t2 | 1k | 0.501 ± 0.002 | 0.500 | 4 | NO |" in markdown
    assert "| A | stage2_A | 400 | 1600 | 2,500,000 | 23 | 900 | 1700 |" in markdown
    assert (tmp_path / "out" / "report.png").stat().st_size > 0
    assert json.loads((tmp_path / "out" / "report.json").read_text())["rows"] == len(synthetic_rows())


def test_a_larger_subset_keeps_the_smaller_ones_examples(tmp_path):
    source = tmp_path / "train.txt"
    source.write_text("".join(f"line {i}\n" for i in range(100)), encoding="utf-8")
    mv.subset_file(source, tmp_path / "small.txt", 10)
    mv.subset_file(source, tmp_path / "large.txt", 12)
    small = set((tmp_path / "small.txt").read_text().splitlines())
    assert small < set((tmp_path / "large.txt").read_text().splitlines())
