"""`mtl data show`: the first examples of a task's split as the adapter parsed them,
and, given a tokenizer, the tokens the model is fed.

    for lines in show(task, "train", "/data", n=3, tokenizer=tokenizer):
        print("\n".join(lines))

Each example is printed field by field: texts as read, labels by name, spans with the
characters they cover (`text[start:end]`, so an offset that is one off shows at once),
choices numbered with the gold one marked. With a tokenizer, the token sequences the
task's featurizer builds from it (the training path itself: [CLS] a [SEP] b [SEP], one
per choice, one per mrc window, cut at max_length as training cuts it). Plain Python:
nothing here imports TensorFlow.
"""
import dataclasses
import itertools

from data_adapters import ReadReport, read_task
from data_adapters.examples import Entity, Span


def examples(task, split, data_root, n):
    """The first `n` examples of a split and the ReadReport of the rows read to find them."""
    report = ReadReport()
    return list(itertools.islice(read_task(task, split, data_root, report), n)), report


def span_line(span, text, label=None):
    """`TYPE [start, end) 'characters'`, the characters taken from `text` by the offsets."""
    kind = label or getattr(span, "type", None)
    covered = text[span.start:span.end]
    mismatch = "" if not isinstance(span, Span) or span.text == covered else \
        f" (the data says {span.text!r})"
    return f"{kind + ' ' if kind else ''}[{span.start}, {span.end}) {covered!r}{mismatch}"


def field_lines(example):
    """`name: value` lines of one example, spans resolved to their characters."""
    text = getattr(example, "text", None) or getattr(example, "context", "")
    lines = []
    for field in dataclasses.fields(example):
        value = getattr(example, field.name)
        if value is None or value == []:
            continue
        if field.name == "choices":
            gold = getattr(example, "label", None)
            lines.append("choices:")
            lines += [f"  {'*' if i == gold else ' '}{i}: {choice}" for i, choice in enumerate(value)]
        elif field.name == "label" and hasattr(example, "choices"):
            lines.append(f"label: {value} ({example.choices[value]!r})")
        elif isinstance(value, (Entity, Span)):
            lines.append(f"{field.name}: {span_line(value, text)}")
        elif isinstance(value, list) and value and dataclasses.is_dataclass(value[0]):
            lines.append(f"{field.name} ({len(value)}):")
            lines += ["  " + line for item in value for line in item_lines(item, text)]
        else:
            lines.append(f"{field.name}: {value!r}" if not isinstance(value, str) else
                         f"{field.name}: {value}")
    return lines


def item_lines(item, text):
    """One entity, answer, triple or event, its spans resolved against `text`."""
    if isinstance(item, (Entity, Span)):
        return [span_line(item, text)]
    if hasattr(item, "predicate"):  # a Triple
        return [f"{span_line(item.subject, text)} --{item.predicate}--> "
                f"{span_line(item.object, text)}"]
    # an Event: its type, trigger and role-labelled arguments
    trigger = span_line(item.trigger, text, "trigger") if item.trigger else "no trigger"
    return [f"{item.type}: {trigger}"] + [f"  {span_line(a, text)}" for a in item.arguments]


def token_lines(example, featurizer, shown_rows=3):
    """The tokens the featurizer feeds the model for one example: one line per sequence
    (a choice task: one per choice; mrc_span: one per context window, the first
    `shown_rows`), and what truncation did to it."""
    features = featurizer.featurize([example])
    report = features.report
    if len(features) == 0:
        reasons = ", ".join(report.dropped) or "no feature row"
        return [f"tokens: none, the featurizer leaves this example out ({reasons})"]
    tokenizer, lines = featurizer.tokenizer, []
    sequences = len(features.splits("token_ids")) - 1  # a choice example: one per choice
    kind = "choice" if sequences > len(features) else "window" if len(features) > 1 else ""
    for row in range(min(sequences, shown_rows if kind == "window" else sequences)):
        tokens = [tokenizer.id_to_token(int(i)) for i in features.ragged("token_ids", row)]
        where = f" {kind} {row + 1}" if kind else ""
        lines.append(f"tokens{where} ({len(tokens)}): {' '.join(tokens)}")
    if kind == "window" and sequences > shown_rows:
        lines.append(f"... {sequences - shown_rows} more windows")
    notes = [f"{reason} (max_length {featurizer.max_length})" for reason in report.truncated]
    notes += [f"{count} span(s) cut off: {reason}" for reason, count in report.spans_lost.items()]
    return lines + [f"truncated: {note}" for note in notes]


def featurizer(task, tokenizer, data_root, max_length=None):
    """The featurizer training uses for this task, at max_length (default: the spec's)."""
    from mtl_framework.families import featurizer_for_task

    return featurizer_for_task(task, tokenizer, data_root, max_length=max_length or task.max_length)


def show(task, split, data_root, n=5, tokenizer=None, max_length=None):
    """Lines per example (a header, its fields, its tokens), then what reading skipped."""
    found, report = examples(task, split, data_root, n)
    encoder = featurizer(task, tokenizer, data_root, max_length) if tokenizer else None
    for index, example in enumerate(found, 1):
        lines = [f"#{index} {task.name} {split} ({task.type}, format {task.format})"]
        lines += ["  " + line for line in field_lines(example)]
        if encoder is not None:
            lines += ["  " + line for line in token_lines(example, encoder)]
        yield lines
    notes = [f"skipped {count}: {reason}" for reason, count in report.skipped.most_common()]
    notes += [f"filtered {count}: {reason}" for reason, count in report.filtered.most_common()]
    notes += [f"lost {count}: {reason}" for reason, count in report.spans_lost.most_common()]
    if notes or not found:
        yield ([f"no example in the {split} split"] if not found else []) + \
            [f"(while reading these: {note})" for note in notes]
