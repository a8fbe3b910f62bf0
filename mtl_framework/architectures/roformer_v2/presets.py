"""Backbone sizes and the full config they imply (no Keras here, so an experiment's
backbone can be checked before TensorFlow is imported)."""

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
    if size is not None and size not in PRESETS:
        raise ValueError(f"unknown backbone size {size!r}: choose one of {sorted(PRESETS)} "
                         "or give num_layers/hidden_size/num_heads explicitly")
    config = dict(vocab_size=12000, segment_vocab_size=2, dropout=0.1, attention_dropout=0.0,
                  alpha_warmup_steps=0, exact_padding=None)
    config.update(PRESETS.get(size, {}))
    config.update({k: v for k, v in overrides.items() if v is not None})
    missing = [k for k in ("num_layers", "hidden_size", "num_heads") if k not in config]
    if missing:
        raise ValueError(f"backbone config needs {missing} (or a size: {sorted(PRESETS)})")
    if "head_size" not in config and config["hidden_size"] % config["num_heads"]:
        # H // heads would silently drop the remainder (hidden 30, 4 heads -> head size 7).
        raise ValueError(f"hidden_size {config['hidden_size']} is not divisible by num_heads "
                         f"{config['num_heads']}: change one, or give head_size explicitly")
    config.setdefault("intermediate_size", 4 * config["hidden_size"])
    config.setdefault("head_size", config["hidden_size"] // config["num_heads"])
    config.setdefault("embedding_size", config["hidden_size"])
    if config["head_size"] % 2:
        raise ValueError(f"head_size must be even for rotary pairs, got {config['head_size']}")
    return config
