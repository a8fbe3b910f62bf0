"""`delimited`: TSV, CSV and `_!_` lines, one text (pair) and label per row.

LCQMC/BQ/AFQMC TSVs, SophonPlus CSVs, Toutiao's `_!_` lines. Fields are column
indexes, or header names when `header: true`:

    options: {delimiter: ",", header: true}      # waimai_10k: label,review
    fields: {text: review, label: label}

Quoting: `auto` reads CSV quotes ("" escapes, quoted newlines) when the
delimiter is a comma and takes every character literally otherwise, since TSV
texts are full of unbalanced quotes. Every row must have as many columns as the
header (or, without one, as the file's first row): a text holding the
delimiter would shift the columns, so such rows are skipped, not guessed at.

A U+FEFF (byte order mark) at the start of a field is removed and counted
under `repaired`: SophonPlus's CSVs (online_shopping_10_cats, weibo_senti_100k)
carry one at the start of the first text, after the header, where a file's
own BOM handling never sees it.
"""
from __future__ import annotations

import csv
import sys
from typing import TYPE_CHECKING

from data_adapters.base import Adapter, register_adapter
from data_adapters.examples import TextExample
from data_adapters.jsonl import text_example
from data_adapters.reading import LabelRule, text_lines, unsegment
from data_adapters.task_types import MATCHING, TEXT_TASKS, type_names

if TYPE_CHECKING:
    from collections.abc import Iterator

    from data_adapters.base import Fields, Labels, Options
    from data_adapters.examples import Example
    from data_adapters.report import ReadReport

# Long documents exceed csv's default 128 KiB field limit.
csv.field_size_limit(min(sys.maxsize, 2**31 - 1))

QUOTING = {"csv": csv.QUOTE_MINIMAL, "none": csv.QUOTE_NONE}


def rows(path, options, report):
    """(line, columns) per non-blank row."""
    delimiter, quoting = options["delimiter"], options["quoting"]
    if quoting not in ("auto", *QUOTING):
        raise ValueError(f"option quoting must be auto, csv or none, got {quoting!r}")
    if quoting == "auto":
        quoting = "csv" if delimiter == "," else "none"
    for number, row in _rows(path, options, report, delimiter, quoting):
        if any(cell.startswith(BOM) for cell in row):
            report.repair("U+FEFF (byte order mark) at the start of a field, removed")
            row = [cell.lstrip(BOM) for cell in row]
        yield number, row


BOM = "\ufeff"


def _rows(path, options, report, delimiter, quoting):
    lines = text_lines(path, report, options["encoding"])
    if len(delimiter) != 1:  # `_!_`: no quoting possible
        for number, line in lines:
            line = line.rstrip("\r\n")
            if line.strip():
                yield number, line.split(delimiter)
        return
    numbers = []  # the line each text line came from, for csv rows spanning lines

    def source():
        for number, line in lines:
            numbers.append(number)
            yield line

    reader = csv.reader(source(), delimiter=delimiter, quoting=QUOTING[quoting], strict=False)
    while True:
        first = len(numbers)  # index of the next line the reader will take
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            report.skip(f"bad CSV row ({error})", path, numbers[first] if first < len(numbers) else None)
            continue
        if row and any(cell.strip() for cell in row):
            yield numbers[first], row


@register_adapter("delimited")
class DelimitedAdapter(Adapter):
    option_keys = {
        "delimiter": (str, "\t"),
        "header": (bool, False),  # first row names the columns
        "quoting": (str, "auto"),  # auto | csv | none
        "encoding": (str, "utf-8"),  # e.g. gbk
        "skip_labels": (list, []),
        "label_map": (dict, {}),
        "join": (str, "，"),  # between joined columns
        "text_b_optional": (bool, False),  # a record without text_b: one text (mtl predict sets it)
    }
    field_keys = ("text", "text_b", "label", "id")
    required_fields = ("text", "label")
    task_types = TEXT_TASKS

    def read(self, paths: list[str], options: Options, fields: Fields, task_type: str | None,
             labels: Labels, report: ReadReport) -> Iterator[Example]:
        rule = LabelRule(task_type, labels, options["skip_labels"], options["label_map"])
        for path in paths:
            columns, columns_of = None, fields
            for line, row in rows(path, options, report):
                if columns is None:
                    columns = len(row)
                    if options["header"]:
                        columns_of = self.header_columns(fields, row, path, optional=("label", "id"))
                        continue
                if len(row) != columns:
                    first = "the header has" if options["header"] else "the first row has"
                    report.skip(f"row has {len(row)} columns, {first} {columns} "
                                "(a text holding the delimiter?)", path, line)
                    continue
                example = text_example(row, columns_of, options, rule, (path, line), report)
                if example is not None:
                    yield example

    @staticmethod
    def header_columns(fields, header, path, optional=()):
        """fields with header names turned into column indexes. An `optional` field
        the header lacks (the label column of an unlabelled test file) maps to
        no column, so its rows read as unlabelled (and are counted so)."""
        names = [name.strip() for name in header]

        def index(field, key):
            if isinstance(key, int) or key.lstrip("-").isdigit():
                return int(key)
            if key not in names and field in optional:
                return len(names)  # past the last column: read as missing
            if key not in names:
                raise ValueError(f"{path}: fields.{field} is {key!r} but the header has "
                                 f"{', '.join(names)}; use one of those or a column index")
            return names.index(key)

        return {field: [index(field, k) for k in source] if isinstance(source, list)
                else index(field, source) if source is not None else None
                for field, source in fields.items()}


@register_adapter("xnli_tsv")
class XnliTsvAdapter(Adapter):
    """XNLI's files as Facebook publishes them, told apart by their header:

    - XNLI-1.0 `xnli.dev.tsv` / `xnli.test.tsv`: all 15 languages in one file; the
      rows whose `language` is `options.language` are read (sentence1, sentence2,
      gold_label); the other languages' rows are counted as filtered.
    - XNLI-MT `multinli.train.<lang>.tsv` (premise, hypo, label): the machine
      translation of MNLI, its Chinese segmented into words with spaces (joined
      back, `reading.unsegment`), "contradictory" for "contradiction".
    """
    option_keys = {"language": (str, "zh"), "encoding": (str, "utf-8")}
    task_types = type_names(MATCHING)
    LAYOUTS = {"xnli": ("sentence1", "sentence2", "gold_label"),
               "mt": ("premise", "hypo", "label")}
    LABEL_NAMES = {"contradictory": "contradiction"}

    def read(self, paths: list[str], options: Options, fields: Fields, task_type: str | None,
             labels: Labels, report: ReadReport) -> Iterator[Example]:
        rule = LabelRule(task_type, labels, label_map=self.LABEL_NAMES)
        options = {**options, "delimiter": "\t", "quoting": "none"}
        for path in paths:
            header = layout = None
            for line, row in rows(path, options, report):
                if header is None:
                    header = [name.strip() for name in row]
                    layout = "xnli" if "language" in header else "mt"
                    missing = [n for n in self.LAYOUTS[layout] if n not in header]
                    if missing:
                        raise ValueError(f"{path}: header lacks {', '.join(missing)}: not an "
                                         "XNLI-1.0 or XNLI-MT file")
                    columns = [header.index(n) for n in self.LAYOUTS[layout]]
                    continue
                if len(row) != len(header):
                    report.skip(f"row has {len(row)} columns, the header has {len(header)}", path, line)
                    continue
                if layout == "xnli" and row[header.index("language")] != options["language"]:
                    report.filter(f"rows of other languages than {options['language']!r}")
                    continue
                text, text_b, raw = (row[i] for i in columns)
                if layout == "mt":
                    text, text_b = unsegment(text), unsegment(text_b)
                label, reason = rule.check(raw)
                if reason:
                    report.skip(reason, path, line)
                    continue
                yield TextExample(text, text_b, label)
