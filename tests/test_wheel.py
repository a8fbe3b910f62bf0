"""A plain install, as a new user makes it: the wheel and its real dependencies in a fresh venv.

The wheel is built from a copy of the checkout (`pip wheel`, build isolation: setuptools
from the index) and installed with `pip install` and NO `--no-deps` into a fresh venv,
from the indexes this environment's pip is configured with (the ones `make install`
uses); pip's cache makes repeats fast. From a folder outside the checkout the installed
`mtl` then runs `--version`, a 2-update `train` on the bundled demo data, `export`,
`predict`, and `report`: first without the [plots] extra (one line, exit 2), then with it.
They run in `make test` (they install ~2.2 GB): on this 2-core machine 5 min 35 s the
first time (the full `tensorflow` wheel, ~570 MB, which `make install`'s tensorflow-cpu
does not bring), 48 s to 2 min 16 s again with pip's cache, depending on other load.
"""
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from mtl_framework import __version__

REPO = Path(__file__).resolve().parents[1]
DEMO_DATA = REPO / "experiments" / "demo" / "data"
COPY_IGNORE = shutil.ignore_patterns(".git", ".venv*", "runs", "build", "dist", "*.egg-info",
                                     "__pycache__", ".pytest_cache", ".cache")
BUILTIN_TASKS, BUILTIN_DATASETS, HUB_CLUE = 108, 77, 10  # 92 catalog + 16 embedding tasks
NO_PLOTS = "error: plots need matplotlib, which is not installed: pip install mtl_framework[plots]"


def run(command, cwd, expect=0, timeout=900):
    """(stdout, stderr) of a command outside this checkout's PYTHONPATH; asserts its exit code."""
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("PYTHONPATH", "TF_CPP_MIN_LOG_LEVEL", "MTL_VERBOSE")}
    environment.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    result = subprocess.run([str(c) for c in command], cwd=cwd, env=environment,
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == expect, f"{command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout, result.stderr


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    shutil.copytree(REPO, source, ignore=COPY_IGNORE)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", tmp / "dist", source], cwd=tmp)
    [built] = (tmp / "dist").glob("mtl_framework-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory):
    """A fresh venv holding the wheel and its dependencies, not the [plots] extra."""
    root = tmp_path_factory.mktemp("venv") / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", root], cwd=root.parent)
    run([sys.executable, "-m", "pip", "--python", root / "bin" / "python", "install", wheel],
        cwd=root.parent)
    return root


@pytest.fixture(scope="module")
def elsewhere(tmp_path_factory):
    """A folder outside the checkout, holding a 2-update experiment on the demo data."""
    folder = tmp_path_factory.mktemp("elsewhere")
    experiment = {"data_root": str(DEMO_DATA),
                  "backbone": {"num_layers": 1, "hidden_size": 32, "num_heads": 2, "vocab_size": 500},
                  "tasks": ["tnews", "cluener"], "tasks_per_update": 2, "batch_size": 4,
                  "max_length": 32, "steps": 2, "checkpoint_every": 2, "eval_every": 2,
                  "eval_batches": 2, "cache_dir": str(folder / "cache")}
    (folder / "tiny.yaml").write_text(yaml.safe_dump(experiment), encoding="utf-8")
    return folder


def test_wheel_carries_the_specs_licence_and_dependencies(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        licence = archive.read(next(n for n in names if n.endswith(".dist-info/licenses/LICENSE")))
    specs = [n for n in names if n.startswith("mtl_framework/task_specs/")]
    top = [n for n in specs if n.count("/") == 2 and n.endswith(".yaml")]
    assert len(top) == len(list((REPO / "task_specs").glob("*.yaml"))) == BUILTIN_DATASETS
    assert len([n for n in specs if n.startswith("mtl_framework/task_specs/hub_clue/")]) == HUB_CLUE
    labels = sorted(p.name for p in (REPO / "task_specs" / "labels").iterdir())
    assert sorted(n.rsplit("/", 1)[1] for n in specs if "/labels/" in n) == labels
    assert "mtl_framework/__main__.py" in names and "data_adapters/parquet.py" in names
    assert "mtl_framework/py.typed" in names  # PEP 561: the public API's hints are for users
    assert licence == (REPO / "LICENSE").read_bytes() and b"Apache License" in licence
    fields = [line.split(": ", 1) for line in metadata.splitlines() if ": " in line]
    values = {}
    for key, value in fields:
        values.setdefault(key, []).append(value)
    assert values["Version"] == [__version__] and values["License"] == ["Apache-2.0"]
    assert values["Requires-Python"] == [">=3.10"]
    assert "Programming Language :: Python :: 3" in values["Classifier"]
    requires = values["Requires-Dist"]
    assert "tensorflow<2.22,>=2.21" in requires
    assert not any(r.startswith(("tensorflow-cpu", "tensorflow_cpu")) for r in requires)
    assert any(r.startswith("tensorboard") for r in requires)
    assert any(r.startswith("huggingface_hub") for r in requires)
    assert set(values["Provides-Extra"]) == {"plots", "jieba", "wwm", "parquet", "embeddings"}
    assert 'pyarrow; extra == "parquet"' in requires and 'matplotlib; extra == "plots"' in requires


def test_installed_wheel_lists_the_tasks_from_another_directory(venv, tmp_path):
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    where, _ = run([venv / "bin" / "python", "-c",
                    "import mtl_framework, data_adapters, mtl_framework.config.registry as r; "
                    "print(mtl_framework.__file__, data_adapters.__file__, r.BUILTIN_SPECS)"],
                   cwd=folder)
    assert all(Path(p).resolve().is_relative_to(venv.resolve()) for p in where.split()), where
    tasks = json.loads(run([venv / "bin" / "mtl", "tasks", "list", "--json"], cwd=folder)[0])
    assert len(tasks) == BUILTIN_TASKS and len({t["dataset"] for t in tasks}) == BUILTIN_DATASETS
    listing, _ = run([venv / "bin" / "python", "-m", "mtl_framework", "tasks", "list"], cwd=folder)
    assert f"{BUILTIN_TASKS} tasks in {BUILTIN_DATASETS} datasets" in listing
    with_hub = json.loads(run([venv / "bin" / "mtl", "tasks", "list", "--specs", "hub_clue", "--json"],
                              cwd=folder)[0])
    assert len(with_hub) == BUILTIN_TASKS + HUB_CLUE
    assert run([venv / "bin" / "mtl", "tasks", "validate", "hub_clue"], cwd=folder)[0].startswith("ok:")
    assert list(folder.iterdir()) == []  # nothing written where it ran


def test_version_names_the_release_and_its_dependencies(venv, elsewhere):
    versions, _ = run([venv / "bin" / "python", "-c",
                       "import importlib.metadata as m; print(m.version('tensorflow'), "
                       "m.version('keras'), m.version('tokenizers'))"], cwd=elsewhere)
    tensorflow, keras, tokenizers = versions.split()
    out, err = run([venv / "bin" / "mtl", "--version"], cwd=elsewhere)
    assert err == ""
    # An installed wheel is no checkout: no commit.
    assert out == (f"mtl_framework {__version__} (TensorFlow {tensorflow}, Keras {keras}, "
                   f"tokenizers {tokenizers}, Python {sys.version.split()[0]})\n")


def test_train_export_predict_report_from_a_plain_install(wheel, venv, elsewhere):
    mtl = venv / "bin" / "mtl"
    run([mtl, "train", "tiny.yaml", "--output", "run"], cwd=elsewhere)
    run_dir = elsewhere / "run"
    [provenance] = [json.loads(line) for line in (run_dir / "provenance.jsonl").open()]
    assert provenance["step"] == 0 and provenance["mtl_framework"] == __version__
    assert provenance["commit"] is None and provenance["tensorflow"].startswith("2.21")
    assert list((run_dir / "logs").rglob("events.out.tfevents.*"))  # tensorboard is installed

    out, err = run([mtl, "export", "run", "--format", "keras", "--output", "export"], cwd=elsewhere)
    assert err == "" and "exported keras backbone" in out  # nothing of TensorFlow's on stderr
    exported = json.loads((elsewhere / "export" / "provenance.json").read_text())
    assert exported["exported_by"]["mtl_framework"] == __version__
    assert exported["trained_by"] == [provenance]

    dev = DEMO_DATA / "tnews" / "dev.json"
    run([mtl, "predict", "run", "--task", "tnews", "--input", dev, "--output", "tnews.jsonl"],
        cwd=elsewhere)
    predictions = (elsewhere / "tnews.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(predictions) == len(dev.read_text(encoding="utf-8").splitlines())

    # Without the [plots] extra: one line naming the fix, exit 2, nothing written.
    before = sorted(p.name for p in run_dir.iterdir())
    out, err = run([mtl, "report", "run"], cwd=elsewhere, expect=2)
    assert err.splitlines() == [NO_PLOTS] and out == ""
    assert sorted(p.name for p in run_dir.iterdir()) == before

    run([sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install",
         f"{wheel}[plots]"], cwd=elsewhere)
    out, err = run([mtl, "report", "run"], cwd=elsewhere)
    plots = {Path(line).name for line in out.splitlines()}
    assert {"loss.png", "dev_scores.png"} <= plots
    assert all((run_dir / "plots" / name).stat().st_size > 0 for name in plots)
