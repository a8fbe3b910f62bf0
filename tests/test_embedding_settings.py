"""The sentence embedding's settings are one value (sentence_encoder/settings.py's EmbeddingSettings)
and the only place their defaults are spelled: what a contrastive task trains when its
`embedding:` is silent (TRAINED) and what a plain encoder gets (PLAIN, the dataclass's own)."""
import re
from pathlib import Path

import pytest

import mtl_framework
from mtl_framework.errors import UserError
from mtl_framework.families.contrastive import EMBEDDING_SETTINGS, embedding_settings
from mtl_framework.sentence_encoder.settings import TRAINED, EmbeddingSettings, export_record

PACKAGE = Path(mtl_framework.__file__).parent
HOME = "sentence_encoder/settings.py"
# A default spelled in code: `pooling="cls"`, `"normalize": False`, `pooling: str = "mean"`,
# `.get("pooling", ...)`, `matryoshka_dims=()`, `query_prefix=""`, `("cls", "mean")`.
KEY = r"""["']?\s*(?::\s*\w+\s*)?[:=]\s*"""
DEFAULT_SPELLINGS = re.compile(
    r"pooling" + KEY + r"""["'](?:cls|mean)["']"""
    r"|normalize" + KEY + r"(?:True|False)\b"
    r"|matryoshka_dims" + KEY + r"(?:\[\]|\(\))"
    r"|(?:query|passage)_prefix" + KEY + r"""(?:""|'')"""
    r"""|\.get\(\s*["'](?:pooling|normalize|query_prefix|passage_prefix|matryoshka_dims)["']\s*,"""
    r"""|\(\s*["']cls["']\s*,\s*["']mean["']\s*\)""")


def default_spellings(root):
    """{module under root: [line numbers]} where a default of the embedding is spelled."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if DEFAULT_SPELLINGS.search(line):
                found.setdefault(path.relative_to(root).as_posix(), []).append(number)
    return found


def test_the_scan_finds_each_way_of_spelling_a_default(tmp_path):
    lines = ['settings = {"pooling": "mean", "normalize": False}', "def f(pooling='cls'): pass",
             "    pooling: str = 'mean'", 'x = config.get("normalize", True)',
             "def g(matryoshka_dims=()): pass", 'h(query_prefix="")', 'CHOICES = ("cls", "mean")',
             'if settings["pooling"] == "cls": pass', "normalize = entries is not None",
             '"""mean pooling, not normalised"""']
    for i, line in enumerate(lines):
        (tmp_path / f"m{i}.py").write_text(line + "\n")
    assert set(default_spellings(tmp_path)) == {f"m{i}.py" for i in range(7)}


def test_the_embedding_defaults_are_spelled_in_one_module():
    found = default_spellings(PACKAGE)
    assert HOME in found  # the scan sees the home itself
    assert set(found) == {HOME}, f"defaults spelled outside {HOME}: " + ", ".join(
        f"{module}:{lines}" for module, lines in found.items() if module != HOME)


def test_the_family_and_its_head_take_their_defaults_from_trained():
    from mtl_framework.families.heads import build_head

    assert {key: embedding_settings({})[key] for key in TRAINED} == TRAINED
    assert {key: EMBEDDING_SETTINGS[key][1] for key in TRAINED} == TRAINED
    config = build_head("contrastive", None, 8).get_config()
    assert {key: config[key] for key in TRAINED} == TRAINED


def test_settings_of_heads_fill_what_an_old_record_leaves_out():
    """An export's record written before a key existed reads as what was trained then."""
    heads = {"a": {"family": "contrastive", "config": {"pooling": "mean"}},
             "t": {"family": "classification", "config": {"pooling": "x"}}}
    settings = EmbeddingSettings.from_heads(heads, "RUN")
    assert settings == EmbeddingSettings("mean", True, {"a": {"query": "", "passage": ""}}, ())
    assert settings.to_json() == {"pooling": "mean", "normalize": True,
                                  "prompts": {"a": {"query": "", "passage": ""}},
                                  "matryoshka_dims": []}
    assert export_record(heads) == {"a": {**TRAINED, "pooling": "mean"}}
    assert EmbeddingSettings.from_heads({"t": heads["t"]}, "RUN") is None


def test_plain_settings_and_what_is_asked_instead():
    plain = EmbeddingSettings()
    assert (plain.pooling, plain.normalize, plain.prompts, plain.matryoshka_dims) == \
        ("mean", False, {}, ())
    assert plain.described() == "mean pooling, not normalised"
    assert plain.replaced("cls", True) == EmbeddingSettings("cls", True)
    assert plain.replaced() == plain
    with pytest.raises(UserError, match=r"^--pooling max: give cls or mean$"):
        plain.replaced("max")
