"""The sentence encoder itself: its settings as one value, the only place their defaults
live (settings.py: EmbeddingSettings, pooling, normalisation, prompts, Matryoshka dims), and
the Keras model that computes it (model.py: SentenceEncoder, a backbone pooled and
normalised). A low room: the contrastive family trains through it, formats/ reads and writes
it, saving opens it; what uses a trained one (`mtl encode`, the suite, mining) is in
embedding/. Nothing is imported here: settings.py loads before Keras, model.py with it."""
