"""`mtl tasks list` and `mtl tasks validate`, through cli.main and once as a process."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_registry import BROKEN, SPECS, fake_formats  # noqa: F401 (autouse fixture)

from mtl_framework import cli
from mtl_framework.config import registry

VALID = SPECS / "valid"


@pytest.fixture
def builtin_is_valid_fixture(monkeypatch):
    monkeypatch.setattr(registry, "BUILTIN_SPECS", VALID)


def test_validate_prints_each_error_sorted_and_exits_2(capsys):
    """Like every refusal (issue 24): one `error:` line per problem on stderr, exit 2."""
    path = BROKEN / "mistyped.yaml"
    assert cli.main(["tasks", "validate", str(path), str(BROKEN / "missing_key.yaml")]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    lines = [line[len("error: "):] for line in out.err.splitlines()]
    assert len(lines) == 7 and all(line.startswith("error: ") for line in out.err.splitlines())
    assert lines[0] == f"{BROKEN / 'missing_key.yaml'}:1: the top level: missing required key 'format'"
    assert lines[2] == (f"{path}:10: task 'quoted_length': labels must be a list of strings; "
                        "0 is not (quote it: YAML read it as a number)")
    assert [line.split(":")[:2] for line in lines] == sorted(
        (line.split(":")[:2] for line in lines), key=lambda p: (p[0], int(p[1])))


def test_validate_valid_specs_exits_0_with_a_summary(capsys):
    assert cli.main(["tasks", "validate", str(VALID)]) == 0
    assert capsys.readouterr().out == "ok: 2 spec files, 2 datasets, 3 tasks\n"


def test_validate_defaults_to_the_builtin_specs(capsys, builtin_is_valid_fixture):
    assert cli.main(["tasks", "validate"]) == 0
    assert capsys.readouterr().out.startswith("ok: 2 spec files")


def test_list_json_shape(capsys, builtin_is_valid_fixture):
    assert cli.main(["tasks", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["name"] for row in rows] == ["demo_match", "demo_topic", "demo_span"]
    keys = {"name", "dataset", "family", "format", "labels", "metric", "max_length", "rate", "loss_weight"}
    assert all(keys <= set(row) for row in rows)
    assert rows[1] == {
        "name": "demo_topic", "dataset": "demo_pairs", "family": "classification",
        "format": "delimited", "labels": ["sports", "finance", "tech"], "label_file": "demo_topics.txt",
        "multi_label": False, "metric": "macro_f1", "max_length": 128, "rate": None, "loss_weight": 2.0,
        "verified": "",
    }
    assert rows[2]["labels"] is None and rows[2]["family"] == "mrc_span"


def test_list_table_and_extra_spec_dirs(capsys, builtin_is_valid_fixture, tmp_path):
    extra = tmp_path / "extra.yaml"
    extra.write_text("dataset: extra\nformat: squad\nfiles: {train: e.json}\ntasks:\n"
                     "  - name: extra_span\n    type: mrc_span\n    max_length: 64\n    metric: em_f1\n",
                     encoding="utf-8")
    assert cli.main(["tasks", "list", "--specs", str(extra)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["name", "dataset", "family", "#labels", "metric", "verified"]
    assert out[2].split() == ["demo_topic", "demo_pairs", "classification", "3", "macro_f1", "-"]
    assert out[4].split() == ["extra_span", "extra", "mrc_span", "-", "em_f1", "-"]
    assert out[-2] == "4 tasks in 3 datasets: matching 1, classification 1, mrc_span 2"
    assert out[-1] == "datasets by what their spec was checked against: not stated 3"


def test_list_with_invalid_specs_prints_the_errors(capsys, builtin_is_valid_fixture):
    assert cli.main(["tasks", "list", "--specs", str(SPECS / "duplicates")]) == 2
    out = capsys.readouterr().err.splitlines()
    assert len(out) == 4 and all(line.startswith("error: ") and "duplicate" in line for line in out)


def test_mtl_console_script_exit_codes():
    mtl = Path(sys.executable).parent / "mtl"
    if not mtl.exists():
        pytest.skip(f"console script not installed next to {sys.executable}")
    broken = subprocess.run([str(mtl), "tasks", "validate", str(BROKEN / "syntax_error.yaml")],
                            capture_output=True, text=True, timeout=60)
    assert broken.returncode == 2
    assert broken.stderr.startswith(f"error: {BROKEN / 'syntax_error.yaml'}:11: YAML syntax error:")
    valid = subprocess.run([str(mtl), "tasks", "validate", str(VALID)],
                           capture_output=True, text=True, timeout=60)
    assert (valid.returncode, valid.stdout) == (0, "ok: 2 spec files, 2 datasets, 3 tasks\n")


def test_registry_and_tasks_command_do_not_import_tensorflow():
    code = ("import sys, mtl_framework.cli.tasks as t; t.reg.load_paths([sys.argv[1]]); "
            "bad = [m for m in ('tensorflow', 'keras') if m in sys.modules]; "
            "sys.exit('imported ' + ', '.join(bad) if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code, str(VALID)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
