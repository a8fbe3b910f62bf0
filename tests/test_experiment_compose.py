"""Experiments without copy-paste (issue 22, points 4-5), no TensorFlow: Experiment.from_dict
checked exactly as a file, `extends:` chains, `--set` overrides and `mtl train --print-config`."""
import os
from pathlib import Path

import pytest
import yaml

from mtl_framework import cli
from mtl_framework.config.experiment import Experiment, ExperimentError, load_experiment

REPO = Path(__file__).resolve().parents[1]
DEMO_DATA = REPO / "experiments" / "demo" / "data"
BASE = {"data_root": str(DEMO_DATA), "backbone": {"num_layers": 1, "hidden_size": 32,
                                                  "num_heads": 2, "dropout": 0.1},
        "tasks": ["tnews", "afqmc"], "batch_size": 4, "steps": 2,
        "optimizer": {"name": "adamw", "lr": 0.001, "weight_decay": 0.01}}


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if isinstance(text, str) else yaml.safe_dump(text, sort_keys=False),
                    encoding="utf-8")
    return path


def line_of(path, key):
    """1-based line of the first line of `path` starting with `key` (read independently)."""
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if text.strip().startswith(key):
            return number
    raise AssertionError(f"{key} not in {path}")


def problems(call):
    with pytest.raises(ExperimentError) as error:
        call()
    return str(error.value).splitlines()


# --- Experiment.from_dict: the file's checks, the key named --------------------------------

BAD = {**BASE, "optimizer": {"name": "adamw", "lr": "fast"}, "keep_checkpoints": 0,
       "tasks": ["tnews", {"name": "afqmc", "rate": 2}], "stepz": 3}


def test_from_dict_reports_what_the_file_reports(tmp_path):
    path = write(tmp_path / "bad.yaml", BAD)
    from_file = problems(lambda: Experiment.from_yaml(str(path)))
    from_dict = problems(lambda: Experiment.from_dict(BAD))
    assert len(from_file) == len(from_dict) == 4
    # the same messages; the file's name `file:line`, the dict's `Experiment.from_dict KEY`
    lines = {key: line_of(path, key) for key in ("lr:", "keep_checkpoints:", "stepz:")}
    assert f"{path}:{lines['lr:']}: optimizer.lr must be a number >= 0, got 'fast'" in from_file
    assert "Experiment.from_dict optimizer.lr: optimizer.lr must be a number >= 0, got 'fast'" \
        in from_dict
    assert f"{path}:{lines['keep_checkpoints:']}: keep_checkpoints must be >= 1, got 0" in from_file
    assert "Experiment.from_dict keep_checkpoints: keep_checkpoints must be >= 1, got 0" in from_dict
    assert any(p.startswith("Experiment.from_dict tasks.1.rate: task 'afqmc': rate") for p in from_dict)
    assert any(p.startswith("Experiment.from_dict stepz: unknown key 'stepz' (did you mean 'steps'?)")
               for p in from_dict)
    bodies = lambda found, prefix: sorted(p.split(": ", 1)[1] for p in found)  # noqa: E731
    assert bodies(from_file, str(path)) == bodies(from_dict, "Experiment.from_dict")


def test_from_dict_paths_start_at_its_folder(tmp_path):
    experiment = Experiment.from_dict({**BASE, "data_root": "data", "cache_dir": "c"},
                                      folder=str(tmp_path))
    assert experiment.resolve_path(experiment.data_root) == str(tmp_path / "data")
    assert experiment.stem == "experiment"
    assert Experiment.from_dict({**BASE, "name": "mine"}).stem == "mine"


# --- extends ------------------------------------------------------------------------------

def test_extends_merges_mappings_key_by_key_and_replaces_the_rest(tmp_path):
    base = write(tmp_path / "base.yaml", BASE)
    child = write(tmp_path / "child.yaml", "extends: base.yaml\nbackbone: {dropout: 0.2}\n"
                                           "tasks: [tnews]\noptimizer: {lr: 0.0005}\n")
    experiment = load_experiment(str(child))
    assert experiment.backbone == {**BASE["backbone"], "dropout": 0.2}
    assert experiment.raw["optimizer"] == {"name": "adamw", "lr": 0.0005, "weight_decay": 0.01}
    assert experiment.raw["tasks"] == ["tnews"]  # a list is replaced whole
    assert "extends" not in experiment.raw
    # each key's line is in the file that gave it last
    assert experiment.where("optimizer", "lr") == f"{child}:4"
    assert experiment.where("optimizer", "weight_decay") == \
        f"{base}:{line_of(base, 'weight_decay:')}"
    assert experiment.where("batch_size") == f"{base}:{line_of(base, 'batch_size:')}"


def test_a_pathlib_path_loads_as_its_string_does(tmp_path):
    """The Python API takes a pathlib.Path (was "extends must be the path ..." on one)."""
    write(tmp_path / "base.yaml", BASE)
    child = write(tmp_path / "child.yaml", "extends: base.yaml\ntasks: [tnews]\n")
    assert load_experiment(child).raw == load_experiment(str(child)).raw


def test_a_chain_of_three_and_errors_naming_the_file_that_wrote_the_value(tmp_path):
    write(tmp_path / "a.yaml", {**BASE, "steps": "many"})
    write(tmp_path / "b.yaml", "extends: a.yaml\nbatch_size: 8\n")
    c = write(tmp_path / "c.yaml", "extends: b.yaml\nseed: 3\n")
    (message,) = problems(lambda: load_experiment(str(c)))
    a = tmp_path / "a.yaml"
    assert message == f"{a}:{line_of(a, 'steps:')}: steps must be an integer, got 'many'"
    fixed = write(tmp_path / "d.yaml", "extends: c.yaml\nsteps: 7\n")
    experiment = load_experiment(str(fixed))
    assert (experiment.steps, experiment.batch_size, experiment.seed) == (7, 8, 3)


def test_paths_in_a_base_elsewhere_keep_meaning_what_they_meant(tmp_path):
    write(tmp_path / "shared" / "base.yaml", {**BASE, "data_root": "../data", "cache_dir": "cache"})
    child = write(tmp_path / "exp" / "deep" / "x.yaml", "extends: ../../shared/base.yaml\n")
    experiment = load_experiment(str(child))
    assert experiment.resolve_path(experiment.data_root) == str(tmp_path / "data")
    assert experiment.resolve_path(experiment.cache_dir) == str(tmp_path / "shared" / "cache")


def test_a_cycle_and_a_missing_base_are_one_line(tmp_path):
    write(tmp_path / "a.yaml", "extends: b.yaml\nsteps: 2\n")
    write(tmp_path / "b.yaml", "steps: 3\nextends: a.yaml\n")
    (message,) = problems(lambda: load_experiment(str(tmp_path / "a.yaml")))
    assert message.startswith(f"{tmp_path / 'b.yaml'}:2: extends a.yaml: a cycle (")
    assert "a.yaml -> " in message and "b.yaml -> " in message
    write(tmp_path / "self.yaml", "extends: self.yaml\n")
    (message,) = problems(lambda: load_experiment(str(tmp_path / "self.yaml")))
    assert "a cycle" in message
    write(tmp_path / "lost.yaml", "tasks: [tnews]\nextends: nowhere.yaml\n")
    (message,) = problems(lambda: load_experiment(str(tmp_path / "lost.yaml")))
    assert message.startswith(f"{tmp_path / 'lost.yaml'}:2: extends nowhere.yaml: no such file")


def test_stage2_c_is_stage2_b_with_balancing_none():
    study = REPO / "experiments" / "pretraining_value"
    b = load_experiment(str(study / "stage2_B.yaml")).raw
    c = load_experiment(str(study / "stage2_C.yaml")).raw
    assert {k for k in set(b) | set(c) if b.get(k) != c.get(k)} == {"name", "balancing"}
    assert (b["balancing"], c["balancing"]) == ("gradient_norm", "none")
    assert b == yaml.safe_load((study / "stage2_B.yaml").read_text(encoding="utf-8"))


# --- --set --------------------------------------------------------------------------------

def test_set_values_are_yaml_and_applied_before_the_checks(tmp_path):
    path = write(tmp_path / "x.yaml", BASE)
    experiment = load_experiment(str(path), ["optimizer.lr=1e-4", "steps=500",
                                             "backbone.exact_padding=true", "tasks=[tnews]",
                                             "tasks.0=afqmc", "keep_best.metric=afqmc",
                                             "eval_every=5"])
    assert experiment.optimizer["lr"] == pytest.approx(1e-4)
    assert (experiment.steps, experiment.backbone["exact_padding"]) == (500, True)
    assert experiment.raw["tasks"] == ["afqmc"]
    assert experiment.raw["keep_best"] == {"metric": "afqmc"}  # mapping created
    assert experiment.where("steps") == "--set steps=500"
    assert experiment.where("optimizer", "weight_decay") == f"{path}:{line_of(path, 'weight_decay:')}"


@pytest.mark.parametrize("override, message", [
    ("optimizer.lr=fast", "--set optimizer.lr=fast: optimizer.lr must be a number >= 0, got 'fast'"),
    ("steps", "--set steps: expected KEY=VALUE with a dotted KEY, e.g. --set optimizer.lr=1e-4"),
    ("tasks.5.rate=0.1", "--set tasks.5.rate=0.1: tasks is a list of 2: address an item by its "
                         "index 0..1"),
    ("batch_size.x=1", "--set batch_size.x=1: batch_size is 4, not a mapping whose keys could be set"),
    ("stepz=3", "--set stepz=3: unknown key 'stepz' (did you mean 'steps'?)"),
    ("steps=[1", "--set steps=[1: the value is not YAML"),
])
def test_a_bad_set_names_itself(tmp_path, override, message):
    path = write(tmp_path / "x.yaml", BASE)
    (found,) = problems(lambda: load_experiment(str(path), [override]))
    assert found.startswith(message)


def test_keep_best_and_patience_are_checked(tmp_path):
    path = write(tmp_path / "x.yaml", {**BASE, "keep_best": {"metric": "cmnli", "mode": "up"},
                                       "patience": 0})
    found = problems(lambda: load_experiment(str(path)))
    assert any("keep_best.metric must be aggregate or one of the tasks (tnews, afqmc), got 'cmnli'"
               in p for p in found)
    assert any("keep_best.mode must be max or min, got 'up'" in p for p in found)
    assert any("patience must be >= 1, got 0" in p for p in found)
    assert any(p.endswith("keep_best watches dev evaluations: set eval_every > 0 (updates "
                          "between evaluations)") for p in found)


# --- mtl train --print-config -------------------------------------------------------------

def listing(folder):
    return sorted((str(p.relative_to(folder)), p.stat().st_mtime_ns) for p in folder.rglob("*"))


def test_print_config_shows_the_resolved_experiment_and_writes_nothing(tmp_path, capsys,
                                                                      monkeypatch):
    write(tmp_path / "base.yaml", {**BASE, "data_root": str(DEMO_DATA)})
    child = write(tmp_path / "x.yaml", "extends: base.yaml\ncache_dir: cache\nseed: 4\n")
    monkeypatch.chdir(tmp_path)
    before = listing(tmp_path)
    assert cli.main(["train", str(child), "--print-config", "--set", "optimizer.lr=2e-4"]) == 0
    assert listing(tmp_path) == before  # no run directory, no cache
    out = capsys.readouterr().out
    shown = yaml.safe_load(out)
    assert shown["seed"] == 4 and shown["optimizer"]["lr"] == pytest.approx(2e-4)
    assert shown["cache_dir"] == str(tmp_path / "cache") and "extends" not in shown
    assert "#   eval_every: 0" in out  # the defaults it leaves unset, as comments


def test_print_config_refuses_a_bad_set_in_one_line(tmp_path, capsys):
    child = write(tmp_path / "x.yaml", BASE)
    assert cli.main(["train", str(child), "--print-config", "--set", "optimizer.lr=fast"]) == 2
    err = capsys.readouterr().err
    assert err == "error: --set optimizer.lr=fast: optimizer.lr must be a number >= 0, got 'fast'\n"
    assert sorted(os.listdir(tmp_path)) == ["x.yaml"]


def test_the_pretraining_value_bench_writes_stage2_c_resolved(tmp_path, monkeypatch):
    """bench/pretraining_value.py rewrites each stage file's paths into its work folder: the
    file it writes for arm C is arm B's with balancing none, without `extends`."""
    monkeypatch.syspath_prepend(str(REPO))  # bench/ is not installed: run from the checkout
    from bench import pretraining_value

    written = {}
    for arm in ("B", "C"):
        path = pretraining_value.experiment(f"stage2_{arm}", tmp_path, tmp_path / "data", {})
        written[arm] = yaml.safe_load(path.read_text(encoding="utf-8"))
    b, c = written["B"], written["C"]
    assert "extends" not in c and c["backbone"]["init"] == str(tmp_path / "stage1" / "export")
    assert {k for k in set(b) | set(c) if b.get(k) != c.get(k)} == {"name", "balancing"}
    assert load_experiment(str(tmp_path / "experiments" / "stage2_C.yaml")).raw["balancing"] == "none"
