"""docs/task_specs.md names a scorer (or what stands in for one) for every catalog dataset,
and every scorer a spec names exists and says where it comes from."""
import re
from pathlib import Path

import pytest

from mtl_framework.config.registry import load_registry
from mtl_framework.scoring.scorers import SCORERS

ROOT = Path(__file__).resolve().parents[1]
CATALOG = ROOT.parent / "shared" / "CATALOG.md"


def scorer_rows():
    text = (ROOT / "docs" / "task_specs.md").read_text(encoding="utf-8")
    section = text.split("## Scorers: the publisher's number", 1)[1].split("\n## ", 1)[0]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| (\w+) \| (.+) \|$", section, re.M)}


@pytest.mark.skipif(not CATALOG.is_file(), reason="../shared/CATALOG.md is absent")
def test_every_catalog_dataset_has_a_scorer_row():
    ids = re.findall(r"^\| \d+ \| (\w+) \|", CATALOG.read_text(encoding="utf-8"), re.M)
    assert len(ids) == 77
    rows = scorer_rows()
    assert [i for i in ids if i not in rows] == []


def test_each_row_names_the_scorer_its_specs_use():
    registry, rows = load_registry(), scorer_rows()
    for dataset in registry.datasets.values():
        for scorer in {registry.tasks[t].scorer for t in dataset.tasks} - {None}:
            assert f"`{scorer}`" in rows[dataset.id], dataset.id


def test_every_scorer_follows_the_contract():
    for name, module in SCORERS.items():
        assert callable(module.score) and callable(module.gold_from_release), name
        assert callable(module.predictions_from_decoded) and isinstance(module.PRIMARY, str), name
        if module.SOURCE is not None:
            assert set(module.SOURCE) == {"repository", "path", "commit"}, name
            assert re.fullmatch(r"[0-9a-f]{40}", module.SOURCE["commit"]), name
