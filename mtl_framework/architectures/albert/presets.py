"""ALBERT sizes: BERT's (bert/presets.py) with a factorised embedding of 128, as
albert_zh and Google's ALBERT releases (no Keras here)."""
from mtl_framework.architectures.bert import presets as bert

PRESETS = bert.PRESETS


def backbone_config(size=None, **overrides):
    """BERT's config plus embedding_size (128 unless given), ALBERT's LayerNorm epsilon
    (1e-12) and no dropout by default (ALBERT v2 and albert_zh train without it)."""
    for key, default in (("embedding_size", 128), ("dropout", 0.0), ("attention_dropout", 0.0)):
        if overrides.get(key) is None:
            overrides[key] = default
    return bert.backbone_config(size, architecture="albert", **overrides)
