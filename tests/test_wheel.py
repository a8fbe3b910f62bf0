"""A real install: the wheel carries the task specs and works from any directory.

The wheel is built from a copy of the checkout with this environment's
setuptools (`pip wheel --no-deps --no-build-isolation`: no network) and
installed with `--no-deps` into a fresh venv (`--without-pip`; this
environment's pip installs into it with `pip --python`). Its dependencies
(TensorFlow, Keras, PyYAML, ...) come from this environment: a `.pth` file in
the new venv lists this environment's site-packages after its own, which is
what `--system-site-packages` would do if this interpreter were not itself a
venv. The `.pth` files of those folders are not run, so an editable install
of the checkout there stays invisible: `mtl_framework` is the wheel's.
"""
import importlib.util
import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
COPY_IGNORE = shutil.ignore_patterns(".git", ".venv*", "runs", "build", "dist", "*.egg-info",
                                     "__pycache__", ".pytest_cache", ".cache")
BUILTIN_TASKS, BUILTIN_DATASETS, HUB_CLUE = 92, 77, 10


def run(command, cwd, **env):
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    environment.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", TF_CPP_MIN_LOG_LEVEL="2", **env)
    result = subprocess.run([str(c) for c in command], cwd=cwd, env=environment, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("setuptools is not installed here (needed to build without network)")
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    shutil.copytree(REPO, source, ignore=COPY_IGNORE)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "-w", tmp / "dist", source], cwd=tmp)
    [built] = (tmp / "dist").glob("mtl_framework-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory):
    root = tmp_path_factory.mktemp("venv") / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", root], cwd=root.parent)
    python = root / "bin" / "python"
    run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", wheel],
        cwd=root.parent)
    purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=root).strip()
    (Path(purelib) / "_test_environment.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return root


def test_wheel_carries_the_specs_and_declares_tensorflow(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    specs = [n for n in names if n.startswith("mtl_framework/task_specs/")]
    top = [n for n in specs if n.count("/") == 2 and n.endswith(".yaml")]
    assert len(top) == len(list((REPO / "task_specs").glob("*.yaml"))) == BUILTIN_DATASETS
    assert len([n for n in specs if n.startswith("mtl_framework/task_specs/hub_clue/")]) == HUB_CLUE
    labels = sorted(p.name for p in (REPO / "task_specs" / "labels").iterdir())
    assert sorted(n.rsplit("/", 1)[1] for n in specs if "/labels/" in n) == labels
    assert "mtl_framework/__main__.py" in names and "data_adapters/parquet.py" in names
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert any(r.startswith("Requires-Dist: tensorflow<2.22,>=2.21") or r.startswith("Requires-Dist: tensorflow>=2.21")
               for r in requires), requires
    assert not any("tensorflow-cpu" in r or "tensorflow_cpu" in r for r in requires)
    extras = {line.split(": ", 1)[1] for line in metadata.splitlines() if line.startswith("Provides-Extra:")}
    assert extras == {"plots", "jieba", "wwm", "parquet"}
    assert 'Requires-Dist: pyarrow; extra == "parquet"' in requires


def test_installed_wheel_lists_the_tasks_from_another_directory(venv, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = run([venv / "bin" / "python", "-c",
                 "import mtl_framework, data_adapters, mtl_framework.registry as r; "
                 "print(mtl_framework.__file__, data_adapters.__file__, r.BUILTIN_SPECS)"], cwd=elsewhere)
    assert all(Path(p).resolve().is_relative_to(venv.resolve()) for p in where.split()), where

    tasks = json.loads(run([venv / "bin" / "mtl", "tasks", "list", "--json"], cwd=elsewhere))
    assert len(tasks) == BUILTIN_TASKS and len({t["dataset"] for t in tasks}) == BUILTIN_DATASETS
    listing = run([venv / "bin" / "python", "-m", "mtl_framework", "tasks", "list"], cwd=elsewhere)
    assert f"{BUILTIN_TASKS} tasks in {BUILTIN_DATASETS} datasets" in listing
    with_hub = json.loads(run([venv / "bin" / "mtl", "tasks", "list", "--specs", "hub_clue", "--json"],
                              cwd=elsewhere))
    assert len(with_hub) == BUILTIN_TASKS + HUB_CLUE
    assert run([venv / "bin" / "mtl", "tasks", "validate", "hub_clue"], cwd=elsewhere).startswith("ok:")
    assert list(elsewhere.iterdir()) == []  # nothing written where it ran
