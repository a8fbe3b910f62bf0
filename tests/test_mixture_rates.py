"""Rates through a real run: an explicit `rate` pins the share under temperature
sampling, sizes count examples (cmrc2018 questions, not windows), and every
metrics.jsonl line keeps each task's effective rate."""
import json
from pathlib import Path

import pytest

from mtl_framework.loop.run import Run
from mtl_framework.mixing.mixture import task_rates

REPO = Path(__file__).resolve().parents[1]
DEMO_DATA = REPO / "experiments" / "demo" / "data"

EXPERIMENT = """
data_root: {data}
cache_dir: {cache}
backbone: {{num_layers: 1, hidden_size: 32, num_heads: 2, intermediate_size: 64, vocab_size: 2000}}
tasks: [tnews, cmrc2018, {{name: mlm, rate: 0.25}}]
sampling: {{method: temperature, temperature: 2.0}}
tasks_per_update: 2
batch_size: 4
max_length: 64
steps: 2
seed: 0
"""


def cmrc_questions(path):
    data = json.loads(Path(path).read_text(encoding="utf-8"))["data"]
    return sum(len(p["qas"]) for d in data for p in d["paragraphs"])


def test_pinned_mlm_rate_and_sizes_in_examples(tmp_path):
    experiment = tmp_path / "rates.yaml"
    experiment.write_text(EXPERIMENT.format(data=DEMO_DATA, cache=tmp_path / "cache"))
    lines = []
    run = Run(str(experiment), output=str(tmp_path / "run"), log=lines.append)
    assert run.rates["mlm"] == pytest.approx(0.25)
    questions = cmrc_questions(DEMO_DATA / "cmrc2018" / "train.json")
    windows = len(run.mixture.streams["cmrc2018"].features)
    assert windows > questions  # max_length 64 cuts contexts into several windows
    table = next(line for line in lines if line.startswith("sampling: temperature"))
    assert "sizes count examples" in table
    rows = {row.split()[0]: row.split()[1:] for row in table.splitlines()[4:]}
    assert rows["cmrc2018"][0] == f"{questions:,}"  # counted in questions
    assert rows["mlm"][-1] == "*" and rows["tnews"][-1] != "*"  # mlm marked as pinned
    tnews = len(run.mixture.streams["tnews"].features)  # one row per tnews example
    expected = task_rates({"tnews": tnews, "cmrc2018": questions}, "temperature",
                          temperature=2.0)
    for task in ("tnews", "cmrc2018"):
        assert run.rates[task] == pytest.approx(0.75 * expected[task])
    run.train()
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert len(records) == 2
    for record in records:
        assert record["rates"] == pytest.approx(run.rates)
        assert record["tokens"] == sum(t["tokens"] for t in record["tasks"].values()) > 0
    # the tokens of the first update, recounted from the same batches drawn again
    replay = Run(str(experiment), output=str(tmp_path / "replay"), log=lambda *_: None)
    drawn = [replay.mixture.next() for _ in range(2)]
    assert records[0]["tokens"] == sum(int((b["token_ids"] != 0).sum()) for _, b in drawn)
