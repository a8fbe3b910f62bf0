"""Backbone-folder readers check before they build (issue 44, point 3; cases N37, N41-N46,
N49, N53, N56, N58, N60-N62): config values of the wrong type or range, keys that would
change the model, tensors the config does not declare, NaN weights: one line naming the
file and the key or tensor. A transformers 5 folder (`dtype`, not `torch_dtype`) and a
sharded one are read, and equal what transformers 5 computed.

Refusals go through the CLI as a user meets them: `mtl train` with `backbone: {init:
FOLDER}` (a config refused before TensorFlow starts) and `mtl finetune FOLDER` (weights
refused when read); nothing is written either way."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file
from test_faults import DEMO_DATA, experiment, refused

from mtl_framework import architectures, cli
from mtl_framework.errors import UserError

FIXTURES = Path(__file__).parent / "fixtures" / "transformers5"


def finetune_options(tmp_path):
    return ["--steps", "1", "--batch-size", "4", "--max-length", "32", "--cache-dir",
            tmp_path / "cache"]


VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [chr(0x4E00 + i) for i in range(55)]


def folder(tmp_path, name="bert", config=None, tensors=None, into="hf"):
    """A copy of the transformers 5 fixture `name` with a vocab of its 60 rows; `config`:
    keys replaced (a value None drops the key); `tensors`: the safetensors rewritten."""
    path = tmp_path / into
    shutil.copytree(FIXTURES / name, path)
    (path / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    if config:
        raw = json.loads((path / "config.json").read_text())
        raw.update(config)
        raw = {k: v for k, v in raw.items() if v is not None}
        (path / "config.json").write_text(json.dumps(raw))
    if tensors is not None:
        save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


def train_refusal(capsys, tmp_path, path):
    """`mtl train` from `path` (backbone.init): refused in one line, nothing written."""
    run = tmp_path / "run"
    message = refused(capsys, ["train", experiment(tmp_path, backbone={"init": str(path)}),
                               "--output", run])
    assert not run.exists()
    return message


def finetune_refusal(capsys, tmp_path, path):
    out = tmp_path / "ft"
    message = refused(capsys, ["finetune", path, "tnews", "--data-root", DEMO_DATA,
                               "--output", out, *finetune_options(tmp_path)])
    assert not out.exists()
    return message


def load(path):
    return architectures.load_backbone(str(path), architectures.layout(str(path)))


def hidden(backbone, expected):
    return np.asarray(backbone({"token_ids": expected["token_ids"].astype("int32"),
                                "segment_ids": expected["segment_ids"].astype("int32")}))


# --- transformers 5 folders (N37) ---------------------------------------------------------

@pytest.mark.parametrize("name", ["bert", "albert"])
def test_a_transformers5_folder_is_read_and_equals_transformers5(name, tmp_path):
    raw = json.loads((FIXTURES / name / "config.json").read_text())
    assert raw["transformers_version"].startswith("5.") and "dtype" in raw
    assert "torch_dtype" not in raw
    expected = np.load(FIXTURES / "expected.npz")
    ours = hidden(load(folder(tmp_path, name)), expected)
    real = expected["token_ids"] != 0
    assert (~real).any()  # padded
    assert np.abs(ours[real] - expected[name][real]).max() <= 1e-5


def test_bookkeeping_keys_are_read_and_keys_that_change_outputs_are_refused(tmp_path):
    """Keys transformers 4.x and 5.x write that cannot change an encoder's outputs pass;
    a decoder, cross-attention, a rotary scaling, relative positions do not."""
    bookkeeping = {"torch_dtype": "float32", "_name_or_path": "x", "use_cache": False,
                   "output_past": True, "gradient_checkpointing": True, "classifier_dropout": 0.2,
                   "tie_word_embeddings": False, "is_encoder_decoder": False, "rope_scaling": None,
                   "_attn_implementation_autoset": True, "num_beams": 4, "id2label": {"0": "a"},
                   "problem_type": "regression", "position_embedding_type": "absolute"}
    path = folder(tmp_path, config=bookkeeping)
    config = architectures.read_config(str(path), architectures.layout(str(path)))
    assert (config["hidden_size"], config["num_layers"], config["activation"]) == (32, 2, "gelu")
    source = str(path / "config.json")
    for key, value, said in [
            ("is_decoder", True, "is_decoder is True; mtl_framework's bert supports False only"),
            ("add_cross_attention", True, "add_cross_attention is True; mtl_framework's bert "
                                          "supports False only"),
            ("rope_scaling", {"type": "linear", "factor": 2.0},
             "rope_scaling is {'type': 'linear', 'factor': 2.0}; mtl_framework's bert reader "
             "supports None only (it changes the encoder's outputs)"),
            ("position_embedding_type", "relative_key",
             "position_embedding_type is 'relative_key'; mtl_framework's bert supports "
             "'absolute' only")]:
        changed = folder(tmp_path, config={key: value}, into=key)
        with pytest.raises(UserError) as error:
            architectures.read_config(str(changed), architectures.layout(str(changed)))
        assert str(error.value) == f"{str(changed / 'config.json')}: {said}", key
    assert source.endswith("hf/config.json")


# --- config values (N41-N46, N62; N58, N60, N61) -----------------------------------------

BERT_VALUES = [  # (case, key, value, what it must be)
    ("N41", "hidden_size", "32", "an integer >= 1"),
    ("N42", "num_attention_heads", 0, "an integer >= 1"),
    ("N43", "hidden_act", ["gelu"], "one of 'gelu', 'gelu_new', 'gelu_pytorch_tanh', 'relu', "
                                    "'gelu_tanh'"),
    ("N44", "layer_norm_eps", -1, "a finite number > 0"),
    ("N46", "num_hidden_layers", 0, "an integer >= 1"),
    ("N62", "hidden_dropout_prob", 1.0, "a number in [0, 1)"),
    ("bool", "vocab_size", True, "an integer >= 1"),
    ("float", "intermediate_size", 64.0, "an integer >= 1"),
    ("nan", "attention_probs_dropout_prob", float("nan"), "a number in [0, 1)"),
]


@pytest.mark.parametrize("case,key,value,must", BERT_VALUES, ids=[c[0] for c in BERT_VALUES])
def test_bert_config_values_are_refused_by_mtl_train(case, key, value, must, tmp_path, capsys):
    path = folder(tmp_path, config={key: value})
    assert train_refusal(capsys, tmp_path, path) == \
        f"{path / 'config.json'}: {key} is {value!r}; it must be {must}"


def test_heads_must_divide_the_hidden_size(tmp_path, capsys):
    path = folder(tmp_path, config={"num_attention_heads": 5})
    assert train_refusal(capsys, tmp_path, path) == (
        f"{path / 'config.json'}: hidden_size 32 is not a multiple of num_attention_heads 5: "
        "use the config file these weights were saved with")


def roformer_folder(tmp_path, into="roformer", config=None, tensors=None):
    """Our roformer-pytorch export of a tiny RoFormerV2 (what junnyu's hub folders hold)."""
    from mtl_framework.architectures.roformer_v2.roformer_pytorch import save_roformer_pytorch

    path = tmp_path / into
    if not (tmp_path / "roformer_made").exists():
        backbone = architectures.build_backbone(architectures.backbone_config(
            None, None, vocab_size=60, num_layers=2, hidden_size=32, num_heads=4))
        backbone.build()
        vocab = tmp_path / "vocab.txt"
        vocab.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
        save_roformer_pytorch(backbone, str(tmp_path / "roformer_made"), str(vocab))
    shutil.copytree(tmp_path / "roformer_made", path)
    if config:
        raw = {**json.loads((path / "config.json").read_text()), **config}
        (path / "config.json").write_text(json.dumps(raw))
    if tensors is not None:
        save_file(tensors(load_file(str(path / "model.safetensors"))),
                  str(path / "model.safetensors"))
    return path


ROFORMER_VALUES = [
    ("N60", "hidden_size", "32", "it must be an integer >= 1"),
    ("N61", "num_attention_heads", 0, "it must be an integer >= 1"),
    ("N44", "layer_norm_eps", -1, "it must be a finite number > 0"),
    ("N62", "hidden_dropout_prob", 1.0, "it must be a number in [0, 1)"),
    ("N58", "is_decoder", True, "mtl_framework's roformer (PyTorch) reader supports False only "
                                "(it changes the encoder's outputs)"),
    ("N58", "add_cross_attention", True, "mtl_framework's roformer (PyTorch) reader supports "
                                         "False only (it changes the encoder's outputs)"),
    ("N58", "rope_scaling", {"type": "linear", "factor": 2.0},
     "mtl_framework's roformer (PyTorch) reader supports None only (it changes the encoder's "
     "outputs)"),
]


@pytest.mark.parametrize("case,key,value,said", ROFORMER_VALUES,
                         ids=[f"{c[0]}-{c[1]}" for c in ROFORMER_VALUES])
def test_roformer_pytorch_config_is_as_strict_as_berts(case, key, value, said, tmp_path, capsys):
    path = roformer_folder(tmp_path, config={key: value})
    assert train_refusal(capsys, tmp_path, path) == \
        f"{path / 'config.json'}: {key} is {value!r}; {said}"


def test_roformer_pytorch_reads_its_bookkeeping_and_refuses_unknown_keys(tmp_path):
    path = roformer_folder(tmp_path, config={"dtype": "float32", "use_cache": True,
                                             "pooler_activation": "tanh", "rope_scaling": None,
                                             "transformers_version": "4.50.3"})
    assert architectures.read_config(str(path), architectures.layout(str(path)))["num_layers"] == 2
    path = roformer_folder(tmp_path, into="odd", config={"rotary_base": 5000})
    with pytest.raises(UserError, match=r"odd/config.json: key 'rotary_base' is not supported by "
                                        r"mtl_framework's roformer \(PyTorch\) reader"):
        architectures.read_config(str(path), architectures.layout(str(path)))


def test_every_other_reader_checks_the_same_values(tmp_path):
    """ALBERT (transformers), Google's bert_config.json, bert4keras's RoFormerV2, keras-hub's
    preset and our own: one table (formats/checks.py), the file and its own key named."""
    from mtl_framework.architectures.bert.config import config_from_json
    from mtl_framework.architectures.bert.keras_hub import PRESET
    from mtl_framework.architectures.roformer_v2.bert4keras import config_from_bert_config
    from mtl_framework.formats import keras as preset

    albert = folder(tmp_path, "albert", config={"embedding_size": 0}, into="albert")
    with pytest.raises(UserError, match=r"albert/config.json: embedding_size is 0; it must be "
                                        r"an integer >= 1$"):
        architectures.read_config(str(albert), architectures.layout(str(albert)))
    with pytest.raises(UserError, match=r"^bert_config.json: max_position_embeddings is '512'; "):
        config_from_json({"vocab_size": 9, "hidden_size": 8, "num_hidden_layers": 1,
                          "num_attention_heads": 2, "max_position_embeddings": "512"},
                         "bert_config.json", "bert")
    with pytest.raises(UserError, match=r"^b/bert_config.json: attention_head_size is -8; "):
        config_from_bert_config({"vocab_size": 9, "hidden_size": 8, "num_hidden_layers": 1,
                                 "num_attention_heads": 2, "attention_head_size": -8},
                                "b/bert_config.json")
    hub = tmp_path / "hub"
    hub.mkdir()
    (hub / "config.json").write_text(json.dumps({"registered_name": "keras_hub>BertBackbone",
                                                 "config": {"num_heads": 2, "hidden_dim": 8,
                                                            "dropout": 1.5}}))
    with pytest.raises(UserError, match=r"hub/config.json: dropout is 1.5; it must be a number "
                                        r"in \[0, 1\)$"):
        PRESET.read_config(str(hub))
    ours = tmp_path / "ours"
    ours.mkdir()
    (ours / "config.json").write_text(json.dumps({
        "format": "mtl_framework.BertBackbone", "backbone": {"num_layers": 1.5}}))
    with pytest.raises(UserError, match=r"ours/config.json: backbone: num_layers is 1.5; it "
                                        r"must be an integer >= 1$"):
        preset.read_config(str(ours))


# --- tensors (N49, N56) -------------------------------------------------------------------

def with_second_layer_of(tensors, layer="1", into="2"):
    """`tensors` plus copies of layer `layer`'s under layer `into` (a file of more layers)."""
    extra = {name.replace(f"encoder.layer.{layer}.", f"encoder.layer.{into}."): value
             for name, value in tensors.items() if f"encoder.layer.{layer}." in name}
    return {**tensors, **extra}


def test_tensors_the_config_does_not_declare_are_refused(tmp_path, capsys):
    tensors = load_file(str(FIXTURES / "bert" / "model.safetensors"))
    path = folder(tmp_path, tensors=with_second_layer_of(tensors))
    message = finetune_refusal(capsys, tmp_path, path)
    assert message == (
        f"{path / 'model.safetensors'}: 16 encoder tensor(s) that config.json does not declare "
        "(encoder.layer.2.attention.output.LayerNorm.bias, encoder.layer.2.attention.output."
        "LayerNorm.weight, encoder.layer.2.attention.output.dense.bias, and 13 more): use the "
        "config.json these weights were saved with")
    # the same file under a config of one layer: layer 1 is the one it does not declare
    path = folder(tmp_path, config={"num_hidden_layers": 1}, into="one")
    with pytest.raises(UserError, match=r"one/model.safetensors: 16 encoder tensor\(s\) that "
                                        r"config.json does not declare \(encoder.layer.1."):
        load(path)
    # a pooler, an MLM head and the position_ids buffer are not the encoder's: read
    head = {"cls.predictions.bias": np.zeros(60, "float32"),
            "embeddings.position_ids": np.arange(32, dtype="int64")[None]}
    load(folder(tmp_path, tensors={**tensors, **head}, into="with_head"))

    def extra_layer(weights):
        return {**weights, **{k.replace("layer.1.", "layer.2."): v for k, v in weights.items()
                              if "layer.1." in k}}
    torch_folder = roformer_folder(tmp_path, tensors=extra_layer)
    with pytest.raises(UserError, match=r"roformer/model.safetensors: 6 encoder tensor\(s\) that "
                                        r"config.json does not declare \(roformer.encoder.layer.2"):
        load(torch_folder)


def test_a_nan_or_inf_weight_is_refused_naming_the_tensor(tmp_path, capsys):
    tensors = load_file(str(FIXTURES / "bert" / "model.safetensors"))
    tensors["encoder.layer.1.output.dense.weight"][3, 4] = np.nan
    path = folder(tmp_path, tensors=tensors)
    assert finetune_refusal(capsys, tmp_path, path) == (
        f"{path / 'model.safetensors'}: tensor encoder.layer.1.output.dense.weight holds 1 NaN "
        "or infinite value(s) of 2048: the file is damaged; copy or export it again")

    def infinite(weights):
        weights["roformer.embeddings.word_embeddings.weight"][0, 0] = np.inf
        return weights
    with pytest.raises(UserError, match=r"roformer/model.safetensors: tensor roformer.embeddings."
                                        r"word_embeddings.weight holds 1 NaN or infinite"):
        load(roformer_folder(tmp_path, tensors=infinite))


def test_a_nan_in_a_tf_checkpoint_or_a_keras_preset_is_refused(tmp_path):
    from test_architectures import google_folder

    from mtl_framework.formats import keras as preset

    google = tmp_path / "google"
    google.mkdir()
    ours, weights, write = google_folder(google)
    weights["bert/encoder/layer_0/attention/self/key/kernel"][0, 0] = np.nan
    weights["bert/encoder/layer_0/attention/self/key/kernel/adam_m"] = np.zeros((32, 32), "f")
    write(weights)  # an optimizer slot beside it is not a tensor of the model
    with pytest.raises(UserError, match=r"google/bert_model.ckpt: tensor bert/encoder/layer_0/"
                                        r"attention/self/key/kernel holds 1 NaN"):
        load(google)
    weights["bert/encoder/layer_0/attention/self/key/kernel"][0, 0] = 0.0
    weights["bert/encoder/layer_2/output/dense/bias"] = np.zeros(32, "float32")
    for old in google.glob("bert_model.ckpt*"):
        old.unlink()
    write(weights)
    with pytest.raises(UserError, match=r"google/bert_model.ckpt: 1 encoder tensor\(s\) that "
                                        r"bert_config.json does not declare \(bert/encoder/layer_2/"
                                        r"output/dense/bias\)"):
        load(google)
    ours.token_embedding.embeddings.assign(np.full((60, 32), np.inf, "float32"))
    preset.save(ours, str(tmp_path / "keras"))
    with pytest.raises(UserError, match=r"keras/model.weights.h5: tensor token_embedding/"
                                        r"embeddings holds 1920 NaN or infinite"):
        load(tmp_path / "keras")


def test_a_nan_in_a_keras_hub_preset_is_refused(tmp_path):
    keras_hub = pytest.importorskip("keras_hub")
    hub = keras_hub.models.BertBackbone(vocabulary_size=60, num_layers=1, num_heads=2,
                                        hidden_dim=8, intermediate_dim=16, max_sequence_length=16)
    kernel = hub.transformer_layers[0]._feedforward_output_dense.kernel
    kernel.assign(np.where(np.eye(16, 8) > 0, np.nan, kernel.numpy()))
    hub.save_to_preset(str(tmp_path / "hub"))
    with pytest.raises(UserError, match=r"hub/model.weights.h5: tensor encoder.layer.0.output."
                                        r"dense.weight holds 8 NaN"):
        load(tmp_path / "hub")


# --- sharded safetensors (N53) ------------------------------------------------------------

def shard(path, names_in_first):
    """Split `path`/model.safetensors into two shards and the index save_pretrained writes."""
    tensors = load_file(str(path / "model.safetensors"))
    (path / "model.safetensors").unlink()
    files = {"model-00001-of-00002.safetensors": {}, "model-00002-of-00002.safetensors": {}}
    for name, value in tensors.items():
        files[sorted(files)[0 if name in names_in_first else 1]][name] = value
    for file, part in files.items():
        save_file(part, str(path / file), metadata={"format": "pt"})
    (path / "model.safetensors.index.json").write_text(json.dumps({
        "metadata": {"total_size": sum(v.nbytes for v in tensors.values())},
        "weight_map": {name: file for file, part in files.items() for name in part}}))
    return files


def test_sharded_safetensors_are_read(tmp_path, capsys):
    expected = np.load(FIXTURES / "expected.npz")
    path = folder(tmp_path)
    files = shard(path, {n for n in load_file(str(path / "model.safetensors"))
                         if n.startswith("embeddings.") or ".layer.0." in n})
    assert all(files.values())  # both shards hold tensors
    real = expected["token_ids"] != 0
    ours = hidden(load(path), expected)
    assert np.abs(ours[real] - expected["bert"][real]).max() <= 1e-5
    # through the CLI: a transformers 5 folder, sharded, fine-tuned (N37 and N53)
    assert cli.main([str(a) for a in ["finetune", path, "tnews", "--data-root", DEMO_DATA,
                                      "--output", tmp_path / "tuned",
                                      *finetune_options(tmp_path)]]) == 0
    assert (tmp_path / "tuned" / "experiment.yaml").exists()
    (path / "model-00002-of-00002.safetensors").unlink()
    assert finetune_refusal(capsys, tmp_path, path) == (
        f"{path / 'model.safetensors.index.json'}: its shard model-00002-of-00002.safetensors "
        "is missing: copy the whole folder")


def test_bert4keras_roformer_weights_are_checked_the_same_way():
    """bert4keras's RoFormerV2 checkpoint reader (assign_weights): a NaN, and a layer the
    bert_config.json does not declare (optimizer slots aside), each named."""
    from mtl_framework.architectures.roformer_v2 import bert4keras

    backbone = architectures.build_backbone(architectures.backbone_config(
        None, None, vocab_size=60, num_layers=1, hidden_size=32, num_heads=4))
    backbone.build()
    weights = bert4keras.backbone_to_checkpoint_weights(backbone)
    slot = {"bert/encoder/layer_0/output/dense/kernel/adam_v": np.zeros((128, 32), "float32")}
    bert4keras.assign_weights(backbone, {**weights, **slot}, source="b4k/bert_model.ckpt")
    extra = {name.replace("layer_0", "layer_1"): value for name, value in weights.items()
             if "layer_0" in name}
    with pytest.raises(UserError, match=r"^b4k/bert_model.ckpt: 6 encoder tensor\(s\) that "
                                        r"bert_config.json does not declare \(bert/encoder/layer_1/"):
        bert4keras.assign_weights(backbone, {**weights, **extra}, source="b4k/bert_model.ckpt")
    weights["bert/embeddings/token_type_embeddings"][1, 2] = -np.inf
    with pytest.raises(UserError, match=r"^b4k/bert_model.ckpt: tensor bert/embeddings/"
                                        r"token_type_embeddings holds 1 NaN or infinite value\(s\) "
                                        r"of 64"):
        bert4keras.assign_weights(backbone, weights, source="b4k/bert_model.ckpt")


def test_mtl_train_from_a_folder_with_a_nan_weight_is_refused_before_the_run(tmp_path, capsys):
    """N56 as filed: `mtl train` with backbone.init at a folder holding a NaN weight used to
    train to a NaN loss and exit 0 without a checkpoint."""
    tensors = load_file(str(FIXTURES / "bert" / "model.safetensors"))
    tensors["embeddings.LayerNorm.weight"][0] = np.nan
    path = folder(tmp_path, tensors=tensors)
    run = tmp_path / "run"
    from test_faults_commands import refused_late

    message = refused_late(capsys, ["train", experiment(tmp_path, backbone={"init": str(path)}),
                                    "--output", run])
    assert message == (f"{path / 'model.safetensors'}: tensor embeddings.LayerNorm.weight holds "
                       "1 NaN or infinite value(s) of 32: the file is damaged; copy or export it "
                       "again")
    assert not run.exists()
