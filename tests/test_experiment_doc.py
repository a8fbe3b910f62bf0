"""docs/experiment.md is the experiment schema (issue 34): every key of each table is one
the checker accepts and every key it accepts is in its table, with the type and default
the code uses; the path table is the keys resolved against the file; and the worked
example (one's own data folder beside built-in tasks) passes every check `mtl train`
makes before writing."""
import re
import shutil
from pathlib import Path

import pytest
import yaml

from mtl_framework import cli
from mtl_framework.config import experiment as E
from mtl_framework.mixing import balancing, mixture

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "experiment.md"
TYPES = {"str": str, "int": int, "list": list, "mapping": dict, "number": float, "bool": bool}


def section(title):
    text = DOC.read_text(encoding="utf-8")
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def table(title):
    """{key: [cells after the key]} of the section's table."""
    rows = {}
    for line in section(title).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| `") and cells:
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def test_top_level_keys_types_and_defaults_are_the_schemas():
    rows = table("Top-level keys")
    assert set(rows) == set(E.KEYS) | {E.EXTENDS}
    for key, kind in E.KEYS.items():
        kinds = kind if isinstance(kind, tuple) else (kind,)
        assert tuple(TYPES[t] for t in rows[key][0].split(" or ")) == kinds, key
        if key in E.DEFAULTS:
            assert yaml.safe_load(rows[key][1].strip("`")) == E.DEFAULTS[key], key
        else:
            assert not rows[key][1].startswith("`"), f"{key}: a default the code does not have"


def test_nested_tables_are_the_schemas_keys():
    assert set(table("`tasks:` entries")) == E.MLM_ENTRY_KEYS
    assert set(table("`backbone:`")) == E.BACKBONE_KEYS
    assert set(table("`optimizer:`")) == set(E.SCHEDULE_KEYS) | {
        key for keys in E.OPTIMIZER_KEYS.values() for key in keys}
    assert tuple(table("`sampling:` as a mapping")) == E.SAMPLING_KEYS
    keep_best = table("`keep_best:`")
    assert {key: cells[1].strip("`") for key, cells in keep_best.items()} == E.KEEP_BEST_KEYS
    # the choices the top-level rows list are the code's
    rows = table("Top-level keys")
    assert re.findall(r"`(\w+)`", rows["sampling"][2])[:len(mixture.METHODS)] == list(mixture.METHODS)
    assert re.findall(r"`(\w+)`", rows["balancing"][2])[:len(balancing.NAMES)] == list(balancing.NAMES)
    assert re.findall(r"`(\w+)`", rows["precision"][2]) == list(E.PRECISION)
    assert re.findall(r"`(\w+)`", rows["distribution"][2])[:3] == list(E.DISTRIBUTION)


def test_the_path_table_is_the_keys_resolved_against_the_file():
    documented = set(table("How paths resolve"))
    resolved = {".".join(p).replace(".*", "[]") for p in E.PATH_VALUES}
    assert documented == resolved


@pytest.fixture
def worked_example(tmp_path):
    """The doc's two files, `/home/me` standing for tmp_path, with the TNEWS demo sample as
    the data root's built-in task and two-row TSVs as one's own data."""
    text = section("A worked example: your own data beside the built-in tasks")
    spec, experiment = re.findall(r"```yaml\n(.*?)```", text, re.S)
    home = str(tmp_path)
    (tmp_path / "my_data").mkdir()
    for split in ("train", "dev"):
        (tmp_path / "my_data" / f"{split}.tsv").write_text("很好\tpos\n很差\tneg\n", encoding="utf-8")
    shutil.copytree(ROOT / "experiments" / "demo" / "data" / "tnews", tmp_path / "shared" / "data" / "tnews")
    (tmp_path / "project" / "my_specs").mkdir(parents=True)
    (tmp_path / "project" / "my_specs" / "mydata.yaml").write_text(spec.replace("/home/me", home),
                                                                   encoding="utf-8")
    path = tmp_path / "project" / "mixed.yaml"
    path.write_text(experiment.replace("/home/me", home), encoding="utf-8")
    return path


def test_worked_example_passes_every_check_mtl_train_makes(worked_example, tmp_path, capsys,
                                                            monkeypatch):
    from mtl_framework.plan import plan_run

    monkeypatch.chdir(tmp_path)  # not the project folder: paths resolve against the file
    plan = plan_run(str(worked_example), output=str(tmp_path / "runs" / "mixed"))
    assert [t.name for t in plan.tasks] == ["mydata", "tnews"]
    [mydata] = [t for t in plan.tasks if t.name == "mydata"]
    assert mydata.files["train"] == str(tmp_path / "my_data" / "train.tsv")
    assert plan.data_root == str(tmp_path / "shared" / "data")
    capsys.readouterr()
    assert cli.main(["train", str(worked_example), "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["task_specs"] == [str(tmp_path / "project" / "my_specs")]
    assert not (tmp_path / "runs").exists()
