"""Backbone sizes and the full config they imply (no Keras here, so an experiment's
backbone can be checked before TensorFlow is imported)."""
from mtl_framework.architectures import sized_config

# Released RoFormerV2 sizes (char-level vocab of 12000, 2 segments, FFN 4H, head size 64).
PRESETS = {
    "small": dict(num_layers=6, hidden_size=384, num_heads=6),
    "base": dict(num_layers=12, hidden_size=768, num_heads=12),
    "large": dict(num_layers=24, hidden_size=1024, num_heads=16),
}


def backbone_config(size=None, **overrides):
    """A full config dict from a preset name and/or explicit dims.

    Defaults follow the released models: intermediate 4H, head size H / heads,
    vocab 12000, 2 segments, dropout 0.1.
    """
    config = sized_config("backbone", PRESETS, dict(
        vocab_size=12000, segment_vocab_size=2, dropout=0.1, attention_dropout=0.0,
        alpha_warmup_steps=0, exact_padding=None), size, **overrides)
    config.setdefault("embedding_size", config["hidden_size"])
    if config["head_size"] % 2:
        raise ValueError(f"head_size must be even for rotary pairs, got {config['head_size']}")
    return config
