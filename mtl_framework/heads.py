"""Task heads, one layer per family (bert4keras practice per family; docs/architecture.md).

Each family's head classes sit beside it (families/text_heads.py beside families/text.py,
...) and register themselves with `head_for`; what a head is and the helpers heads share
are in head_base.py. This module gathers them all (the names below stay importable from
here) and builds the head of a family:

    head = build_head(task.type, num_labels, hidden_size, name=task.name)
    head = task_head(task, labels, hidden_size)   # a registry TaskSpec's head
    outputs = head(hidden, batch, training=False); loss = head.compute_task_loss(outputs, batch)

See head_base.py for the interface every head keeps.
"""
import keras

from mtl_framework.families import FAMILIES
from mtl_framework.families.choice_heads import ChoiceHead
from mtl_framework.families.coreference_heads import CorefHead
from mtl_framework.families.mlm_heads import MLMHead
from mtl_framework.families.mrc_heads import SpanHead
from mtl_framework.families.spans_heads import (
    EntityHead,
    EventHead,
    RelationHead,
    _GPLinkerHead,
    clique_search,
)
from mtl_framework.families.text_heads import ClassificationHead, RegressionHead
from mtl_framework.head_base import (
    HEAD_CLASSES,
    TaskHead,
    _label_scores,
    _np,
    _padding_mask,
    _real_lengths,
    backbone_inputs,
    head_for,
    pointer_loss,
    spans_from_scores,
    use_backbone_rotary,
)
from mtl_framework.layers import (
    NEG_INF,
    EfficientGlobalPointer,
    GlobalPointer,
    RoFormerV2Initializer,
    rotary_lengths,
)

__all__ = [
    "HEAD_CLASSES", "NEG_INF", "ChoiceHead", "ClassificationHead", "CorefHead", "EfficientGlobalPointer",
    "EntityHead", "EventHead", "GlobalPointer", "MLMHead", "RegressionHead", "RelationHead",
    "RoFormerV2Initializer", "SpanHead", "TaskHead", "backbone_inputs", "build_head", "clique_search",
    "head_for", "pointer_loss", "rotary_lengths", "spans_from_scores", "task_head", "use_backbone_rotary",
    # helpers, importable from here as before the heads moved beside their families
    "_GPLinkerHead", "_label_scores", "_np", "_padding_mask", "_real_lengths",
]


def build_head(task_type, num_labels, hidden_size, **kwargs):
    """A built head for a task family (the `type` of a task spec; families.FAMILIES).

    kwargs go to the head: name, head_size, multi_label (classification),
    role_groups (extraction_event), embeddings (mlm, required), threshold,
    num_layers (the backbone's: the initializer's L^(-1/2), as bert4keras's heads
    share the model's initializer; 1 when not given).
    """
    if task_type not in FAMILIES:
        raise ValueError(f"unknown task type {task_type!r}; "
                         f"expected one of: {', '.join(FAMILIES)}")
    family = FAMILIES[task_type]
    least = 1 if kwargs.get("multi_label") else family.min_labels
    if least is not None and (num_labels is None or num_labels < least):
        raise ValueError(f"task type {task_type!r} needs at least {least} "
                         f"label(s), got {num_labels}{family.too_few_labels_hint}")
    if family.tied_embedding:
        if kwargs.get("embeddings") is None:
            raise ValueError(f"the {task_type} head is tied to the token embedding: pass "
                             "embeddings=<the backbone's token embedding matrix>")
        vocab = kwargs["embeddings"]
        vocab = vocab.embeddings if isinstance(vocab, keras.layers.Embedding) else vocab
        if num_labels is not None and vocab.shape[0] != num_labels:
            raise ValueError(f"{task_type}: num_labels {num_labels} differs from the "
                             f"embedding's vocabulary size {vocab.shape[0]}")
    if kwargs.pop("family", family.name) != family.name:
        raise ValueError(f"build_head({task_type!r}): family must be the task type")
    head = HEAD_CLASSES[family.name](num_labels=num_labels, family=family.name, **kwargs)
    head.build((None, None, hidden_size))
    return head


def task_head(task, labels, hidden_size, **kwargs):
    """The head of a registry TaskSpec whose labels are `labels` (resolved), with the
    settings its family takes from the task (multi_label, an event task's role groups)."""
    if task.multi_label:
        kwargs["multi_label"] = True
    kwargs.update(FAMILIES[task.type].head_settings(task, labels))
    return build_head(task.type, len(labels) if labels else None, hidden_size, name=task.name,
                      **kwargs)
