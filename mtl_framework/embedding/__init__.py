"""The sentence embedding used: texts -> vectors from a run, an export or a folder (encode.py),
hard negatives mined with it (mine_negatives.py) and the C-MTEB-style suite that scores it
(suite.py). What the embedding is, its settings and its Keras model, is sentence_encoder/;
the contrastive family trains it (families/contrastive.py); scoring/embedding.py holds the
suite's scorers."""
