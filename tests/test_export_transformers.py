"""`mtl export --format transformers` of BERT and ALBERT: what the folder holds (read
without torch); RoFormerV2 refused in one line naming roformer-pytorch; exports of runs.
Loading in transformers / sentence-transformers, keras-hub and bert4keras with our
outputs: test_backbone_harness.py (converter parity)."""
import json

import pytest
from backbone_harness import tiny_backbone, write_vocab

from mtl_framework import architectures
from mtl_framework.errors import UserError


def test_folder_files(tmp_path):
    """What the folder holds, read without torch: ALBERT's tokenizer_class, a zero pooler,
    the pooling module, and a zero token-type row where the backbone has none."""
    from safetensors.numpy import load_file

    vocab = write_vocab(tmp_path / "words.txt", 200)
    backbone = tiny_backbone("albert", embedding_size=None)  # ALBERT's default: 128
    architectures.converter("transformers", "albert").save(backbone, str(tmp_path), str(vocab), 64)
    config = json.loads((tmp_path / "config.json").read_text())
    assert (config["model_type"], config["architectures"], config["tokenizer_class"],
            config["embedding_size"], config["num_hidden_groups"]) == (
        "albert", ["AlbertModel"], "BertTokenizer", 128, 1)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    assert not tensors["pooler.weight"].any() and tensors["pooler.weight"].shape == (32, 32)
    pooling = json.loads((tmp_path / "1_Pooling/config.json").read_text())
    assert pooling["pooling_mode_mean_tokens"] and pooling["word_embedding_dimension"] == 32
    assert json.loads((tmp_path / "sentence_bert_config.json").read_text())["max_seq_length"] == 64
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["do_lower_case"] is True

    no_segments = tiny_backbone("bert", segment_vocab_size=0)
    architectures.converter("transformers", "bert").save(no_segments, str(tmp_path / "b"))
    assert json.loads((tmp_path / "b/config.json").read_text())["type_vocab_size"] == 1
    table = load_file(str(tmp_path / "b/model.safetensors"))["embeddings.token_type_embeddings.weight"]
    assert table.shape == (1, 32) and not table.any()
    assert not (tmp_path / "b/vocab.txt").exists()  # no vocab given, none written


def test_roformer_v2_is_refused_naming_roformer_pytorch():
    with pytest.raises(UserError, match=r"^format transformers: mainline transformers has no "
                                        r"RoFormerV2 .*--format roformer-pytorch"):
        architectures.converter("transformers", "roformer_v2")


def test_keras_hub_refuses_the_exact_gelu():
    """keras-hub computes the tanh GELU only (parity with its approximate one: the harness)."""
    for architecture in ("bert", "albert"):
        config = tiny_backbone(architecture).config
        with pytest.raises(UserError, match=r"backbone.activation is 'gelu'; keras-hub's "
                                            r"\w+Backbone has 'gelu_approximate' only"):
            architectures.converter("keras-hub", architecture).check(config, "trainer.json")


# --- `mtl export` on runs ---------------------------------------------------------------

@pytest.mark.slow  # two tiny `mtl train` runs (one update each) and four exports
def test_mtl_export_of_runs(tmp_path):
    from mtl_framework.cli import main as mtl

    from conftest import write_tiny_experiment

    albert = {"architecture": "albert", "num_layers": 1, "hidden_size": 32, "num_heads": 2,
              "intermediate_size": 64, "embedding_size": 16, "dropout": 0.0, "max_positions": 64}
    experiment = write_tiny_experiment(tmp_path / "albert.yaml", backbone=albert, steps=1)
    assert mtl(["train", str(experiment), "--output", str(tmp_path / "run")]) == 0
    for fmt in ("transformers", "bert4keras"):
        assert mtl(["export", str(tmp_path / "run"), "--format", fmt, "--output",
                    str(tmp_path / fmt)]) == 0
        card = (tmp_path / fmt / "README.md").read_text()
        assert "ALBERT backbone from mtl_framework" in card and "- albert" in card
    # no contrastive task: sentence-transformers' default pooling, and the card says so
    assert "This run trained no contrastive task: the pooling was not trained" in \
        (tmp_path / "transformers/README.md").read_text()
    assert {"config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json",
            "special_tokens_map.json", "modules.json", "sentence_bert_config.json",
            "1_Pooling/config.json", "config_sentence_transformers.json"} <= set(json.loads(
                (tmp_path / "transformers/export-manifest.json").read_text())["files"])
    # keras-hub holds only the tanh GELU: refused in one line, nothing written
    assert mtl(["export", str(tmp_path / "run"), "--format", "keras-hub", "--output",
                str(tmp_path / "hub")]) == 2
    assert not (tmp_path / "hub").exists()

    experiment = write_tiny_experiment(tmp_path / "roformer.yaml", steps=1)
    assert mtl(["train", str(experiment), "--output", str(tmp_path / "roformer")]) == 0
    assert mtl(["export", str(tmp_path / "roformer"), "--format", "transformers", "--output",
                str(tmp_path / "none")]) == 2
    assert not (tmp_path / "none").exists()
