"""Saving and loading, one surface for every kind of folder:

    from mtl_framework import saving
    trained = saving.load("runs/demo")                     # newest readable checkpoint
    trained = saving.load("runs/demo", checkpoint="best")  # keep_best's, or a step number
    trained = saving.load("exports/keras")                 # a keras export (--with-heads: heads)
    trained = saving.load("exports/bert")                  # any backbone folder we read
    trained.backbone, trained.heads(), trained.model()     # built when first asked for
    trained.embedding(task=None)                           # its EmbeddingSettings
    trained.encoder()                                      # its SentenceEncoder (keras.Model)
    saving.export("runs/demo", "transformers", "exports/bert")   # any format of formats/
    backbone = saving.load_backbone("exports/bert")        # a backbone folder of any format

The pieces: trained.py opens a trained model (a run through rundir.RunDir, which owns the
run's files; an export through formats/keras.py), writer.py writes an export in a format
(each format's files are its converter's, architectures/<name>/), model_card.py its
README.md and provenance.json. TensorFlow is imported only when one of these is called.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mtl_framework.saving.trained import Trained


def load(path, checkpoint=None, log=print, rope_scaling=None, precision=None) -> Trained:
    """A trained model from a run directory (its newest readable checkpoint, or
    `checkpoint` "best" or a step number), a keras export (its heads when written
    `--with-heads`) or any backbone folder we read; a UserError in one line when it is
    none of these. `precision` instead of the run's (float32 for a folder)."""
    from mtl_framework.saving.trained import open_trained

    return open_trained(path, checkpoint, log, rope_scaling, precision)


def export(run_dir, fmt, output, with_heads=False, force=False, log=print, checkpoint=None,
           embedding_task=None):
    """Write the run's backbone (and, `with_heads`, its heads) to `output` in format `fmt`
    (`mtl export`; `embedding_task`: whose sentence embedding a transformers folder
    declares); returns the folder written."""
    from mtl_framework.saving.writer import export as write

    return write(run_dir, fmt, output, with_heads=with_heads, force=force, log=log,
                 checkpoint=checkpoint, embedding_task=embedding_task)


def load_backbone(directory, **overrides):
    """The backbone of a folder in any format `architectures.layout` recognises (our keras
    export, bert4keras, keras-hub, transformers, roformer-pytorch)."""
    from mtl_framework import architectures

    return architectures.load_folder(directory, **overrides)


__all__ = ["export", "load", "load_backbone"]
