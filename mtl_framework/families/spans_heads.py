"""The heads of families/spans.py: EfficientGlobalPointers for entities, and
GPLinker's three pointers for relation triples and events (as bert4keras).

Keras: mtl_framework.families.heads imports this module, families/__init__.py never does (the
family records load before Keras)."""
from itertools import groupby

import numpy as np

from data_adapters.task_types import EXTRACTION_EVENT, EXTRACTION_NER, EXTRACTION_RELATION
from mtl_framework.families.heads import (
    TaskHead,
    _label_scores,
    _np,
    _padding_mask,
    _real_lengths,
    head_for,
    pointer_loss,
    spans_from_scores,
)
from mtl_framework.families.pointers import EfficientGlobalPointer


@head_for(EXTRACTION_NER.name)
class EntityHead(TaskHead):
    """EfficientGlobalPointer(n types), nested spans allowed; sparse
    multi-label CE (bert4keras GPLinker loss). decode: {(type, start, end)}
    with score > threshold (0, as bert4keras)."""


    def __init__(self, num_labels, head_size=64, threshold=0.0, max_spans=256,
                 **kwargs):
        super().__init__(num_labels, **kwargs)
        self.head_size, self.threshold, self.max_spans = head_size, threshold, max_spans
        self.pointer = EfficientGlobalPointer(num_labels, head_size, name="pointer",
                                              kernel_initializer=self.initializer)

    def build(self, hidden_shape):
        self.pointer.build(hidden_shape)

    def call(self, hidden, batch, training=False):
        # training: the scores' parts (the loss needs no [B, types, L, L]); else whole
        return self.pointer(hidden, mask=_padding_mask(batch), factored=training,
                            lengths=_real_lengths(batch))

    def compute_task_loss(self, logits, batch):
        return pointer_loss(batch["entity_labels"], logits)

    def decode(self, logits, batch, max_spans="default"):
        max_spans = self.max_spans if max_spans == "default" else max_spans
        lengths = (np.asarray(batch["token_ids"]) != 0).sum(-1)
        return [spans_from_scores(s, n, self.threshold, max_spans)
                for s, n in zip(_np(logits), lengths)]

    def targets(self, batch):
        length = np.asarray(batch["token_ids"]).shape[-1]
        return self.decode(_label_scores(batch["entity_labels"], length), batch, None)

    def get_config(self):
        return {**super().get_config(), "head_size": self.head_size,
                "threshold": self.threshold, "max_spans": self.max_spans}


class _GPLinkerHead(TaskHead):
    """Three EfficientGlobalPointers named by `keys` (spans, head links, tail
    links), each trained with the sparse multilabel CE on `<key>_labels`."""

    keys = ()

    def add_pointers(self, *pointers):
        for key, pointer in zip(self.keys, pointers):
            setattr(self, f"{key}_pointer", pointer)  # in key order: fixes variable order

    def build(self, hidden_shape):
        for key in self.keys:
            getattr(self, f"{key}_pointer").build(hidden_shape)

    def call(self, hidden, batch, training=False):
        # training: each pointer's scores as parts (no [B, predicates, L, L]); else whole
        mask = _padding_mask(batch)
        lengths = _real_lengths(batch)
        return {key: getattr(self, f"{key}_pointer")(hidden, mask=mask, factored=training,
                                                     lengths=lengths)
                for key in self.keys}

    def compute_task_loss(self, outputs, batch):
        return sum(pointer_loss(batch[k + "_labels"], outputs[k]) for k in self.keys)

    def targets(self, batch):
        length = np.asarray(batch["token_ids"]).shape[-1]
        scores = {k: _label_scores(batch[k + "_labels"], length) for k in self.keys}
        return self.decode(scores, batch, None)


@head_for(EXTRACTION_RELATION.name)
class RelationHead(_GPLinkerHead):
    """GPLinker for (s, p, o), as bert4keras's
    examples/task_relation_extraction_gplinker.py: entity pointer (2 heads:
    subjects, objects), head pointer (subject start, object start) and tail
    pointer (subject end, object end) per predicate, both without RoPE or
    start <= end mask. decode: {(s_start, s_end, predicate, o_start, o_end)}."""

    keys = ("entity", "head", "tail")

    def __init__(self, num_labels, head_size=64, threshold=0.0, max_spans=256,
                 **kwargs):
        super().__init__(num_labels, **kwargs)
        self.head_size, self.threshold, self.max_spans = head_size, threshold, max_spans
        link = dict(RoPE=False, tril_mask=False, kernel_initializer=self.initializer)
        self.add_pointers(EfficientGlobalPointer(2, head_size, name="entity",
                                                 kernel_initializer=self.initializer),
                          EfficientGlobalPointer(num_labels, head_size, name="head", **link),
                          EfficientGlobalPointer(num_labels, head_size, name="tail", **link))

    def decode(self, outputs, batch, max_spans="default"):
        max_spans = self.max_spans if max_spans == "default" else max_spans
        lengths = (np.asarray(batch["token_ids"]) != 0).sum(-1)
        entity, head, tail = (_np(outputs[k]) for k in self.keys)
        out = []
        for i, n in enumerate(lengths):
            spans = sorted(spans_from_scores(entity[i], n, self.threshold, max_spans))
            subj = np.array([(s, e) for k, s, e in spans if k == 0], int).reshape(-1, 2)
            obj = np.array([(s, e) for k, s, e in spans if k == 1], int).reshape(-1, 2)
            # a predicate holds when both its head and tail links fire
            ok = ((head[i][:, subj[:, None, 0], obj[None, :, 0]] > self.threshold)
                  & (tail[i][:, subj[:, None, 1], obj[None, :, 1]] > self.threshold))
            out.append({(int(subj[a, 0]), int(subj[a, 1]), int(p),
                         int(obj[b, 0]), int(obj[b, 1]))
                        for p, a, b in zip(*np.nonzero(ok))})
        return out

    def get_config(self):
        return {**super().get_config(), "head_size": self.head_size,
                "threshold": self.threshold, "max_spans": self.max_spans}


def clique_search(argus, links):
    """Split arguments [(role, start, end)] into events: the maximal cliques
    of the link graph (links hold (start, end, start, end) both ways).

    bert4keras's DuEE recursion yields exactly the maximal cliques too, but
    blows up on dense graphs (an untrained model links almost everything);
    Bron-Kerbosch with a pivot gives the same set without that.
    """
    nbrs = {a: {b for b in argus if b != a and a[1:] + b[1:] in links}
            for a in argus}
    out = []

    def expand(r, p, x):
        if not p and not x:
            out.append(sorted(r))
            return
        pivot = max(p | x, key=lambda u: len(nbrs[u] & p))
        for v in sorted(p - nbrs[pivot]):
            expand(r | {v}, p & nbrs[v], x & nbrs[v])
            p, x = p - {v}, x | {v}

    expand(set(), set(argus), set())
    return sorted(out)


@head_for(EXTRACTION_EVENT.name)
class EventHead(_GPLinkerHead):
    """GPLinker for events, as bert4keras's DuEE example (bojone/GPLinker
    duee_v1.py): argument pointer over roles (event type + role, the trigger
    being a role), head and tail pointers (1 head, no RoPE, start <= end)
    linking two arguments of one event by their starts and by their ends,
    stored as (min, max). role_groups[r] is role r's event type: arguments
    are split into events within a type (one group for all roles when not
    given). decode: per row a list of events, each a sorted tuple of
    (role, start, end)."""

    keys = ("argument", "head", "tail")

    def __init__(self, num_labels, head_size=64, threshold=0.0,
                 role_groups=None, max_spans=64, **kwargs):
        super().__init__(num_labels, **kwargs)
        if role_groups is not None and len(role_groups) != num_labels:
            raise ValueError(
                f"role_groups has {len(role_groups)} entries for {num_labels} "
                "roles: give one event type per role, in label order")
        self.head_size, self.threshold, self.max_spans = head_size, threshold, max_spans
        self.role_groups = list(role_groups) if role_groups is not None else None
        init = dict(kernel_initializer=self.initializer)
        self.add_pointers(EfficientGlobalPointer(num_labels, head_size, name="argument", **init),
                          EfficientGlobalPointer(1, head_size, RoPE=False, name="head", **init),
                          EfficientGlobalPointer(1, head_size, RoPE=False, name="tail", **init))

    def events(self, argus, head, tail):
        """Events from arguments {(role, start, end)} and link scores
        head, tail [L, L] (a link needs both > threshold)."""
        argus = sorted(argus)
        links = set()
        for i1, (_, h1, t1) in enumerate(argus):
            for i2, (_, h2, t2) in enumerate(argus):
                if (i2 > i1 and head[min(h1, h2), max(h1, h2)] > self.threshold
                        and tail[min(t1, t2), max(t1, t2)] > self.threshold):
                    links.add((h1, t1, h2, t2))
                    links.add((h2, t2, h1, t1))
        groups = self.role_groups or [0] * self.num_labels
        out = []
        for _, sub in groupby(sorted(argus, key=lambda a: (str(groups[a[0]]), a)),
                              key=lambda a: groups[a[0]]):
            out.extend(tuple(e) for e in clique_search(list(sub), links))
        return out

    def decode(self, outputs, batch, max_spans="default"):
        max_spans = self.max_spans if max_spans == "default" else max_spans
        lengths = (np.asarray(batch["token_ids"]) != 0).sum(-1)
        argument, head, tail = (_np(outputs[k]) for k in self.keys)
        return [self.events(spans_from_scores(argument[i], n, self.threshold, max_spans),
                            head[i, 0], tail[i, 0])
                for i, n in enumerate(lengths)]

    def get_config(self):
        return {**super().get_config(), "head_size": self.head_size,
                "threshold": self.threshold, "role_groups": self.role_groups,
                "max_spans": self.max_spans}
