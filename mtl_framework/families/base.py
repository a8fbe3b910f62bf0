"""The record of one task family: what the rest of the framework asks about it.

A family module (text.py, mrc.py, ...) defines its featurizer, collate function
and hooks, and describes them in a `Family`; `families/__init__.py` gathers the
records into the one table, FAMILIES. Its head classes sit beside it in
`<module>_heads.py` and register themselves for its families (`head_for`). Nothing
here imports TensorFlow or Keras: the spec checks and the feature workers read this
table before TensorFlow loads, so a record does not import its head class.

Everything the rest of the framework treats differently per family is a field of the
record (the Hub task type of a model card, how raw strings become examples, whether
a label is a number), so a family's name is spelled in its own modules only.
"""
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from data_adapters.task_types import TASK_TYPES

TOKENS = {"token_ids": ("int32", 2), "segment_ids": ("int32", 2)}


def rows_per_example(features, max_examples):
    """The feature rows of the first `max_examples` examples: one row per example."""
    return np.arange(min(max_examples, len(features)))


def batch_rows(batch):
    """A loss that is a mean over the batch's rows is a mean over this many."""
    import tensorflow as tf  # only a training step calls this

    return tf.cast(tf.shape(batch["token_ids"])[0], tf.float32)


def no_head_settings(task, labels):
    return {}


def no_feature_settings(task):
    return {}


def negative_label(reference):
    """Unlabelled class targets are -1 (a multi-label target is a list: never unlabelled)."""
    return isinstance(reference, int) and reference < 0


def label_output(prediction, example, labels, features, row):
    """A predicted class index (a list of them when multi-label) as the task's label names."""
    if isinstance(prediction, list):  # multi-label
        return [labels[i] for i in prediction]
    return labels[prediction]


def char_span(text, offsets, first, last):
    """Inclusive token span -> {"text", "start", "end"}, half-open characters of `text`."""
    start, end = int(offsets[first][0]), int(offsets[last][1])
    return {"text": text[start:end], "start": start, "end": end}


@dataclass(frozen=True)
class Family:
    """One task family (the `type` of a task spec, or the reserved mlm).

    name: the type.  featurizer: its Featurizer class.  collate(features, rows, rng,
    pad_to) -> batch.  batch_spec: batch key -> (dtype, rank), docs/batches.md
    (`multi_label_spec` replaces keys when the task is multi-label).  Its head class
    registers itself for it (`head_for`, in the family module's `_heads` sibling);
    head_settings(task, labels) -> that head's extra kwargs; feature_settings(task) -> the
    featurizer's settings the task's spec gives (contrastive's `embedding:`).
    """

    name: str
    featurizer: type
    collate: Callable
    batch_spec: dict
    needs_labels: bool = False  # a spec must give `labels` / `label_file`
    min_labels: Optional[int] = None  # None: the head takes no labels
    too_few_labels_hint: str = ""
    multi_label: bool = False  # `multi_label: true` allowed
    multi_label_spec: dict = field(default_factory=dict)
    in_specs: bool = True  # a spec may declare it (mlm is the experiment's own task)
    head_settings: Callable = no_head_settings
    feature_settings: Callable = no_feature_settings  # task -> its featurizer's settings
    tied_embedding: bool = False  # the head is the backbone's token embedding (pass embeddings=)
    choice_axis: bool = False  # batches are [B, C, L]: choices folded into the batch axis
    loss_denominator: Callable = batch_rows  # what the head's loss is a mean over
    # (task, train features, batch_size) -> a line when no batch of them can teach anything
    # (contrastive: no candidate besides a query's positive), else None; checked before a run
    train_problem: Optional[Callable] = None
    # the loss couples a batch's rows (in-batch negatives, CoSENT's pairs): under a
    # tf.distribute strategy each replica computes it on the whole micro-batch (shard_batch)
    rows_coupled: bool = False
    # evaluation and prediction
    scored: bool = True  # has task outputs to evaluate and predict (mlm has none)
    unlabelled: Optional[Callable] = None  # reference -> unlabelled?; None: no label to learn
    counts_lost_gold: bool = False  # gold spans lost in featurizing count as missed
    # (features, rows, predictions) -> (predictions, references) in characters, the gold
    # read from the data (nothing lost), for metrics that match text
    text_answers: Optional[Callable] = None
    example_rows: Callable = rows_per_example  # (features, max_examples) -> rows
    window_answers: Optional[Callable] = None  # (features, windows) -> (predictions, references)
    window_outputs: Optional[Callable] = None  # (features, windows) -> per example output
    output: Optional[Callable] = None  # (prediction, example, labels, features, row) -> JSON
    # mrr: rank_groups(features, rows, scores) -> (per question the candidates' scores, the
    # positions of the right ones, questions left out); rank_scores(head outputs) -> scores
    rank_groups: Optional[Callable] = None
    rank_scores: Optional[Callable] = None
    # raw strings (`mtl predict --text`, predict_texts): from_texts(texts) -> its examples
    # (ValueError saying what is wrong); None: its input is written in the task's format
    from_texts: Optional[Callable] = None
    two_texts: bool = False  # compares two texts: text_b is never optional
    hub_task: str = "other"  # the Hugging Face Hub task type (a model card's model-index, tags)

    @property
    def labelled(self):
        """Its examples carry a label to learn (a train or dev row without one is skipped)."""
        return self.unlabelled is not None

    @property
    def numeric_label(self):
        """Its label is a number (data stats report its range): its task type says so."""
        return TASK_TYPES[self.name].numeric_label

    @property
    def windows(self):
        """Its rows are windows of an example, decoded together (mrc_span)."""
        return self.window_answers is not None

    def spec(self, multi_label=False):
        """The batch keys -> (dtype, rank) of this family's batches."""
        return {**TOKENS, **self.batch_spec, **(self.multi_label_spec if multi_label else {})}

    def check_batch(self, batch, multi_label=False):
        """Raise ValueError when `batch` does not have exactly the declared keys, dtypes, ranks."""
        spec = self.spec(multi_label)
        if set(batch) != set(spec):
            raise ValueError(f"{self.name} batch keys {sorted(batch)}, declared {sorted(spec)}")
        for key, (dtype, rank) in spec.items():
            array = np.asarray(batch[key])
            if array.dtype != np.dtype(dtype) or array.ndim != rank:
                raise ValueError(f"{self.name} batch key {key!r}: {array.dtype} rank "
                                 f"{array.ndim}, declared {dtype} rank {rank}")
