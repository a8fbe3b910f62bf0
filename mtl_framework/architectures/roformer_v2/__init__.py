"""RoFormerV2 (Su et al., 2022), numerically equal to bert4keras's `roformer_v2`: rotary
self-attention, RMS norm without weights, no biases, ReLU FFN, residual scale `a`.
The default architecture (a config without "architecture" is this one)."""
BACKBONE = "RoFormerV2Backbone"
TITLE = "RoFormerV2"  # as prose names it (model cards)
# {format: converter module}: how each folder format holds this architecture.
CONVERTERS = {
    "bert4keras": "mtl_framework.architectures.roformer_v2.bert4keras",
    "keras-hub": "mtl_framework.architectures.roformer_v2.keras_hub",
    "roformer-pytorch": "mtl_framework.architectures.roformer_v2.roformer_pytorch",
}
# Formats it cannot have, and what to use instead (the refusal's one line).
NOT_HELD = {"transformers": "mainline transformers has no RoFormerV2 (its RoFormer is v1): "
                            "export --format roformer-pytorch (JunnYu's roformer package)"}
