"""mtl_framework: supervised multi-task pretraining of Chinese RoFormerV2 encoders."""
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

__version__ = "0.1.0"
