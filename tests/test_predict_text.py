"""`mtl predict RUN --task T --text ...` (issue 34): raw texts typed on the command line or
piped in, one JSON line each, the same predictions `--input` gives for the same texts; and
input files that carry only the fields a prediction reads."""
import io
import json
import shutil
from pathlib import Path

import pytest
import yaml

from mtl_framework import cli

ROOT = Path(__file__).resolve().parents[1]
DEMO_DATA = ROOT / "experiments" / "demo" / "data"
TITLES = ["中国女排夺得世界杯冠军", "央行宣布下调存款准备金率", "新款电动汽车明年上市"]
PAIRS = [("花呗怎么还款", "花呗如何还钱"), ("借呗能提前还吗", "今天天气怎么样")]
NER_TEXT = "浙商银行企业信贷部叶老桂博士则从另一个角度对五道门槛进行了解读。"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A 1-layer run trained 2 updates on tnews, afqmc and cluener (demo samples)."""
    from mtl_framework.loop.run import Run

    base = tmp_path_factory.mktemp("predict-text")
    data = base / "data"
    for task in ("tnews", "afqmc", "cluener"):
        shutil.copytree(DEMO_DATA / task, data / task)
    experiment = {
        "name": "tiny", "data_root": str(data), "cache_dir": str(base / "cache"),
        "backbone": {"num_layers": 1, "hidden_size": 32, "num_heads": 2,
                     "intermediate_size": 64, "vocab_size": 2000},
        "tasks": ["tnews", "afqmc", "cluener"], "batch_size": 4, "max_length": 32,
        "tasks_per_update": 3, "steps": 2, "optimizer": {"name": "adamw", "lr": 0.001},
        "seed": 0, "checkpoint_every": 0, "keep_checkpoints": 1, "eval_every": 0}
    path = base / "tiny.yaml"
    path.write_text(yaml.safe_dump(experiment, allow_unicode=True), encoding="utf-8")
    Run(str(path), output=str(base / "run"), log=lambda message: None).train()
    return base / "run"


def predict_lines(capsys, *argv):
    capsys.readouterr()
    assert cli.main(["predict", *map(str, argv)]) == 0
    out = capsys.readouterr().out
    return [json.loads(line) for line in out.splitlines()]


def file_predictions(tmp_path, run_dir, task, rows):
    """What `--input` predicts for these records (written in the spec's format)."""
    source = tmp_path / f"{task}-in.json"
    source.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                      encoding="utf-8")
    out = tmp_path / f"{task}-out.jsonl"
    assert cli.main(["predict", str(run_dir), "--task", task, "--input", str(source),
                     "--output", str(out)]) == 0
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def test_repeated_text_prints_one_json_line_per_text_as_the_file_input_predicts(
        run_dir, tmp_path, capsys):
    from mtl_framework.config.registry import load_registry

    args = [run_dir, "--task", "tnews"] + [a for t in TITLES for a in ("--text", t)]
    lines = predict_lines(capsys, *args)
    assert [line["text"] for line in lines] == TITLES
    assert all(line["prediction"] in load_registry().tasks["tnews"].labels for line in lines)
    # rows with the title only (no keywords, no label): read as one text each, not refused
    from_file = file_predictions(tmp_path, run_dir, "tnews", [{"sentence": t} for t in TITLES])
    assert [line["prediction"] for line in from_file] == [line["prediction"] for line in lines]


def test_text_dash_reads_one_text_per_line_of_stdin(run_dir, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{TITLES[0]}\n\n{TITLES[1]}\r\n"))
    lines = predict_lines(capsys, run_dir, "--task", "tnews", "--text", "-", "--text", TITLES[2])
    assert [line["text"] for line in lines] == TITLES


def test_pairs_with_a_separator_and_matching_needs_both_texts(run_dir, tmp_path, capsys):
    texts = [f"{a}|||{b}" for a, b in PAIRS]
    lines = predict_lines(capsys, run_dir, "--task", "afqmc", "--separator", "|||",
                          "--text", texts[0], "--text", texts[1])
    assert [(line["text"], line["text_b"]) for line in lines] == PAIRS
    assert {line["prediction"] for line in lines} <= {"0", "1"}
    # the same pairs as an afqmc file (TSV, no label column): the same answers
    source = tmp_path / "pairs.tsv"
    source.write_text("".join(f"{a}\t{b}\n" for a, b in PAIRS), encoding="utf-8")
    out = tmp_path / "pairs.jsonl"
    assert cli.main(["predict", str(run_dir), "--task", "afqmc", "--input", str(source),
                     "--output", str(out)]) == 0
    assert [json.loads(line)["prediction"] for line in out.read_text().splitlines()] == \
        [line["prediction"] for line in lines]
    # a matching task given one text, or a text without the separator: one line, exit 2
    for extra in (["--text", PAIRS[0][0]], ["--separator", "|||", "--text", PAIRS[0][0]]):
        capsys.readouterr()
        assert cli.main(["predict", str(run_dir), "--task", "afqmc", *extra]) == 2
        [error] = capsys.readouterr().err.splitlines()
        assert error.startswith("error: ") and "--separator" in error


def test_ner_text_gives_spans_whose_text_is_the_mention(run_dir, capsys):
    [line] = predict_lines(capsys, run_dir, "--task", "cluener", "--text", NER_TEXT)
    assert line["text"] == NER_TEXT
    for span in line["prediction"]:
        assert NER_TEXT[span["start"]:span["end"]] == span["text"]


def test_text_output_file_and_refusals(run_dir, tmp_path, capsys):
    out = tmp_path / "titles.jsonl"
    assert cli.main(["predict", str(run_dir), "--task", "tnews", "--text", TITLES[0],
                     "--output", str(out)]) == 0
    [line] = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert line["text"] == TITLES[0]
    for argv in (["--task", "tnews"],  # neither --text nor --input
                 ["--task", "tnews", "--text", "x", "--input", str(out)],
                 ["--task", "tnews", "--input", str(out)],  # no --output
                 ["--task", "tnews", "--text", "x", "--output", str(out)],  # exists, no --force
                 ["--task", "cmrc2018", "--text", "x"]):  # no head / not a text family
        capsys.readouterr()
        assert cli.main(["predict", str(run_dir), *argv]) == 2, argv
        [error] = capsys.readouterr().err.splitlines()
        assert error.startswith("error: ")
    assert [json.loads(x)["text"] for x in out.read_text(encoding="utf-8").splitlines()] == \
        [TITLES[0]]
