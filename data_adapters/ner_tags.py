"""Tagged NER: `tagged_chars` (one `char tag` per line, blank line between
sentences: MSRA, People's Daily, Weibo, SanWen) and `tagged_json`
(`{"text": [chars], "label": [tags]}` per line: Resume, bertorch's MSRA).

Schemes: BIO, IOB1, BIOS, BIOES, BMES (O is always allowed). An entity runs
from its B (or S) over the following I/M tags of the same type and ends at E
or where they stop. An I/M/E that continues nothing is a lost span (IOB1
alone reads a leading I as a start). A tag outside the scheme skips its
sentence: the scheme option is then wrong, and the report says so.

    options: {separator: "\\t", scheme: BIO, keep_suffix: NAM}   # Weibo, B-PER.NAM
    options: {separator: " ", type_separator: "_"}              # SanWen, B_Time

`keep_suffix: NAM` keeps the `.NAM` entities as their bare type (PER) and
filters the rest (counted); `strip_suffix: true` keeps all, suffix removed.
Weibo writes each character with its position in its word (`科0`, `p10`):
`strip_position_digits: true` drops those digits.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from data_adapters.base import Adapter, register_adapter
from data_adapters.examples import Entity, NERExample
from data_adapters.reading import records, text_lines
from data_adapters.task_types import EXTRACTION_NER, type_names

if TYPE_CHECKING:
    from collections.abc import Iterator

    from data_adapters.base import Fields, Labels, Options
    from data_adapters.examples import Example
    from data_adapters.report import ReadReport

SCHEMES = {"BIO": "BI", "IOB1": "BI", "BIOS": "BIS", "BIOES": "BIES", "BMES": "BMES"}
DIGITS = "0123456789"

TAG_OPTIONS = {
    "scheme": (str, "BIO"),
    "type_separator": (str, "-"),  # B-PER; SanWen writes B_Time
    "keep_suffix": (str, None),  # keep only TYPE.<suffix> entities, as TYPE
    "strip_suffix": (bool, False),  # TYPE.<anything> -> TYPE, all kept
}


def decode_tags(tags, scheme, type_separator):
    """([(first, last + 1, type)] token spans, [(lost reason, token index)]), or (None, bad tag)."""
    allowed = SCHEMES[scheme]
    spans, lost = [], []
    current = None  # [type, first token]; first None = a run that began without B

    def close(end):
        if current is not None and current[1] is not None:
            spans.append((current[1], end, current[0]))

    for index, tag in enumerate(tags):
        if tag == "O":
            close(index)
            current = None
            continue
        prefix, separator, type_ = tag.partition(type_separator)
        if not separator or not type_ or prefix not in allowed:
            return None, tag
        continues = current is not None and current[0] == type_
        if prefix == "B":
            close(index)
            current = [type_, index]
        elif prefix in "IM":
            if not continues:
                close(index)
                if scheme == "IOB1":
                    current = [type_, index]
                else:
                    lost.append((f"{prefix}- tag without a B- before it", index))
                    current = [type_, None]
        elif prefix == "E":
            if continues:
                close(index + 1)
            else:
                close(index)
                lost.append(("E- tag without a B- before it", index))
            current = None
        else:  # S
            close(index)
            spans.append((index, index + 1, type_))
            current = None
    close(len(tags))
    return spans, lost


def tagged_example(tokens, tags, options, labels, path, line, report, line_per_token=False):
    """An NERExample from tokens (characters, sometimes longer) and their tags; with
    line_per_token the token i is on line `line + i` (tagged_chars), else all on `line`."""
    spans, lost = decode_tags(tags, options["scheme"], options["type_separator"])
    if spans is None:
        report.skip(f"tag {lost!r} is not a {options['scheme']} tag with type separator "
                    f"{options['type_separator']!r} (check options.scheme / type_separator)", path, line)
        return None
    for reason, index in lost:
        report.lose_span(reason, path, line + index if line_per_token else line)
    starts, position = [], 0
    for token in tokens:
        starts.append(position)
        position += len(token)
    starts.append(position)
    entities = []
    for first, end, type_ in spans:
        type_ = entity_type(type_, options, report)
        if type_ is None:
            continue
        if labels is not None and type_ not in labels:
            report.filter(not_in_labels(type_), file=path,
                          line=line + first if line_per_token else line)
            continue
        entities.append(Entity(starts[first], starts[end], type_))
    return NERExample("".join(tokens), entities)


def not_in_labels(type_):
    """The filter reason of an entity type outside the task's labels; a dotted type
    (Weibo's `PER.NAM`) says which options turn it into a bare label."""
    reason = f"entity type {type_!r} is not in the task's labels"
    if "." in type_:
        base, _, suffix = type_.rpartition(".")
        reason += (f" (a typed suffix: options.keep_suffix: {suffix} keeps these as {base!r}, "
                   f"strip_suffix: true keeps every {base}.* as {base!r})")
    return reason


def entity_type(type_, options, report):
    if options["keep_suffix"]:
        base, dot, suffix = type_.rpartition(".")
        if not dot or suffix != options["keep_suffix"]:
            report.filter(f"entity type without the .{options['keep_suffix']} suffix (options.keep_suffix)")
            return None
        return base
    if options["strip_suffix"]:
        return type_.rpartition(".")[0] or type_
    return type_


def check_scheme(options):
    if options["scheme"] not in SCHEMES:
        raise ValueError(f"option scheme must be one of {', '.join(SCHEMES)}, got {options['scheme']!r}")


@register_adapter("tagged_chars")
class TaggedCharsAdapter(Adapter):
    option_keys = {
        "separator": (str, None),  # between char and tag; default any whitespace
        **TAG_OPTIONS,
        "strip_position_digits": (bool, False),  # Weibo: 科0 -> 科
        "encoding": (str, "utf-8"),
    }
    task_types = type_names(EXTRACTION_NER)

    def read(self, paths: list[str], options: Options, fields: Fields, task_type: str | None,
             labels: Labels, report: ReadReport) -> Iterator[Example]:
        check_scheme(options)
        for path in paths:
            for start, lines in self.sentences(path, options["encoding"], report):
                tokens, tags = self.split(lines, start, options, path, report)
                if tokens is not None:
                    example = tagged_example(tokens, tags, options, labels, path, start, report,
                                             line_per_token=True)
                    if example is not None:
                        yield example

    @staticmethod
    def sentences(path, encoding, report):
        """(first line number, [lines]) per blank-line separated block."""
        block, start = [], 0
        for number, line in text_lines(path, report, encoding):
            if line.isspace() or not line:
                if block:
                    yield start, block
                    block = []
            else:
                if not block:
                    start = number
                block.append(line)
        if block:
            yield start, block

    @staticmethod
    def split(lines, start, options, path, report):
        """(tokens, tags) of one sentence, or (None, None) after skipping it."""
        separator = options["separator"]
        rows = [line.rstrip("\r\n").split(separator) for line in lines]
        if not all(len(row) == 2 and row[0] and row[1] for row in rows):
            for index, row in enumerate(rows):  # the rare case: say which line, or a space token
                if len(row) == 2 and row[0] and row[1]:
                    continue
                if separator and len(row) == 3 and row[0] == row[1] == "" and row[2]:
                    rows[index] = [separator, row[2]]  # the character is the separator (a space)
                    continue
                report.skip(f"line is not `char{separator or ' '}tag`", path, start + index)
                return None, None
        tokens = [row[0] for row in rows]
        if options["strip_position_digits"]:
            tokens = [token[0] + token[1:].rstrip(DIGITS) for token in tokens]
        return tokens, [row[1].strip() for row in rows]


@register_adapter("tagged_json")
class TaggedJsonAdapter(Adapter):
    option_keys = dict(TAG_OPTIONS)
    task_types = type_names(EXTRACTION_NER)

    def read(self, paths: list[str], options: Options, fields: Fields, task_type: str | None,
             labels: Labels, report: ReadReport) -> Iterator[Example]:
        check_scheme(options)
        for path in paths:
            for line, record in records(path, report):
                text = record.get("text") if isinstance(record, dict) else None
                if isinstance(text, str):
                    text = list(text)
                if not isinstance(text, list) or not all(isinstance(t, str) for t in text):
                    report.skip("record without a `text` list of characters", path, line)
                    continue
                tags = record.get("label")
                if tags is None:
                    report.count("unlabelled")
                    yield NERExample("".join(text), [])
                    continue
                if not isinstance(tags, list) or len(tags) != len(text):
                    size = len(tags) if isinstance(tags, list) else "no"
                    report.skip(f"text has {len(text)} characters but `label` has {size} tags",
                                path, line)
                    continue
                example = tagged_example(text, [str(t) for t in tags], options, labels, path, line, report)
                if example is not None:
                    yield example
