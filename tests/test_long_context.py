"""Longer than trained through the commands (issue 27): a run trained with
backbone.rope_scaling, `mtl evaluate/predict/finetune --max-length N --rope-scaling`,
and the export formats that cannot hold a scaling refusing it."""
import json

import numpy as np
import pytest

from mtl_framework import RoFormerV2Backbone
from mtl_framework.cli import main
from mtl_framework.rundir import RunDir, records

from conftest import DEMO_DATA, TINY_BACKBONE, write_tiny_experiment

TRAINED = 48  # write_tiny_experiment's max_length
EXAMPLES = 6


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """cmrc2018 (GlobalPointer) + cluener (EfficientGlobalPointer), trained with linear x2."""
    folder = tmp_path_factory.mktemp("long")
    backbone = {**TINY_BACKBONE, "rope_scaling": {"type": "linear", "factor": 2}}
    experiment = write_tiny_experiment(folder / "tiny.json", backbone=backbone,
                                       tasks=["cmrc2018", "cluener"],
                                       eval_every=3)  # one full dev evaluation, as trained
    assert main(["train", str(experiment), "--output", str(folder / "run")]) == 0
    return folder / "run"


def one_line_error(capsys):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def evaluate(run, capsys, *extra):
    capsys.readouterr()
    assert main(["evaluate", str(run), "--max-examples", str(EXAMPLES), "--json", *extra]) == 0
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err


def test_the_run_records_its_scaling_with_the_trained_length(run):
    trainer = json.loads(next((run / "checkpoints").glob("step-*/trainer.json")).read_text())
    assert trainer["backbone"]["rope_scaling"] == {"type": "linear", "factor": 2.0,
                                                   "original_max_length": TRAINED}


def test_evaluate_longer_than_trained_scores_fewer_windows(run, capsys):
    from mtl_framework.tokenizer import Tokenizer

    default, _ = evaluate(run, capsys)
    assert "max_length" not in default and "rope_scaling" not in default
    long, log = evaluate(run, capsys, "--max-length", "512", "--rope-scaling", "dynamic_ntk:4")
    # cluener's spec caps it at 128: said, not silent
    assert "cluener: scored at max_length 128, its spec's cap (--max-length 512 asked)" in log
    assert long["max_length"] == 512
    assert long["rope_scaling"] == {"type": "dynamic_ntk", "factor": 4.0,
                                    "original_max_length": TRAINED}
    assert RunDir(run).read_evaluations()[-1]["rope_scaling"] == long["rope_scaling"]
    # windows: a context of c tokens after a question of q takes 1 + ceil((c - room) /
    # stride) windows, room = L - q - 3, stride = min(128, room // 2) (mrc.py's rule),
    # counted here from the raw file with the run's tokenizer
    data = json.loads((DEMO_DATA / "cmrc2018" / "dev.json").read_text(encoding="utf-8"))
    tokenizer = Tokenizer(str(run / "vocab.txt"))
    questions = [(p["context"], qa["question"]) for a in data["data"] for p in a["paragraphs"]
                 for qa in p["qas"]][:EXAMPLES]

    def windows(length):
        total = 0
        for context, question in questions:
            c = len(tokenizer.encode(context)[0]) - 2
            room = length - min(64, len(tokenizer.encode(question)[0]) - 2) - 3
            total += 1 + max(0, -(-(c - room) // min(128, room // 2)))
        return total

    assert long["tasks"]["cmrc2018"]["windows"] == windows(512)
    assert default["tasks"]["cmrc2018"]["windows"] == windows(TRAINED)
    assert windows(512) < EXAMPLES + 2 < 2 * EXAMPLES < windows(TRAINED)
    # the run's own setting at the trained length, spelled out, scores the same
    same, _ = evaluate(run, capsys, "--max-length", str(TRAINED), "--rope-scaling", "linear:2")
    for task in ("cmrc2018", "cluener"):
        assert same["tasks"][task]["result"] == pytest.approx(default["tasks"][task]["result"])


def test_evaluate_refuses_a_bad_scaling_in_one_line(run, capsys):
    before = len(RunDir(run).read_evaluations())
    assert main(["evaluate", str(run), "--rope-scaling", "yarn:2"]) == 2
    assert "type must be one of linear, ntk, dynamic_ntk" in one_line_error(capsys)
    assert len(RunDir(run).read_evaluations()) == before


def test_predict_model_takes_the_override_backbone_and_heads_alike(run):
    from mtl_framework.evaluation.predict import load_model

    model = load_model(str(run), rope_scaling="ntk:8", log=None, max_length=512)
    expected = {"type": "ntk", "factor": 8.0, "original_max_length": TRAINED}
    assert model.model.backbone.config["rope_scaling"] == expected
    pointers = [layer for head in model.heads.values() for layer in head._flatten_layers()
                if hasattr(layer, "rope_scaling")]
    assert pointers and all(p.rope_scaling == expected for p in pointers)
    assert model.length(model.task("cmrc2018")) == 512


def test_predict_cli_at_512_writes_one_line_per_question(run, tmp_path, capsys):
    out = tmp_path / "answers.jsonl"
    assert main(["predict", str(run), "--task", "cmrc2018", "--input",
                 str(DEMO_DATA / "cmrc2018" / "dev.json"), "--output", str(out),
                 "--max-length", "512", "--rope-scaling", "linear:8"]) == 0
    data = json.loads((DEMO_DATA / "cmrc2018" / "dev.json").read_text(encoding="utf-8"))
    questions = sum(len(p["qas"]) for a in data["data"] for p in a["paragraphs"])
    assert len(out.read_text(encoding="utf-8").splitlines()) == questions


@pytest.mark.parametrize("fmt", ["bert4keras", "keras-hub", "roformer-pytorch"])
def test_formats_without_rope_scaling_refuse_it(run, tmp_path, capsys, fmt):
    output = tmp_path / fmt
    assert main(["export", str(run), "--format", fmt, "--output", str(output)]) == 2
    err = one_line_error(capsys)
    assert "rope_scaling linear x2" in err and "--format keras" in err
    assert not output.exists()


def test_keras_export_and_finetune_keep_and_override_it(run, tmp_path, capsys):
    export = tmp_path / "keras"
    assert main(["export", str(run), "--format", "keras", "--output", str(export)]) == 0
    config = json.loads((export / "config.json").read_text())
    assert config["backbone"]["rope_scaling"]["type"] == "linear"
    assert config["run"]["max_length"] == TRAINED
    # the model card cites the last dev line scored as trained, not a --max-length one, nor
    # a partial one (the --max-examples evaluations above): the training run's own
    lines = RunDir(run).read_evaluations()
    assert records.other_settings(lines[-1])
    plain = [line for line in lines if line.get("split") == "dev" and not records.other_settings(line)
             and "max_examples" not in line and "tasks_asked" not in line][-1]
    card = (export / "README.md").read_text()
    assert f"aggregate {plain['aggregate']:.4f}" in card
    assert not any(f"aggregate {line['aggregate']:.4f}" in card for line in lines
                   if "max_examples" in line and line["aggregate"] != plain["aggregate"])
    backbone = RoFormerV2Backbone.from_preset(str(export))
    assert backbone.config["rope_scaling"] == {"type": "linear", "factor": 2.0,
                                               "original_max_length": TRAINED}
    ids = np.array([[2, 40, 41, 42, 3, 0]], "int32")
    assert np.isfinite(np.asarray(backbone({"token_ids": ids}))).all()
    output = tmp_path / "ft"
    capsys.readouterr()
    assert main(["finetune", str(export), "cmrc2018", "--data-root", str(DEMO_DATA),
                 "--output", str(output), "--steps", "1", "--batch-size", "2",
                 "--max-length", "96", "--rope-scaling", "dynamic_ntk:2",
                 "--eval-max-examples", "2", "--json"]) == 0
    trainer = json.loads(next((output / "checkpoints").glob("step-*/trainer.json")).read_text())
    # trained length: the export's run (48), not the fine-tune's 96
    assert trainer["backbone"]["rope_scaling"] == {"type": "dynamic_ntk", "factor": 2.0,
                                                   "original_max_length": TRAINED}


def test_experiment_refuses_a_bad_rope_scaling_with_its_line(tmp_path, capsys):
    backbone = {**TINY_BACKBONE, "rope_scaling": {"type": "linear", "factor": 0.5}}
    experiment = write_tiny_experiment(tmp_path / "bad.json", backbone=backbone)
    assert main(["train", str(experiment), "--output", str(tmp_path / "run")]) == 2
    err = one_line_error(capsys)
    assert err.startswith(f"error: {experiment}:") and "backbone.rope_scaling.factor must be" in err
    assert not (tmp_path / "run").exists()
