"""mtl_framework: supervised multi-task pretraining of Chinese text encoders (RoFormerV2,
BERT, ALBERT)."""
import os

# Unset, Keras's backend is TensorFlow; the CLI says so when TensorFlow is not installed.
BACKEND_DEFAULTED = "KERAS_BACKEND" not in os.environ
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

# As quiet as `mtl`: TensorFlow's own log lines (absl's notice, oneDNN, CUDA probes) are
# held back from the moment TensorFlow is imported, unless MTL_VERBOSE=1 (tf_log_filter).
from mtl_framework import tf_log_filter  # noqa: E402  (the standard library only)

tf_log_filter.quiet_on_tensorflow_import()

__version__ = "0.1.0"


# The public names, each imported when first used: `mtl tasks list` and the data tools must
# not pay for importing TensorFlow. Where each lives is the one table below.
_PUBLIC = {
    "RoFormerV2Backbone": "mtl_framework.architectures.roformer_v2.backbone",
    "BertBackbone": "mtl_framework.architectures.bert.backbone",
    "AlbertBackbone": "mtl_framework.architectures.albert.backbone",
    "Tokenizer": "mtl_framework.tokenizer",
    "Experiment": "mtl_framework.config.experiment",
    "Run": "mtl_framework.loop.run",
}
__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str) -> object:
    if name in _PUBLIC:
        import importlib

        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'mtl_framework' has no attribute {name!r}")
