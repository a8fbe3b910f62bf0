"""SentenceEncoder (sentence_encoder/model.py): the backbone pooled and normalised, the one
model the encoder computes with and whose pooling the contrastive step trains through; and
L2 normalisation written once (numbers.l2_normalize) for NumPy and Keras alike."""
import re
from pathlib import Path

import keras
import numpy as np
from keras import ops

import mtl_framework
from mtl_framework import RoFormerV2Backbone
from mtl_framework.families.heads import build_head
from mtl_framework.numbers import l2_normalize
from mtl_framework.sentence_encoder.model import SentenceEncoder

PACKAGE = Path(mtl_framework.__file__).parent


def tiny_backbone():
    keras.utils.set_random_seed(0)
    backbone = RoFormerV2Backbone(vocab_size=64, num_layers=2, hidden_size=16, num_heads=2,
                                  intermediate_size=32, dropout=0.0)
    backbone.build()
    return backbone


def inputs():
    ids = np.array([[2, 5, 9, 3, 0, 0], [2, 7, 8, 11, 12, 3]], np.int32)
    return {"token_ids": ids, "segment_ids": np.zeros_like(ids)}


def test_the_encoder_is_the_backbone_pooled_as_the_step_pools_then_normalised():
    backbone, batch = tiny_backbone(), inputs()
    hidden = ops.convert_to_numpy(backbone(batch)).astype(np.float64)
    real = batch["token_ids"] > 0
    by_hand = {"cls": hidden[:, 0],
               "mean": (hidden * real[..., None]).sum(1) / real.sum(1, keepdims=True)}
    for pooling, expected in by_hand.items():
        raw = ops.convert_to_numpy(SentenceEncoder(backbone, pooling, False)(batch))
        unit = ops.convert_to_numpy(SentenceEncoder(backbone, pooling, True)(batch))
        assert raw.dtype == np.float32 and raw.shape == (2, 16)
        np.testing.assert_allclose(raw, expected, atol=1e-5)
        np.testing.assert_allclose(unit, expected / np.linalg.norm(expected, axis=1,
                                                                   keepdims=True), atol=1e-6)
        # the contrastive head pools the backbone's output by the same function, raw
        head = build_head("contrastive", None, 16, pooling=pooling)
        step = ops.convert_to_numpy(head.call(backbone(batch), batch))
        np.testing.assert_array_equal(step, raw)


def test_the_contrastive_step_runs_its_texts_through_a_sentence_encoder_of_its_backbone():
    """The step holds one SentenceEncoder per contrastive head (ContrastiveHead.text_encoder),
    on the model's own backbone, pooled as the head pools and raw; its side vectors are that
    model's output for each side's texts; it owns no variable, so the model's weights and a
    checkpoint's names are the backbone's and the heads' as before."""
    import pytest

    from mtl_framework.step.model import MultiTaskModel

    backbone = tiny_backbone()
    heads = {"pairs": build_head("contrastive", None, 16, name="pairs", pooling="mean"),
             "topic": build_head("classification", 3, 16, name="topic")}
    model = MultiTaskModel(backbone, heads, tasks_per_update=2)
    model.build_all()
    encoder = model.text_encoders["pairs"]
    assert list(model.text_encoders) == ["pairs"] and isinstance(encoder, SentenceEncoder)
    assert encoder.backbone is backbone and (encoder.pooling, encoder.normalize) == ("mean", False)
    assert encoder.weights == backbone.weights  # its only variables are the backbone's
    assert len({id(v) for v in model.weights}) == len(model.weights)
    assert all(not name.startswith("pairs_texts") for name in model.named_state_variables)
    ids = np.array([[[2, 5, 9, 3, 0, 0], [2, 7, 8, 11, 12, 3]],
                    [[2, 6, 3, 0, 0, 0], [2, 13, 14, 3, 0, 0]]], np.int32)
    batch = {"token_ids": ids, "segment_ids": np.zeros_like(ids)}
    vectors = ops.convert_to_numpy(model.task_outputs("pairs", batch))
    for side in range(2):
        rows = {"token_ids": ids[:, side], "segment_ids": np.zeros_like(ids[:, side])}
        np.testing.assert_allclose(vectors[:, side], ops.convert_to_numpy(encoder(rows)),
                                   atol=1e-6)
    with pytest.raises(TypeError, match="has no text encoder"):
        heads["topic"].text_encoder(backbone)


def test_the_encoder_keeps_its_config():
    encoder = SentenceEncoder(tiny_backbone(), "mean", True)
    again = SentenceEncoder.from_config(encoder.get_config())
    assert (again.pooling, again.normalize) == ("mean", True)
    def dims(backbone):  # Keras numbers the rebuilt backbone's name anew
        return {k: v for k, v in backbone.get_config().items() if k != "name"}
    assert dims(again.backbone) == dims(encoder.backbone)


def test_one_l2_normalisation_for_numpy_and_keras():
    x = np.array([[3.0, 4.0], [0.0, 0.0], [1e-13, 0.0]])
    np.testing.assert_array_equal(l2_normalize(x), [[0.6, 0.8], [0.0, 0.0], [0.1, 0.0]])
    vectors = np.random.default_rng(0).normal(size=(5, 7)).astype(np.float32)
    np.testing.assert_allclose(ops.convert_to_numpy(l2_normalize(vectors, xp=ops)),
                               l2_normalize(vectors), atol=1e-7)


def test_l2_normalisation_is_written_once():
    """A division by a vector's norm (`x / max(norm, eps)`, sklearn's zero-row rule) lives
    in numbers.py alone: every other module calls l2_normalize."""
    division = re.compile(r"/\s*(?:np|ops|xp)\.maximum\(\s*(?:np\.linalg\.norm|(?:np|ops|xp)\.sqrt)"
                          r"|norms\[norms == 0")
    found = {path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")
             if division.search(path.read_text(encoding="utf-8"))}
    assert found == {"numbers.py"}


# --- one way in: saving.load opens any folder and gives its encoder ---------------------------

def keras_folder(tmp_path):
    """A backbone-only keras export of the tiny backbone, with a vocab of 64 tokens."""
    from mtl_framework.formats import keras as preset

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                               + [chr(0x4E00 + i) for i in range(59)]) + "\n", encoding="utf-8")
    folder = tmp_path / "export"
    preset.save(tiny_backbone(), str(folder), str(vocab))
    return folder


def test_saving_load_gives_a_folders_encoder_and_the_encoder_goes_through_it(tmp_path):
    import pytest

    from mtl_framework import saving
    from mtl_framework.embedding.encode import Encoder
    from mtl_framework.errors import UserError
    from mtl_framework.sentence_encoder.settings import EmbeddingSettings

    folder, said = keras_folder(tmp_path), []
    trained = saving.load(str(folder), log=said.append)
    assert trained.embedding() == EmbeddingSettings()  # it declares none: PLAIN, said once
    assert said == [f"{folder}: declares no sentence embedding (no heads.json, 1_Pooling/ or "
                    "provenance.json \"embedding\"): mean pooling, not normalised (sentence-"
                    "transformers' default for a plain encoder); give --pooling to choose"]
    model = trained.encoder(EmbeddingSettings("cls", True))
    assert isinstance(model, SentenceEncoder) and (model.pooling, model.normalize) == ("cls", True)
    texts = ["一丁七", "万丈三上下"]
    by_path = Encoder(str(folder), pooling="cls", normalize=True, log=None).encode(texts)
    opened = Encoder(saving.load(str(folder), log=None), pooling="cls", normalize=True, log=None)
    np.testing.assert_array_equal(opened.encode(texts), by_path)
    ids = np.zeros((2, 7), np.int32)
    for row, text in zip(ids, texts):
        tokens = opened.tokenizer.encode(text)[0]
        row[:len(tokens)] = tokens
    direct = ops.convert_to_numpy(model({"token_ids": ids, "segment_ids": np.zeros_like(ids)}))
    np.testing.assert_allclose(by_path, direct, atol=1e-6)
    with pytest.raises(UserError, match=r"--checkpoint is for a run directory, not a folder$"):
        Encoder(str(folder), checkpoint="best")
    with pytest.raises(UserError, match=r"no heads\.json: this export holds the backbone only"):
        trained.heads()


def test_jax_encodes_a_folder_as_tensorflow_does(tmp_path):
    """step/jax.py's encoding_forward (predict_on_batch, lengths rounded up to 8) against
    step/tensorflow.py's (traced, packed, lanes): the same vectors of the same folder."""
    import os
    import subprocess

    import pytest

    from mtl_framework.embedding.encode import Encoder

    jax_python = PACKAGE.parent / ".venv-jax" / "bin" / "python"
    if not jax_python.exists():
        pytest.skip(".venv-jax is absent (make interop-jax)")
    folder, texts = keras_folder(tmp_path), ["一丁七", "万丈三上下", "丐"]
    np.save(tmp_path / "tf.npy", Encoder(str(folder), log=None).encode(texts, batch_size=2))
    code = ("import sys, numpy as np; from mtl_framework.embedding.encode import Encoder; "
            f"np.save(sys.argv[2], Encoder(sys.argv[1], log=None).encode({texts!r}, batch_size=2))")
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", PYTHONPATH=str(PACKAGE.parent))
    out = subprocess.run([str(jax_python), "-c", code, str(folder), str(tmp_path / "jax.npy")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    np.testing.assert_allclose(np.load(tmp_path / "jax.npy"), np.load(tmp_path / "tf.npy"),
                               atol=1e-5)


def test_saving_load_names_a_missing_path_and_a_headless_folder_in_one_line(tmp_path):
    """A folder of another format opens as an encoder; asked for heads (mtl predict), it says
    it has none and where they are; a missing path is named as what it should be."""
    import pytest

    from mtl_framework import BertBackbone, saving
    from mtl_framework.errors import UserError

    with pytest.raises(UserError, match=r"nowhere: no such run directory or model folder$"):
        saving.load(str(tmp_path / "nowhere"))
    from test_architectures import write_transformers_folder

    keras.utils.set_random_seed(0)
    backbone = BertBackbone(vocab_size=64, num_layers=1, hidden_size=16, num_heads=2,
                            intermediate_size=32, max_positions=16)
    backbone.build()
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join(f"{t}\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                             + [chr(0x4E00 + i) for i in range(59)]), encoding="utf-8")
    folder = tmp_path / "bert"
    write_transformers_folder(backbone, folder, vocab)
    trained = saving.load(str(folder), log=None)
    assert trained.encoder().backbone.config["hidden_size"] == 16
    with pytest.raises(UserError, match=re.escape(
            f"{folder}: a transformers backbone folder holds no task heads: give the run "
            "directory, or its export with `mtl export RUN_DIR --format keras --with-heads`")):
        trained.heads()
