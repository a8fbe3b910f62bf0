"""docs/task_specs.md's "Every format option" table is the adapters' declared options
(issue 34): every (format, option) pair documented, none invented, with its type and
default as the adapter declares them."""
import re
from pathlib import Path

import yaml

import data_adapters  # noqa: F401  (registers the built-in formats)
from data_adapters.base import _ADAPTERS

DOC = Path(__file__).resolve().parents[1] / "docs" / "task_specs.md"
TYPE_NAMES = {"str": str, "bool": bool, "list": list, "dict": dict, "int": int, "float": float}


def documented():
    """{(format, option): (type cell, default cell)} of the table."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Every format option", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if len(cells) != 5 or not cells[1].startswith("`"):
            continue
        formats = re.findall(r"`([^`]+)`", cells[0])
        option = cells[1].strip("`")
        for name in formats:
            assert (name, option) not in rows, f"{name}.{option} documented twice"
            rows[name, option] = (cells[2], cells[3].strip("`"))
    return rows


def declared():
    return {(name, option): spec for name, adapter in _ADAPTERS.items()
            for option, spec in adapter.option_keys.items()}


def test_every_declared_option_is_documented_and_nothing_else():
    docs, code = documented(), declared()
    assert sorted(set(code) - set(docs)) == []  # declared but not documented
    assert sorted(set(docs) - set(code)) == []  # documented but not declared


def test_documented_types_and_defaults_are_the_declared_ones():
    docs = documented()
    for key, (kind, default) in declared().items():
        type_cell, default_cell = docs[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        assert tuple(TYPE_NAMES[t] for t in type_cell.split(" or ")) == kinds, key
        assert yaml.safe_load(default_cell) == default, (key, default_cell)
