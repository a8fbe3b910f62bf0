"""PyTorch `roformer` in and out: `mtl export --format roformer-pytorch`,
`RoFormerV2Backbone.from_roformer_pytorch`, and every backbone folder (keras, bert4keras,
roformer-pytorch) accepted by `backbone: {init|checkpoint: DIR}` and `mtl finetune`.

Parity with JunnYu's roformer 0.4.3 runs in .venv-torch (`make interop-torch`) through
interop/roformer_torch_worker.py; those tests skip when it is not installed."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from backbone_harness import encode
from interop.roformer_torch import run_torch, torch_site_packages, torch_unavailable_reason

from mtl_framework import RoFormerV2Backbone
from mtl_framework.cli import main as mtl
from mtl_framework.errors import UserError

from conftest import (
    DEMO_DATA,
    REPO,
    TINY_BACKBONE,
    export_all,
    padded_batch,
    train_tiny,
    write_tiny_experiment,
)

ALPHA_WARMUP, STEPS = 10, 3  # exported before the warm-up ends: a = 0.3


def write_experiment(path, backbone=None, **overrides):
    backbone = backbone or {**TINY_BACKBONE, "alpha_warmup_steps": ALPHA_WARMUP}
    return write_tiny_experiment(path, backbone=backbone, **{"steps": STEPS, **overrides})


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return train_tiny(write_experiment(tmp_path_factory.mktemp("torch_run") / "tiny.yaml"))


@pytest.fixture(scope="module")
def exported(run_dir):
    return export_all(run_dir, ("keras", "bert4keras", "roformer-pytorch"))


@pytest.fixture(scope="module")
def trained(run_dir):
    """The run's backbone as trained (a = 0.3, not folded)."""
    from mtl_framework.saving.trained import load_run_backbone

    backbone, _ = load_run_backbone(str(run_dir))
    assert float(backbone.residual_alpha) == pytest.approx(STEPS / ALPHA_WARMUP)
    return backbone


@pytest.fixture(scope="module")
def batch(run_dir, request):
    """(token_ids, segment_ids, texts): real TNEWS titles and AFQMC pairs (../shared/data,
    else the demo samples) tokenized with the run's vocab, padded to the longest."""
    from mtl_framework.tokenizer import Tokenizer

    try:
        titles, pairs = request.getfixturevalue("real_sentences")
    except pytest.skip.Exception:
        with open(DEMO_DATA / "tnews" / "dev.json", encoding="utf-8") as f:
            titles = [json.loads(line)["sentence"] for _, line in zip(range(48), f)]
        with open(DEMO_DATA / "afqmc" / "dev.txt", encoding="utf-8") as f:
            pairs = [line.rstrip("\n").split("\t")[:2] for _, line in zip(range(16), f)]
    tokenizer = Tokenizer(str(run_dir / "vocab.txt"))
    encoded = ([tokenizer.encode(t, max_length=48) for t in titles]
               + [tokenizer.encode(a, b, max_length=48) for a, b in pairs])
    token_ids, segment_ids = padded_batch(encoded)
    assert (token_ids == 0).any() and (segment_ids == 1).any()
    return token_ids, segment_ids, titles + [list(p) for p in pairs]


@pytest.fixture(scope="module")
def torch_env():
    reason = torch_unavailable_reason()
    if reason:
        pytest.skip(f"PyTorch parity: {reason}")


def load_safetensors(path):
    from safetensors.numpy import load_file

    return load_file(str(path))


def roformer_table(positions, dim):
    """RoFormerSinusoidalPositionalEmbedding._init_weight, transcribed loop for loop."""
    enc = np.array([[pos / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)]
                    for pos in range(positions)])
    out = np.zeros((positions, dim))
    out[:, : dim // 2] = np.sin(enc[:, 0::2])
    out[:, dim // 2:] = np.cos(enc[:, 1::2])
    return out


def tiny_backbone(**overrides):
    config = dict(vocab_size=300, num_layers=2, hidden_size=64, num_heads=4,
                  intermediate_size=128, dropout=0.0)
    backbone = RoFormerV2Backbone(**{**config, **overrides})
    backbone.build()
    return backbone


def assert_same_weights(a, b):
    pairs = [(x, y) for x, y in zip(a.variables, b.variables) if "seed_generator" not in x.path]
    assert len(pairs) == len([v for v in b.variables if "seed_generator" not in v.path])
    for x, y in pairs:
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=x.path)


# --- the export -------------------------------------------------------------------------

def test_export_writes_config_weights_vocab_and_card(run_dir, exported, trained):
    directory = exported["roformer-pytorch"]
    assert {p.name for p in directory.iterdir()} == {
        "config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json", "README.md",
        "provenance.json",
        "export-manifest.json"}  # what --force checks before replacing it (issue 24)
    config = json.loads((directory / "config.json").read_text())
    assert config["model_type"] == "roformer"
    assert config["architectures"] == ["RoFormerForMaskedLM"]
    assert (config["norm_type"], config["use_bias"], config["rotary_value"],
            config["hidden_act"]) == ("rms_norm", False, False, "relu")
    assert config["layer_norm_eps"] == 1e-7
    assert config["max_position_embeddings"] >= 48  # the run's max_length
    assert (config["vocab_size"], config["embedding_size"], config["hidden_size"],
            config["num_hidden_layers"], config["num_attention_heads"],
            config["intermediate_size"], config["type_vocab_size"]) == (
        trained.config["vocab_size"], 64, 64, 2, 4, 128, 2)
    tensors = load_safetensors(directory / "model.safetensors")
    layers = [f"roformer.encoder.layer.{i}." + n for i in range(2) for n in (
        "attention.self.query.weight", "attention.self.key.weight",
        "attention.self.value.weight", "attention.output.dense.weight",
        "intermediate.dense.weight", "output.dense.weight")]
    assert set(tensors) == {"roformer.embeddings.word_embeddings.weight",
                            "roformer.embeddings.token_type_embeddings.weight",
                            "roformer.encoder.embed_positions.weight", *layers}
    # torch Linear weights are [out, in]; a = 0.3 is folded into both output kernels
    alpha = float(trained.residual_alpha)
    np.testing.assert_array_equal(tensors["roformer.embeddings.word_embeddings.weight"],
                                  np.asarray(trained.token_embedding.embeddings))
    for i, layer in enumerate(trained.transformer_layers):
        prefix = f"roformer.encoder.layer.{i}."
        qkv = np.asarray(layer.attention.qkv_kernel)
        for j, name in enumerate(("query", "key", "value")):
            np.testing.assert_array_equal(tensors[prefix + f"attention.self.{name}.weight"],
                                          qkv[:, 64 * j: 64 * (j + 1)].T)
        np.testing.assert_allclose(tensors[prefix + "attention.output.dense.weight"],
                                   alpha * np.asarray(layer.attention.output_kernel).T, rtol=1e-6)
        np.testing.assert_array_equal(tensors[prefix + "intermediate.dense.weight"],
                                      np.asarray(layer.feed_forward.inner_kernel).T)
        np.testing.assert_allclose(tensors[prefix + "output.dense.weight"],
                                   alpha * np.asarray(layer.feed_forward.output_kernel).T,
                                   rtol=1e-6)
    table = tensors["roformer.encoder.embed_positions.weight"]
    assert table.shape == (config["max_position_embeddings"], 16)
    np.testing.assert_allclose(table, roformer_table(*table.shape), atol=1e-6)
    assert (directory / "vocab.txt").read_bytes() == (run_dir / "vocab.txt").read_bytes()
    assert json.loads((directory / "tokenizer_config.json").read_text())["tokenizer_class"] \
        == "BertTokenizer"
    card = (directory / "README.md").read_text(encoding="utf-8")
    assert "tnews, afqmc" in card and f"({STEPS} optimizer updates)" in card
    assert "roformer==0.4.3" in card and "attention_mask" in card
    assert "Task heads" not in card


def test_export_refuses_what_the_format_cannot_express(tmp_path, capsys):
    """head_size x heads != hidden: one line, exit 2, nothing written."""
    backbone = {"num_layers": 1, "hidden_size": 64, "num_heads": 4, "head_size": 8,
                "intermediate_size": 64, "dropout": 0.0, "vocab_size": 1500}
    experiment = write_experiment(tmp_path / "heads.yaml", backbone=backbone, steps=1,
                                  tasks=["tnews"], tasks_per_update=1)
    assert mtl(["train", str(experiment), "--output", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    output = tmp_path / "out"
    assert mtl(["export", str(tmp_path / "run"), "--format", "roformer-pytorch",
                "--output", str(output)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "trainer.json: head_size 8 x num_heads 4 != hidden_size 64" in err
    assert "--format keras or bert4keras" in err
    assert not output.exists()


# --- reading a roformer folder ------------------------------------------------------------

def test_from_roformer_pytorch_reads_the_export(exported, trained, batch):
    loaded = RoFormerV2Backbone.from_roformer_pytorch(str(exported["roformer-pytorch"]))
    b4k = exported["bert4keras"]  # the same folded weights through the other writer
    assert_same_weights(loaded, RoFormerV2Backbone.from_bert4keras(
        str(b4k / "bert_config.json"), str(b4k / "bert_model.ckpt")))
    assert float(loaded.residual_alpha) == 1.0
    token_ids, segment_ids, _ = batch
    real = token_ids != 0
    difference = np.abs(encode(loaded, token_ids, segment_ids)
                        - encode(trained, token_ids, segment_ids))[real].max()
    assert difference <= 1e-5


def test_round_trip_with_embedding_mapping_and_unprefixed_names(tmp_path):
    from safetensors.numpy import save_file

    from mtl_framework.architectures.roformer_v2.roformer_pytorch import save_roformer_pytorch

    backbone = tiny_backbone(embedding_size=32, segment_vocab_size=3)
    save_roformer_pytorch(backbone, tmp_path / "a")
    tensors = load_safetensors(tmp_path / "a" / "model.safetensors")
    np.testing.assert_array_equal(tensors["roformer.embeddings_project.weight"],
                                  np.asarray(backbone.embedding_mapping.kernel).T)
    np.testing.assert_array_equal(tensors["roformer.embeddings_project.bias"], np.zeros(64))
    assert_same_weights(RoFormerV2Backbone.from_roformer_pytorch(str(tmp_path / "a")), backbone)
    # a bare RoFormerModel's save_pretrained writes names without "roformer."
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "config.json").write_bytes((tmp_path / "a" / "config.json").read_bytes())
    save_file({k.removeprefix("roformer."): v for k, v in tensors.items()},
              str(tmp_path / "b" / "model.safetensors"), metadata={"format": "pt"})
    assert_same_weights(RoFormerV2Backbone.from_roformer_pytorch(str(tmp_path / "b")), backbone)


def test_reader_errors_name_the_file_and_what_is_wrong(tmp_path):
    from safetensors.numpy import save_file

    from mtl_framework.architectures.roformer_v2.roformer_pytorch import save_roformer_pytorch

    good = tmp_path / "good"
    save_roformer_pytorch(tiny_backbone(embedding_size=32), good)
    config = json.loads((good / "config.json").read_text())
    tensors = load_safetensors(good / "model.safetensors")

    def folder(name, config=config, tensors=tensors):
        path = tmp_path / name
        path.mkdir()
        (path / "config.json").write_text(json.dumps(config))
        if tensors is not None:
            save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
        return str(path)

    with pytest.raises(UserError, match=r"v1/config.json: norm_type is 'layer_norm', use_bias "
                                        r"is True; a RoFormerV2 config has"):
        RoFormerV2Backbone.from_roformer_pytorch(
            folder("v1", {**config, "norm_type": "layer_norm", "use_bias": True}))
    missing = {k: v for k, v in tensors.items() if "layer.1.output.dense" not in k}
    with pytest.raises(UserError, match=r"missing/model.safetensors: roformer.encoder.layer.1."
                                        r"output.dense.weight missing"):
        RoFormerV2Backbone.from_roformer_pytorch(folder("missing", tensors=missing))
    with pytest.raises(UserError, match=r"shape/model.safetensors: .*word_embeddings.weight has "
                                        r"shape \(300, 32\), config.json implies \(301, 32\)"):
        RoFormerV2Backbone.from_roformer_pytorch(folder("shape", {**config, "vocab_size": 301}))
    biased = {**tensors, "roformer.embeddings_project.bias": np.ones(64, "float32")}
    with pytest.raises(UserError, match=r"embeddings_project.bias is not zero"):
        RoFormerV2Backbone.from_roformer_pytorch(folder("bias", tensors=biased))
    with pytest.raises(UserError, match=r"nothing: neither model.safetensors nor "
                                        r"pytorch_model.bin"):
        RoFormerV2Backbone.from_roformer_pytorch(folder("nothing", tensors=None))
    if importlib.util.find_spec("torch") is None:
        path = folder("bin", tensors=None)
        Path(path, "pytorch_model.bin").write_bytes(b"not read")
        with pytest.raises(UserError, match=r"bin/pytorch_model.bin: reading a PyTorch pickle "
                                            r"needs torch \(pip install torch\)"):
            RoFormerV2Backbone.from_roformer_pytorch(path)


# --- every backbone folder: layout, init/checkpoint, finetune ----------------------------

def test_layout_tells_the_folders_apart(exported, tmp_path):
    from mtl_framework import architectures

    for kind, directory in exported.items():
        assert architectures.layout(str(directory)) == kind
    with pytest.raises(UserError, match="nowhere: no such folder"):
        architectures.layout(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="empty: not a backbone folder; expected config.json"):
        architectures.layout(str(tmp_path / "empty"))
    hub = tmp_path / "hub"
    hub.mkdir()
    (hub / "config.json").write_text(json.dumps(
        {"registered_name": "keras_hub>RoformerV2Backbone", "config": {}}))
    with pytest.raises(UserError, match="hub: a keras-hub preset"):
        architectures.layout(str(hub))


@pytest.mark.parametrize("kind,key", [("keras", "init"), ("bert4keras", "init"),
                                      ("roformer-pytorch", "init"),
                                      ("bert4keras", "checkpoint"),
                                      ("roformer-pytorch", "checkpoint")])
def test_run_starts_from_every_folder(kind, key, exported, trained, batch, run_dir, tmp_path):
    from mtl_framework.loop.run import Run

    directory = exported[kind]
    experiment = write_experiment(tmp_path / "start.yaml", tasks=["tnews"],
                                  cache_dir=str(run_dir.parent / "cache"),
                                  backbone={key: str(directory), "dropout": 0.1})
    run = Run(str(experiment), output=str(tmp_path / "run"), log=lambda *_: None)
    # the folder's own vocab (the run directory gets a copy when training starts)
    assert Path(run.vocab_path).read_bytes() == (run_dir / "vocab.txt").read_bytes()
    assert run.backbone.config["dropout"] == 0.1
    # keras keeps a = 0.3 as trained; bert4keras and roformer hold it folded (a = 1)
    assert float(run.backbone.residual_alpha) == pytest.approx(0.3 if kind == "keras" else 1.0)
    token_ids, segment_ids, _ = batch
    real = token_ids != 0
    assert np.abs(encode(run.backbone, token_ids, segment_ids)
                  - encode(trained, token_ids, segment_ids))[real].max() <= 1e-5


def test_run_refuses_dims_that_differ_from_the_folder(exported, run_dir, tmp_path):
    from mtl_framework.loop.run import Run

    experiment = write_experiment(
        tmp_path / "dims.yaml", tasks=["tnews"], cache_dir=str(run_dir.parent / "cache"),
        backbone={"checkpoint": str(exported["roformer-pytorch"]), "num_layers": 3})
    with pytest.raises(ValueError, match=r"dims.yaml:\d+: backbone.num_layers is 3 but "
                                         r".*roformer-pytorch/config.json has 2"):
        Run(str(experiment), output=str(tmp_path / "run"), log=lambda *_: None)


@pytest.mark.parametrize("kind", ["bert4keras", "roformer-pytorch"])
def test_finetune_accepts_bert4keras_and_roformer_folders(kind, exported, run_dir, tmp_path,
                                                          capsys):
    output = tmp_path / "ft"
    assert mtl(["finetune", str(exported[kind]), "afqmc", "--data-root", str(DEMO_DATA),
                "--steps", "1", "--batch-size", "4", "--max-length", "48",
                "--cache-dir", str(run_dir.parent / "cache"), "--eval-max-examples", "8",
                "--output", str(output), "--json"]) == 0
    line = json.loads(capsys.readouterr().out)
    assert line["step"] == 1 and line["tasks"]["afqmc"]["examples"] == 8


def test_finetune_refuses_a_folder_it_cannot_start_from(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    output = tmp_path / "ft"
    assert mtl(["finetune", str(tmp_path / "empty"), "afqmc", "--output", str(output)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "empty: not a backbone folder" in err
    assert not output.exists()


# --- parity with PyTorch roformer 0.4.3 (.venv-torch) -----------------------------------

def test_bert_tokenizer_on_the_export_gives_our_ids(torch_env, exported, batch, tmp_path):
    """BertTokenizer on the exported vocab gives our ids (the outputs of roformer 0.4.3 on
    our export equal ours: test_backbone_harness.py's converter parity)."""
    token_ids, _, texts = batch
    (tmp_path / "texts.json").write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
    run_torch("tokenize", exported["roformer-pytorch"], tmp_path / "texts.json",
              tmp_path / "ids.json")
    ids = json.loads((tmp_path / "ids.json").read_text())
    ours = [row[row != 0].tolist() for row in token_ids]
    whole = [i for i, row in enumerate(ours) if len(row) < 48]  # not truncated (max_length)
    assert len(whole) > len(ours) // 2
    assert [ours[i] for i in whole] == [ids[i] for i in whole]


def test_mainline_transformers_roformer_computes_something_else(torch_env, exported, trained,
                                                                batch, tmp_path):
    """transformers.RoFormerModel is RoFormer v1 (LayerNorm, biases): it loads our file
    without an error and gives other hidden states."""
    token_ids, segment_ids, _ = batch
    np.savez(tmp_path / "inputs.npz", token_ids=token_ids, segment_ids=segment_ids)
    run_torch("encode", exported["roformer-pytorch"], tmp_path / "inputs.npz",
              tmp_path / "v1.npy", "transformers")
    real = token_ids != 0
    difference = np.abs(encode(trained, token_ids, segment_ids)
                        - np.load(tmp_path / "v1.npy"))[real].max()
    print(f"mainline transformers RoFormer (v1) vs ours, max |diff|: {difference:.2f}")
    assert difference > 0.1


SAVED_CONFIG = {"vocab_size": 300, "embedding_size": 64, "hidden_size": 64,
                "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
                "hidden_act": "relu", "max_position_embeddings": 64, "type_vocab_size": 2,
                "layer_norm_eps": 1e-7, "norm_type": "rms_norm", "use_bias": False,
                "rotary_value": False, "pad_token_id": 0}


def read_in_this_python(directory, out):
    """{variable path without the model's name: array} of from_roformer_pytorch(directory),
    computed in a fresh process of this Python that can import torch (the torch venv's
    site-packages appended: same Python version)."""
    script = (
        "import sys, numpy as np\n"
        f"sys.path.append({torch_site_packages()!r})\n"
        "from mtl_framework import RoFormerV2Backbone\n"
        f"b = RoFormerV2Backbone.from_roformer_pytorch({str(directory)!r})\n"
        f"np.savez({str(out)!r}, **{{v.path.split('/', 1)[1]: np.asarray(v) "
        "for v in b.variables if 'seed_generator' not in v.path})\n")
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    with np.load(out) as values:
        return {k: values[k] for k in values.files}


def test_model_saved_by_roformer_as_a_pickle_loads_with_identical_weights(torch_env, tmp_path):
    """RoFormerForMaskedLM with pytorch_model.bin (the hub's copies), read in a Python
    that has torch (RoFormerModel's safetensors, names without `roformer.`: the harness's
    converter parity)."""
    (tmp_path / "config.json").write_text(json.dumps(SAVED_CONFIG))
    directory = tmp_path / "saved"
    run_torch("save", tmp_path / "config.json", directory, tmp_path / "torch.npz", 7, "bin")
    assert (directory / "pytorch_model.bin").exists()
    with np.load(tmp_path / "torch.npz") as values:
        torch_weights = {k.removeprefix("roformer."): values[k] for k in values.files}
    if importlib.util.find_spec("torch") is None:
        with pytest.raises(UserError, match="pytorch_model.bin: reading a PyTorch pickle"):
            RoFormerV2Backbone.from_roformer_pytorch(str(directory))
    ours = read_in_this_python(directory, tmp_path / "ours.npz")
    backbone = tiny_backbone(vocab_size=300)
    for variable in backbone.variables:
        if "seed_generator" not in variable.path:
            variable.assign(ours[variable.path.split("/", 1)[1]])
    weight = ours.__getitem__

    np.testing.assert_array_equal(weight("token_embedding/embeddings"),
                                  torch_weights["embeddings.word_embeddings.weight"])
    np.testing.assert_array_equal(weight("segment_embedding/embeddings"),
                                  torch_weights["embeddings.token_type_embeddings.weight"])
    for i in range(2):
        theirs = f"encoder.layer.{i}."
        layer = f"transformer_layer_{i}/"
        qkv = np.concatenate([torch_weights[theirs + f"attention.self.{n}.weight"].T
                              for n in ("query", "key", "value")], axis=1)
        np.testing.assert_array_equal(weight(layer + "attention/qkv_kernel"), qkv)
        for ours_name, theirs_name in (("attention/output_kernel", "attention.output.dense"),
                                       ("feed_forward/inner_kernel", "intermediate.dense"),
                                       ("feed_forward/output_kernel", "output.dense")):
            np.testing.assert_array_equal(weight(layer + ours_name),
                                          torch_weights[theirs + theirs_name + ".weight"].T)
    rng = np.random.default_rng(0)
    token_ids = rng.integers(5, 300, (4, 20)).astype("int32")
    token_ids[1, 12:] = 0
    token_ids[3, 5:] = 0
    segment_ids = np.zeros_like(token_ids)
    segment_ids[0, 9:] = 1
    np.savez(tmp_path / "inputs.npz", token_ids=token_ids, segment_ids=segment_ids)
    run_torch("encode", directory, tmp_path / "inputs.npz", tmp_path / "theirs.npy")
    real = token_ids != 0
    difference = np.abs(encode(backbone, token_ids, segment_ids)
                        - np.load(tmp_path / "theirs.npy"))[real].max()
    print(f"saved by roformer (pytorch_model.bin) vs ours: {difference:.2e}")
    assert difference <= 1e-5
