"""SentenceEncoder: a backbone, pooled, L2-normalised or not: token ids -> one vector per
text, as keras-hub's text embedders are (the backbone and what turns its output into the
task's value, kept apart).

    encoder = SentenceEncoder(backbone, settings.pooling, settings.normalize)
    vectors = encoder({"token_ids": ids, "segment_ids": zeros}, packed=True)   # float32 [n, H]

The one model of the sentence embedding: `mtl encode`, the suite and mining compute with it
(embedding/encode.py's Encoder), an export declares what it computes
(formats/sentence_transformers.py: 1_Pooling, Normalize), and the contrastive step pools
through one (ContrastiveHead.text_encoder: each text alone, MultiTaskModel._text_vectors;
unnormalised there: the losses compare by cosine).
Its settings are settings.py's EmbeddingSettings, beside it. Keras: imported by the
contrastive head and by saving, never by families/__init__.py or settings.py.
"""
import keras
from keras import ops

from mtl_framework.numbers import l2_normalize
from mtl_framework.sentence_encoder.settings import POOLINGS


def pool(hidden, token_ids, pooling):
    """Sentence vectors from the backbone's output [..., L, H]: the [CLS] position (`cls`),
    or the mean over the real (non-padding) tokens, [CLS] and [SEP] included as
    sentence-transformers' mean pooling includes them (`mean`)."""
    if pooling == "cls":
        return hidden[..., 0, :]
    mask = ops.cast(ops.not_equal(token_ids, 0), hidden.dtype)[..., None]
    return ops.sum(hidden * mask, axis=-2) / ops.maximum(ops.sum(mask, axis=-2), 1.0)


def sentence_vectors(hidden, token_ids, pooling, normalize):
    """The backbone's output [..., L, H] -> float32 sentence vectors [..., H]: pooled
    (pool), and L2-normalised where `normalize`. What SentenceEncoder computes after its
    backbone, and what the contrastive head computes in training (normalize False)."""
    vectors = ops.cast(pool(hidden, token_ids, pooling), "float32")
    return l2_normalize(vectors, xp=ops) if normalize else vectors


@keras.saving.register_keras_serializable(package="mtl_framework")
class SentenceEncoder(keras.Model):
    """{token_ids, segment_ids} [n, L] -> float32 [n, H]: `backbone`'s output pooled by
    `pooling` (cls, or mean over the real tokens) and, with `normalize`, L2-normalised.
    `packed` (a call argument) runs the backbone's token-wise work on the real tokens
    alone (layers.Packing), as the contrastive step and `mtl encode` do on TensorFlow.

    Args:
        backbone: any backbone of architectures/ (RoFormerV2, BERT, ALBERT).
        pooling: one of POOLINGS (cls, or mean over the real tokens).
        normalize: whether the vectors are L2-normalised (an encoder's output; the
            training step keeps them raw, its losses normalise).

    Example:
        encoder = SentenceEncoder(backbone, "cls", True)
        vectors = encoder({"token_ids": ids, "segment_ids": ops.zeros_like(ids)})
    """

    def __init__(self, backbone, pooling, normalize, **kwargs):
        if pooling not in POOLINGS:
            raise ValueError(f"pooling {pooling!r}: give one of {', '.join(POOLINGS)}")
        super().__init__(**kwargs)
        self.backbone, self.pooling, self.normalize = backbone, pooling, bool(normalize)
        self.built = True  # no weights of its own (fit under tf.distribute checks every layer is)

    def call(self, inputs, training=False, packed=False):
        hidden = self.backbone(inputs, training=training, packed=packed)
        return sentence_vectors(hidden, inputs["token_ids"], self.pooling, self.normalize)

    def get_config(self):
        return {"backbone": keras.saving.serialize_keras_object(self.backbone),
                "pooling": self.pooling, "normalize": self.normalize, "name": self.name}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        return cls(**config)
