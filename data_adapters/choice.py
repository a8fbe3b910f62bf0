"""Multiple choice and cloze: `c3`, `chid`, `cmrc2019`, `choice_jsonl`.

Every question becomes a ChoiceExample whose label is the index of the right
choice (None where a test split has no answers).

Cloze passages can hold several blanks: each blank is one example. Its own
blank is written `#idiom#` (ChID, as FewCLUE writes it) or `[BLANK]`
(CMRC2019) and the passage's other blanks become `#`, so that the model sees
where the gap is without seeing the other answers.
"""
from __future__ import annotations

import json
import os
import random
import re
import zlib
from typing import TYPE_CHECKING

from data_adapters.base import Adapter, register_adapter
from data_adapters.examples import ChoiceExample
from data_adapters.reading import (
    MISSING,
    json_array_records,
    json_data,
    lookup,
    read_text,
    record_examples,
    records,
)
from data_adapters.task_types import CLOZE, MULTIPLE_CHOICE, type_names

if TYPE_CHECKING:
    from collections.abc import Iterator

    from data_adapters.base import Fields, Labels, Options
    from data_adapters.examples import Example
    from data_adapters.report import ReadReport

OTHER_BLANK = "#"
CHID_BLANK = "#idiom#"
CHID_MARKER = re.compile(r"#idiom\d+#")
CMRC2019_BLANK = "[BLANK]"
CMRC2019_MARKER = re.compile(r"\[BLANK(\d+)\]")


def fill_blanks(text, marker, target, target_text):
    """text with the `target` match written `target_text` and every other blank `#`."""
    return marker.sub(lambda m: target_text if m.group(0) == target else OTHER_BLANK, text)


@register_adapter("c3")
class C3Adapter(Adapter):
    """C3: `[[context lines...], [{question, choice, answer}], id]` items of one JSON array.
    A question's id is its own `id` (CLUE's release) or `<document id>-<position>`."""
    task_types = type_names(MULTIPLE_CHOICE)

    def read(self, paths: list[str], options: Options, fields: Fields, task_type: str | None,
             labels: Labels, report: ReadReport) -> Iterator[Example]:
        for path in paths:
            for line, item in json_array_records(path, report):
                if not (isinstance(item, list) and len(item) >= 2 and isinstance(item[0], list)
                        and isinstance(item[1], list)):
                    report.skip("not a [[context...], [questions...], id] item", path, line)
                    continue
                context = "\n".join(str(part) for part in item[0])  # dialogue turns stay apart
                doc_id = item[2] if len(item) > 2 else line
                for index, question in enumerate(item[1]):
                    # CLUE's c3 test files give each question its own id (the leaderboard's key)
                    own = question.get("id") if isinstance(question, dict) else None
                    id_ = own if own is not None else f"{doc_id}-{index}"
                    example = self.question(question, context, id_, path, line, report)
                    if example is not None:
                        yield example

    @staticmethod
    def question(entry, context, id_, path, line, report):
        report.count("questions")
        if not isinstance(entry, dict) or not isinstance(entry.get("choice"), list) or not entry["choice"]:
            report.skip("question without a `choice` list", path, line)
            return None
        choices = [str(c) for c in entry["choice"]]
        label = None
        if "answer" in entry:
            if entry["answer"] not in choices:
                report.skip("answer is not one of the choices", path, line)
                return None
            label = choices.index(entry["answer"])
        elif report.missing_label(path, line):
            return None
        return ChoiceExample(context, str(entry.get("question", "")), choices, label, id_)


@register_adapter("chid")
class ChidAdapter(Adapter):
    """ChID in either release.

    FewCLUE: `{id, candidates, content, answer}` with one `#idiom#` blank.
    CLUE: `{candidates, content: [passages]}` with blanks `#idiom000123#`, and an
    answer file `{"#idiom000123#": index}` beside each data file, named by the
    option `answers` with `{name}` for the data file's name without extension:
    `answers: "{name}_answer.json"` reads train_answer.json for train.json.
    """
    option_keys = {"answers": (str, None)}
    task_types = type_names(CLOZE)

    def read(self, paths: list[str], options: Options, fields: Fields, task_type: str | None,
             labels: Labels, report: ReadReport) -> Iterator[Example]:
        for path in paths:
            answers = self.answer_file(path, options["answers"])
            for line, record in records(path, report):
                if not isinstance(record, dict) or not isinstance(record.get("candidates"), list):
                    report.skip("not a ChID record (no `candidates` list)", path, line)
                    continue
                candidates = [str(c) for c in record["candidates"]]
                content = record.get("content")
                passages = content if isinstance(content, list) else [content]
                if not all(isinstance(p, str) for p in passages):
                    report.skip("`content` is not text", path, line)
                    continue
                if "answer" in record or CHID_BLANK in "".join(passages):
                    yield from self.fewclue(record, passages, candidates, path, line, report)
                else:
                    yield from self.clue(passages, candidates, answers, path, line, report)

    @staticmethod
    def answer_file(path, pattern):
        if not pattern:
            return None
        name = os.path.splitext(os.path.basename(path))[0]
        answer_path = os.path.join(os.path.dirname(path), pattern.replace("{name}", name))
        if not os.path.exists(answer_path):
            raise FileNotFoundError(f"ChID answer file not found: {answer_path} (options.answers "
                                    f"is {pattern!r}, read beside {path})")
        try:
            answers = json.loads(read_text(answer_path))
        except json.JSONDecodeError as error:
            raise ValueError(f"{answer_path}:{error.lineno}: bad JSON ({error.msg})") from None
        if not isinstance(answers, dict):
            raise ValueError(f"{answer_path}: expected {{\"#idiom000000#\": index, ...}}")
        return answers

    @staticmethod
    def fewclue(record, passages, candidates, path, line, report):
        report.count("questions")
        text = "".join(passages)
        if text.count(CHID_BLANK) != 1:
            report.skip(f"content has {text.count(CHID_BLANK)} {CHID_BLANK} blanks, expected 1",
                        path, line)
            return
        label = record.get("answer")
        if label is not None and not (isinstance(label, int) and 0 <= label < len(candidates)):
            report.skip("answer is not an index into candidates", path, line)
            return
        if label is None and report.missing_label(path, line):
            return
        yield ChoiceExample(text, "", candidates, label, record.get("id"))

    @staticmethod
    def clue(passages, candidates, answers, path, line, report):
        if not any(CHID_MARKER.search(p) for p in passages):
            report.skip("content has no #idiomNNNNNN# blank", path, line)
        for passage in passages:
            for marker in CHID_MARKER.findall(passage):
                report.count("questions")
                label = None if answers is None else answers.get(marker)
                if answers is not None and not (isinstance(label, int) and 0 <= label < len(candidates)):
                    report.skip("blank has no valid index in the answer file", path, line)
                    continue
                if label is None and report.missing_label(path, f"line {line}, {marker}"):
                    continue
                context = fill_blanks(passage, CHID_MARKER, marker, CHID_BLANK)
                yield ChoiceExample(context, "", candidates, label, marker)


@register_adapter("cmrc2019")
class Cmrc2019Adapter(Adapter):
    """CMRC2019: `{"data": [{context with [BLANKn], choices, context_id, answers}]}`;
    answers[n - 1] is the index of the choice that fills [BLANKn]."""
    task_types = type_names(CLOZE)

    def read(self, paths: list[str], options: Options, fields: Fields, task_type: str | None,
             labels: Labels, report: ReadReport) -> Iterator[Example]:
        for path in paths:
            for entry in json_data(path, report, "CMRC2019", bare_list=True) or ():
                yield from self.passage(entry, path, report)

    @staticmethod
    def passage(entry, path, report):
        id_ = entry.get("context_id") if isinstance(entry, dict) else None
        where = f"context_id {id_}"
        if not (isinstance(entry, dict) and isinstance(entry.get("context"), str)
                and isinstance(entry.get("choices"), list)):
            report.skip("not a {context, choices, answers} entry", path, where)
            return
        choices = [str(c) for c in entry["choices"]]
        answers = entry.get("answers")
        for match in CMRC2019_MARKER.finditer(entry["context"]):
            report.count("questions")
            number = int(match.group(1))
            label = None
            if answers is not None:
                label = (answers[number - 1] if isinstance(answers, list) and 0 < number <= len(answers)
                         else None)
                if not (isinstance(label, int) and 0 <= label < len(choices)):
                    report.skip("blank without a valid answer index", path, f"{where} [BLANK{number}]")
                    continue
            elif report.missing_label(path, f"{where} [BLANK{number}]"):
                continue
            context = fill_blanks(entry["context"], CMRC2019_MARKER, match.group(0), CMRC2019_BLANK)
            yield ChoiceExample(context, "", choices, label, f"{id_}-{number}")


@register_adapter("choice_jsonl")
class ChoiceJsonlAdapter(Adapter):
    """Generic multiple choice, one JSON object per question (ReCO-like):

        fields: {context: passage, question: query, choices: alternatives, label: answer}
        options: {label_is_text: true}     # the label field holds the answer's text

    `choices_separator: "|"` splits a choices string (ReCO's `"是|否|无法确定"`).
    `answer_is_first: true`: the right choice is the first one listed, as ReCO's
    publisher reads it (prepare_data.py shuffles the alternatives and takes the
    first one's new place as the label); the choices are then put in an order
    fixed per record (seeded by its id), so that the position tells nothing.
    """
    option_keys = {"label_is_text": (bool, False), "choices_separator": (str, ""),
                   "answer_is_first": (bool, False)}
    field_keys = ("context", "question", "choices", "label", "id")
    field_defaults = {"context": "context", "question": "question", "choices": "choices",
                      "label": "label", "id": "id"}
    task_types = type_names(MULTIPLE_CHOICE, CLOZE)

    def read(self, paths: list[str], options: Options, fields: Fields, task_type: str | None,
             labels: Labels, report: ReadReport) -> Iterator[Example]:
        yield from record_examples(
            paths, report, lambda record, path, line: self.example(record, fields, options, path,
                                                                   line, report))

    @staticmethod
    def example(record, fields, options, path, line, report):
        report.count("questions")
        context = lookup(record, fields["context"])
        if isinstance(context, list):
            context = "\n".join(str(c) for c in context)
        if not isinstance(context, str):
            report.skip(f"missing context field {fields['context']!r}", path, line)
            return None
        question = lookup(record, fields["question"]) if fields.get("question") else ""
        choices = lookup(record, fields["choices"])
        if isinstance(choices, str) and options.get("choices_separator"):
            choices = [c.strip() for c in choices.split(options.get("choices_separator"))]
        if not isinstance(choices, list) or not choices:
            report.skip(f"missing choices list {fields['choices']!r}", path, line)
            return None
        choices = [str(c) for c in choices]
        id_ = lookup(record, fields["id"]) if fields.get("id") else None
        id_ = None if id_ is MISSING else id_
        raw = lookup(record, fields["label"]) if fields.get("label") else MISSING
        label = None
        if options.get("answer_is_first"):
            order = random.Random(zlib.crc32(str(id_ if id_ is not None else line).encode()))
            shuffled = order.sample(range(len(choices)), len(choices))
            choices, label = [choices[i] for i in shuffled], shuffled.index(0)
        elif raw is not MISSING and raw is not None:
            if options["label_is_text"]:
                if str(raw) not in choices:
                    report.skip("label is not one of the choices", path, line)
                    return None
                label = choices.index(str(raw))
            else:
                try:
                    label = int(raw)
                except (TypeError, ValueError):
                    label = -1
                if not 0 <= label < len(choices):
                    report.skip("label is not an index into the choices (use "
                                "options.label_is_text if it holds the answer text)", path, line)
                    return None
        elif report.missing_label(path, line):
            return None
        question = "" if question is MISSING or question is None else str(question)
        return ChoiceExample(context, question, choices, label, id_)
