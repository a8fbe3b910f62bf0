"""keras-hub 0.32's `RoformerV2Backbone` with our weights (its RMS scales set to 1).

keras-hub differs from bert4keras in one way that matters: on the TF/JAX path
its attention mask masks padded query rows instead of padded keys, so outputs
at real tokens move when only the padding changes (see the README).
"""
import importlib.util

import numpy as np


def keras_hub_available():
    return importlib.util.find_spec("keras_hub") is not None


def to_keras_hub(backbone):
    """A keras_hub RoformerV2Backbone holding `backbone`'s weights."""
    import keras_hub

    config = backbone.config
    if config["embedding_size"] != config["hidden_size"]:
        raise ValueError("keras-hub's RoformerV2Backbone has no embedding mapping: "
                         "export needs embedding_size == hidden_size")
    hub = keras_hub.models.RoformerV2Backbone(
        vocabulary_size=config["vocab_size"], num_layers=config["num_layers"],
        num_heads=config["num_heads"], hidden_dim=config["hidden_size"],
        intermediate_dim=config["intermediate_size"], head_size=config["head_size"],
        dropout=config["dropout"], num_segments=config["segment_vocab_size"])
    copy_weights_to_keras_hub(backbone, hub)
    return hub


def copy_weights_to_keras_hub(backbone, hub):
    hub.token_embedding.embeddings.assign(backbone.token_embedding.embeddings)
    hub.segment_embedding.embeddings.assign(backbone.segment_embedding.embeddings)
    hub.embeddings_layer_norm.scale.assign(np.ones(hub.embeddings_layer_norm.scale.shape))
    for ours, theirs in zip(backbone.transformer_layers, hub.transformer_layers):
        q, k, v = np.split(ours.attention.qkv_kernel.numpy(), 3, axis=1)
        attention = theirs.attention_layer
        attention.q_dense.kernel.assign(q)
        attention.k_dense.kernel.assign(k)
        attention.v_dense.kernel.assign(v)
        attention.o_dense.kernel.assign(ours.attention.output_kernel)
        theirs.feedforward_intermediate_dense.kernel.assign(ours.feed_forward.inner_kernel)
        theirs.feedforward_output_dense.kernel.assign(ours.feed_forward.output_kernel)
        for norm in (theirs.attention_norm, theirs.feedforward_norm):
            norm.scale.assign(np.ones(norm.scale.shape))
