"""BERT and ALBERT beside RoFormerV2 (architectures/): what is theirs alone (ALBERT's
shared block, sizes, Google's checkpoint reader, runs on BERT); what a reader cannot hold
is refused naming the file and the key. Build, call, padding, round trips and parity with
each format's library: test_backbone_harness.py."""
import json

import numpy as np
import pytest
from backbone_harness import encode

from mtl_framework import architectures
from mtl_framework.errors import UserError

# bert_config.json / config.json keys of a tiny model (Google's and transformers' names)
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 64, "max_position_embeddings": 128, "type_vocab_size": 2,
        "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
ALBERT = {"embedding_size": 16}


def tiny_config(architecture, vocab_size, **extra):
    return {**TINY, "vocab_size": vocab_size, **(ALBERT if architecture == "albert" else {}),
            **extra}


def test_albert_shares_one_block_across_depth():
    sizes = [architectures.build_backbone(architectures.backbone_config(
        "albert", None, vocab_size=50, num_layers=n, hidden_size=32, num_heads=4))
        for n in (1, 6)]
    for backbone in sizes:
        backbone.build()
    assert sizes[0].count_params_exact() == sizes[1].count_params_exact()
    bert = architectures.build_backbone(architectures.backbone_config(
        "bert", None, vocab_size=50, num_layers=6, hidden_size=32, num_heads=4))
    bert.build()
    assert bert.count_params_exact() > sizes[1].count_params_exact()


def test_sizes_and_what_bert_has_not():
    base = architectures.backbone_config("bert", "base")
    assert (base["num_layers"], base["hidden_size"], base["intermediate_size"]) == (12, 768, 3072)
    assert architectures.backbone_config("albert", "base")["embedding_size"] == 128
    with pytest.raises(ValueError, match="alpha_warmup_steps is RoFormerV2's"):
        architectures.backbone_config("bert", "small", alpha_warmup_steps=10)
    with pytest.raises(ValueError, match="unknown architecture 'gpt'"):
        architectures.backbone_config("gpt", "small")


def google_folder(tmp_path, architecture="bert", **config):
    """A Google-layout folder written with the TF checkpoint writer of our own
    RoFormerV2 exports, under bert/weights.py's names (the reader's checks, not parity)."""
    from mtl_framework.architectures.bert.weights import ALBERT_CHECKPOINT, BERT_CHECKPOINT, arrays
    from mtl_framework.architectures.roformer_v2.bert4keras import write_checkpoint

    raw = tiny_config(architecture, 60, hidden_act="gelu", **config)
    ours = architectures.build_backbone(architectures.backbone_config(
        architecture, None, vocab_size=60, num_layers=2, hidden_size=32, num_heads=4,
        intermediate_size=64, max_positions=128, embedding_size=raw.get("embedding_size")))
    ours.build()
    names = ALBERT_CHECKPOINT if architecture == "albert" else BERT_CHECKPOINT
    weights = arrays(ours, names)
    (tmp_path / f"{architecture}_config.json").write_text(json.dumps(raw))
    return ours, weights, lambda w: write_checkpoint(w, str(tmp_path / "bert_model.ckpt"))


def test_google_reader_refuses_in_one_line(tmp_path):
    ours, weights, write = google_folder(tmp_path)
    write(weights)
    found = architectures.layout(str(tmp_path))
    loaded = architectures.load_backbone(str(tmp_path), found)
    ids = np.array([[2, 7, 8, 0]], "int32")
    np.testing.assert_array_equal(encode(loaded, ids, np.zeros_like(ids)),
                                  encode(ours, ids, np.zeros_like(ids)))
    config = json.loads((tmp_path / "bert_config.json").read_text())
    (tmp_path / "bert_config.json").write_text(json.dumps({**config, "rotary": True}))
    with pytest.raises(UserError, match=r"bert_config.json: key 'rotary' is not supported"):
        architectures.read_config(str(tmp_path), architectures.layout(str(tmp_path)))
    (tmp_path / "bert_config.json").write_text(json.dumps(
        {**config, "position_embedding_type": "relative_key"}))
    with pytest.raises(UserError, match=r"bert_config.json: position_embedding_type is "
                                        r"'relative_key'; .* supports 'absolute' only"):
        architectures.read_config(str(tmp_path), architectures.layout(str(tmp_path)))
    (tmp_path / "bert_config.json").write_text(json.dumps({**config, "intermediate_size": 48}))
    with pytest.raises(UserError, match=r"bert_model.ckpt: weight bert/encoder/layer_0/"
                                        r"intermediate/dense/kernel has shape \(32, 64\), "
                                        r"bert_config.json implies \(32, 48\)"):
        architectures.load_backbone(str(tmp_path), architectures.layout(str(tmp_path)))
    (tmp_path / "bert_config.json").write_text(json.dumps(config))
    del weights["bert/encoder/layer_1/output/LayerNorm/beta"]
    for path in tmp_path.glob("bert_model.ckpt*"):
        path.unlink()
    write(weights)
    with pytest.raises(UserError, match=r"bert_model.ckpt: weight bert/encoder/layer_1/output/"
                                        r"LayerNorm/beta is missing"):
        architectures.load_backbone(str(tmp_path), architectures.layout(str(tmp_path)))


def test_albert_without_projection_gets_the_identity(tmp_path):
    """Google's ALBERT writes no embedding projection when embedding_size == hidden_size."""
    ours, weights, write = google_folder(tmp_path, "albert", embedding_size=32)
    weights = {n: w for n, w in weights.items() if "embedding_hidden_mapping_in" not in n}
    write(weights)
    loaded = architectures.load_backbone(str(tmp_path), architectures.layout(str(tmp_path)))
    np.testing.assert_array_equal(np.asarray(loaded.embedding_projection.kernel), np.eye(32))


# --- a run on BERT: from scratch, and from a transformers folder (`init:`) --------------

def write_transformers_folder(backbone, directory, vocab):
    """config.json (model_type bert) + model.safetensors in BertModel's names, written
    with bert/weights.py's table (the mapping the readers use; parity is tested above)."""
    from safetensors.numpy import save_file

    from mtl_framework.architectures.bert.config import json_from_config
    from mtl_framework.architectures.bert.weights import arrays, transformers_names

    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(
        {"model_type": backbone.config["architecture"], **json_from_config(backbone.config)}))
    save_file(arrays(backbone, transformers_names(backbone)), str(directory / "model.safetensors"))
    (directory / "vocab.txt").write_bytes(vocab.read_bytes())


@pytest.mark.slow  # two `mtl train` runs and an export: 28-116 s on the 2-core box
def test_a_run_trains_bert_and_starts_from_a_transformers_folder(tmp_path):
    from mtl_framework.cli import main as mtl
    from mtl_framework.saving.trained import load_run_backbone

    from conftest import write_tiny_experiment

    bert = {"architecture": "bert", "num_layers": 1, "hidden_size": 32, "num_heads": 2,
            "intermediate_size": 64, "dropout": 0.0, "max_positions": 64}
    experiment = write_tiny_experiment(tmp_path / "bert.yaml", backbone=bert)
    assert mtl(["train", str(experiment), "--output", str(tmp_path / "run")]) == 0
    trained, _ = load_run_backbone(str(tmp_path / "run"))
    assert type(trained).__name__ == "BertBackbone" and trained.config["max_positions"] == 64
    assert mtl(["export", str(tmp_path / "run"), "--format", "keras", "--output",
                str(tmp_path / "keras")]) == 0
    assert json.loads((tmp_path / "keras/config.json").read_text())["format"] == \
        "mtl_framework.BertBackbone"
    # a RoFormerV2-only format: refused in one line, nothing written
    assert mtl(["export", str(tmp_path / "run"), "--format", "roformer-pytorch", "--output",
                str(tmp_path / "torch")]) == 2
    assert not (tmp_path / "torch").exists()

    write_transformers_folder(trained, tmp_path / "hf", tmp_path / "run/vocab.txt")
    found = architectures.layout(str(tmp_path / "hf"))
    assert (found, found.architecture) == ("transformers", "bert")
    started = write_tiny_experiment(tmp_path / "init.yaml", backbone={"init": str(tmp_path / "hf")},
                                    steps=1)
    assert mtl(["train", str(started), "--output", str(tmp_path / "from_hf")]) == 0
    again, _ = load_run_backbone(str(tmp_path / "from_hf"))
    assert again.config == trained.config


def test_experiment_checks_the_architecture(tmp_path):
    from mtl_framework.config.experiment import ExperimentError, load_experiment

    from conftest import write_tiny_experiment

    def problem(**backbone):
        path = write_tiny_experiment(tmp_path / "e.yaml", max_length=600, backbone=backbone)
        with pytest.raises(ExperimentError) as error:
            load_experiment(str(path))
        return str(error.value)

    assert "max_length 600 > backbone.max_positions 512" in problem(architecture="bert",
                                                                     size="small")
    assert "backbone.architecture must be one of roformer_v2, bert, albert, got 'gpt2'" in \
        problem(architecture="gpt2", size="small")
    assert "alpha_warmup_steps is RoFormerV2's; bert has none" in problem(
        architecture="bert", size="small", max_positions=1024, alpha_warmup_steps=100)
    path = write_tiny_experiment(tmp_path / "ok.yaml", max_length=600, backbone={
        "architecture": "albert", "size": "small", "max_positions": 1024})
    assert load_experiment(str(path)).backbone["architecture"] == "albert"


def test_transformers_reader_refusals(tmp_path):
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(
        {"model_type": "albert", "num_hidden_groups": 2, **tiny_config("albert", 60)}))
    (folder / "pytorch_model.bin").write_bytes(b"not read")
    found = architectures.layout(str(folder))
    assert (found, found.architecture) == ("transformers", "albert")
    with pytest.raises(UserError, match=r"hf/config.json: num_hidden_groups is 2; "
                                        r"mtl_framework's albert supports 1 only"):
        architectures.read_config(str(folder), found)
    (folder / "config.json").write_text(json.dumps({"model_type": "albert",
                                                    **tiny_config("albert", 60)}))
    try:
        import torch  # noqa: F401
    except ImportError:
        with pytest.raises(UserError, match=r"hf/pytorch_model.bin: reading a PyTorch pickle "
                                            r"needs torch"):
            architectures.load_backbone(str(folder), found)
    (folder / "pytorch_model.bin").unlink()
    with pytest.raises(UserError, match=r"config.json \(model_type albert\) without "
                                        r"model.safetensors or pytorch_model.bin"):
        architectures.layout(str(folder))


def test_mlm_on_a_factorised_embedding_is_refused(tmp_path, capsys):
    from mtl_framework.cli import main as mtl

    from conftest import write_tiny_experiment

    experiment = write_tiny_experiment(tmp_path / "e.yaml", tasks=["tnews", "mlm"], backbone={
        "architecture": "albert", "num_layers": 1, "hidden_size": 32, "num_heads": 2,
        "embedding_size": 16})
    assert mtl(["train", str(experiment), "--output", str(tmp_path / "run")]) == 2
    assert "the 'mlm' head ties to the token embedding, 16 wide, but hidden_size is 32" in \
        capsys.readouterr().err
    assert not (tmp_path / "run").exists()
