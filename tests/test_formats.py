"""mtl_framework.formats: one converter module per format and architecture with the same
names, one table the CLI and the loaders derive from, each format's name written only in
the table, the architectures' CONVERTERS and its converters."""
import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mtl_framework import RoFormerV2Backbone, architectures, formats
from mtl_framework.cli import build_parser
from mtl_framework.errors import UserError

REPO = Path(__file__).resolve().parents[1]
NAMES_EVERY_MODULE_HAS = ("CONFIG_FILE", "CARD_USE", "detect", "read_config", "trained_length",
                          "load_weights", "check", "save")
TINY = dict(vocab_size=40, num_layers=2, hidden_size=32, num_heads=4, intermediate_size=48,
            dropout=0.0)


def test_every_format_module_has_the_same_names():
    for name, architecture in architectures.candidates():
        module = architectures.converter(name, architecture)
        missing = [n for n in NAMES_EVERY_MODULE_HAS if not hasattr(module, n)]
        assert not missing, (name, architecture, missing)


def test_the_table_imports_no_tensorflow():
    code = ("import sys; import mtl_framework.formats as f; f.NAMES; f.loadable(); "
            "print('tensorflow' in sys.modules, 'keras' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "False"]


def test_cli_choices_come_from_the_table():
    parser = build_parser()
    export = parser._subparsers._group_actions[0].choices["export"]
    choices = next(a.choices for a in export._actions if a.dest == "format")
    assert tuple(choices) == formats.NAMES


def code_strings(path):
    """The string constants of a module that are not docstrings or comments."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
            and isinstance(node.value, str) and id(node) not in docstrings]


def test_each_format_name_is_spelled_only_in_the_tables():
    modules = list((REPO / "mtl_framework").rglob("*.py"))
    tables = {"mtl_framework/formats/__init__.py"} | {
        f"mtl_framework/architectures/{name}/__init__.py" for name in architectures.ARCHITECTURES}
    for name in ("roformer-pytorch", "keras-hub"):
        spelling = {p.relative_to(REPO).as_posix() for p in modules
                    if any(name in s for s in code_strings(p))}
        converters = {f"mtl_framework/architectures/{a}/{name.replace('-', '_')}.py"
                      for a in architectures.ARCHITECTURES}  # messages about it
        assert spelling <= tables | converters, (name, spelling - tables - converters)
        assert "mtl_framework/formats/__init__.py" in spelling


# keras-hub's RoFormerV2 differs from ours: read back refused (the test below)
# (transformers holds BERT and ALBERT only: tests/test_export_transformers.py)
@pytest.mark.parametrize("name", [n for n in formats.NAMES
                                  if n != "keras-hub" and architectures.converter_name(n)])
def test_save_then_load_round_trips_every_loadable_format(name, tmp_path):
    backbone = RoFormerV2Backbone(**TINY)
    backbone.build()
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(f"t{i}" for i in range(TINY["vocab_size"])) + "\n")
    folder = tmp_path / name
    module = architectures.converter(name)
    module.check(backbone.config, "test")
    if formats.FORMATS[name].ours:
        module.save(backbone, str(folder), str(vocab), extra={"run": {"max_length": 64}})
    else:
        module.save(backbone, str(folder), str(vocab), 64)
    assert architectures.layout(str(folder)) == name
    assert formats.vocab_path(str(folder)) == str(folder / "vocab.txt")
    config = architectures.read_config(str(folder), architectures.layout(str(folder)))
    assert {k: config[k] for k in ("num_layers", "hidden_size", "num_heads")} == \
        {k: TINY[k] for k in ("num_layers", "hidden_size", "num_heads")}
    loaded = architectures.load_backbone(str(folder), architectures.layout(str(folder)))
    ids = np.array([[5, 6, 7, 8, 0]], "int32")
    batch = {"token_ids": ids, "segment_ids": np.zeros_like(ids)}
    np.testing.assert_allclose(np.asarray(loaded(batch))[:, :4], np.asarray(backbone(batch))[:, :4],
                               atol=1e-5)


def test_a_keras_hub_preset_is_named_and_refused(tmp_path):
    (tmp_path / "config.json").write_text('{"registered_name": "keras_hub>RoformerV2Backbone"}')
    with pytest.raises(UserError, match="keras-hub preset"):
        architectures.layout(str(tmp_path))
