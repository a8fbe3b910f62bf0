"""`mtl export --format transformers` of BERT and ALBERT: the folder loads in mainline
transformers (AutoModel, AutoTokenizer: a BertTokenizerFast with our ids) in .venv-torch,
equal to our encoder on a padded batch of real sentences; in sentence-transformers (where
installed there) its embeddings equal our mean over the real tokens; our own reader reads
it back. RoFormerV2 is refused in one line naming roformer-pytorch."""
import json

import numpy as np
import pytest
from interop.roformer_torch import BERT_WORKER, run_torch, torch_unavailable_reason

from mtl_framework import architectures
from mtl_framework.errors import UserError

TOLERANCE = 1e-5
HUB = {"bert": "BertBackbone", "albert": "AlbertBackbone"}
TINY = dict(num_layers=2, hidden_size=32, num_heads=4, intermediate_size=64, dropout=0.0,
            attention_dropout=0.0, max_positions=128)


@pytest.fixture(scope="module")
def vocab(real_sentences, tmp_path_factory):
    from mtl_framework.tokenizer import build_vocab, count_units, write_vocab

    titles, pairs = real_sentences
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    write_vocab(build_vocab(count_units(titles + [t for p in pairs for t in p]), max_size=3000),
                path)
    return path


def random_backbone(architecture, vocab_size, seed=3):
    """A tiny backbone with every bias and LayerNorm moved off its initial 0 / 1."""
    import keras

    keras.utils.set_random_seed(seed)
    config = architectures.backbone_config(architecture, None, vocab_size=vocab_size, **TINY)
    backbone = architectures.build_backbone(config)
    backbone.build()
    rng = np.random.default_rng(seed)
    for weight in backbone.weights:
        if len(weight.shape) == 1:
            weight.assign(np.asarray(weight) + 0.1 * rng.standard_normal(weight.shape))
    return backbone


def ours(backbone, token_ids, segment_ids):
    return np.asarray(backbone({"token_ids": token_ids, "segment_ids": segment_ids}))


def our_batch(vocab, texts):
    from mtl_framework.tokenizer import Tokenizer

    from conftest import padded_batch

    tokenizer = Tokenizer(str(vocab))
    return padded_batch([tokenizer.encode(t) for t in texts])


@pytest.mark.parametrize("architecture,model", [("bert", "BertModel"), ("albert", "AlbertModel")])
def test_loads_in_transformers_and_sentence_transformers(architecture, model, vocab,
                                                         real_sentences, tmp_path):
    reason = torch_unavailable_reason()
    if reason:
        pytest.skip(reason)
    from mtl_framework.tokenizer import Tokenizer

    backbone = random_backbone(architecture, Tokenizer(str(vocab)).vocab_size)
    folder = tmp_path / "hf"
    architectures.converter("transformers", architecture).save(backbone, str(folder),
                                                               str(vocab), 64)
    texts = real_sentences[0][:24]  # real TNEWS titles of mixed lengths: a padded batch
    (tmp_path / "texts.json").write_text(json.dumps(texts, ensure_ascii=False), "utf-8")
    run_torch("load", folder, tmp_path / "texts.json", tmp_path / "out.npz", worker=BERT_WORKER)
    theirs = np.load(tmp_path / "out.npz")
    assert (str(theirs["tokenizer"]), str(theirs["model"])) == ("BertTokenizerFast", model)
    token_ids, segment_ids = our_batch(vocab, texts)
    np.testing.assert_array_equal(theirs["token_ids"], token_ids)  # the same ids, padded
    np.testing.assert_array_equal(theirs["segment_ids"], segment_ids)
    hidden = ours(backbone, token_ids, segment_ids)
    real = token_ids != 0
    assert (~real).any()
    assert np.abs(hidden[real] - theirs["hidden"][real]).max() <= TOLERANCE
    if "sentence" in theirs:  # sentence-transformers installed in .venv-torch
        mean = (hidden * real[..., None]).sum(1) / real.sum(1, keepdims=True)
        assert np.abs(theirs["sentence"] - mean).max() <= TOLERANCE
    # our reader takes the folder back: same architecture, same outputs
    found = architectures.layout(str(folder))
    assert (found, found.architecture) == ("transformers", architecture)
    again = architectures.load_backbone(str(folder), found)
    np.testing.assert_array_equal(ours(again, token_ids, segment_ids), hidden)


def test_folder_files(vocab, tmp_path):
    """What the folder holds, read without torch: ALBERT's tokenizer_class, a zero pooler,
    the pooling module, and a zero token-type row where the backbone has none."""
    from safetensors.numpy import load_file

    from mtl_framework.tokenizer import Tokenizer

    size = Tokenizer(str(vocab)).vocab_size
    backbone = random_backbone("albert", size)
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

    config = architectures.backbone_config("bert", None, vocab_size=size, segment_vocab_size=0,
                                           **TINY)
    no_segments = architectures.build_backbone(config)
    no_segments.build()
    architectures.converter("transformers", "bert").save(no_segments, str(tmp_path / "b"))
    assert json.loads((tmp_path / "b/config.json").read_text())["type_vocab_size"] == 1
    table = load_file(str(tmp_path / "b/model.safetensors"))["embeddings.token_type_embeddings.weight"]
    assert table.shape == (1, 32) and not table.any()
    assert not (tmp_path / "b/vocab.txt").exists()  # no vocab given, none written


def test_roformer_v2_is_refused_naming_roformer_pytorch():
    with pytest.raises(UserError, match=r"^format transformers: mainline transformers has no "
                                        r"RoFormerV2 .*--format roformer-pytorch"):
        architectures.converter("transformers", "roformer_v2")


# --- keras-hub and bert4keras exports of BERT / ALBERT ----------------------------------

@pytest.mark.parametrize("architecture", ["bert", "albert"])
def test_keras_hub_export_loads_in_keras_hub(architecture, vocab, real_sentences, tmp_path):
    keras_hub = pytest.importorskip("keras_hub")
    from mtl_framework.tokenizer import Tokenizer

    size = Tokenizer(str(vocab)).vocab_size
    writer = architectures.converter("keras-hub", architecture)
    exact = random_backbone(architecture, size)
    with pytest.raises(UserError, match=r"backbone.activation is 'gelu'; keras-hub's "
                                        r"\w+Backbone has 'gelu_approximate' only"):
        writer.check(exact.config, "trainer.json")  # keras-hub computes the tanh GELU only
    import keras

    keras.utils.set_random_seed(3)
    config = architectures.backbone_config(architecture, None, vocab_size=size,
                                           activation="gelu_approximate", **TINY)
    backbone = architectures.build_backbone(config)
    backbone.build()
    for weight, twin in zip(backbone.weights, exact.weights):  # the same weights
        weight.assign(twin)
    writer.save(backbone, str(tmp_path / "hub"), str(vocab))
    hub = getattr(keras_hub.models, HUB[architecture]).from_preset(str(tmp_path / "hub"))
    token_ids, segment_ids = our_batch(vocab, real_sentences[0][:16])
    theirs = hub({"token_ids": token_ids, "segment_ids": segment_ids,
                  "padding_mask": token_ids != 0})
    real = token_ids != 0
    hidden = ours(backbone, token_ids, segment_ids)
    assert np.abs(hidden[real] - np.asarray(theirs["sequence_output"])[real]).max() <= TOLERANCE
    assert not np.asarray(theirs["pooled_output"]).any()  # no pooler trained: zero
    found = architectures.layout(str(tmp_path / "hub"))  # our reader takes it back
    assert (found, found.architecture) == ("keras-hub", architecture)
    again = architectures.load_backbone(str(tmp_path / "hub"), found)
    np.testing.assert_allclose(ours(again, token_ids, segment_ids), hidden, rtol=0, atol=1e-6)


@pytest.mark.parametrize("architecture,activation", [("bert", "gelu"),
                                                     ("albert", "gelu_approximate")])
def test_bert4keras_export_loads_in_bert4keras(architecture, activation, vocab, real_sentences,
                                               tmp_path):
    from interop.legacy_bert4keras import bert4keras_available, run_bert4keras

    if not bert4keras_available():
        pytest.skip("bert4keras/tf-keras not installed (make interop)")
    import keras

    from mtl_framework.tokenizer import Tokenizer

    keras.utils.set_random_seed(5)
    config = architectures.backbone_config(architecture, None, activation=activation,
                                           vocab_size=Tokenizer(str(vocab)).vocab_size, **TINY)
    backbone = architectures.build_backbone(config)
    backbone.build()
    rng = np.random.default_rng(5)
    for weight in backbone.weights:
        if len(weight.shape) == 1:
            weight.assign(np.asarray(weight) + 0.1 * rng.standard_normal(weight.shape))
    writer = architectures.converter("bert4keras", architecture)
    writer.save(backbone, str(tmp_path), str(vocab))
    token_ids, segment_ids = our_batch(vocab, real_sentences[0][:16])
    np.savez(tmp_path / "inputs.npz", token_ids=token_ids, segment_ids=segment_ids)
    run_bert4keras("encode", tmp_path / writer.CONFIG_FILE, tmp_path / f"{architecture}_model.ckpt",
                   tmp_path / "inputs.npz", tmp_path / "out.npy", architecture)
    real = token_ids != 0
    hidden = ours(backbone, token_ids, segment_ids)
    assert np.abs(hidden[real] - np.load(tmp_path / "out.npy")[real]).max() <= TOLERANCE
    found = architectures.layout(str(tmp_path))
    assert (found, found.architecture) == ("bert4keras", architecture)
    again = architectures.load_backbone(str(tmp_path), found)
    np.testing.assert_array_equal(ours(again, token_ids, segment_ids), hidden)


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
    assert {"config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json",
            "special_tokens_map.json", "modules.json", "sentence_bert_config.json",
            "1_Pooling/config.json"} <= set(json.loads(
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
