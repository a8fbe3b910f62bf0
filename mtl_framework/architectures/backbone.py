"""What every architecture's backbone class shares (each subclasses `Backbone`): its
`.config` as its Keras config, the token + segment embedding sum its call starts with,
and its trainable parameter count."""
import keras
import numpy as np
from keras import ops


class Backbone(keras.Model):
    """A subclass sets `.config` (its keyword arguments, "architecture" where not the
    default), `.token_embedding` and `.segment_embedding` (None without segments)."""

    def embed_tokens(self, inputs):
        """token embedding + segment embedding (segment ids default to 0)."""
        token_ids = inputs["token_ids"]
        x = self.token_embedding(token_ids)
        if self.segment_embedding is not None:
            segment_ids = inputs.get("segment_ids")
            if segment_ids is None:
                segment_ids = ops.zeros_like(token_ids)
            x = x + self.segment_embedding(segment_ids)
        return x

    def get_config(self):
        return {**super().get_config(), **self.config}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in ("name", "trainable", "dtype", "architecture"):
            config.pop(key, None)
        return cls(**config)

    def count_params_exact(self):
        """Trainable parameters (non-trainable state such as RoFormerV2's residual alpha
        excluded)."""
        return int(sum(np.prod(w.shape) for w in self.trainable_weights))
