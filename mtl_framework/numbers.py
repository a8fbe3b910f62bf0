"""Number rules the package holds once: the numbers of every YAML file read here
(experiments, task specs; `yaml_number`) and L2 normalisation (`l2_normalize`: the
contrastive losses, the sentence encoder, decoding, mining, the suite's model cosine). A
module of its own, importing nothing of the package, so every room may use it (config/ and
families/ without importing each other)."""
import math

import numpy as np


def yaml_number(value):
    """A finite number from an int, a float or a numeric string, else None: the one rule for
    the numbers of every YAML file read here (experiments, task specs). YAML 1.1 reads `1e-3`
    (no dot) as a string, which is meant as a number; `.inf`, `.nan` and `true` are not."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, int) or isinstance(value, float) and math.isfinite(value):
        return value
    return None


def l2_normalize(x, axis=-1, xp=np):
    """x / max(|x|, 1e-12) along `axis`: a zero vector stays zero (torch's normalize, what
    sentence-transformers' Normalize and mteb's cosine divide by). `xp`: the array
    namespace, numpy for arrays in hand, keras.ops inside a model or a loss (their
    functions share these names), so the one formula serves both."""
    return x / xp.maximum(xp.sqrt(xp.sum(xp.square(x), axis=axis, keepdims=True)), 1e-12)
