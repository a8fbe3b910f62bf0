"""mtl_framework.formats: one module per format with the same names, one table the CLI
and the loaders derive from, each format's name written in at most two modules."""
import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mtl_framework import formats
from mtl_framework.backbone import RoFormerV2Backbone
from mtl_framework.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
NAMES_EVERY_MODULE_HAS = ("CONFIG_FILE", "CARD_USE", "detect", "read_config", "trained_length",
                          "load_weights", "check", "save")
TINY = dict(vocab_size=40, num_layers=2, hidden_size=32, num_heads=4, intermediate_size=48,
            dropout=0.0)


def test_every_format_module_has_the_same_names():
    for name in formats.NAMES:
        module = formats.module(name)
        missing = [n for n in NAMES_EVERY_MODULE_HAS if not hasattr(module, n)]
        assert not missing, (name, missing)


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


def test_each_format_name_is_spelled_in_at_most_two_modules():
    modules = list((REPO / "mtl_framework").rglob("*.py"))
    for name in ("roformer-pytorch", "keras-hub"):
        spelling = [p.relative_to(REPO).as_posix() for p in modules
                    if any(name in s for s in code_strings(p))]
        assert len(spelling) <= 2, (name, spelling)
        assert "mtl_framework/formats/__init__.py" in spelling


@pytest.mark.parametrize("name", [n for n in formats.NAMES if formats.FORMATS[n].loads])
def test_save_then_load_round_trips_every_loadable_format(name, tmp_path):
    backbone = RoFormerV2Backbone(**TINY)
    backbone.build()
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(f"t{i}" for i in range(TINY["vocab_size"])) + "\n")
    folder = tmp_path / name
    module = formats.module(name)
    module.check(backbone.config, "test")
    if formats.FORMATS[name].ours:
        module.save(backbone, str(folder), str(vocab), extra={"run": {"max_length": 64}})
    else:
        module.save(backbone, str(folder), str(vocab), 64)
    assert formats.layout(str(folder)) == name
    assert formats.vocab_path(str(folder)) == str(folder / "vocab.txt")
    config = formats.read_config(str(folder), name)
    assert {k: config[k] for k in ("num_layers", "hidden_size", "num_heads")} == \
        {k: TINY[k] for k in ("num_layers", "hidden_size", "num_heads")}
    loaded = formats.load_backbone(str(folder), name)
    ids = np.array([[5, 6, 7, 8, 0]], "int32")
    batch = {"token_ids": ids, "segment_ids": np.zeros_like(ids)}
    np.testing.assert_allclose(np.asarray(loaded(batch))[:, :4], np.asarray(backbone(batch))[:, :4],
                               atol=1e-5)


def test_a_keras_hub_preset_is_named_and_refused(tmp_path):
    (tmp_path / "config.json").write_text('{"registered_name": "keras_hub>RoformerV2Backbone"}')
    with pytest.raises(formats.UserError, match="keras-hub preset"):
        formats.layout(str(tmp_path))
