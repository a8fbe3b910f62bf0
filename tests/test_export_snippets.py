"""docs/export.md's "The inputs each format expects" (issue 34): each format's snippet runs
as written (the export folder swapped for one exported here from the run fixture), each in
this process (Keras 3) or one of its own (bert4keras's legacy Keras, the torch venv:
marked slow), and prints the [CLS] vector our keras export gives for the same pair."""
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "tests" / "fixtures" / "run_format1"
DOC = ROOT / "docs" / "export.md"
TORCH_PYTHON = ROOT / ".venv-torch" / "bin" / "python"


def snippets():
    """{format: code} of the section's python blocks, each after its `format` label."""
    section = DOC.read_text(encoding="utf-8").split("## The inputs each format expects", 1)[1]
    found = re.findall(r"\n`([a-z0-9-]+)`[^\n]*(?:\n[^\n`]+)*:\n\n```python\n(.*?)```", section, re.S)
    return dict(found)


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """A folder for the exports, each written when a test first asks for it."""
    from mtl_framework.saving.writer import export

    base = tmp_path_factory.mktemp("snippets")

    def folder(fmt):
        if not (base / fmt).exists():
            export(str(RUN), fmt, str(base / fmt), log=None)
        return base
    return folder


def exec_snippet(code, folder, capsys):
    """Run a snippet in this process (Keras 3 formats), its printed vector."""
    capsys.readouterr()
    exec(compile(code.replace("runs/demo/export", str(folder)), "<snippet>", "exec"), {})
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def run_snippet(code, folder, python=sys.executable):
    """Run a snippet in a process of its own (bert4keras's legacy Keras, torch's venv)."""
    code = code.replace("runs/demo/export", str(folder))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def close(ours, theirs):
    assert len(ours) == len(theirs) == 8
    assert max(abs(a - b) for a, b in zip(ours, theirs)) < 1e-4, (ours, theirs)


def test_the_section_has_a_snippet_per_format():
    assert sorted(snippets()) == ["bert4keras", "keras", "keras-hub", "roformer-pytorch"]


def test_keras_and_keras_hub_snippets_give_the_same_vector(exports, capsys):
    if importlib.util.find_spec("keras_hub") is None:
        pytest.skip("keras-hub not installed (make interop)")
    exports("keras")
    ours = exec_snippet(snippets()["keras"], exports("keras-hub"), capsys)
    close(ours, exec_snippet(snippets()["keras-hub"], exports("keras-hub"), capsys))


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["bert4keras", "roformer-pytorch"])
def test_bert4keras_and_pytorch_snippets_give_the_keras_vector(exports, fmt, capsys):
    python = sys.executable
    if fmt == "bert4keras" and importlib.util.find_spec("bert4keras") is None:
        pytest.skip("bert4keras not installed (make interop)")
    if fmt == "roformer-pytorch":
        if not TORCH_PYTHON.exists():
            pytest.skip("no .venv-torch (make interop-torch)")
        python = str(TORCH_PYTHON)
    ours = exec_snippet(snippets()["keras"], exports("keras"), capsys)
    close(ours, run_snippet(snippets()[fmt], exports(fmt), python))


def test_from_preset_takes_a_size_name_as_keras_hub_does(tmp_path, monkeypatch):
    from mtl_framework import RoFormerV2Backbone
    from mtl_framework.architectures.roformer_v2.presets import PRESETS

    backbone = RoFormerV2Backbone.from_preset("small", vocab_size=64)
    assert {k: backbone.config[k] for k in PRESETS["small"]} == PRESETS["small"]
    assert backbone.config["vocab_size"] == 64
    # a folder of that name wins over the size
    monkeypatch.chdir(tmp_path)
    folder = RoFormerV2Backbone(vocab_size=64, num_layers=1, hidden_size=16, num_heads=2,
                                intermediate_size=32)
    folder.build()
    folder.save_preset("small")
    assert RoFormerV2Backbone.from_preset("small").config["num_layers"] == 1
    with pytest.raises(FileNotFoundError, match="or give a size name: small, base, large"):
        RoFormerV2Backbone.from_preset("smal")
