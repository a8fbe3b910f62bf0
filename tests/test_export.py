"""`mtl export` on a real (tiny) run: each format loads in its target library with the
run's weights; bert4keras (legacy-Keras subprocess) and keras-hub give our outputs."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from interop.legacy_bert4keras import bert4keras_available, run_bert4keras

from mtl_framework import RoFormerV2Backbone
from mtl_framework.architectures.roformer_v2.keras_hub import keras_hub_available
from mtl_framework.cli import main as mtl
from mtl_framework.errors import UserError

from conftest import write_tiny_experiment

REPO = Path(__file__).resolve().parents[1]
DEMO_DATA = REPO / "experiments" / "demo" / "data"
TASKS = ["tnews", "afqmc", "cluener"]


def write_experiment(path, **overrides):
    return write_tiny_experiment(path, **{"tasks": TASKS + [{"name": "mlm", "rate": 0.2}],
                                          **overrides})


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("export_run")
    assert mtl(["train", str(write_experiment(root / "tiny.yaml")), "--output",
                str(root / "run")]) == 0
    return root / "run"


@pytest.fixture(scope="module")
def exported(run_dir):
    formats = ["keras", "bert4keras"] + (["keras-hub"] if keras_hub_available() else [])
    out = {}
    for fmt in formats:
        out[fmt] = run_dir / "export" / fmt
        assert mtl(["export", str(run_dir), "--format", fmt, "--output", str(out[fmt])]) == 0
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


@pytest.fixture(scope="module")
def sentences(request):
    """Real TNEWS titles and AFQMC pairs from ../shared/data, else the demo samples."""
    try:
        return request.getfixturevalue("real_sentences")
    except pytest.skip.Exception:
        with open(DEMO_DATA / "tnews" / "dev.json", encoding="utf-8") as f:
            titles = [json.loads(line)["sentence"] for _, line in zip(range(48), f)]
        with open(DEMO_DATA / "afqmc" / "dev.txt", encoding="utf-8") as f:
            pairs = [line.rstrip("\n").split("\t")[:2] for _, line in zip(range(16), f)]
        return titles, pairs


def encodings(run_dir, sentences):
    from mtl_framework.tokenizer import Tokenizer

    tokenizer = Tokenizer(str(run_dir / "vocab.txt"))
    titles, pairs = sentences
    return ([tokenizer.encode(t, max_length=64) for t in titles]
            + [tokenizer.encode(a, b, max_length=64) for a, b in pairs])


def padded(encoded):
    length = max(len(ids) for ids, _ in encoded)
    token_ids = np.zeros((len(encoded), length), dtype="int32")
    segment_ids = np.zeros_like(token_ids)
    for row, (ids, segments) in enumerate(encoded):
        token_ids[row, : len(ids)] = ids
        segment_ids[row, : len(ids)] = segments
    return token_ids, segment_ids


def encode(model, token_ids, segment_ids):
    return np.asarray(model({"token_ids": token_ids, "segment_ids": segment_ids}))


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


def test_bert4keras_loads_export_and_equals_ours_on_padded_real_sentences(
        run_dir, exported, sentences, tmp_path):
    if not bert4keras_available():
        pytest.skip("bert4keras/tf-keras not installed (make interop)")
    directory = exported["bert4keras"]
    token_ids, segment_ids = padded(encodings(run_dir, sentences))
    assert (token_ids == 0).any(), "the batch must contain padding"
    np.savez(tmp_path / "inputs.npz", token_ids=token_ids, segment_ids=segment_ids)
    # bert4keras's build_transformer_model(config, checkpoint, model="roformer_v2")
    run_bert4keras("encode", directory / "bert_config.json", directory / "bert_model.ckpt",
                   tmp_path / "inputs.npz", tmp_path / "theirs.npy")
    theirs = np.load(tmp_path / "theirs.npy")
    ours = encode(RoFormerV2Backbone.from_preset(str(exported["keras"])), token_ids, segment_ids)
    real = token_ids > 0
    assert ours.shape == theirs.shape
    assert np.abs(ours[real] - theirs[real]).max() <= 1e-5


def test_keras_hub_loads_export_equal_unpadded_and_differs_padded(run_dir, exported, sentences):
    """Equal (<= 1e-5) on unpadded input; with padding keras-hub 0.32 masks query rows
    instead of keys, so real-token outputs of padded rows move (measured > 1e-2)."""
    if not keras_hub_available():
        pytest.skip("keras-hub not installed (make interop)")
    import keras_hub

    hub = keras_hub.models.RoformerV2Backbone.from_preset(str(exported["keras-hub"]))
    ours = RoFormerV2Backbone.from_preset(str(exported["keras"]))
    encoded = encodings(run_dir, sentences)
    worst = 0.0
    for ids, segments in encoded[::4]:  # one sentence at a time: no padding at all
        token_ids, segment_ids = np.array([ids], "int32"), np.array([segments], "int32")
        worst = max(worst, np.abs(encode(ours, token_ids, segment_ids)
                                  - encode(hub, token_ids, segment_ids)).max())
    assert worst <= 1e-5
    token_ids, segment_ids = padded(encoded)
    real_in_padded_rows = (token_ids > 0) & (token_ids == 0).any(axis=1, keepdims=True)
    difference = np.abs(encode(ours, token_ids, segment_ids)
                        - encode(hub, token_ids, segment_ids))[real_in_padded_rows].max()
    assert difference > 1e-2  # documented in the README (keras-hub padding)


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
