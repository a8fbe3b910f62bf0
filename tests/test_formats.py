"""mtl_framework.formats: one converter module per format and architecture with the same
names, one table the CLI and the loaders derive from, each format's name written only in
the table, the architectures' CONVERTERS and its converters. Each converter's round trip
and parity: test_backbone_harness.py."""
import ast
import subprocess
import sys
from pathlib import Path

from mtl_framework import architectures, formats
from mtl_framework.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
NAMES_EVERY_MODULE_HAS = ("CONFIG_FILE", "CARD_USE", "detect", "read_config", "trained_length",
                          "load_weights", "check", "save")


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
