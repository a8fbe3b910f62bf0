"""`mtl report`: plots from a hand-written metrics.jsonl (no training), and its errors."""
import json

import numpy as np
import pytest

from mtl_framework import cli
from mtl_framework.plots import ReportError, smooth, write_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TRAINING_PLOTS = {"loss.png", "gradient_norm.png", "sampling.png", "schedule.png"}


def update(step, tasks, loss=1.0):
    return {"step": step, "time": 1700000000.0 + step, "loss": loss, "alpha": min(1.0, step / 4),
            "lr": 1e-3 * min(1.0, step / 3), "skipped": {},
            "tasks": {t: {"loss": 2.0 / step + i, "gradient_norm": 1.0 + i, "count": 1 + i % 2}
                      for i, t in enumerate(tasks)}}


def write_lines(path, lines):
    path.write_text("".join(line if isinstance(line, str) else json.dumps(line) + "\n"
                            for line in lines), encoding="utf-8")


@pytest.fixture
def run_dir(tmp_path):
    # tnews misses some updates, cluener's loss is NaN once (a skipped micro-batch),
    # and steps 3-4 appear twice, as after a resume from the step-2 checkpoint.
    lines = [update(1, ["tnews", "afqmc"]), update(2, ["afqmc", "cluener"]),
             update(3, ["tnews"]), update(4, ["tnews", "afqmc"]),
             update(3, ["tnews", "cluener"]), update(4, ["afqmc"]), update(5, ["tnews", "cluener"])]
    lines[-1]["tasks"]["cluener"]["loss"] = float("nan")  # json writes NaN, as the trainer does
    write_lines(tmp_path / "metrics.jsonl", lines)
    return tmp_path


def assert_png(path):
    data = path.read_bytes()
    assert len(data) > 1000 and data.startswith(PNG_SIGNATURE), path


def test_training_plots_without_evaluations(run_dir, capsys):
    assert cli.main(["report", str(run_dir)]) == 0
    plots = run_dir / "plots"
    assert {p.name for p in plots.iterdir()} == TRAINING_PLOTS
    for name in TRAINING_PLOTS:
        assert_png(plots / name)
    assert sorted(capsys.readouterr().out.split()) == sorted(str(plots / n) for n in TRAINING_PLOTS)


def test_dev_scores_plotted_when_evaluations_exist(run_dir, tmp_path):
    evaluations = [{"step": step, "split": "dev", "aggregate": 0.1 * step,
                    "tasks": {"tnews": {"metric": "accuracy", "score": 0.2 * step},
                              "cluener": {"metric": "f1", "score": 0.1 * step, "precision": 0.5}}}
                   for step in (2, 4)]
    write_lines(run_dir / "evaluations.jsonl", evaluations)
    output = tmp_path / "elsewhere"
    paths = write_report(str(run_dir), str(output))
    assert {p.name for p in output.iterdir()} == TRAINING_PLOTS | {"dev_scores.png"}
    assert sorted(paths) == sorted(str(output / p.name) for p in output.iterdir())
    for path in output.iterdir():
        assert_png(path)
    assert not (run_dir / "plots").exists()


def test_empty_evaluations_file_is_not_plotted(run_dir):
    (run_dir / "evaluations.jsonl").write_text("", encoding="utf-8")
    write_report(str(run_dir))
    assert {p.name for p in (run_dir / "plots").iterdir()} == TRAINING_PLOTS


def test_missing_metrics_names_the_file(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert str(tmp_path / "metrics.jsonl") in error and "not found" in error


@pytest.mark.parametrize("bad_line,message", [
    ('{"step": 3, "loss": 1.0, "tasks": {"tnews": {"loss": 1.0, "gradi', "not valid JSON"),
    ('{"step": "3", "tasks": {}}\n', "'step' must be an integer"),
    ('{"step": 3, "tasks": {"tnews": {"loss": "high", "gradient_norm": 1}}}\n', "tasks.tnews"),
    ('[1, 2]\n', "JSON object"),
])
def test_malformed_line_names_file_and_line(tmp_path, bad_line, message):
    write_lines(tmp_path / "metrics.jsonl", [update(1, ["tnews"]), "\n", update(2, ["tnews"]), bad_line])
    with pytest.raises(ReportError) as error:
        write_report(str(tmp_path))
    assert str(error.value).startswith(f"{tmp_path / 'metrics.jsonl'}:4: ")
    assert message in str(error.value)


def test_malformed_evaluation_line_names_file_and_line(run_dir):
    write_lines(run_dir / "evaluations.jsonl", [{"step": 2, "split": "dev", "aggregate": 0.5,
                                                 "tasks": {"tnews": {"metric": "accuracy"}}}])
    with pytest.raises(ReportError, match=r"evaluations\.jsonl:1: tasks\.tnews must have a numeric 'score'"):
        write_report(str(run_dir))


def test_metrics_without_updates_is_an_error(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("\n", encoding="utf-8")
    with pytest.raises(ReportError, match="no update recorded yet"):
        write_report(str(tmp_path))


def test_smooth_is_exact_on_lines_and_skips_nan():
    steps = [1, 2, 5, 9, 10, 30]
    line = [3.0 + 0.5 * s for s in steps]
    assert smooth(steps, line) == pytest.approx(line, abs=1e-9)  # a trend has no lag
    values = list(line)
    values[2] = float("nan")  # a skipped micro-batch: left out, its step still gets the trend
    assert smooth(steps, values) == pytest.approx(line, abs=1e-9)
    assert smooth([4], [2.0], log=True) == pytest.approx([2.0])
    assert all(np.isnan(smooth([1, 2], [float("nan"), None])))


def test_smooth_follows_a_falling_loss_drawn_at_unequal_steps():
    """The demo's cluener/duie_spo loss: falls 20x early, drawn at irregular steps, noisy.
    The smoothed curve must sit in the middle of the raw points (on the log axis it is
    drawn on), where TensorBoard's EMA over draws sat well above them."""
    rng = np.random.default_rng(0)
    steps = np.sort(rng.choice(np.arange(1, 301), size=70, replace=False))
    trend = 60.0 * np.exp(-steps / 25.0) + 3.0
    raw = trend * np.exp(rng.normal(0.0, 0.3, size=len(steps)))
    smoothed = np.array(smooth(steps.tolist(), raw.tolist(), log=True))
    assert abs(np.median(np.log(raw / smoothed))) < 0.05
    assert np.median(np.abs(np.log(smoothed / trend))) < 0.1
    early = steps < 60  # where the loss falls fastest
    assert abs(np.median(np.log(raw[early] / smoothed[early]))) < 0.1
    ema, average, total = [], 0.0, 0.0  # what the report drew before: above the points
    for value in raw:
        average, total = 0.9 * average + 0.1 * value, 0.9 * total + 0.1
        ema.append(average / total)
    assert np.median(np.log(raw[early] / np.array(ema)[early])) < -0.3




@pytest.fixture
def figures(monkeypatch):
    """The figures the report draws, kept open for inspection instead of only saved."""
    from mtl_framework import plots as report

    kept = []
    original = report.save

    def keep(figure, path):
        kept.append(figure)
        figure.savefig(path, dpi=40)
        return path

    monkeypatch.setattr(report, "save", keep)
    yield kept
    monkeypatch.setattr(report, "save", original)


def test_dev_scores_bounded_axes_and_baselines(run_dir, figures):
    evaluations = [{"step": step, "split": "dev", "aggregate": 0.3,
                    "tasks": {"tnews": {"metric": "accuracy", "score": 0.5 + 0.001 * step,
                                        "baseline": 0.16},
                              "stsb": {"metric": "spearman", "score": 0.2, "baseline": 0.0}}}
                   for step in (2, 4)]
    write_lines(run_dir / "evaluations.jsonl", evaluations)
    write_report(str(run_dir))
    axes = {axis.get_title(): axis for axis in figures[-1].axes if axis.get_visible()}
    tnews, stsb = axes["tnews (accuracy)"], axes["stsb (spearman)"]
    # a 0.002 change stays a flat line on 0-1, not a cliff on an auto-scaled axis
    assert tnews.get_ylim() == (0.0, 1.0) and stsb.get_ylim() == (-1.0, 1.0)
    assert axes["aggregate"].get_ylim() != (0.0, 1.0)  # spearman is not in 0-1
    baseline = [line for line in tnews.get_lines() if line.get_label() == "majority class"]
    assert len(baseline) == 1 and set(baseline[0].get_ydata()) == {0.16}


def test_benchmark_plot_bars_and_intervals(tmp_path, figures):
    from mtl_framework.plots import plot_benchmark

    results = {
        "seeds": [0, 1],
        "exports": [{"name": "a"}, {"name": "b"}],
        "tasks": [{"name": "tnews", "metric": "accuracy", "baseline": 0.1},
                  {"name": "ner", "metric": "span_f1", "baseline": 0.0}],
        "summary": [{"export": e, "task": t, "mean": m, "ci95": [m - 0.05, m + 0.05]}
                    for e, t, m in (("a", "tnews", 0.5), ("a", "ner", 0.3),
                                    ("b", "tnews", 0.4), ("b", "ner", 0.2))],
        "suite_mean": [{"export": "a", "mean": 0.4, "ci95": None},
                       {"export": "b", "mean": 0.3, "ci95": [0.2, 0.4]}],
    }
    plot_benchmark(results, str(tmp_path / "results.png"))
    (axis,) = figures[-1].axes
    heights = [round(p.get_height(), 6) for p in axis.patches]
    assert heights == [0.5, 0.3, 0.4, 0.4, 0.2, 0.3]  # export a's bars, then b's
    assert axis.get_ylim() == (0.0, 1.0)
    assert [t.get_text() for t in axis.get_xticklabels()] == ["tnews\n(accuracy)",
                                                              "ner\n(span_f1)", "mean"]
    assert (tmp_path / "results.png").read_bytes().startswith(PNG_SIGNATURE)
