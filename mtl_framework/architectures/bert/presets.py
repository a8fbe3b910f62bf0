"""BERT sizes and the full config they imply (no Keras here: experiments are checked
before TensorFlow is imported). The sizes are RoFormerV2's (presets of roformer_v2),
so `size: small` is the same width and depth in every architecture; `base` and
`large` are Google's BERT-Base and BERT-Large."""
from mtl_framework.architectures import sized_config
from mtl_framework.architectures.roformer_v2.presets import PRESETS as ROFORMER_V2_SIZES

PRESETS = dict(ROFORMER_V2_SIZES)
ACTIVATIONS = ("gelu", "gelu_approximate", "relu")  # bert/layers.py's ACTIVATIONS
# What RoFormerV2 has and BERT has not: refused unless left at "none".
NOT_BERT = {"alpha_warmup_steps": 0, "rope_scaling": None}


def backbone_config(size=None, architecture="bert", **overrides):
    """A full BERT config dict from a preset name and/or explicit dims: intermediate 4H,
    head size H / heads, Chinese BERT's vocab (21128), 2 segments, 512 positions,
    exact GELU, LayerNorm epsilon 1e-12, dropout 0.1 (attention too), as bert_config.json
    of Google's Chinese BERT."""
    for key, none in NOT_BERT.items():
        if overrides.get(key) not in (None, none):
            raise ValueError(f"{key} is RoFormerV2's; {architecture} has none (drop it)")
        overrides.pop(key, None)
    config = sized_config(architecture, PRESETS, dict(
        architecture=architecture, vocab_size=21128, segment_vocab_size=2, max_positions=512,
        activation="gelu", layer_norm_epsilon=1e-12, dropout=0.1, attention_dropout=0.1,
        exact_padding=None), size, **overrides)
    if config["activation"] not in ACTIVATIONS:
        raise ValueError(f"activation {config['activation']!r}: {architecture} has "
                         f"{', '.join(ACTIVATIONS)}")
    if architecture == "bert":
        embedding = config.pop("embedding_size", None)
        if embedding not in (None, config["hidden_size"]):
            raise ValueError(f"embedding_size {embedding} != hidden_size {config['hidden_size']}: "
                             "BERT's embedding is hidden_size wide (a factorised embedding is "
                             "ALBERT's: architecture: albert)")
    return config
