"""Rotary scaling (issue 27): the setting, the tables against NumPy and against Hugging Face
transformers' own rope initialisation (.venv-torch; skipped without it), padding
exactness with scaling on, the pointer heads following the backbone."""
import json
import subprocess
from pathlib import Path

import keras
import numpy as np
import pytest
from backbone_harness import synthetic_batch
from interop.roformer_torch import torch_python, torch_unavailable_reason

from mtl_framework import RoFormerV2Backbone
from mtl_framework.architectures import rope_scaling
from mtl_framework.families import heads as H
from mtl_framework.layers import ntk_base, rotary_angles, rotary_inverse_frequency, rotary_tables

WORKER = Path(__file__).with_name("hf_rope_worker.py")
TINY = dict(vocab_size=200, num_layers=2, hidden_size=32, num_heads=2, dropout=0.0,
            exact_padding=True)
SCALINGS = {
    "linear": {"type": "linear", "factor": 4.0, "original_max_length": 16},
    "ntk": {"type": "ntk", "factor": 4.0, "original_max_length": 16},
    "dynamic_ntk": {"type": "dynamic_ntk", "factor": 4.0, "original_max_length": 16},
}


# --- the setting --------------------------------------------------------------------------

def test_normalise_fills_checks_and_parses():
    assert rope_scaling.normalise(None) is None and rope_scaling.normalise("none") is None
    assert rope_scaling.normalise({"type": "ntk", "factor": 2}) == \
        {"type": "ntk", "factor": 2.0, "original_max_length": None}
    assert rope_scaling.normalise({"type": "dynamic_ntk", "factor": 4}, 128) == \
        {"type": "dynamic_ntk", "factor": 4.0, "original_max_length": 128}
    assert rope_scaling.parse("linear:2.5:64") == \
        {"type": "linear", "factor": 2.5, "original_max_length": 64}
    assert rope_scaling.parse("none") is None
    bad = [({"type": "yarn", "factor": 2}, "type must be one of linear, ntk, dynamic_ntk"),
           ({"type": "linear", "factor": 0.5}, "factor must be a finite number from 1 to 1024"),
           ({"type": "linear", "factor": 2, "scale": 1}, "unknown key(s) ['scale']"),
           ({"type": "dynamic_ntk", "factor": 2}, "dynamic_ntk needs original_max_length"),
           ("linear", "must be a mapping"),
           ({"type": "dynamic", "factor": 2}, "Hugging Face's 'dynamic' is ours 'dynamic_ntk'"),
           ({"rope_type": "linear", "factor": 2}, "Hugging Face's rope_type is our type")]
    for value, message in bad:
        with pytest.raises(ValueError, match=None) as error:
            rope_scaling.normalise(value)
        assert message in str(error.value) and "\n" not in str(error.value)
    for text in ("linear", "linear:x", "ntk:2:3:4"):
        with pytest.raises(ValueError, match="--rope-scaling"):
            rope_scaling.parse(text)


# --- the maths, against NumPy -------------------------------------------------------------

def numpy_inverse_frequency(d, scaling, n=None, base=10000.0):
    """The formulas of the issue, in float64."""
    i = np.arange(d // 2)
    if scaling is None:
        return base ** (-2 * i / d)
    factor, original = scaling["factor"], scaling.get("original_max_length")
    if scaling["type"] == "linear":
        return base ** (-2 * i / d) / factor
    if scaling["type"] == "ntk":
        return (base * factor ** (d / (d - 2))) ** (-2 * i / d)
    if n <= original:
        return base ** (-2 * i / d)
    return (base * (factor * n / original - (factor - 1)) ** (d / (d - 2))) ** (-2 * i / d)


@pytest.mark.parametrize("d", [64, 48])
@pytest.mark.parametrize("kind", list(SCALINGS))
def test_inverse_frequencies_equal_the_formulas(kind, d):
    scaling = SCALINGS[kind]
    lengths = np.array([5, 16, 17, 64, 512])
    ours = np.asarray(rotary_inverse_frequency(d, scaling=scaling, lengths=lengths))
    for row, n in enumerate(lengths):
        theirs = numpy_inverse_frequency(d, scaling, n)
        got = ours[row] if ours.ndim == 2 else ours
        np.testing.assert_allclose(got, theirs, rtol=3e-7, atol=0)
    if kind == "dynamic_ntk":  # at or under the trained length: the trained tables, bit for bit
        trained = np.asarray(rotary_inverse_frequency(d))
        np.testing.assert_array_equal(ours[0], trained)
        np.testing.assert_array_equal(ours[1], trained)
        assert not np.array_equal(ours[2], trained)
    assert ntk_base(10000.0, 4.0, 64) == pytest.approx(10000.0 * 4.0 ** (64 / 62), rel=1e-15)


def test_tables_are_the_angles_pair_interleaved():
    scaling = SCALINGS["dynamic_ntk"]
    cos, sin = (np.asarray(t) for t in rotary_tables(40, 8, scaling=scaling,
                                                     lengths=np.array([10, 40])))
    assert cos.shape == sin.shape == (2, 40, 8)
    for row, n in enumerate((10, 40)):
        angle = np.arange(40)[:, None] * numpy_inverse_frequency(8, scaling, n)[None]
        np.testing.assert_allclose(cos[row, :, 0::2], np.cos(angle), atol=2e-6)
        np.testing.assert_allclose(cos[row, :, 1::2], np.cos(angle), atol=2e-6)
        np.testing.assert_allclose(sin[row, :, 0::2], -np.sin(angle), atol=2e-6)
        np.testing.assert_allclose(sin[row, :, 1::2], np.sin(angle), atol=2e-6)


# --- against Hugging Face transformers (.venv-torch) --------------------------------------

HF_CASES = [  # (name, HF rope type, HF factor, HF base, our scaling, the length scored)
    ("linear2", "linear", 2.0, 10000.0, {"type": "linear", "factor": 2.0}, 256),
    ("linear4", "linear", 4.0, 10000.0, {"type": "linear", "factor": 4.0}, 512),
    ("dynamic4_long", "dynamic", 4.0, 10000.0,
     {"type": "dynamic_ntk", "factor": 4.0, "original_max_length": 128}, 512),
    ("dynamic2_long", "dynamic", 2.0, 10000.0,
     {"type": "dynamic_ntk", "factor": 2.0, "original_max_length": 128}, 300),
    ("dynamic4_short", "dynamic", 4.0, 10000.0,
     {"type": "dynamic_ntk", "factor": 4.0, "original_max_length": 128}, 100),
    # static NTK / ABF: HF's default rope with rope_theta = base * factor^(d/(d-2))
    ("ntk4", "default", 1.0, ntk_base(10000.0, 4.0, 64), {"type": "ntk", "factor": 4.0}, 512),
]


@pytest.fixture(scope="module")
def hf_tables(tmp_path_factory):
    reason = torch_unavailable_reason()
    if reason:
        pytest.skip(f"transformers rope reference: {reason}")
    folder = tmp_path_factory.mktemp("hf_rope")
    cases = [{"name": name, "type": kind, "factor": factor, "base": base, "dim": 64,
              "max_position": 128, "length": length}
             for name, kind, factor, base, _, length in HF_CASES]
    (folder / "cases.json").write_text(json.dumps(cases))
    env = {"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"}
    result = subprocess.run([torch_python(), str(WORKER), str(folder / "cases.json"),
                             str(folder / "hf.npz")], env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    with np.load(folder / "hf.npz") as tables:
        return {key: tables[key] for key in tables.files}


@pytest.mark.parametrize("case", HF_CASES, ids=[c[0] for c in HF_CASES])
def test_tables_equal_transformers_rope(hf_tables, case):
    """Inverse frequencies to 1e-6 (absolute; they are <= 1) and the per-position angles
    to 1e-6 relative. cos/sin are compared after undoing the layout (theirs: the head's two
    halves, ours: adjacent pairs); both are float32, and a 1-ulp difference in a frequency
    (2 ulps allowed: 2.4e-7 relative) grows with the position m, hence 1e-6 + m * 2.4e-7,
    plus one ulp of the float32 angle m * f that each side rounds before sin and cos."""
    name, _, _, _, scaling, length = case
    scaling = rope_scaling.normalise(scaling)
    lengths = np.array([length])
    theirs = hf_tables[f"{name}/inv_freq"]
    ours = np.asarray(rotary_inverse_frequency(64, scaling=scaling, lengths=lengths)).reshape(-1)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6)
    np.testing.assert_allclose(ours, theirs, rtol=2.4e-7, atol=0)
    angles = np.asarray(rotary_angles(length, 64, scaling=scaling, lengths=lengths))
    angles = angles.reshape(length, 32)
    reference = np.arange(length)[:, None] * theirs.astype(np.float64)[None]
    np.testing.assert_allclose(angles, reference, rtol=1e-6, atol=0)
    cos, sin = (np.asarray(t).reshape(length, 64)
                for t in rotary_tables(length, 64, scaling=scaling, lengths=lengths))
    hf_cos, hf_sin = hf_tables[f"{name}/cos"], hf_tables[f"{name}/sin"]
    # ... and each side rounds its angle m * f to float32 before sin/cos: half an ulp of the
    # angle each (a whole-suite run on another CPU path measured 6.6e-5 at m = 255, f = 1)
    positions = np.arange(length)[:, None]
    bound = 1e-6 + positions * 2.4e-7 + np.spacing(np.float32(np.maximum(positions, 1)))
    for ours_half, theirs_half in ((cos[:, 0::2], hf_cos[:, :32]), (cos[:, 1::2], hf_cos[:, 32:]),
                                   (sin[:, 1::2], hf_sin[:, :32]), (-sin[:, 0::2], hf_sin[:, 32:])):
        assert (np.abs(ours_half - theirs_half) <= bound).all()
    assert np.abs(cos[:8, 0::2] - hf_cos[:8, :32]).max() <= 1e-6


# --- the backbone ------------------------------------------------------------------------

def padded(base, extra=0):
    """4 rows of 5..base real tokens, padded to base + extra (the harness's batch)."""
    return synthetic_batch(base, extra)[0]


def encode(backbone, ids):
    return np.asarray(backbone({"token_ids": ids, "segment_ids": np.zeros_like(ids)}))


def twin(backbone, **config):
    """A backbone with `backbone`'s weights and `config` changed."""
    backbone.build()
    other = RoFormerV2Backbone(**{**backbone.config, **config})
    other.build()
    other.set_weights(backbone.get_weights())
    return other


@pytest.mark.parametrize("kind", list(SCALINGS))
def test_padding_exactness_holds_with_scaling(kind):
    """Real-token outputs are bit-identical when the batch is padded further (aligned
    lengths, as test_exact_padding), rows past the trained length 16 included."""
    keras.utils.set_random_seed(0)
    backbone = RoFormerV2Backbone(**TINY, rope_scaling=SCALINGS[kind])
    base = 64
    reference = encode(backbone, padded(base))
    real = padded(base) > 0
    for total in (128, 256):
        out = encode(backbone, padded(base, total - base))
        np.testing.assert_array_equal(out[:, :base][real], reference[real])
    unscaled = encode(twin(backbone, rope_scaling=None), padded(base))
    assert np.abs(unscaled[real] - reference[real]).max() > 1e-3  # scaling does change them


def test_dynamic_ntk_rows_do_not_depend_on_their_neighbours():
    """Each row's base comes from its own length: a short row (<= trained) equals the
    unscaled model's output, a long one is the same alone or beside others."""
    keras.utils.set_random_seed(0)
    backbone = RoFormerV2Backbone(**TINY, rope_scaling=SCALINGS["dynamic_ntk"])
    plain = twin(backbone, rope_scaling=None)
    ids = padded(64)
    batch = encode(backbone, ids)
    short = ids[1:2, :5]  # 5 real tokens <= 16
    np.testing.assert_allclose(encode(backbone, short)[0], encode(plain, short)[0], atol=1e-6)
    np.testing.assert_allclose(batch[0], encode(backbone, ids[:1])[0], atol=2e-6)
    assert np.abs(batch[0] - encode(plain, ids[:1])[0]).max() > 1e-3


def test_config_preset_and_from_config_keep_rope_scaling(tmp_path):
    keras.utils.set_random_seed(0)
    backbone = RoFormerV2Backbone(**TINY, rope_scaling={"type": "ntk", "factor": 2})
    backbone.build()
    assert backbone.config["rope_scaling"] == {"type": "ntk", "factor": 2.0,
                                               "original_max_length": None}
    again = RoFormerV2Backbone.from_config(backbone.get_config())
    assert again.config["rope_scaling"] == backbone.config["rope_scaling"]
    backbone.save_preset(tmp_path / "preset")
    saved = json.loads((tmp_path / "preset" / "config.json").read_text())
    assert saved["backbone"]["rope_scaling"]["type"] == "ntk"
    loaded = RoFormerV2Backbone.from_preset(tmp_path / "preset")
    ids = padded(32)
    np.testing.assert_array_equal(encode(loaded, ids), encode(backbone, ids))
    linear = RoFormerV2Backbone.from_preset(tmp_path / "preset",
                                            rope_scaling={"type": "linear", "factor": 2})
    assert linear.config["rope_scaling"]["type"] == "linear"
    with pytest.raises(ValueError, match="backbone.rope_scaling.type"):
        RoFormerV2Backbone(**TINY, rope_scaling={"type": "yarn", "factor": 2})


# --- heads use the backbone's tables -------------------------------------------------------

def numpy_rotary(x, theta):
    """Adjacent pairs as complex numbers times e^{i m theta_i}: x [B, n, ..., d]."""
    n, d = x.shape[1], x.shape[-1]
    angle = (np.arange(n)[:, None] * theta[None]).reshape((1, n) + (1,) * (x.ndim - 3)
                                                           + (d // 2,))
    z = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * angle)
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = z.real, z.imag
    return out


@pytest.mark.parametrize("kind", ["linear", "ntk"])
def test_global_pointer_rotates_with_the_backbone_scaling(kind):
    rng = np.random.default_rng(1)
    hidden = rng.normal(size=(2, 24, 16)).astype("float32")
    keras.utils.set_random_seed(0)
    backbone = RoFormerV2Backbone(**TINY, rope_scaling=SCALINGS[kind])
    head = H.build_head("mrc_span", None, 16, head_size=8)
    H.use_backbone_rotary([head], backbone)
    pointer = head.pointer
    assert pointer.rope_scaling == backbone.config["rope_scaling"]
    ours = np.asarray(pointer(hidden))[:, 0]
    (kernel,) = [np.asarray(w, np.float64) for w in pointer.weights]
    y = hidden.astype(np.float64) @ kernel
    theta = numpy_inverse_frequency(8, SCALINGS[kind])
    q, k = numpy_rotary(y[..., None, :8], theta), numpy_rotary(y[..., None, 8:], theta)
    reference = np.einsum("bmhd,bnhd->bhmn", q, k)[:, 0] / np.sqrt(8)
    finite = np.isfinite(ours)
    np.testing.assert_allclose(ours[finite], reference[finite], rtol=1e-4, atol=1e-5)
    unscaled = numpy_rotary(y[..., None, :8], numpy_inverse_frequency(8, None))
    assert not np.allclose(q, unscaled, atol=1e-3)


def test_efficient_pointer_dynamic_ntk_reads_each_rows_length():
    rng = np.random.default_rng(2)
    hidden = rng.normal(size=(2, 40, 16)).astype("float32")
    pointer = H.EfficientGlobalPointer(2, 8)
    pointer.build((None, None, 16))
    pointer.rope_scaling = rope_scaling.normalise(SCALINGS["dynamic_ntk"])
    lengths = np.array([12, 40], "int32")  # row 0 under the trained 16: unscaled
    ours = np.asarray(pointer(hidden, lengths=lengths))
    pointer.rope_scaling = None
    plain = np.asarray(pointer(hidden))
    finite = np.isfinite(plain[0])
    np.testing.assert_allclose(ours[0][finite], plain[0][finite], atol=1e-6)
    finite = np.isfinite(plain[1])
    assert np.abs(ours[1][finite] - plain[1][finite]).max() > 1e-3
