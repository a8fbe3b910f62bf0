"""What every architecture and every converter must do, written once (as keras-hub's
TestCase.run_backbone_test / run_model_saving_test); test_backbone_harness.py runs it on
each architecture and each (architecture, format) pair a converter exists for.

    run_backbone_test        build, call (shape, dtype), config round trip, dropout
    run_padding_test         padded positions leave real positions' outputs unchanged
    run_mixed_precision_test mixed_bfloat16 builds and runs, close to float32
    run_saving_test          converter save -> layout -> load: the same outputs
    run_parity_test          the format's own library, both ways: it writes random
                             weights that we read, and reads what we write; the same outputs

The references run where they are installed (bert4keras and tf-keras in this venv,
keras-hub, torch + transformers + roformer in .venv-torch: `make interop`,
`make interop-torch`) and skip otherwise. Each call of a reference library's worker is
one process for both directions (its `batch` command): they are slow to start."""
import functools
import json
import re

import numpy as np
import pytest
from interop.legacy_bert4keras import bert4keras_available, run_bert4keras
from interop.roformer_torch import BERT_WORKER, run_torch, torch_unavailable_reason

from mtl_framework import architectures
from mtl_framework.errors import UserError
from mtl_framework.formats import FORMATS

ROUND_TRIP_TOLERANCE = 1e-6  # our own writer and reader: the same float32 kernels
PARITY_TOLERANCE = 1e-5      # another library's kernels sum in another order
# roformer 0.4.3: 9.5e-7 in every run alone, but whole-suite runs measured 9.6e-5 (AMD
# EPYC) and 2.66e-4 (Intel Xeon, reading torch's weights) (README, known issues; cause not
# found). A wrong weight mapping is of order 0.1.
FORMAT_TOLERANCE = {"roformer-pytorch": 1e-3}
# bfloat16 keeps 8 bits of mantissa: through two tiny blocks the outputs (norm ~1 a
# feature) move by 0.028-0.035 from float32's (measured on all three architectures).
MIXED_TOLERANCE = 0.1
DIMS = dict(num_layers=2, hidden_size=32, num_heads=4, intermediate_size=64, dropout=0.0)
EXTRA = {"roformer_v2": {}, "bert": {"max_positions": 256},  # run_padding_test's longest
         "albert": {"max_positions": 256, "embedding_size": 16}}  # ALBERT: factorised
# What a format holds only in part: keras-hub computes the tanh GELU alone, and the
# bert4keras RoFormerV2 case also checks the embedding mapping (embedding_size < hidden).
FORMAT_EXTRA = {("bert", "keras-hub"): {"activation": "gelu_approximate"},
                ("albert", "keras-hub"): {"activation": "gelu_approximate"},
                ("roformer_v2", "bert4keras"): {"embedding_size": 16}}
# Differences of a reference library that are its own, recorded so they stay true:
# keras-hub 0.32's RoformerV2Backbone masks padded query rows instead of keys, so the
# real tokens of padded rows move (measured > 1e-2); rows without padding agree.
PADDED_ROWS_DIFFER = {("roformer_v2", "keras-hub")}


def cases():
    """(architecture, format) for every converter an architecture has."""
    return [(a, f) for a in architectures.ARCHITECTURES for f in FORMATS
            if architectures.converter_name(f, a)]


def tiny_backbone(architecture, vocab_size=200, fmt=None, seed=0, **overrides):
    """A built tiny backbone whose biases and LayerNorms (1-D weights) are moved off their
    initial 0 / 1, so converters are tested on them too."""
    import keras

    keras.utils.set_random_seed(seed)
    dims = {**DIMS, **EXTRA[architecture], **FORMAT_EXTRA.get((architecture, fmt), {}),
            **overrides}
    backbone = architectures.build_backbone(architectures.backbone_config(
        architecture, None, vocab_size=vocab_size, **dims))
    backbone.build()
    rng = np.random.default_rng(seed)
    for weight in backbone.trainable_weights:
        if len(weight.shape) == 1:
            weight.assign(np.asarray(weight) + 0.1 * rng.standard_normal(weight.shape))
    return backbone


def encode(backbone, token_ids, segment_ids, **kwargs):
    return np.asarray(backbone({"token_ids": token_ids, "segment_ids": segment_ids}, **kwargs))


def dtype(tensor):
    import keras

    return keras.backend.standardize_dtype(tensor.dtype)


def synthetic_batch(length=48, extra=0, vocab_size=200, seed=0):
    """(token_ids, segment_ids): 4 rows of length..5 real tokens (the first two rows of
    two segments), zero-padded to length + extra."""
    rng = np.random.default_rng(seed)
    token_ids = np.zeros((4, length + extra), "int32")
    segment_ids = np.zeros_like(token_ids)
    for row, n in enumerate([length, 5, length // 2, length - 9]):
        token_ids[row, :n] = rng.integers(1, vocab_size, n)
        segment_ids[row, n // 2:n] = row < 2
    return token_ids, segment_ids


def assert_close_at_real_tokens(ours, theirs, token_ids, tolerance, what=""):
    assert ours.shape == theirs.shape, what
    real = token_ids != 0
    assert (~real).any(), "the batch must contain padding"
    worst = float(np.abs(ours[real] - theirs[real]).max())
    assert worst <= tolerance, f"{what}: max |difference| at real tokens {worst:.2e}"


# --- the backbone ---------------------------------------------------------------------

def run_backbone_test(architecture):
    backbone = tiny_backbone(architecture, dropout=0.3)
    token_ids, segment_ids = synthetic_batch()
    out = backbone({"token_ids": token_ids, "segment_ids": segment_ids})
    assert tuple(out.shape) == (*token_ids.shape, DIMS["hidden_size"])
    assert dtype(out) == "float32"
    out = np.asarray(out)
    assert np.isfinite(out).all()
    assert type(backbone).__name__ == architectures.package(architecture).BACKBONE
    assert architectures.architecture_of(backbone.config) == architecture
    # Keras's config round trip gives the same model
    again = type(backbone).from_config(backbone.get_config())
    again.build()
    again.set_weights(backbone.get_weights())
    np.testing.assert_array_equal(encode(again, token_ids, segment_ids), out)
    # dropout in training only: inference is deterministic
    np.testing.assert_array_equal(encode(backbone, token_ids, segment_ids), out)
    assert np.abs(encode(backbone, token_ids, segment_ids, training=True) - out).max() > 1e-3


def run_padding_test(architecture):
    """Padding the batch to 128 and 256 leaves the real tokens' outputs bit-identical with
    exact_padding (the float64 softmax sum) at lengths where TF's matmul kernels round
    alike (48 and 64: measured in docs/backbone.md), and within float32 rounding without."""
    exact = tiny_backbone(architecture, exact_padding=True)
    plain = tiny_backbone(architecture, exact_padding=False)
    plain.set_weights(exact.get_weights())
    for backbone, tolerance in ((exact, 0.0), (plain, 5e-6)):
        for length in (48, 64):
            token_ids, segment_ids = synthetic_batch(length)
            reference = encode(backbone, token_ids, segment_ids)
            for total in (128, 256):
                more = synthetic_batch(length, total - length)
                padded = encode(backbone, *more)[:, :length]
                assert_close_at_real_tokens(padded, reference, token_ids, tolerance,
                                            f"exact_padding={backbone.exact_padding}")


def run_packed_test(architecture):
    """The packed call (layers.Packing: token-wise work on the real tokens alone, attention
    padded) gives the padded call's outputs at real tokens within float32 rounding and
    zeros at padding, traced for any shape, a row of padding alone included; its weight
    gradients equal the padded call's (a loss that reads real tokens only)."""
    import tensorflow as tf

    backbone = tiny_backbone(architecture, attention_dropout=0.0)  # training=True: no masks
    token_ids, segment_ids = synthetic_batch()
    token_ids[2], segment_ids[2] = 0, 0  # a missing hard negative: no real token
    inputs = {"token_ids": tf.constant(token_ids), "segment_ids": tf.constant(segment_ids)}
    real = (token_ids != 0)[..., None].astype("float32")
    probe = tf.random.stateless_normal((*token_ids.shape, backbone.config["hidden_size"]), (1, 2))

    def forward(packed):
        with tf.GradientTape() as tape:
            out = backbone(inputs, training=True, packed=packed)
            loss = tf.reduce_sum(out * real * probe)
        grads = tape.gradient(loss, backbone.trainable_variables)
        return np.asarray(out), [np.asarray(tf.convert_to_tensor(g)) for g in grads]

    (padded, padded_grads), (packed, packed_grads) = forward(False), forward(True)
    assert_close_at_real_tokens(packed, padded, token_ids, 5e-6, "packed vs padded")
    assert not packed[token_ids == 0].any()
    for ours, theirs in zip(packed_grads, padded_grads):
        np.testing.assert_allclose(ours, theirs, atol=2e-6 * np.abs(theirs).max() + 1e-7)
    traced = tf.function(lambda x: backbone(x, packed=True), reduce_retracing=True)
    for length in (48, 20):
        cut = {k: v[:, :length] for k, v in inputs.items()}
        assert_close_at_real_tokens(np.asarray(traced(cut)), encode(backbone, token_ids[:, :length],
                                    segment_ids[:, :length]), token_ids[:, :length], 5e-6, "traced")


def run_mixed_precision_test(architecture):
    import keras

    reference = tiny_backbone(architecture)
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        mixed = tiny_backbone(architecture)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    mixed.set_weights(reference.get_weights())
    assert {dtype(w) for w in mixed.weights} == {"float32"}  # the variables stay float32
    token_ids, segment_ids = synthetic_batch()
    out = mixed({"token_ids": token_ids, "segment_ids": segment_ids})
    assert dtype(out) == "bfloat16"  # computed in bfloat16
    out = np.asarray(keras.ops.cast(out, "float32"))
    assert np.isfinite(out).all()
    assert_close_at_real_tokens(out, encode(reference, token_ids, segment_ids), token_ids,
                                MIXED_TOLERANCE, "mixed_bfloat16 vs float32")


# --- a converter: ours both ways, and the format's own library ------------------------

def write_vocab(path, size):
    path.write_text("".join(f"t{i}\n" for i in range(size)), encoding="utf-8")
    return path


def run_saving_test(architecture, fmt, tmp_path):
    """The converter's save, then `layout` finds (format, architecture) and `load_backbone`
    gives the same outputs (a format it only writes: `layout` names it and refuses)."""
    backbone = tiny_backbone(architecture, fmt=fmt)
    converter = architectures.converter(fmt, architecture)
    converter.check(backbone.config, "test")
    folder = tmp_path / fmt
    converter.save(backbone, str(folder), str(write_vocab(tmp_path / "vocab.txt", 200)), 64)
    reason = converter.detect(str(folder))
    if reason:  # written for its library, not read back
        with pytest.raises(UserError, match=re.escape(reason)):
            architectures.layout(str(folder))
        return
    found = architectures.layout(str(folder))
    assert (found, found.architecture) == (fmt, architecture)
    assert (folder / "vocab.txt").read_text() == (tmp_path / "vocab.txt").read_text()
    config = architectures.read_config(str(folder), found)
    assert {k: config[k] for k in DIMS if k != "dropout"} == \
        {k: backbone.config[k] for k in DIMS if k != "dropout"}
    assert architectures.trained_length(str(folder), found) in (None, 64)
    loaded = architectures.load_backbone(str(folder), found)
    assert type(loaded) is type(backbone)
    token_ids, segment_ids = synthetic_batch()
    assert_close_at_real_tokens(encode(loaded, token_ids, segment_ids),
                                encode(backbone, token_ids, segment_ids), token_ids,
                                ROUND_TRIP_TOLERANCE, f"{fmt} round trip")


def run_parity_test(architecture, fmt, batch, vocab, texts, tmp_path):
    """`batch` (token_ids, segment_ids, vocab_size) of real sentences, padded; `texts`:
    single sentences (libraries that tokenize themselves)."""
    token_ids, segment_ids, vocab_size = batch
    ours = tiny_backbone(architecture, vocab_size, fmt=fmt, seed=3)
    converter = architectures.converter(fmt, architecture)
    converter.save(ours, str(tmp_path / "ours"), str(vocab), 64)
    np.savez(tmp_path / "inputs.npz", token_ids=token_ids, segment_ids=segment_ids)
    theirs = REFERENCES[fmt](architecture, converter, tmp_path, texts)
    what, tolerance = f"{fmt} {architecture}", FORMAT_TOLERANCE.get(fmt, PARITY_TOLERANCE)
    if theirs.get("their_folder") is not None:  # they wrote it: we read it
        found = architectures.layout(str(theirs["their_folder"]))
        assert (found, found.architecture) == (fmt, architecture)
        read = architectures.load_backbone(str(theirs["their_folder"]), found)
        assert_close_at_real_tokens(encode(read, token_ids, segment_ids), theirs["their_out"],
                                    token_ids, tolerance, f"{what}: we read theirs")
    if "our_ids" in theirs:  # their tokenizer on our export's vocab gives our ids
        from mtl_framework.tokenizer import Tokenizer

        from conftest import padded_batch

        tokenizer = Tokenizer(str(vocab))
        token_ids, segment_ids = padded_batch([tokenizer.encode(t) for t in texts])
        np.testing.assert_array_equal(theirs["our_ids"], token_ids)
    hidden = encode(ours, token_ids, segment_ids)
    if (architecture, fmt) in PADDED_ROWS_DIFFER:
        full = (token_ids != 0).all(axis=1)
        assert full.any() and (~full).any()
        assert np.abs(hidden[full] - theirs["our_out"][full]).max() <= tolerance
        real_in_padded_rows = ~full[:, None] & (token_ids != 0)
        assert np.abs(hidden - theirs["our_out"])[real_in_padded_rows].max() > 1e-2
    else:
        assert_close_at_real_tokens(theirs["our_out"], hidden, token_ids, tolerance,
                                    f"{what}: they read ours")
    if "sentence" in theirs:  # sentence-transformers: the mean over the real tokens
        real = token_ids != 0
        mean = (hidden * real[..., None]).sum(1) / real.sum(1, keepdims=True)
        assert np.abs(theirs["sentence"] - mean).max() <= tolerance


def copy_config(converter, tmp_path):
    """Their folder's config: the one our converter wrote (their keys, our dims)."""
    (tmp_path / "theirs").mkdir()
    source = tmp_path / "ours" / converter.CONFIG_FILE
    (tmp_path / "theirs" / converter.CONFIG_FILE).write_bytes(source.read_bytes())
    return tmp_path / "theirs" / converter.CONFIG_FILE


def bert4keras_reference(architecture, converter, tmp_path, texts):
    """bert4keras 0.11.5 (legacy tf-keras, its own process): model=<architecture>."""
    if not bert4keras_available():
        pytest.skip("bert4keras/tf-keras not installed (make interop)")
    config = copy_config(converter, tmp_path)
    checkpoint = converter.CONFIG_FILE.replace("_config.json", "_model.ckpt")
    jobs = [["build", config, tmp_path / "theirs" / checkpoint, 5, architecture,
             tmp_path / "inputs.npz", tmp_path / "their_out.npy"],
            ["encode", tmp_path / "ours" / converter.CONFIG_FILE, tmp_path / "ours" / checkpoint,
             tmp_path / "inputs.npz", tmp_path / "our_out.npy", architecture]]
    (tmp_path / "jobs.json").write_text(json.dumps([[str(a) for a in job] for job in jobs]))
    run_bert4keras("batch", tmp_path / "jobs.json")
    return {"their_folder": tmp_path / "theirs", "their_out": np.load(tmp_path / "their_out.npy"),
            "our_out": np.load(tmp_path / "our_out.npy")}


@functools.cache
def torch_reason():
    """Why the torch venv cannot run (None when it can), asked once: it imports torch."""
    return torch_unavailable_reason()


def torch_ready():
    reason = torch_reason()
    if reason:
        pytest.skip(f"PyTorch parity: {reason}")


def transformers_reference(architecture, converter, tmp_path, texts):
    """transformers' BertModel / AlbertModel writes random weights; AutoTokenizer and
    AutoModel (strict) load our export, and sentence-transformers where installed."""
    torch_ready()
    config = copy_config(converter, tmp_path)
    (tmp_path / "texts.json").write_text(json.dumps(texts, ensure_ascii=False), "utf-8")
    jobs = [["save", architecture, config, tmp_path / "theirs", 3, tmp_path / "inputs.npz",
             tmp_path / "their_out.npy"],
            ["load", tmp_path / "ours", tmp_path / "texts.json", tmp_path / "our_out.npz"]]
    (tmp_path / "jobs.json").write_text(json.dumps([[str(a) for a in job] for job in jobs]))
    run_torch("batch", tmp_path / "jobs.json", worker=BERT_WORKER)
    loaded = dict(np.load(tmp_path / "our_out.npz"))
    assert (str(loaded["tokenizer"]), str(loaded["model"])) == (
        "BertTokenizerFast", {"bert": "BertModel", "albert": "AlbertModel"}[architecture])
    return {"their_folder": tmp_path / "theirs", "their_out": np.load(tmp_path / "their_out.npy"),
            "our_ids": loaded["token_ids"], "our_out": loaded["hidden"],
            **({"sentence": loaded["sentence"]} if "sentence" in loaded else {})}


def roformer_pytorch_reference(architecture, converter, tmp_path, texts):
    """JunnYu's roformer 0.4.3: RoFormerModel.save_pretrained of random weights (names
    without `roformer.`), and RoFormerModel.from_pretrained of both folders."""
    torch_ready()
    config = copy_config(converter, tmp_path)
    jobs = [["save", config, tmp_path / "theirs", tmp_path / "their_weights.npz", 7,
             "safetensors"],
            ["encode", tmp_path / "theirs", tmp_path / "inputs.npz", tmp_path / "their_out.npy"],
            ["encode", tmp_path / "ours", tmp_path / "inputs.npz", tmp_path / "our_out.npy"]]
    (tmp_path / "jobs.json").write_text(json.dumps([[str(a) for a in job] for job in jobs]))
    run_torch("batch", tmp_path / "jobs.json")
    return {"their_folder": tmp_path / "theirs", "their_out": np.load(tmp_path / "their_out.npy"),
            "our_out": np.load(tmp_path / "our_out.npy")}


def keras_hub_reference(architecture, converter, tmp_path, texts):
    """keras-hub's backbone of the architecture, in this process: from_preset of our
    export; a random one of the same config (biases, LayerNorms moved) saved as a preset."""
    keras_hub = pytest.importorskip("keras_hub")
    import keras

    inputs = np.load(tmp_path / "inputs.npz")

    def run(hub):
        """keras-hub's sequence output (its pooled output, or None)."""
        feed = {"token_ids": inputs["token_ids"], "segment_ids": inputs["segment_ids"]}
        if "padding_mask" in hub.input:
            feed["padding_mask"] = inputs["token_ids"] != 0
        out = hub(feed)
        if isinstance(out, dict):
            return np.asarray(out["sequence_output"]), np.asarray(out["pooled_output"])
        return np.asarray(out), None

    hub = keras_hub.models.Backbone.from_preset(str(tmp_path / "ours"))
    our_out, pooled = run(hub)
    assert pooled is None or not pooled.any()  # no pooler trained: zero
    keras.utils.set_random_seed(11)
    random = type(hub).from_config(hub.get_config())
    rng = np.random.default_rng(0)
    for weight in random.weights:
        if len(weight.shape) == 1 or "bias" in weight.path:
            weight.assign(np.asarray(weight) + 0.1 * rng.standard_normal(weight.shape))
    random.save_to_preset(str(tmp_path / "theirs"))
    if converter.detect(str(tmp_path / "theirs")):  # a preset we do not read (refused:
        return {"our_out": our_out}                 # run_saving_test)
    return {"our_out": our_out, "their_folder": tmp_path / "theirs",
            "their_out": run(random)[0]}


REFERENCES = {"bert4keras": bert4keras_reference, "transformers": transformers_reference,
              "roformer-pytorch": roformer_pytorch_reference, "keras-hub": keras_hub_reference}
