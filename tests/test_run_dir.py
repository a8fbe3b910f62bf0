"""run_dir.py: variable names, checkpoints written and read back, the format-1 fixture
(a run written by the code before run_dir.py) resumed, exported and evaluated, and no
import cycle in the package."""
import ast
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from mtl_framework.cli import main as mtl
from mtl_framework.rundir import RunDir, records
from mtl_framework.rundir import checkpoint as ckpt
from mtl_framework.rundir import run_dir as layout
from mtl_framework.step.variable_names import layer_variable_names

REPO = Path(__file__).resolve().parents[1]
FORMAT1 = REPO / "tests" / "fixtures" / "run_format1"
PACKAGES = ("mtl_framework", "data_adapters")


# --- no import cycle ------------------------------------------------------------------------

def module_imports():
    """{module: {package modules it imports}}, imports inside functions included (a lazy
    import still ties the modules together)."""
    modules = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                # `from pkg import sub` imports the submodule when there is one
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules
                           else node.module for a in node.names]
            else:
                continue
            edges.update(t for t in targets if t in modules and t != name)
        graph[name] = edges
    return graph


def find_cycle(graph):
    """One import cycle as a list of modules, or None (depth-first search)."""
    state, stack = {}, []

    def visit(module):
        state[module] = "open"
        stack.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                return stack[stack.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        state[module] = "done"
        stack.pop()
        return None

    for module in sorted(graph):
        if module not in state:
            cycle = visit(module)
            if cycle:
                return cycle
    return None


def test_find_cycle_finds_one_and_only_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_package_has_no_import_cycle():
    graph = module_imports()
    assert {"mtl_framework.loop.run", "mtl_framework.saving.writer", "mtl_framework.evaluation.dev",
            "mtl_framework.rundir.run_dir"} <= set(graph)
    assert "mtl_framework.rundir" in graph["mtl_framework.saving.writer"]  # the parser sees imports
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_top_level_rooms_have_no_cycle():
    """The package's top-level modules and sub-packages (config/, prepare/, step/, ...)
    import each other without a cycle: the stages read bottom to top (docs/architecture.md)."""
    rooms = {}
    for module, imported in module_imports().items():
        if module.startswith("mtl_framework."):
            room = ".".join(module.split(".")[:2])
            rooms.setdefault(room, set()).update(
                ".".join(t.split(".")[:2]) for t in imported if t.startswith("mtl_framework."))
    graph = {room: (targets - {room}) & set(rooms) for room, targets in rooms.items()}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle between top-level rooms: " + " -> ".join(cycle)
    # 28 rooms since embedding/, transfer/, files.py and plots.py left loop/, evaluation/ and
    # rundir/, and sentence_encoder/ (the embedding's settings and model) left families/
    # (issue 50): a new one should be as deliberate
    assert len(graph) <= 28, sorted(graph)


# --- names, write, read ---------------------------------------------------------------------

def test_names_do_not_depend_on_what_else_the_process_built():
    from mtl_framework import RoFormerV2Backbone

    config = dict(vocab_size=50, num_layers=1, hidden_size=8, num_heads=2, intermediate_size=16,
                  dropout=0.1)
    first, second = RoFormerV2Backbone(**config), RoFormerV2Backbone(**config)
    first.build(), second.build()
    assert first.name != second.name  # Keras numbered the second one
    names = list(layer_variable_names(first, "backbone"))
    assert names == list(layer_variable_names(second, "backbone"))
    assert "backbone/token_embedding/embeddings" in names
    assert [n for n in names if "seed_generator" in n] == ["backbone/seed_generator_0",
                                                          "backbone/seed_generator_1"]


def test_written_checkpoint_reads_back_by_name_and_rotates(tmp_path):
    arrays = {"backbone/a": np.arange(6.0).reshape(2, 3), "tnews/dense/kernel": np.ones(2),
              "micro_batches_seen": np.array(7)}
    assert RunDir(tmp_path).newest_step() == 0
    for step in (2, 4, 6):
        RunDir(tmp_path).write_checkpoint(step, arrays, {"mixture": {}, "backbone": {}}, keep=2)
    assert RunDir(tmp_path).checkpoint_names() == ["step-00000004", "step-00000006"]
    assert RunDir(tmp_path).newest_step() == 6
    checkpoint = RunDir(tmp_path).latest_checkpoint(lambda n: n.startswith("backbone/"))
    assert checkpoint.step == 6 and checkpoint.names == list(arrays) and not checkpoint.damaged
    assert list(checkpoint.arrays) == ["backbone/a"]  # only what was wanted is read
    np.testing.assert_array_equal(checkpoint.arrays["backbone/a"], arrays["backbone/a"])
    full = ckpt.read_checkpoint(tmp_path / "checkpoints" / "step-00000006")
    values, mismatch = full.in_order(list(arrays))
    assert mismatch is None and values["micro_batches_seen"] == 7
    values, mismatch = full.in_order(["backbone/a", "other"])
    assert values is None and "'other'" in mismatch and "tnews/dense/kernel" in mismatch


def test_a_ctrl_c_mid_checkpoint_leaves_no_temporary_folder(tmp_path, monkeypatch):
    """SIGTERM is Ctrl-C (cli.terminated): one landing inside save_arrays left
    checkpoints/.tmp-<hex> behind (test_sigterm_in_train_is_ctrl_c, now and then)."""
    def interrupted(path, values):
        Path(path).write_bytes(b"PK\x03\x04")  # part of the file lands, then the signal
        raise KeyboardInterrupt

    monkeypatch.setattr(ckpt, "save_arrays", interrupted)
    with pytest.raises(KeyboardInterrupt):
        RunDir(tmp_path).write_checkpoint(2, {"a": np.ones(2)}, {"mixture": {}}, keep=2)
    assert list((tmp_path / "checkpoints").iterdir()) == []


def test_evaluations_tolerate_a_cut_last_line_but_not_a_broken_one(tmp_path):
    RunDir(tmp_path).append_evaluation({"step": 1})
    with open(tmp_path / layout.EVALUATIONS, "a", encoding="utf-8") as f:
        f.write('{"step": 2, "spl')  # an append a kill cut short
    warnings = []
    assert RunDir(tmp_path).read_evaluations(log=warnings.append) == [{"step": 1}]
    assert "evaluations.jsonl:2: an unfinished last line" in warnings[0]
    (tmp_path / layout.EVALUATIONS).write_text('{"step": 1}\n{broken\n{"step": 3}\n')
    with pytest.raises(records.DamagedFile, match=r"evaluations.jsonl:2: not a JSON line"):
        RunDir(tmp_path).read_evaluations()


# --- the format-1 fixture: resume, export, evaluate ------------------------------------------

def format1_copy(tmp_path):
    """A copy of the fixture run whose experiment.yaml points at the data it was trained
    on (the demo samples of that time, kept in the fixture: the demo's have grown since)."""
    run = tmp_path / "run"
    shutil.copytree(FORMAT1, run, ignore=shutil.ignore_patterns("PROVENANCE.md", "data"))
    experiment = yaml.safe_load((run / "experiment.yaml").read_text(encoding="utf-8"))
    experiment.update(data_root=str(FORMAT1 / "data"), cache_dir=str(tmp_path / "cache"))
    (run / "experiment.yaml").write_text(yaml.safe_dump(experiment, sort_keys=False),
                                         encoding="utf-8")
    return run


def format1_state(step):
    path = FORMAT1 / "checkpoints" / f"step-{step:08d}"
    trainer = json.loads((path / "trainer.json").read_text())
    with np.load(path / "state.npz") as values:
        return trainer, [values[f"v{i:05d}"] for i in range(len(values.files))]


def without_data(state):
    """A mixture state without the streams' data digests (written since issue 35)."""
    if isinstance(state, dict):
        return {k: without_data(v) for k, v in state.items() if k != "data"}
    if isinstance(state, list):
        return [without_data(v) for v in state]
    return state


def test_format1_run_resumes_to_the_state_its_own_code_reached(tmp_path):
    run = format1_copy(tmp_path)
    shutil.rmtree(run / "checkpoints" / "step-00000004")
    assert mtl(["train", str(run / "experiment.yaml"), "--output", str(run), "--resume"]) == 0
    new = ckpt.read_checkpoint(run / "checkpoints" / "step-00000004")
    assert new.trainer["format"] == ckpt.FORMAT and not new.positional
    old_trainer, old_arrays = format1_state(4)  # the old code, uninterrupted
    assert without_data(new.trainer["mixture"]) == old_trainer["mixture"]  # positions
    assert len(new.names) == len(old_arrays)
    for name, old in zip(new.names, old_arrays):  # the same state order, now named
        assert new.arrays[name].shape == old.shape, name
        np.testing.assert_allclose(new.arrays[name], old, atol=1e-6, err_msg=name)


def test_format1_run_exports_its_backbone_and_heads(tmp_path):
    from mtl_framework import RoFormerV2Backbone

    run = format1_copy(tmp_path)
    out = tmp_path / "export"
    assert mtl(["export", str(run), "--format", "keras", "--with-heads", "--output", str(out)]) == 0
    trainer, arrays = format1_state(4)
    backbone = RoFormerV2Backbone.from_preset(str(out))
    weights = [v for v in backbone.variables if "seed_generator" not in v.path]
    old = [a for a, name in zip(arrays, trainer["variables"])
           if name.startswith("ro_former_v2_backbone/")]
    assert len(weights) == len(old) == 7  # alpha, 2 embeddings, 4 kernels
    for variable, value in zip(weights, old):
        np.testing.assert_array_equal(np.asarray(variable), value, err_msg=variable.path)
    index = {name: i for i, name in enumerate(trainer["variables"])}
    with np.load(out / "heads.weights.npz") as heads:
        assert sorted(heads.files) == sorted(n for h in trainer["heads"].values()
                                             for n in h["variables"])
        for name in heads.files:
            np.testing.assert_array_equal(heads[name], arrays[index[name]])


def test_format1_run_evaluates_like_the_full_run_rebuilt(tmp_path):
    from mtl_framework.evaluation.dev import evaluate_run
    from mtl_framework.loop.run import Run

    run = format1_copy(tmp_path)
    line = evaluate_run(str(run), max_examples=6, batch_size=4, log=None)
    assert line["step"] == 4 and set(line["tasks"]) == {"tnews", "cluener"}
    rebuilt = Run.load(str(run), log=lambda *a: None)  # experiment, mixture, optimizer and all
    reference = rebuilt.evaluate("dev", max_examples=6, batch_size=4)
    for task, entry in reference.items():
        assert line["tasks"][task]["result"] == pytest.approx(entry["result"], abs=1e-9), task
        assert line["tasks"][task]["baseline"] == entry["baseline"]
