"""`mtl export` on a real (tiny) run: each format holds the run's weights, its card and
vocab; --with-heads, `backbone: {init: DIR}`, `mtl finetune`. That each format's library
gives our outputs: test_backbone_harness.py (converter parity)."""
import json
import shutil

import numpy as np
import pytest
from backbone_harness import encode

from mtl_framework import RoFormerV2Backbone
from mtl_framework.architectures.roformer_v2.keras_hub import keras_hub_available
from mtl_framework.cli import main as mtl
from mtl_framework.errors import UserError

from conftest import DEMO_DATA, export_all, train_tiny, write_tiny_experiment

TASKS = ["tnews", "afqmc", "cluener"]


def write_experiment(path, **overrides):
    return write_tiny_experiment(path, **{"tasks": TASKS + [{"name": "mlm", "rate": 0.2}],
                                          **overrides})


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return train_tiny(write_experiment(tmp_path_factory.mktemp("export_run") / "tiny.yaml"))


@pytest.fixture(scope="module")
def exported(run_dir):
    out = export_all(run_dir, ["keras", "bert4keras"]
                     + (["keras-hub"] if keras_hub_available() else []))
    out["heads"] = run_dir / "export" / "keras-heads"
    assert mtl(["export", str(run_dir), "--format", "keras", "--with-heads",
                "--output", str(out["heads"])]) == 0
    return out


@pytest.fixture(scope="module")
def checkpoint(run_dir):
    """(trainer.json dict, [arrays in the order trainer.json lists them]) of the run's
    latest checkpoint (state.npz keys its arrays by those names)."""
    step = sorted((run_dir / "checkpoints").iterdir())[-1]
    state = json.loads((step / "trainer.json").read_text())
    with np.load(step / "state.npz") as values:
        arrays = [values[name] for name in state["variables"]]
    return state, arrays


def backbone_arrays(checkpoint):
    """The backbone's weights: its variables come first in the checkpoint (dropout seed
    states, which are no weights, left out)."""
    state, arrays = checkpoint
    after = {n for h in state["heads"].values() for n in h["variables"]}
    count = next(i for i, name in enumerate(state["variables"])
                 if name in after or name.startswith("initial_loss"))
    return [a for a, name in zip(arrays[:count], state["variables"])
            if "seed_generator" not in name]


def assert_same_weights(backbone, arrays):
    variables = [v for v in backbone.variables if "seed_generator" not in v.path]
    assert len(variables) == len(arrays)
    for variable, value in zip(variables, arrays):
        np.testing.assert_array_equal(np.asarray(variable), value, err_msg=variable.path)


def test_keras_export_loads_with_identical_weights(run_dir, exported, checkpoint):
    state, _ = checkpoint
    directory = exported["keras"]
    backbone = RoFormerV2Backbone.from_preset(str(directory))
    assert backbone.config == state["backbone"]
    assert_same_weights(backbone, backbone_arrays(checkpoint))
    assert (directory / "vocab.txt").read_bytes() == (run_dir / "vocab.txt").read_bytes()
    assert not (directory / "heads.json").exists()
    card = (directory / "README.md").read_text(encoding="utf-8")
    for task in TASKS + ["mlm"]:
        assert task in card
    assert f"({state['step']} optimizer updates)" in card
    assert "not evaluated (run `mtl evaluate" in card


def test_bert4keras_export_round_trip_identical_weights(exported, checkpoint):
    directory = exported["bert4keras"]
    assert {p.name for p in directory.iterdir()} >= {
        "bert_config.json", "bert_model.ckpt.index", "vocab.txt"}
    backbone = RoFormerV2Backbone.from_bert4keras(str(directory / "bert_config.json"),
                                                  str(directory / "bert_model.ckpt"))
    assert_same_weights(backbone, backbone_arrays(checkpoint))


def test_keras_hub_tokenizer_points_at_our_vocab(run_dir, exported):
    if not keras_hub_available():
        pytest.skip("keras-hub not installed (make interop)")
    directory = exported["keras-hub"]
    config = json.loads((directory / "tokenizer.json").read_text())
    assert config["registered_name"] == "keras_hub>RoformerV2Tokenizer"
    assert config["config"]["lowercase"] and config["config"]["strip_accents"]
    vocab = (directory / "assets" / "tokenizer" / "vocabulary.txt").read_bytes()
    assert vocab == (run_dir / "vocab.txt").read_bytes()
    import importlib.util

    if importlib.util.find_spec("tensorflow_text") is None:
        return  # keras-hub's WordPiece tokenizer needs tensorflow-text to run
    import keras_hub

    from mtl_framework.tokenizer import Tokenizer

    tokenizer = keras_hub.models.RoformerV2Tokenizer.from_preset(str(directory))
    text = "今天天气很好"
    ours = Tokenizer(str(run_dir / "vocab.txt")).encode(text)[0][1:-1]
    assert [int(i) for i in np.asarray(tokenizer(text))] == ours


def test_residual_scale_is_folded_for_bert4keras(tmp_path):
    """Exported before its warm-up ended (a = 0.4): a moves into the output kernels."""
    from mtl_framework.architectures.roformer_v2 import bert4keras
    from mtl_framework.saving.writer import fold_residual_alpha

    backbone = RoFormerV2Backbone(vocab_size=300, num_layers=2, hidden_size=32, num_heads=2,
                                  intermediate_size=64, dropout=0.0, alpha_warmup_steps=10)
    backbone.build()
    backbone.update_residual_alpha(4)
    ids = np.array([[2, 7, 8, 9, 3, 0], [2, 5, 6, 3, 0, 0]], dtype="int32")
    before = encode(backbone, ids, np.zeros_like(ids))
    assert fold_residual_alpha(backbone) == pytest.approx(0.4)
    bert4keras.save_bert4keras(backbone, tmp_path)
    loaded = RoFormerV2Backbone.from_bert4keras(str(tmp_path / "bert_config.json"),
                                                str(tmp_path / "bert_model.ckpt"))
    assert float(loaded.residual_alpha) == 1.0
    assert np.abs(encode(loaded, ids, np.zeros_like(ids)) - before).max() <= 1e-5


def test_with_heads_only_for_keras_format(run_dir, tmp_path, capsys):
    assert mtl(["export", str(run_dir), "--format", "bert4keras", "--with-heads",
                "--output", str(tmp_path / "x")]) == 2
    assert "--with-heads is for --format keras" in capsys.readouterr().err


# --- model card: dev scores from evaluations.jsonl --------------------------------------

def test_model_card_lists_last_dev_scores(run_dir, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("export", "logs"))
    lines = [
        {"step": 2, "split": "dev", "tasks": {"tnews": {"metric": "accuracy", "score": 0.1,
                                                        "examples": 40}}, "aggregate": 0.1},
        {"step": 3, "split": "dev", "aggregate": 0.4321,
         "tasks": {"tnews": {"metric": "accuracy", "score": 0.25, "baseline": 0.11,
                             "examples": 100},
                   "cluener": {"metric": "span_f1", "score": 0.6142, "examples": 50}}},
        {"step": 3, "split": "test", "tasks": {"tnews": {"metric": "accuracy", "score": 0.9,
                                                         "examples": 7}}, "aggregate": 0.9},
    ]
    (copy / "evaluations.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert mtl(["export", str(copy), "--format", "keras", "--output", str(tmp_path / "k")]) == 0
    card = (tmp_path / "k" / "README.md").read_text(encoding="utf-8")
    assert "step 3, aggregate 0.4321" in card
    assert "| tnews | accuracy | 0.2500 | 0.1100 | 100 |" in card
    assert "| cluener | span_f1 | 0.6142 | - | 50 |" in card
    assert "0.9000" not in card and "0.1000" not in card
    assert "not evaluated" not in card


# --- --with-heads and experiment `backbone: {init: DIR}` ---------------------------------

def test_with_heads_export_holds_heads_and_their_weights(exported, checkpoint):
    state, arrays = checkpoint
    heads = json.loads((exported["heads"] / "heads.json").read_text())
    assert list(heads) == TASKS + ["mlm"]
    assert heads["tnews"]["type"] == "classification" and heads["tnews"]["num_labels"] == 15
    assert heads["cluener"]["type"] == "extraction_ner" and heads["cluener"]["num_labels"] == 10
    assert heads["mlm"]["variables"] == []  # tied to the token embedding
    index = {name: i for i, name in enumerate(state["variables"])}
    with np.load(exported["heads"] / "heads.weights.npz") as weights:
        assert set(weights.files) == {n for h in heads.values() for n in h["variables"]}
        for name in weights.files:
            np.testing.assert_array_equal(weights[name], arrays[index[name]])
    config = json.loads((exported["heads"] / "config.json").read_text())
    assert config["heads"] == TASKS + ["mlm"]
    assert "Task heads included" in (exported["heads"] / "README.md").read_text(encoding="utf-8")


def test_init_from_export_starts_backbone_and_same_named_heads(exported, checkpoint, tmp_path):
    from mtl_framework.loop.run import Run
    from mtl_framework.tokenizer import Tokenizer

    state, arrays = checkpoint
    experiment = write_experiment(
        tmp_path / "continue.yaml", backbone={"init": str(exported["heads"]), "dropout": 0.1},
        tasks=["tnews", "cluewsc"], cache_dir=str(exported["heads"].parent.parent.parent / "cache"))
    messages = []
    run = Run(str(experiment), output=str(tmp_path / "run"), log=messages.append)
    assert run.tokenizer.vocab == Tokenizer(str(exported["heads"] / "vocab.txt")).vocab
    assert run.backbone.config["dropout"] == 0.1
    assert run.backbone.config["alpha_warmup_steps"] == 0
    assert_same_weights(run.backbone, backbone_arrays(checkpoint))
    index = {name: i for i, name in enumerate(state["variables"])}
    for variable in run.model.heads["tnews"].variables:
        np.testing.assert_array_equal(np.asarray(variable), arrays[index[variable.path]])
    assert any("heads from" in m and "tnews" in m and "new: cluewsc" in m for m in messages)
    assert not (tmp_path / "run").exists()  # nothing written before training starts
    run.train()  # one task from the export plus a new one: trains
    assert (tmp_path / "run" / "checkpoints").is_dir()
    assert (tmp_path / "run" / "vocab.txt").read_bytes() == \
        (exported["heads"] / "vocab.txt").read_bytes()


def test_init_errors_name_the_file_and_the_mismatch(exported, tmp_path):
    from mtl_framework.loop.run import Run

    cache = str(exported["heads"].parent.parent.parent / "cache")
    bad_dims = write_experiment(tmp_path / "dims.yaml", cache_dir=cache, tasks=["tnews"],
                                backbone={"init": str(exported["heads"]), "hidden_size": 128})
    with pytest.raises(ValueError, match=r"dims.yaml:\d+: backbone.hidden_size is 128 but "
                                         r".*config.json has 64"):
        Run(str(bad_dims), output=str(tmp_path / "a"), log=lambda *_: None)
    changed = tmp_path / "changed"
    shutil.copytree(exported["heads"], changed)
    heads = json.loads((changed / "heads.json").read_text())
    heads["tnews"]["num_labels"] = 3
    (changed / "heads.json").write_text(json.dumps(heads))
    bad_head = write_experiment(tmp_path / "head.yaml", cache_dir=cache, tasks=["tnews"],
                                backbone={"init": str(changed)})
    with pytest.raises(UserError, match=r"changed/heads.json: head 'tnews' has num_labels 3, "
                                         r"this model's 'tnews' has 15"):
        Run(str(bad_head), output=str(tmp_path / "b"), log=lambda *_: None)
    missing = write_experiment(tmp_path / "missing.yaml", cache_dir=cache, tasks=["tnews"],
                               backbone={"init": str(tmp_path / "nowhere")})
    with pytest.raises(UserError, match=r"missing.yaml:\d+: .*nowhere: no such folder; give a "
                                        r"backbone folder"):
        Run(str(missing), output=str(tmp_path / "c"), log=lambda *_: None)


# --- mtl finetune EXPORTED_DIR TASK ---------------------------------------------------

def test_finetune_trains_one_task_from_export_and_scores_dev(exported, checkpoint, tmp_path,
                                                             capsys):
    import yaml

    cache = str(exported["keras"].parent.parent.parent / "cache")
    output = tmp_path / "ft"
    assert mtl(["finetune", str(exported["keras"]), "afqmc", "--data-root", str(DEMO_DATA),
                "--steps", "3", "--batch-size", "4", "--lr", "1e-3", "--max-length", "48",
                "--cache-dir", cache, "--eval-max-examples", "40", "--output", str(output),
                "--json"]) == 0
    line = json.loads(capsys.readouterr().out)
    assert line["step"] == 3 and line["split"] == "dev"
    assert line["tasks"]["afqmc"]["metric"] == "accuracy"
    assert line["tasks"]["afqmc"]["examples"] == 40
    assert 0.0 <= line["tasks"]["afqmc"]["score"] <= 1.0
    recorded = [json.loads(x) for x in (output / "evaluations.jsonl").read_text().splitlines()]
    assert recorded[-1]["tasks"]["afqmc"]["score"] == line["tasks"]["afqmc"]["score"]
    experiment = yaml.safe_load((output / "finetune.yaml").read_text())
    assert experiment["backbone"]["init"] == str(exported["keras"].resolve())
    assert experiment["tasks"] == ["afqmc"] and experiment["tasks_per_update"] == 1
    # the run started from the export: its first checkpoint moved away from it by 3 updates
    state = json.loads(next((output / "checkpoints").iterdir()).joinpath("trainer.json")
                       .read_text())
    assert state["step"] == 3 and list(state["heads"]) == ["afqmc"]


def test_finetune_errors(exported, tmp_path, capsys):
    assert mtl(["finetune", str(tmp_path / "nowhere"), "afqmc"]) == 2
    assert "nowhere: no such folder; give a backbone folder" in capsys.readouterr().err
    assert mtl(["finetune", str(exported["keras"]), "no_such_task", "--data-root",
                str(DEMO_DATA), "--output", str(tmp_path / "x")]) == 2
    assert "no_such_task" in capsys.readouterr().err
