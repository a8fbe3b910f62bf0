"""`--specs` on finetune, benchmark and predict (issue 34): a task of one's own is found in
the folders given, and an unknown task's error names the folders searched (or, with none
given, says how to add one)."""
from pathlib import Path

import pytest

from mtl_framework import cli

ROOT = Path(__file__).resolve().parents[1]
DEMO_DATA = ROOT / "experiments" / "demo" / "data"
SPEC = """dataset: my_titles
format: jsonl
files: {train: tnews/train.json, dev: tnews/dev.json}
fields: {text: sentence, label: label_desc}
tasks:
  - name: my_titles
    type: classification
    labels: [news_story, news_culture, news_entertainment, news_sports, news_finance,
             news_house, news_car, news_edu, news_tech, news_military, news_travel,
             news_world, news_stock, news_agriculture, news_game]
    max_length: 32
    metric: accuracy
"""


@pytest.fixture(scope="module")
def backbone_dir(tmp_path_factory):
    from mtl_framework import RoFormerV2Backbone

    folder = tmp_path_factory.mktemp("specs-option")
    backbone = RoFormerV2Backbone(vocab_size=64, num_layers=1, hidden_size=16, num_heads=2,
                                  intermediate_size=32)
    backbone.build()
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                               + [f"x{i}" for i in range(59)]) + "\n", encoding="utf-8")
    backbone.save_preset(str(folder / "export"), str(vocab))
    specs = folder / "my_specs"
    specs.mkdir()
    (specs / "my_titles.yaml").write_text(SPEC, encoding="utf-8")
    return folder / "export", specs


def refusal(capsys, argv):
    capsys.readouterr()
    assert cli.main(argv) == 2
    [line] = capsys.readouterr().err.splitlines()
    return line


def test_finetune_unknown_task_names_the_specs_folders_or_asks_for_one(backbone_dir, tmp_path,
                                                                        capsys):
    export, specs = backbone_dir
    base = ["finetune", str(export), "my_titlez", "--data-root", str(DEMO_DATA),
            "--output", str(tmp_path / "run")]
    line = refusal(capsys, base + ["--specs", str(specs)])
    assert "unknown task or dataset 'my_titlez' (did you mean 'my_titles'?)" in line
    assert f"searched the built-in specs and {specs}" in line
    line = refusal(capsys, base)
    assert "searched the built-in specs only" in line and "--specs DIR" in line
    assert not (tmp_path / "run").exists()


def test_benchmark_suite_task_from_specs_and_unknown_names_them(backbone_dir, tmp_path, capsys):
    export, specs = backbone_dir
    suite = tmp_path / "suite.yaml"
    suite.write_text("seeds: [0]\ntasks: [my_titlez]\n", encoding="utf-8")
    line = refusal(capsys, ["benchmark", str(export), "--suite", str(suite), "--data-root",
                            str(DEMO_DATA), "--output", str(tmp_path / "out"),
                            "--specs", str(specs)])
    assert "unknown task 'my_titlez' (did you mean 'my_titles'?)" in line
    assert f"searched the built-in specs and {specs}" in line
    assert not (tmp_path / "out").exists()
