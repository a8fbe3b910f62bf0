"""mtl_framework: supervised multi-task pretraining of Chinese text encoders (RoFormerV2,
BERT, ALBERT)."""
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

# As quiet as `mtl`: TensorFlow's own log lines (absl's notice, oneDNN, CUDA probes) are
# held back from the moment TensorFlow is imported, unless MTL_VERBOSE=1 (tf_log_filter).
from mtl_framework import tf_log_filter  # noqa: E402  (the standard library only)

tf_log_filter.quiet_on_tensorflow_import()

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # Lazy: `mtl tasks list` and the data tools must not pay for importing TensorFlow.
    if name in ("RoFormerV2Backbone", "backbone_config", "PRESETS"):
        from mtl_framework import backbone
        return getattr(backbone, name)
    if name in ("BertBackbone", "AlbertBackbone"):
        from mtl_framework import architectures
        return architectures.backbone_class(name[:-len("Backbone")].lower())
    if name == "Tokenizer":
        from mtl_framework.tokenizer import Tokenizer
        return Tokenizer
    raise AttributeError(f"module 'mtl_framework' has no attribute {name!r}")
