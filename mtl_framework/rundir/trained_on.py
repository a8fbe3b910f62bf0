"""What a run or an export was trained on, recorded so that every reader can check it:
each head's label names in the order of its output ids (trainer.json's and heads.json's
"heads"[task]["labels"]) and the vocab by content ("vocab": {"sha256", "tokens"} at the top
of trainer.json, in a keras export's config.json "run" entry, in every export's
provenance.json).

A reader compares what it is given against the record: a vocab whose content differs is
refused; labels equal are fine, the same names in another order are mapped by name (the
task decodes by the recorded order) where the reader allows it, and anything else is
refused naming the first difference. A record written before these keys existed cannot
be checked: one line says so.
"""
import dataclasses
import hashlib
import os

NO_VOCAB_RECORD = "recorded no vocab hash: cannot check the vocab by content"
NO_LABELS_RECORD = ("recorded no label names: cannot check the task specs' labels against its "
                    "heads (written by an older mtl_framework)")


def vocab_record(path):
    """{"sha256", "tokens"} of a vocab.txt: its bytes' SHA-256 and its token count (of a
    tokenizer.json: of the vocab.txt it stands for, tokenizer.vocab_bytes)."""
    from mtl_framework.tokenizer import load_vocab, vocab_bytes

    return {"sha256": hashlib.sha256(vocab_bytes(path)).hexdigest(),
            "tokens": len(load_vocab(path))}


def line_end_digests(path):
    """SHA-256 of the vocab's bytes as they are, with LF and with CRLF line ends: the same
    tokens whichever line ends an editor saved (load_vocab reads them alike)."""
    from mtl_framework.tokenizer import vocab_bytes

    data = vocab_bytes(path)
    lf = data.replace(b"\r\n", b"\n")
    return {hashlib.sha256(text).hexdigest() for text in (data, lf, lf.replace(b"\n", b"\r\n"))}


def vocab_difference(path, recorded):
    """None when the vocab at `path` is the one `recorded` ({"sha256", "tokens"}) names,
    line ends aside, else what differs (its size first: the clearer message)."""
    ours = vocab_record(path)
    if ours["tokens"] != recorded.get("tokens"):
        return f"{ours['tokens']} tokens, the recorded vocab {recorded.get('tokens')}"
    if recorded.get("sha256") not in line_end_digests(path):
        return (f"same size ({ours['tokens']} tokens) but other content (SHA-256 "
                f"{ours['sha256'][:12]}..., recorded {str(recorded.get('sha256'))[:12]}...)")
    return None


def check_vocab(path, recorded, source, fix, log=print):
    """Refuse (a UserError ending in `fix`) the vocab at `path` when it is not the one
    `recorded` names; `source` is the file holding the record. Without a record, one
    line says the vocab cannot be checked by content."""
    from mtl_framework.errors import UserError

    if recorded is None:
        if log:
            log(f"{source} {NO_VOCAB_RECORD} (written by an older mtl_framework, or not by "
                "it)")
        return
    difference = vocab_difference(path, recorded)
    if difference:
        raise UserError(f"{path}: not the vocab {source} records ({difference}): {fix}")


def task_labels(tasks, data_root):
    """{task name: its label names in id order} of the TaskSpecs that have labels."""
    labels = {}
    for task in tasks:
        if task.labels is not None or task.label_file:
            labels[task.name] = list(task.resolve_labels(data_root))
    return labels


def label_difference(recorded, labels):
    """None when equal; "order" when the same names in another order; else the first
    difference in words (first_difference)."""
    recorded, labels = list(recorded), list(labels)
    if recorded == labels:
        return None
    if len(recorded) == len(labels) and sorted(recorded) == sorted(labels) and \
            len(set(labels)) == len(labels):
        return "order"
    return first_difference(recorded, labels)


def first_difference(recorded, labels):
    """The first difference of two label lists in words: the position and the two
    names, or the counts and the first name only one has."""
    for position, (theirs, ours) in enumerate(zip(recorded, labels)):
        if theirs != ours:
            listed = f" (which has {recorded})" if len(recorded) <= 12 else ""
            return (f"label {position} is {ours!r} in the spec, {theirs!r} in the trained "
                    f"head{listed}")
    longer, what = (labels, "the spec") if len(labels) > len(recorded) else (recorded,
                                                                             "the trained head")
    return (f"the spec lists {len(labels)} labels, the trained head {len(recorded)}; label "
            f"{min(len(labels), len(recorded))} ({longer[min(len(labels), len(recorded))]!r}) is "
            f"only in {what}")


def matched_task(task, head, data_root, source, log=print, reorder=True,
                 fix="use the task spec the head was trained on"):
    """The TaskSpec to read and decode `task` with, given its trained head's metadata
    `head` (trainer.json's or heads.json's entry; `source` the file): the spec itself when
    its labels are the recorded ones; with `reorder`, the spec in the recorded order when
    the names match in another order (logged); a UserError naming the first difference
    and `fix` otherwise. A head without a record (an older run) cannot be checked: one
    line, the same for every task, and the spec is used as it is."""
    from mtl_framework.errors import UserError

    if task.labels is None and not task.label_file:
        return task
    try:
        labels = task.resolve_labels(data_root)
    except FileNotFoundError as error:
        raise UserError(f"{error} (pass --data-root)") from None
    recorded = head.get("labels")
    if recorded is None:  # the same line for every task: a caller says it once
        if log:
            log(f"{source} {NO_LABELS_RECORD}")
        return task
    difference = label_difference(recorded, labels)
    if difference is None:
        return task
    if difference == "order" and reorder:
        if log:
            log(f"labels of {task.name} mapped by name (the spec lists them in another order "
                f"than {source} records)")
        return dataclasses.replace(task, labels=list(recorded), label_file=None)
    raise UserError(f"{task.spec_path}:{task.line}: task {task.name!r}: "
                    f"{first_difference(recorded, labels)} ({source}): {fix}")


def export_fingerprint(path):
    """SHA-256 over the folder's files (names and bytes; the README model card left out):
    a row is reused only for the same weights and config."""
    digest = hashlib.sha256()
    for root, dirs, names in os.walk(path):
        dirs.sort()
        for name in sorted(names):
            if name == "README.md":
                continue
            full = os.path.join(root, name)
            digest.update(os.path.relpath(full, path).encode() + b"\0")
            with open(full, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()
