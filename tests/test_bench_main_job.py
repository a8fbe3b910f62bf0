"""bench/main_job.py's pieces that need no run: the rows the baselines get from a
micro-batch, the experiments both `mtl train`s read, and the report's ratios."""
import numpy as np

from bench.main_job import (
    CATALOG_TASKS,
    SYSTEMS,
    experiment_text,
    steady,
    summarize_cell,
    trimmed_rows,
)
from mtl_framework.config.experiment import load_experiment
from mtl_framework.config.registry import load_registry

REPO = __import__("pathlib").Path(__file__).resolve().parent.parent


def test_a_contrastive_batch_gives_its_real_texts_cut_to_the_longest():
    ids = np.zeros((2, 3, 8), np.int32)  # [batch, texts, length]; query 2 has no negative
    ids[0, 0, :5], ids[0, 1, :3], ids[0, 2, :6] = 7, 8, 9
    ids[1, 0, :2], ids[1, 1, :4] = 7, 8
    segments = np.where(ids > 0, 2, 0)  # clipped to bert4keras's two segments
    rows, segs = trimmed_rows({"token_ids": ids, "segment_ids": segments})
    assert rows.shape == (5, 6)
    assert [int(n) for n in (rows > 0).sum(axis=1)] == [5, 3, 6, 2, 4]
    assert int(segs.max()) == 1
    assert int(np.count_nonzero(rows)) == int(np.count_nonzero(ids))


def test_the_experiments_are_the_demo_and_eight_families(tmp_path):
    demo = tmp_path / "demo.yaml"
    demo.write_text(experiment_text("demo", "auto", 24, tmp_path / "cache", None, REPO))
    experiment = load_experiment(str(demo))
    assert (experiment.steps, experiment.eval_every, experiment.checkpoint_every) == (24, 0, 24)
    assert experiment.raw["precision"] == "auto"
    assert [t["name"] for t in experiment.raw["tasks"]] == [
        "tnews", "chnsenticorp", "cluener", "afqmc", "cluewsc", "mlm"]
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(experiment_text("catalog", "float32", 24, tmp_path / "cache",
                                       REPO.parent / "shared" / "data", REPO))
    assert [t["name"] for t in load_experiment(str(catalog)).raw["tasks"]] == list(CATALOG_TASKS)
    tasks = load_registry().tasks
    assert {name: tasks[name].type for name in CATALOG_TASKS if name != "mlm"} == {
        name: family for name, family in CATALOG_TASKS.items() if name != "mlm"}
    assert len(set(CATALOG_TASKS.values())) == 8


def test_ratios_leave_out_traced_updates_and_pair_rounds():
    def update(wall, tokens, traced=False):
        return {"wall": wall, "cpu": wall, "tokens": tokens, "positions": 2 * tokens,
                "traced": traced}
    rounds = []
    for now_wall in (1.0, 2.0):  # now: 100 tokens per update; the others twice as slow
        rounds.append({s: {**steady([update(now_wall * (1 if s == "now" else 2), 100),
                                     update(9.0, 100, traced=True)]), "other_cores": 0.0}
                       for s in SYSTEMS})
    summary = summarize_cell(rounds)
    assert summary["now"]["tokens_per_s"] == round(200 / 3.0, 1)
    assert summary["now"]["traced_left_out"] == 2
    assert summary["now"]["real_token_fraction"] == 0.5
    assert summary["now/bert4keras"]["pooled"] == 2.0
    assert summary["now/bert4keras"]["per_round"] == [2.0, 2.0]
    assert summary["now/base"]["target"] == 1.6
