"""The head of families/contrastive.py: pooling (sentence_encoder/model.py's, as the
encoder pools) and the contrastive losses (no weights).

Keras: mtl_framework.families.heads imports this module, families/__init__.py never does (the
family records load before Keras)."""
import numpy as np
from keras import ops

from data_adapters.task_types import CONTRASTIVE
from mtl_framework import losses
from mtl_framework.families.heads import TaskHead, _np, head_for
from mtl_framework.numbers import l2_normalize
from mtl_framework.sentence_encoder.model import SentenceEncoder, sentence_vectors
from mtl_framework.sentence_encoder.settings import TRAINED


@head_for(CONTRASTIVE.name)
class ContrastiveHead(TaskHead):
    """Pooled vectors [B, K, H] of each row's texts (query, positive, negatives); the loss
    is InfoNCE (over cosine / temperature, with or without in-batch negatives) or CoSENT,
    averaged over the Matryoshka dimensions when given (each a prefix of the vector,
    compared by cosine as sentence-transformers' MatryoshkaLoss does, weights 1)."""

    # each text is encoded alone and pooled without weights: the step runs the queries and
    # the passages through the backbone apart (MultiTaskModel._side_vectors), or chunk by
    # chunk (cached_chunk)
    texts_alone = True

    # the embedding's settings default to TRAINED (sentence_encoder/settings.py, their one place)
    def __init__(self, num_labels=None, loss="infonce", temperature=0.05, in_batch_negatives=True,
                 pooling=TRAINED["pooling"], normalize=TRAINED["normalize"],
                 matryoshka_dims=TRAINED["matryoshka_dims"], cached_chunk=0,
                 query_prefix=TRAINED["query_prefix"], passage_prefix=TRAINED["passage_prefix"],
                 **kwargs):
        super().__init__(num_labels, **kwargs)
        self.query_prefix, self.passage_prefix = query_prefix, passage_prefix
        self.loss, self.temperature = loss, float(temperature)
        self.in_batch_negatives, self.pooling, self.normalize = in_batch_negatives, pooling, normalize
        self.matryoshka_dims = tuple(int(d) for d in matryoshka_dims)
        # > 0: the step computes this head's gradient by GradCache, `cached_chunk` texts
        # through the backbone at a time (_cached_gradients in step/tensorflow.py, step/jax.py)
        self.cached_chunk = int(cached_chunk)

    def build(self, hidden_shape):
        too_wide = [d for d in self.matryoshka_dims if hidden_shape[-1] and d > hidden_shape[-1]]
        if too_wide:  # a prefix past the vector would silently be the whole vector
            raise ValueError(f"task {self.name!r}: embedding.matryoshka_dims {too_wide} exceed the "
                             f"backbone's hidden size {hidden_shape[-1]}: give dims up to it")

    def call(self, hidden, batch, training=False):
        """float32 [N, H]: the SentenceEncoder's vectors of the backbone's output, raw (the
        losses normalise; `normalize` is the exported encoder's): not normalised here."""
        return sentence_vectors(hidden, batch["token_ids"], self.pooling, False)

    def text_encoder(self, backbone):
        """The SentenceEncoder the step runs this head's texts through (MultiTaskModel.
        _text_vectors): `backbone` pooled as this head pools, raw, as `call` computes."""
        return SentenceEncoder(backbone, self.pooling, False, name=f"{self.name}_texts")

    @property
    def signs(self):
        """InfoNCE: in-batch accuracy, chance and collapse (losses.ranking_signs); CoSENT
        ranks no candidates: chance and collapse (losses.cosent_signs)."""
        return ("accuracy", "chance", "cosine") if self.loss == "infonce" else ("chance", "cosine")

    def compute_task_loss(self, vectors, batch):
        return self.compute_task_loss_and_signs(vectors, batch)[0]

    def compute_task_loss_and_signs(self, vectors, batch):
        """The loss averaged over the Matryoshka dims, and the signs of the widest of them
        (the whole vector without dims), from the same cosines the loss took."""
        dims = self.matryoshka_dims or (None,)
        widest = None if None in dims else max(dims)
        values, signs = [], {}
        for size in dims:
            loss, more = self._loss(vectors[..., :size] if size else vectors, batch, size == widest)
            values.append(loss)
            signs.update(more)
        return ops.mean(ops.stack(values)), signs

    def _loss(self, vectors, batch, with_signs=False):
        """(the loss on `vectors`, its signs when `with_signs`, else {})."""
        queries, positives = vectors[:, 0], vectors[:, 1]
        if self.loss == "cosent":
            loss = losses.cosent(queries, positives, batch["score"], self.temperature)
            return loss, losses.cosent_signs(queries, positives, batch["score"]) if with_signs else {}
        logits, valid, target = losses.info_nce_logits(
            queries, positives, vectors[:, 2:], batch["text_mask"][:, 2:], batch["positive_id"],
            self.temperature, self.in_batch_negatives)
        loss = ops.mean(losses.sparse_categorical_crossentropy(target, logits))
        return loss, losses.ranking_signs(logits, valid, target, self.temperature) if with_signs else {}

    def decode(self, vectors, batch=None):
        """Per row {"query", "positive": unit vectors, "cosine": theirs, "negatives": the
        row's hard negatives' unit vectors [n, H] (those the batch holds)}."""
        vectors = l2_normalize(np.asarray(_np(vectors), np.float64))
        real = (np.asarray(_np(batch["text_mask"])) > 0 if batch is not None and "text_mask" in batch
                else np.ones(vectors.shape[:2], bool))
        return [{"query": v[0], "positive": v[1], "cosine": float(v[0] @ v[1]),
                 "negatives": v[2:][mask[2:]]} for v, mask in zip(vectors, real)]

    def targets(self, batch):
        """Per row {"score": float (NaN: none), "positive_id": the positive's text id,
        "query_id": the query's}."""
        return [{"score": float(s), "positive_id": int(p), "query_id": int(q)}
                for s, p, q in zip(np.asarray(batch["score"]), np.asarray(batch["positive_id"]),
                                   np.asarray(batch["query_id"]))]

    def get_config(self):
        return {**super().get_config(), "loss": self.loss, "temperature": self.temperature,
                "in_batch_negatives": self.in_batch_negatives, "pooling": self.pooling,
                "normalize": self.normalize, "matryoshka_dims": list(self.matryoshka_dims),
                "cached_chunk": self.cached_chunk,
                "query_prefix": self.query_prefix, "passage_prefix": self.passage_prefix}

    # normalize acts on the exported embeddings only (the losses compare by cosine); the
    # prefixes are the featurizer's, recorded here for encoding
    untraced_config = TaskHead.untraced_config + ("normalize", "query_prefix", "passage_prefix")
