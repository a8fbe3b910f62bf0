"""Annealed sampling: `sampling: {method: anneal, from, to, over}` moves the rates linearly
from one method's to the other's over `over` updates; exact on resume; in the rates
table and in every metrics.jsonl line; refused in one line when misconfigured."""
import json

import numpy as np
import pytest

from mtl_framework.mixing.mixture import TaskSampler, format_rates, schedule_from_config

from conftest import write_tiny_experiment

SIZES = {"big": 9000, "small": 1000}


def test_schedule_ends_are_the_two_methods():
    start, end, over = schedule_from_config(
        SIZES, {"method": "anneal", "from": "proportional", "to": "uniform", "over": 50})
    assert start == pytest.approx({"big": 0.9, "small": 0.1})
    assert end == pytest.approx({"big": 0.5, "small": 0.5})
    assert over == 50
    start, end, over = schedule_from_config(SIZES, "temperature")
    assert start == end and over == 0


def test_annealed_draws_follow_the_interpolated_rates_and_resume_exactly():
    sampler = TaskSampler([0.9, 0.1], seed=3, end=[0.5, 0.5], over=4000)
    assert sampler.rates_at(0) == pytest.approx([0.9, 0.1])
    assert sampler.rates_at(1000) == pytest.approx([0.8, 0.2])
    assert sampler.rates_at(10_000) == pytest.approx([0.5, 0.5])
    draws = sampler.sample(8000)
    # the first 4000 draws: small's mean rate is (0.1 + 0.5) / 2; after: 0.5
    assert abs(draws[:4000].mean() - 0.3) < 0.025
    assert abs(draws[4000:].mean() - 0.5) < 0.025
    # the uniforms are the plain sampler's: the same seed without annealing differs only
    # where the rates do
    plain = TaskSampler([0.9, 0.1], seed=3).sample(8000)
    assert (plain[:50] == draws[:50]).mean() > 0.9
    resumed = TaskSampler([0.9, 0.1], seed=3, end=[0.5, 0.5], over=4000)
    resumed.set_state({"seed": 3, "step": 2500})
    again = TaskSampler([0.9, 0.1], seed=3, end=[0.5, 0.5], over=4000)
    again.sample(2500)
    np.testing.assert_array_equal(resumed.sample(3000), again.sample(3000))


def test_rates_table_shows_both_ends():
    text = format_rates({"big": 0.9, "small": 0.1}, SIZES, "anneal",
                        end={"big": 0.5, "small": 0.5}, over=50)
    assert "at update 50" in text and "over 50 updates" in text
    line = next(l for l in text.splitlines() if l.startswith("small"))
    assert "10.000%" in line and "50.000%" in line


@pytest.mark.parametrize("sampling,message", [
    ({"method": "anneal", "from": "proportional", "to": "uniform"}, "needs `over: N`"),
    ({"method": "anneal", "from": "proportion", "to": "uniform", "over": 5},
     "sampling.from must be one of"),
    ({"method": "anneal", "to": "uniform", "over": 0}, "sampling.over must be a number"),
    ({"method": "uniform", "over": 5}, "sampling.over is for method: anneal"),
    ("anneal", "sampling: anneal is a mapping"),
])
def test_bad_anneal_is_one_line_naming_the_file(tmp_path, sampling, message):
    path = write_tiny_experiment(tmp_path / "e.yaml", sampling=sampling)
    from mtl_framework.config.experiment import ExperimentError, load_experiment

    with pytest.raises(ExperimentError, match=message) as error:
        load_experiment(str(path))
    assert "\n" not in str(error.value) and str(error.value).startswith(f"{path}:")


def test_metrics_lines_carry_the_annealed_rates(tmp_path):
    from mtl_framework.loop.run import Run
    from mtl_framework.mixing.mixture import example_count

    over = 4
    path = write_tiny_experiment(tmp_path / "e.yaml", steps=6, sampling={
        "method": "anneal", "from": "proportional", "to": "uniform", "over": over})
    lines = []
    run = Run(str(path), str(tmp_path / "run"), log=lines.append)
    run.train()
    assert any("at update 4" in str(line) for line in lines)  # the rates table, both ends
    sizes = {t: example_count(s.features) for t, s in run.mixture.streams.items()}
    start = {t: n / sum(sizes.values()) for t, n in sizes.items()}
    records = [json.loads(l) for l in open(tmp_path / "run" / "metrics.jsonl")]
    assert len(records) == 6
    for update, record in enumerate(records):  # the rates of the update's first draw
        fraction = min(update / over, 1.0)
        want = {t: (1 - fraction) * start[t] + fraction * 0.5 for t in start}
        assert record["rates"] == pytest.approx(want), update
