"""`mtl report`: plots from a hand-written metrics.jsonl (no training), and its errors."""
import json

import pytest

from mtl_framework import cli
from mtl_framework.report import ReportError, smooth, write_report

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


def test_smooth_is_debiased_and_skips_nan():
    assert smooth([2.0, 2.0]) == pytest.approx([2.0, 2.0])
    values = smooth([1.0, float("nan"), 3.0], weight=0.5)
    assert values[0] == pytest.approx(1.0) and values[1] == pytest.approx(1.0)
    assert values[2] == pytest.approx((0.25 * 1 + 0.5 * 3) / 0.75)
