"""ALBERT (Lan et al., 2020): BERT's blocks with a factorised embedding (vocab x E, then
a projection E -> H) and one block's weights shared across the depth. albert_zh's
Chinese ALBERTs and transformers' AlbertModel; one group, one inner layer."""
BACKBONE = "AlbertBackbone"
TITLE = "ALBERT"
CONVERTERS = {
    "bert4keras": "mtl_framework.architectures.albert.checkpoint",  # Google's TF release
    "keras-hub": "mtl_framework.architectures.albert.keras_hub",
    "transformers": "mtl_framework.architectures.albert.transformers",
}
