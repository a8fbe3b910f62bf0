"""The version in one place, `mtl --version`, provenance from the installed metadata, and
`mtl report` without the [plots] extra."""
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest

import mtl_framework
from mtl_framework import cli
from mtl_framework.rundir.provenance import describe, provenance

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def fresh_provenance():
    """provenance() is computed once per process; the checkout may have moved since."""
    from mtl_framework.rundir import provenance as module

    module._provenance.cache_clear()


def git_head():
    """HEAD of this checkout, asked of git directly; None outside a checkout."""
    if not (REPO / ".git").exists():
        return None
    done = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                          text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def test_setup_reads_the_one_version():
    setup = (REPO / "setup.py").read_text(encoding="utf-8")
    assert mtl_framework.__version__ not in setup  # not written twice
    done = subprocess.run([sys.executable, "setup.py", "--version"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == mtl_framework.__version__


def test_provenance_is_the_installed_versions_and_the_checkout():
    import keras
    import tensorflow as tf
    import tokenizers

    record = provenance()
    assert record["mtl_framework"] == mtl_framework.__version__
    assert (record["tensorflow"], record["keras"], record["tokenizers"]) == \
        (tf.__version__, keras.__version__, tokenizers.__version__)
    assert record["python"] == "%d.%d.%d" % sys.version_info[:3]
    assert record["commit"] == git_head()
    assert (record["dirty"] is None) == (record["commit"] is None)
    assert record["keras"] == importlib.metadata.version("keras")


def test_version_option_prints_one_line(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    record = provenance()
    assert out == describe(record) + "\n"
    head = git_head()
    assert out.startswith(f"mtl_framework {mtl_framework.__version__} (")
    assert (f"commit {head[:12]}" in out) if head else ("commit" not in out)
    assert f"TensorFlow {record['tensorflow']}, Keras {record['keras']}, " \
           f"tokenizers {record['tokenizers']}, Python {record['python']})" in out


def test_report_without_matplotlib_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 1.0, "tasks": {}}) + "\n")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now fails
    monkeypatch.delitem(sys.modules, "mtl_framework.plots", raising=False)
    assert cli.main(["report", str(run)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: plots need matplotlib, which is not installed: pip install mtl_framework[plots]"]
    assert sorted(p.name for p in run.iterdir()) == ["metrics.jsonl"]
