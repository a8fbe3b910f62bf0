"""Prediction sets scored by publishers' official scripts (tests/fixtures/official_scorers/).

Each fixture names the script (repository, path, commit) and holds, per set, the
predictions and the figures the script printed; the scripts ran outside this
repository and none of their code is here."""
import json
import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "official_scorers"
REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("MTL_SHARED_DATA", REPO.parent / "shared" / "data")).parent
TOLERANCE = 1e-3


def load(name):
    with open(FIXTURES / f"{name}.json", encoding="utf-8") as f:
        return json.load(f)


def shared_file(*parts):
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not found (real data is not in a fresh clone)")
    return path


def assert_figures(ours, official, name):
    """Every official figure within TOLERANCE of ours; returns the largest difference."""
    worst = 0.0
    for key, value in official.items():
        if value is None or key not in ours:
            continue
        assert abs(ours[key] - value) <= TOLERANCE, (name, key, ours[key], value)
        worst = max(worst, abs(ours[key] - value))
    return worst
