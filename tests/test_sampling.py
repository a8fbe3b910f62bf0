"""Sampling rates against the formulas; sampler determinism and resume."""
import numpy as np
import pytest

from mtl_framework.mixing.mixture import TaskSampler, format_rates, rates_from_config, task_rates

SIZES = {"big": 1_000_000, "mid": 40_000, "small": 500}


def test_proportional_and_uniform():
    rates = task_rates(SIZES, "proportional")
    total = sum(SIZES.values())
    assert rates == pytest.approx({t: n / total for t, n in SIZES.items()})
    assert list(rates) == list(SIZES)
    assert task_rates(SIZES, "uniform") == pytest.approx({t: 1 / 3 for t in SIZES})


def test_temperature_with_cap_matches_formula():
    T, cap = 3.0, 100_000
    w = {t: min(n, cap) ** (1 / T) for t, n in SIZES.items()}
    expected = {t: v / sum(w.values()) for t, v in w.items()}
    assert task_rates(SIZES, "temperature", temperature=T, cap=cap) == pytest.approx(expected)
    # T = 1 without a cap is proportional; with a cap, T5's capped proportional
    assert task_rates(SIZES, "temperature", temperature=1.0) == pytest.approx(task_rates(SIZES))
    capped = task_rates(SIZES, "proportional", cap=cap)
    assert capped["big"] == pytest.approx(cap / (cap + 40_000 + 500))


def test_fixed_rates_and_errors():
    assert task_rates(SIZES, "fixed", rates={"big": 1, "mid": 1, "small": 2}) == pytest.approx(
        {"big": 0.25, "mid": 0.25, "small": 0.5})
    with pytest.raises(ValueError, match="missing for: mid, small"):
        task_rates(SIZES, "fixed", rates={"big": 1})
    with pytest.raises(ValueError, match="unknown sampling method 'temp'"):
        task_rates(SIZES, "temp")
    with pytest.raises(ValueError, match="temperature must be > 0"):
        task_rates(SIZES, "temperature", temperature=0)
    with pytest.raises(ValueError, match="all sampling weights are 0"):
        task_rates({"a": 0}, "proportional")
    assert rates_from_config(SIZES, {"method": "temperature", "temperature": 2}) == pytest.approx(
        task_rates(SIZES, "temperature", temperature=2))
    assert rates_from_config(SIZES, "uniform") == pytest.approx(task_rates(SIZES, "uniform"))
    with pytest.raises(ValueError, match="unknown sampling option"):
        rates_from_config(SIZES, {"method": "uniform", "temp": 2})


def test_sampler_deterministic_and_follows_rates():
    rates = {"a": 0.5, "b": 0.0, "c": 0.3, "d": 0.2}
    first = TaskSampler(rates, seed=7).sample(5000)
    assert np.array_equal(first, TaskSampler(rates, seed=7).sample(5000))
    assert not np.array_equal(first, TaskSampler(rates, seed=8).sample(5000))
    counts = np.bincount(first, minlength=4) / 5000
    assert counts[1] == 0  # a zero rate is never drawn
    np.testing.assert_allclose(counts, [0.5, 0.0, 0.3, 0.2], atol=0.03)


def test_sampler_resume_continues_the_sequence():
    rates = [0.2, 0.3, 0.5]
    full = TaskSampler(rates, seed=3).sample(3000)
    sampler = TaskSampler(rates, seed=3)
    head = [next(sampler) for _ in range(1234)]  # crosses a block boundary
    state = sampler.get_state()
    resumed = TaskSampler(rates, seed=3).set_state(dict(state))
    assert np.array_equal(np.r_[head, resumed.sample(3000 - 1234)], full)
    with pytest.raises(ValueError, match="seed 3"):
        TaskSampler(rates, seed=4).set_state(state)


def test_format_rates_table():
    rates = task_rates(SIZES, "uniform")
    table = format_rates(rates, SIZES, "uniform")
    assert table.splitlines()[0] == "sampling: uniform"
    assert "1,000,000" in table and "33.333%" in table
    assert len(table.splitlines()) == 2 + len(SIZES) and "size" in table.splitlines()[1]


def test_pinned_rate_holds_under_every_method():
    pins = {"small": 0.25}
    for method, kwargs in (("proportional", {}), ("temperature", {"temperature": 3.0}),
                           ("uniform", {})):
        rates = task_rates(SIZES, method, rates=pins, **kwargs)
        assert rates["small"] == pytest.approx(0.25)
        free = task_rates({t: n for t, n in SIZES.items() if t != "small"}, method, **kwargs)
        for t in ("big", "mid"):  # the rest shared by the method, in its proportions
            assert rates[t] == pytest.approx(0.75 * free[t])
        assert sum(rates.values()) == pytest.approx(1.0)
    drawn = TaskSampler(task_rates(SIZES, "temperature", rates=pins, temperature=2.0),
                        seed=0).sample(20000)
    assert np.mean(drawn == 2) == pytest.approx(0.25, abs=0.01)


def test_pin_errors_name_the_tasks():
    with pytest.raises(ValueError, match=r"pinned rates sum to 1.2 > 1: big: 0.7, mid: 0.5"):
        task_rates(SIZES, "uniform", rates={"big": 0.7, "mid": 0.5})
    with pytest.raises(ValueError, match="leaving nothing for small"):
        task_rates(SIZES, "proportional", rates={"big": 0.5, "mid": 0.5})
    with pytest.raises(ValueError, match="rate 'x' is not a number"):
        task_rates(SIZES, "uniform", rates={"big": "x"})
    # every task pinned: the pins are the mixture (normalised, as `fixed` does)
    assert task_rates(SIZES, "uniform", rates={"big": 0.2, "mid": 0.2, "small": 0.6}) == \
        pytest.approx({"big": 0.2, "mid": 0.2, "small": 0.6})


def test_format_rates_marks_pinned_and_what_was_counted():
    rates = task_rates(SIZES, "uniform", rates={"small": 0.5})
    table = format_rates(rates, SIZES, "uniform", pinned={"small"}, counted="questions")
    lines = table.splitlines()
    assert lines[1] == "sizes count questions" and "pinned" in lines[2]
    assert lines[-1].endswith("50.000% *") and not lines[4].endswith("*")
