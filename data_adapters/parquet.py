"""`parquet`: Apache Parquet files, such as the Hugging Face hub's datasets
(`clue/afqmc/train-00000-of-00001.parquet`). Needs pyarrow, an optional extra:
`pip install mtl_framework[parquet]`.

Columns are mapped with `fields` as for JSON: a column name, a dotted key into
a struct column (`answers.text`, `target.span1_index`), or for texts a list of
them (joined with `join`). Each row becomes the example that the JSON format
of its family builds, made by that format's own code, so both read alike:

| type | fields | built as by |
|---|---|---|
| classification, matching, regression | text, label (required), text_b, id | jsonl |
| multiple_choice | context, choices (required), question, label, id | choice_jsonl |
| cloze | context (passages), choices (required), label (one index per blank), id | chid |
| mrc_span | context, question, answers, answer_starts (required), id | squad |
| coreference | text, span1_text, span1_index, span2_text, span2_index (required), label, id | wsc |

Hub datasets store class labels as integers (a `ClassLabel`); the option
`class_labels` gives their names in index order (copy them from the dataset
card), or `labels` to use the task's own label list, when that is in index
order. The name then goes through `label_map` and the task's labels like any
text label. Labels in `unlabelled` (HF writes -1 in unlabelled test splits)
give unlabelled examples.

Rows are read one record batch at a time, so memory stays bounded. A row is
named in the report by its index in its file, counted from 0 like `dataset[i]`.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from data_adapters.base import Adapter, register_adapter
from data_adapters.choice import CHID_BLANK, CHID_MARKER, ChidAdapter, ChoiceJsonlAdapter
from data_adapters.coref import WscAdapter
from data_adapters.jsonl import text_example
from data_adapters.qa import SquadAdapter
from data_adapters.reading import MISSING, LabelRule, lookup
from data_adapters.task_types import CLOZE, COREFERENCE, MRC_SPAN, MULTIPLE_CHOICE, TEXT_TASKS
from mtl_framework.errors import UserError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from data_adapters.base import Fields, Labels, Options
    from data_adapters.examples import Example
    from data_adapters.report import ReadReport

INSTALL_HINT = "pip install mtl_framework[parquet] (or pip install pyarrow)"
BATCH_ROWS = 4096  # rows decoded at a time

# Per task type: the fields it needs (checked when a task is read), and the method that
# builds its example as the JSON format named after it does.
ROWS = {
    **{task_type: (("text", "label"), "text") for task_type in TEXT_TASKS},
    MULTIPLE_CHOICE.name: (("context", "choices"), "choice_jsonl"),
    CLOZE.name: (("context", "choices"), "chid"),
    MRC_SPAN.name: (("context", "question", "answers", "answer_starts"), "squad"),
    COREFERENCE.name: (("text", "span1_text", "span1_index", "span2_text", "span2_index"), "wsc"),
}


@register_adapter("parquet")
class ParquetAdapter(Adapter):
    option_keys = {
        "class_labels": ((list, str), None),  # names of integer labels in index order, or "labels"
        "unlabelled": (list, [-1]),  # raw labels meaning "no label" (HF: -1; c3's test: "")
        "skip_labels": (list, []),  # as jsonl
        "label_map": (dict, {}),  # as jsonl: label name -> the task's label name
        "join": (str, "，"),  # between joined columns / list items of a text field
        "text_b_optional": (bool, False),  # a record without text_b: one text (mtl predict sets it)
        "label_is_text": (bool, False),  # multiple_choice: the label is the answer's text (c3)
        "group_ids": (bool, False),  # id shared by consecutive rows (c3: one document): number them
        "answer_text_stripped": (bool, False),  # mrc_span: text stripped, answer_start not (hub clue)
    }
    field_keys = ("text", "text_b", "label", "id", "context", "question", "choices",
                  "answers", "answer_starts", "span1_text", "span1_index", "span2_text", "span2_index")
    task_types = tuple(ROWS)

    def read(self, paths: list[str], options: Options, fields: Fields, task_type: str | None,
             labels: Labels, report: ReadReport) -> Iterator[Example]:
        needed, builder = ROWS[task_type]
        needed += ("id",) if options["group_ids"] else ()
        missing = [key for key in needed if fields.get(key) is None]
        if missing:
            raise ValueError(f"format 'parquet' needs `fields:` for {', '.join(missing)} in a "
                             f"{task_type} task (a column, or a dotted key into a struct column)")
        rule = ClassLabelRule(task_type, labels, options)
        build = getattr(self, builder)
        for path in paths:
            group, number = object(), 0
            for row_number, row in parquet_rows(path, fields):
                report.count("rows")
                where = f"row {row_number}"
                if options["group_ids"]:
                    key = lookup(row, fields["id"])
                    number = number + 1 if key == group else 0
                    group = key
                for example in build(row, fields, options, rule, (path, where), report):
                    if options["group_ids"]:
                        example = dataclasses.replace(example, id=f"{example.id}-{number}")
                    yield example

    # One method per family: each turns a row into what that family's JSON format
    # reads, then lets that format build the example.

    @staticmethod
    def text(row, fields, options, rule, where, report):
        example = text_example(row, fields, options, rule, where, report)
        return [] if example is None else [example]

    @staticmethod
    def choice_jsonl(row, fields, options, rule, where, report):
        keys = [key for key in ("context", "question", "choices", "label", "id") if fields.get(key)]
        record = {key: lookup(row, fields[key]) for key in keys}
        if "label" in record and rule.no_label(record["label"]):
            record["label"] = None
        example = ChoiceJsonlAdapter.example(record, {key: key for key in keys},
                                             {"label_is_text": options["label_is_text"]}, *where, report)
        return [] if example is None else [example]

    @staticmethod
    def chid(row, fields, options, rule, where, report):
        """ChID: passages with `#idiomNNNNNN#` blanks and one candidate index per blank
        in reading order (CLUE's release, the hub's `answers.candidate_id`), or one
        passage with a single `#idiom#` blank and its index (FewCLUE's)."""
        path, line = where
        passages, candidates = lookup(row, fields["context"]), lookup(row, fields["choices"])
        passages = [passages] if isinstance(passages, str) else passages
        if not (isinstance(passages, list) and all(isinstance(p, str) for p in passages)):
            report.skip(f"{fields['context']!r} is not text or a list of passages", path, line)
            return
        if not isinstance(candidates, list) or not candidates:
            report.skip(f"{fields['choices']!r} is not a list of candidates", path, line)
            return
        candidates = [str(c) for c in candidates]
        raw = lookup(row, fields["label"]) if fields.get("label") else MISSING
        answers = None if raw is MISSING or raw is None or raw == [] or rule.no_label(raw) else raw
        id_ = lookup(row, fields["id"]) if fields.get("id") else None
        if CHID_BLANK in "".join(passages):
            answer = answers[0] if isinstance(answers, list) and len(answers) == 1 else answers
            yield from ChidAdapter.fewclue({"answer": answer, "id": id_}, passages, candidates,
                                           path, line, report)
            return
        if answers is not None:
            blanks = [marker for passage in passages for marker in CHID_MARKER.findall(passage)]
            if not isinstance(answers, list) or len(answers) != len(blanks):
                count = len(answers) if isinstance(answers, list) else "not a list of"
                report.count("questions", len(blanks))
                report.skip(f"{count} answers for {len(blanks)} blanks", path, line)
                return
            answers = dict(zip(blanks, answers))
        yield from ChidAdapter.clue(passages, candidates, answers, path, line, report)

    @staticmethod
    def squad(row, fields, options, rule, where, report):
        path, line = where
        context, texts = lookup(row, fields["context"]), lookup(row, fields["answers"])
        starts = lookup(row, fields["answer_starts"])
        id_ = lookup(row, fields["id"]) if fields.get("id") else None
        if not (isinstance(texts, list) and isinstance(starts, list) and len(texts) == len(starts)):
            report.count("questions")
            report.skip(f"{fields['answers']!r} and {fields['answer_starts']!r} are not lists "
                        "of equal length", path, line)
            return []
        answers = [{"text": text, "answer_start": start} for text, start in zip(texts, starts)]
        if options["answer_text_stripped"] and isinstance(context, str):
            answers = [unstrip(answer, context, report) for answer in answers]
        question = {"id": None if id_ is MISSING else id_, "question": lookup(row, fields["question"]),
                    "answers": answers}
        return SquadAdapter.paragraph({"context": context, "qas": [question], "id": line}, path, report)

    @staticmethod
    def wsc(row, fields, options, rule, where, report):
        keys = ("span1_text", "span1_index", "span2_text", "span2_index")
        record = {"text": lookup(row, fields["text"]),
                  "target": {key: lookup(row, fields[key]) for key in keys},
                  "label": lookup(row, fields["label"]) if fields.get("label") else None,
                  "idx": lookup(row, fields["id"]) if fields.get("id") else None}
        example = WscAdapter.example(record, rule, *where, report)
        return [] if example is None else [example]


def unstrip(answer, context, report):
    """The hub's clue.py strips each answer text but keeps its answer_start, so an
    answer that began with whitespace starts that many characters later."""
    text, start = answer["text"], answer["answer_start"]
    if not (isinstance(text, str) and text and isinstance(start, int) and 0 <= start < len(context)):
        return answer
    if context[start:start + len(text)] == text or not context[start].isspace():
        return answer
    moved = start + len(context[start:]) - len(context[start:].lstrip())
    if context[moved:moved + len(text)] != text:
        return answer  # not the stripping: squad counts it as a lost span
    report.count("answer starts moved past stripped whitespace")
    return {"text": text, "answer_start": moved}


class ClassLabelRule(LabelRule):
    """LabelRule after two hub conventions: integer labels index `class_labels`,
    and values in `unlabelled` mean no label."""

    def __init__(self, task_type, labels, options):
        super().__init__(task_type, labels, options["skip_labels"], options["label_map"])
        self.unlabelled = options["unlabelled"]
        names = options["class_labels"]
        if names == "labels":
            if not labels:
                raise ValueError("option class_labels: labels needs a task with `labels:` (in the "
                                 "dataset's index order); otherwise list the names")
            names = list(labels)
        elif isinstance(names, str):
            raise ValueError(f"option class_labels must list the class names in index order, or be "
                             f"`labels` (the task's labels), not {names!r}")
        self.names = names

    def no_label(self, raw):
        # bool is an int in Python: True must not count as the label 1.
        return not isinstance(raw, (bool, list, dict)) and raw in self.unlabelled

    def check(self, raw):
        if self.no_label(raw):
            return None, None
        if self.names is not None and isinstance(raw, int) and not isinstance(raw, bool):
            if not 0 <= raw < len(self.names):
                return None, f"class label {raw} is outside class_labels (0-{len(self.names) - 1})"
            raw = self.names[raw]
        return super().check(raw)


def parquet_rows(path, fields):
    """(row number, row dict) for each row, reading only the columns `fields` name."""
    parquet = _pyarrow_parquet()
    try:
        file = parquet.ParquetFile(path)
    except (OSError, ValueError) as error:  # ArrowInvalid is a ValueError
        raise ValueError(f"{path}: not a readable parquet file ({error})") from None
    names = file.schema_arrow.names
    columns = []
    for key, source in fields.items():
        for item in source if isinstance(source, list) else [source]:
            if item is None:
                continue
            column = str(item) if str(item) in names else str(item).split(".")[0]
            if column not in names:
                raise ValueError(f"{path}: fields.{key}: no column {column!r}; the file has "
                                 f"{', '.join(names)}")
            if column not in columns:
                columns.append(column)
    number = 0
    for batch in file.iter_batches(batch_size=BATCH_ROWS, columns=columns):
        for row in batch.to_pylist():
            yield number, row
            number += 1


class PyarrowMissing(UserError, ValueError):
    """A UserError, so `mtl train` prints it as one line, and a ValueError, which the
    data tools (`mtl data stats`) report per task like any other unreadable split."""


def _pyarrow_parquet():
    try:
        import pyarrow.parquet
    except ImportError:
        raise PyarrowMissing(f"format 'parquet' needs pyarrow, which is not installed: "
                             f"{INSTALL_HINT}") from None
    return pyarrow.parquet
