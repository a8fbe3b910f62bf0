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
DEMO = REPO / "experiments" / "demo" / "data"


def load(name):
    with open(FIXTURES / f"{name}.json", encoding="utf-8") as f:
        return json.load(f)


def shared_file(*parts):
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not found (real data is not in a fresh clone)")
    return path


def assert_names_the_script(fixture, scorer, sets=20):
    """The fixture names the script the scorer module cites, and holds `sets` sets or more."""
    assert fixture["source"] == scorer.SOURCE
    assert len(fixture["sets"]) >= sets


def assert_figures(ours, official, name):
    """Every official figure within TOLERANCE of ours; returns the largest difference."""
    worst = 0.0
    for key, value in official.items():
        if value is None or key not in ours:
            continue
        assert abs(ours[key] - value) <= TOLERANCE, (name, key, ours[key], value)
        worst = max(worst, abs(ours[key] - value))
    return worst


def demo_dev_features(scorer, task_name, tmp_path, max_length):
    """(task, gold, features) of `task_name`'s demo dev set: the scorer module's gold from
    the release, the features with a vocab built from the gold texts (an oracle's input)."""
    from mtl_framework.config.registry import load_registry
    from mtl_framework.prepare.cache import cached_features
    from mtl_framework.tokenizer import Tokenizer, build_vocab, count_units, write_vocab

    task = load_registry().select([task_name])[0]
    assert task.scorer == scorer.__name__.rsplit(".", 1)[-1]
    gold = scorer.gold_from_release(task, "dev", DEMO)
    vocab = tmp_path / "v.txt"
    write_vocab(build_vocab(count_units([g["text"] for g in gold]), max_size=3000), vocab)
    features = cached_features(task, "dev", Tokenizer(str(vocab)), str(DEMO), tmp_path / "cache",
                               max_length=max_length)
    return task, gold, features


def evaluate_oracle(task, features, head, predict, batch_size):
    """The dev entry `evaluate_features` gives a model with `head` whose predictions are
    `predict(batch)` (an oracle: scores made from the labels the features hold)."""
    from mtl_framework.evaluation import dev as evaluation

    class Oracle:
        heads = {task.name: head}

        @staticmethod
        def predictor(name, batch):
            return predict(batch)

    return evaluation.evaluate_features(Oracle, task, features, Oracle.predictor,
                                        batch_size=batch_size,
                                        scoring=evaluation.Scoring(task, "dev", str(DEMO)))
