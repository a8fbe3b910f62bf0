"""`mtl benchmark` on a tiny suite: rows, the summary recomputed here from the rows,
paired differences checked by hand, pairing digests, resume, and the suite's errors."""
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from mtl_framework.cli import main as mtl
from mtl_framework.errors import UserError
from mtl_framework.transfer.benchmark import initial_export, load_suite, mean_ci, t_quantile

from conftest import write_tiny_experiment

REPO = Path(__file__).resolve().parents[1]
DEMO_DATA = REPO / "experiments" / "demo" / "data"
# Published two-sided 95% critical values of Student's t (any statistics table).
T_TABLE = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706, 9: 2.2622, 10: 2.2281,
           29: 2.0452, 30: 2.0423, 100: 1.9840}
SUITE = """\
description: tiny suite for tests
seeds: [0, 1]
defaults: {steps: 2, batch_size: 4, lr: 1.0e-3, max_length: 32, dev_examples: 24}
tasks:
  - tnews
  - {name: afqmc, steps: 3}
"""


def write_experiment(path, lr=3e-3, steps=3):
    backbone = {"num_layers": 1, "hidden_size": 32, "num_heads": 2, "intermediate_size": 64,
                "dropout": 0.1, "vocab_size": 800, "alpha_warmup_steps": 0}
    return write_tiny_experiment(path, backbone=backbone, max_length=32, steps=steps,
                                 optimizer={"name": "adamw", "lr": lr, "weight_decay": 0.0})


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """A trained tiny run's keras export and its step-0 export (same initial weights)."""
    root = tmp_path_factory.mktemp("benchmark")
    assert mtl(["train", str(write_experiment(root / "tiny.yaml")), "--output",
                str(root / "run")]) == 0
    assert mtl(["export", str(root / "run"), "--format", "keras", "--output",
                str(root / "trained")]) == 0
    initial = initial_export(str(root / "run"), str(root / "initial"), log=lambda *_: None)
    return root, root / "trained", Path(initial)


@pytest.fixture(scope="module")
def results(exports):
    root, trained, initial = exports
    (root / "suite.yaml").write_text(SUITE)
    output = root / "bench"
    assert mtl(["benchmark", str(trained), str(initial), "--suite", str(root / "suite.yaml"),
                "--data-root", str(DEMO_DATA), "--output", str(output)]) == 0
    return output, json.loads((output / "results.json").read_text())


def weights(export):
    import h5py  # comes with keras

    arrays = []
    with h5py.File(export / "model.weights.h5", "r") as f:
        f.visititems(lambda name, node: arrays.append((name, node[()]))
                     if isinstance(node, h5py.Dataset) else None)
    return dict(arrays)


def test_t_quantile_matches_published_table():
    for df, value in T_TABLE.items():
        assert t_quantile(df) == pytest.approx(value, abs=1e-4)
    mean, ci = mean_ci([0.5, 0.7, 0.6])
    half = 4.3027 * np.std([0.5, 0.7, 0.6], ddof=1) / math.sqrt(3)
    assert mean == pytest.approx(0.6) and ci == pytest.approx([0.6 - half, 0.6 + half], abs=1e-5)
    assert mean_ci([0.4]) == (0.4, None)


def test_initial_export_is_the_runs_step_0_model(tmp_path):
    """A run whose updates change nothing (lr 0, no decay) ends where it started: its
    export must equal the initial export bitwise, while a real run's does not."""
    still = write_experiment(tmp_path / "still.yaml", lr=0.0, steps=1)
    assert mtl(["train", str(still), "--output", str(tmp_path / "run")]) == 0
    assert mtl(["export", str(tmp_path / "run"), "--format", "keras", "--output",
                str(tmp_path / "end")]) == 0
    initial = Path(initial_export(str(tmp_path / "run"), str(tmp_path / "initial"),
                                  log=lambda *_: None))
    end, start = weights(tmp_path / "end"), weights(initial)
    assert end.keys() == start.keys() and len(end) > 5
    for name in end:
        np.testing.assert_array_equal(end[name], start[name], err_msg=name)
    assert (initial / "vocab.txt").read_text() == (tmp_path / "run" / "vocab.txt").read_text()
    with pytest.raises(UserError, match="already exists"):
        initial_export(str(tmp_path / "run"), str(tmp_path / "initial"), log=lambda *_: None)


def test_rows_cover_every_export_task_seed(exports, results):
    _, trained, initial = exports
    output, result = results
    names = [e["name"] for e in result["exports"]]
    assert names == [str(trained), str(initial)]
    keys = [(r["export"], r["task"], r["seed"]) for r in result["rows"]]
    assert sorted(keys) == sorted((e, t, s) for e in names for t in ("tnews", "afqmc")
                                  for s in (0, 1))
    for row in result["rows"]:
        assert 0.0 <= row["score"] <= 1.0
    tasks = {t["name"]: t for t in result["tasks"]}
    assert tasks["afqmc"]["settings"]["steps"] == 3 and tasks["tnews"]["settings"]["steps"] == 2
    assert tasks["tnews"]["examples"] == 24 and tasks["tnews"]["metric"] == "accuracy"
    # each fine-tune ran the suite's settings: its own run directory says so
    for row in result["rows"]:
        run = next(output.joinpath("runs").glob(f"*/{row['task']}/seed-{row['seed']}"))
        assert (run / "finetune.log").exists() and not (run / "checkpoints").exists()


def test_summary_recomputed_from_rows(results):
    _, result = results
    rows = result["rows"]
    for entry in result["summary"]:
        values = [r["score"] for r in rows
                  if r["export"] == entry["export"] and r["task"] == entry["task"]]
        assert len(values) == 2 and entry["seeds"] == 2
        half = T_TABLE[1] * np.std(values, ddof=1) / math.sqrt(2)
        assert entry["mean"] == pytest.approx(np.mean(values), abs=1e-12)
        assert entry["ci95"] == pytest.approx([np.mean(values) - half, np.mean(values) + half],
                                              abs=1e-3)
    assert len(result["summary"]) == 4
    for entry in result["suite_mean"]:
        per_seed = [np.mean([r["score"] for r in rows if r["export"] == entry["export"]
                             and r["seed"] == seed]) for seed in (0, 1)]
        assert entry["mean"] == pytest.approx(np.mean(per_seed), abs=1e-12)


def test_paired_differences_by_hand(exports, results):
    _, trained, initial = exports
    _, result = results
    score = {(r["export"], r["task"], r["seed"]): r["score"] for r in result["rows"]}
    a, b = str(trained), str(initial)
    for entry in result["differences"]:
        assert (entry["a"], entry["b"]) == (a, b) and entry["paired"]
        d = [score[a, entry["task"], s] - score[b, entry["task"], s] for s in (0, 1)]
        half = T_TABLE[1] * np.std(d, ddof=1) / math.sqrt(2)
        assert entry["mean"] == pytest.approx(np.mean(d), abs=1e-12)
        assert entry["ci95"] == pytest.approx([np.mean(d) - half, np.mean(d) + half], abs=1e-3)
    (suite,) = result["suite_mean_differences"]
    d = [np.mean([score[a, t, s] for t in ("tnews", "afqmc")])
         - np.mean([score[b, t, s] for t in ("tnews", "afqmc")]) for s in (0, 1)]
    assert suite["mean"] == pytest.approx(np.mean(d), abs=1e-12)


def test_same_head_init_and_batch_order_across_exports_not_across_seeds(exports, results):
    _, trained, initial = exports
    _, result = results
    start = {(r["export"], r["task"], r["seed"]): r["start"] for r in result["rows"]}
    a, b = weights(trained), weights(initial)  # different backbones ...
    assert any(not np.array_equal(a[name], b[name]) for name in a)
    for task in ("tnews", "afqmc"):
        for seed in (0, 1):  # ... the same head and batches for one seed
            assert start[str(trained), task, seed] == start[str(initial), task, seed]
        first, second = start[str(trained), task, 0], start[str(trained), task, 1]
        assert first["head_init"] != second["head_init"]
        assert first["batch_order"] != second["batch_order"]


def test_markdown_table_and_plot(exports, results):
    _, trained, initial = exports
    output, result = results
    table = (output / "results.md").read_text()
    assert table.startswith("| export | tnews (accuracy) | afqmc (accuracy) | mean |")
    tnews = next(e for e in result["summary"]
                 if e["export"] == str(trained) and e["task"] == "tnews")
    cell = f"{tnews['mean'] * 100:.2f} ± {(tnews['ci95'][1] - tnews['ci95'][0]) * 50:.2f}"
    assert f"| {trained} | {cell} |" in table
    assert f"| {trained} − {initial} (paired) |" in table and "| majority class |" in table
    assert (output / "results.png").read_bytes().startswith(b"\x89PNG")


def test_resume_runs_only_what_is_missing(exports, results, capsys):
    root, trained, initial = exports
    output, result = results
    resumed = root / "resumed"
    shutil.copytree(output, resumed)
    rows = (resumed / "rows.jsonl").read_text().splitlines()
    dropped = json.loads(rows[5])
    (resumed / "rows.jsonl").write_text("\n".join(rows[:5] + rows[6:]) + "\n")
    capsys.readouterr()
    assert mtl(["benchmark", str(trained), str(initial), "--suite", str(root / "suite.yaml"),
                "--data-root", str(DEMO_DATA), "--output", str(resumed)]) == 0
    out = capsys.readouterr().out
    assert out.count("done earlier") == 7 and "7 already done" in out
    again = json.loads((resumed / "results.json").read_text())
    redone = next(r for r in again["rows"] if (r["export"], r["task"], r["seed"]) ==
                  (dropped["export"], dropped["task"], dropped["seed"]))
    assert redone["score"] == pytest.approx(dropped["score"], abs=1e-9)  # deterministic
    assert redone["start"] == dropped["start"]
    assert [e["mean"] for e in again["summary"]] == \
        pytest.approx([e["mean"] for e in result["summary"]], abs=1e-9)


def test_changed_settings_are_refused_not_mixed(exports, results, capsys):
    root, trained, initial = exports
    output, _ = results
    changed = root / "changed.yaml"
    changed.write_text(SUITE.replace("steps: 2", "steps: 5"))
    before = (output / "rows.jsonl").read_text()
    assert mtl(["benchmark", str(trained), str(initial), "--suite", str(changed),
                "--data-root", str(DEMO_DATA), "--output", str(output)]) == 2
    err = capsys.readouterr().err
    assert f"{output / 'rows.jsonl'}:1:" in err and "other settings" in err
    assert (output / "rows.jsonl").read_text() == before


@pytest.mark.parametrize("text,line,message", [
    ("seeds: [0]\ntasks: [tnews]\nepochs: 3\n", 3, "unknown key 'epochs'"),
    ("seeds: []\ntasks: [tnews]\n", 1, "seeds must be a non-empty list"),
    ("tasks:\n  - tnews\n  - {name: afqmc, stepz: 3}\n", 3, "unknown setting 'stepz'"),
    ("tasks:\n  - tnews\n  - {name: afqmc,\n     lr: fast}\n", 4, "lr must be a number"),
    ("defaults:\n  steps: 0\ntasks: [tnews]\n", 2, "steps must be > 0"),
    ("tasks:\n  - tnews\n  - tnewz\n", 3, "unknown task 'tnewz' (did you mean 'tnews'?)"),
    ("tasks:\n  - tnews\n  - tnews\n", 3, "listed twice"),
    ("tasks: [tnews\n", 2, "invalid YAML"),
    ("seeds: [0]\ntasks: [tnews]\nseeds: [1]\n", 3, "key 'seeds' given twice (also on line 1)"),
])
def test_suite_errors_name_file_and_line(tmp_path, text, line, message):
    from mtl_framework.config.registry import load_registry

    path = tmp_path / "suite.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as error:
        load_suite(str(path), load_registry())
    assert f"{path}:{line}: " in str(error.value) and message in str(error.value)


def test_cli_errors_are_one_line_and_write_nothing(exports, tmp_path, capsys):
    _, trained, _ = exports
    suite = tmp_path / "suite.yaml"
    suite.write_text("tasks: [tnews]\nseeds: [0, 0]\n")
    output = tmp_path / "out"
    assert mtl(["benchmark", str(trained), "--suite", str(suite), "--data-root", str(DEMO_DATA),
                "--output", str(output)]) == 2
    assert capsys.readouterr().err.strip() == f"error: {suite}:2: seeds repeat a value: [0, 0]"
    assert mtl(["benchmark", str(tmp_path), "--suite", str(suite), "--data-root", str(DEMO_DATA),
                "--output", str(output)]) == 2
    assert "not a backbone folder" in capsys.readouterr().err
    suite.write_text("tasks: [ocnli]\n")  # not among the demo samples
    assert mtl(["benchmark", str(trained), "--suite", str(suite), "--data-root", str(DEMO_DATA),
                "--output", str(output)]) == 2
    assert "missing train file of task 'ocnli'" in capsys.readouterr().err
    assert not output.exists()


def test_shipped_suites_are_valid(shared_data):
    from mtl_framework.config.registry import load_registry
    from mtl_framework.transfer.benchmark import check_task_files

    registry = load_registry()
    small = load_suite(str(REPO / "suites" / "clue_small.yaml"), registry)
    check_task_files(registry.select([t["name"] for t in small["tasks"]]), str(shared_data))
    clue = load_suite(str(REPO / "suites" / "clue.yaml"), registry)
    assert len(clue["tasks"]) == 12  # the paper's 11, C3 as c3_m + c3_d
