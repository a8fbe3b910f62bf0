"""Initial weights (issue 12): every weight its own draw, each with bert4keras 0.11.5's
`RoFormerV2.initializer` scale, reproducible under keras.utils.set_random_seed."""
import inspect
import itertools
import math

import keras
import numpy as np
import pytest

from mtl_framework import RoFormerV2Backbone
from mtl_framework.architectures.roformer_v2.layers import SelfAttention
from mtl_framework.families import FAMILIES
from mtl_framework.families.heads import build_head, head_classes
from mtl_framework.layers import RoFormerV2Initializer

LAYERS = 4
# vocab > 10000 and 2 segments (< 10) take the fan from shape[1]; embedding_size != hidden
# adds the embedding mapping
CONFIG = dict(vocab_size=10001, num_layers=LAYERS, hidden_size=32, num_heads=2,
              intermediate_size=96, embedding_size=16, dropout=0.0)


def rule_std(shape, layers):
    """bert4keras models.py RoFormerV2.initializer, written out again: the std parameter."""
    fan = shape[1] if shape[0] > 10000 or shape[0] < 10 else shape[0]
    return 1.13684723 / fan ** 0.5 * layers ** -0.5


def truncated_moments():
    """Std and 4th moment of a standard normal cut at +-2 (numerical integration)."""
    x = np.linspace(-2, 2, 400001)
    density = np.exp(-x * x / 2)
    density /= np.trapezoid(density, x)
    variance = np.trapezoid(x ** 2 * density, x)
    return math.sqrt(variance), np.trapezoid(x ** 4 * density, x) / variance ** 2


def build_all(seed):
    """A backbone and one head of every family with weights, all built under `seed`."""
    keras.utils.set_random_seed(seed)
    backbone = RoFormerV2Backbone(**CONFIG)
    backbone.build()
    heads = []
    for family, record in FAMILIES.items():
        if record.tied_embedding:
            continue  # the mlm head is the backbone's token embedding: no weights of its own
        pointer = "head_size" in inspect.signature(head_classes()[family]).parameters
        heads.append(build_head(family, 3 if record.min_labels else None, CONFIG["hidden_size"],
                                num_layers=LAYERS, name=family,
                                **({"head_size": 8} if pointer else {})))
    return backbone, heads


def random_weights(backbone, heads):
    """(path, value, std parameter) of every randomly initialised weight; the fused
    q/k/v kernel as its three [hidden, inner] draws."""
    out = []
    for variable in backbone.trainable_weights + [w for h in heads for w in h.trainable_weights]:
        if variable.path.endswith("bias"):
            continue  # zeros, as in bert4keras
        value = np.asarray(variable.numpy())
        if variable.path.endswith("qkv_kernel"):
            for i, part in enumerate(np.split(value, 3, axis=1)):
                out.append((f"{variable.path}[{'qkv'[i]}]", part, rule_std(part.shape, LAYERS)))
        else:
            out.append((variable.path, value, rule_std(value.shape, LAYERS)))
    return out


def test_no_two_weights_start_equal():
    weights = random_weights(*build_all(0))
    # 2 embeddings + mapping, per layer q, k, v, output and 2 FFN kernels, 21 head kernels
    assert len(weights) == 3 + LAYERS * 6 + 21
    for (name_a, a, _), (name_b, b, _) in itertools.combinations(weights, 2):
        n = min(a.size, b.size)
        # a shared seed shows as a shared prefix (the old bug: segment embedding = token
        # embedding rows 0-1, the FFN output kernel = the input kernel reshaped)
        assert not np.array_equal(a.ravel()[:n], b.ravel()[:n]), (name_a, name_b)


def test_each_weight_std_matches_the_rule():
    unit_std, kurtosis = truncated_moments()
    assert unit_std == pytest.approx(1 / 1.13684723, rel=1e-6)  # what the constant undoes
    for name, value, std in random_weights(*build_all(1)):
        # sample std: standard error std * sqrt((kurtosis - 1) / (4 n)); 5 of them
        tolerance = 5 * math.sqrt((kurtosis - 1) / (4 * value.size))
        assert value.std() == pytest.approx(std * unit_std, rel=tolerance), name
        assert np.abs(value).max() <= 2 * std + 1e-7, name  # truncated at 2 std
        assert abs(value.mean()) <= 5 * std * unit_std / math.sqrt(value.size), name


def test_fan_rule_branches():
    init = RoFormerV2Initializer(num_layers=1)
    assert init.stddev((12000, 768)) == pytest.approx(1.13684723 / math.sqrt(768))
    assert init.stddev((3368, 768)) == pytest.approx(1.13684723 / math.sqrt(3368))
    assert init.stddev((2, 384)) == pytest.approx(1.13684723 / math.sqrt(384))
    assert init.stddev((10, 384)) == pytest.approx(1.13684723 / math.sqrt(10))
    assert RoFormerV2Initializer(num_layers=12).stddev((768, 3072)) == pytest.approx(
        1.13684723 / math.sqrt(768) / math.sqrt(12))


def test_deterministic_under_a_seed():
    first = [w for _, w, _ in random_weights(*build_all(5))]
    again = [w for _, w, _ in random_weights(*build_all(5))]
    other = [w for _, w, _ in random_weights(*build_all(6))]
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not any(np.array_equal(a, b) for a, b in zip(first, other))


def test_an_explicit_seed_gives_its_own_stream():
    a, b = RoFormerV2Initializer(2, seed=3), RoFormerV2Initializer(2, seed=3)
    first, second = np.asarray(a((20, 4))), np.asarray(a((20, 4)))
    assert not np.array_equal(first, second)
    assert np.array_equal(first, np.asarray(b((20, 4))))


def test_initializer_serialises():
    init = RoFormerV2Initializer(num_layers=6)
    again = keras.initializers.deserialize(keras.initializers.serialize(init))
    assert isinstance(again, RoFormerV2Initializer) and again.get_config() == init.get_config()
    layer = SelfAttention(2, 8, kernel_initializer=init)
    rebuilt = SelfAttention.from_config(layer.get_config())
    assert rebuilt.kernel_initializer.num_layers == 6
    head = build_head("extraction_ner", 3, 16, head_size=8, num_layers=6)
    assert head.get_config()["num_layers"] == 6
    assert head.trace_key() == build_head("extraction_ner", 3, 16, head_size=8).trace_key()
