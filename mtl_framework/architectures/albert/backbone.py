"""The ALBERT encoder, numerically equal to transformers' AlbertModel, bert4keras's
"albert" and keras-hub's AlbertBackbone (with their activation) on the same weights:
BERT's embedding at embedding_size, LayerNorm, a projection to hidden_size, then ONE
BERT block (bert/layers.py) applied num_layers times (one group, one inner layer)."""
import keras

from mtl_framework.architectures.albert.presets import backbone_config
from mtl_framework.architectures.bert.backbone import BertBackbone
from mtl_framework.architectures.bert.layers import initializer


@keras.saving.register_keras_serializable(package="mtl_framework")
class AlbertBackbone(BertBackbone):
    """BertBackbone's inputs, outputs and options, plus embedding_size (the factorised
    embedding's width; 128 unless given). `transformer_layers` holds the one shared block."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # transformers and keras-hub always have it (Google's ALBERT only when E != H:
        # its readers fill the identity then)
        self.embedding_projection = keras.layers.Dense(
            self.config["hidden_size"], kernel_initializer=initializer(),
            name="embedding_projection")

    make_config = staticmethod(backbone_config)

    def distinct_layers(self):
        return 1

    def layer_sequence(self):
        return self.transformer_layers * self.config["num_layers"]

    def build_projection(self):
        self.embedding_projection.build((None, None, self.config["embedding_size"]))

    def project(self, x):
        return self.embedding_projection(x)
