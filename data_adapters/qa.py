"""Span-extraction reading comprehension: `squad` and `multi_passage_qa`.

`squad`: SQuAD v1/v2 JSON (CMRC2018, DRCD, DuReader-robust, CJRC). An answer
is kept only if `context[answer_start:answer_start + len(text)] == text`; a
wrong offset is a lost span, never a guess. A question whose every answer is
lost (or, for mrc_span, is YES / NO) has nothing to learn: training leaves it out,
counted as filtered (not skipped: the row is fine); with `unlocated_questions:
score` (the adapter's scoring_options and predict_options: what `mtl evaluate`
and `mtl predict` read with) it comes out without a span, its gold texts in
`unlocated`, so the publisher's scorer and the CLUE submission file still have
it. v2 questions marked `is_impossible` come out with no answers. A question whose answers are all
placeholders (CLUE's cmrc2018 test: `FAKE_ANSWER_n` at answer_start -1) is
skipped with that reason, unless `placeholder_answers: no_gold` (what `mtl
predict` reads with) reads it without gold, counted as filtered. CJRC's
YES/NO answers are not spans (skipped for mrc_span); a `classification` task
reads the kind of answer instead, as TextExample(question, context, label):
"span", "YES", "NO" or "unknown" (no answer). With `scorer: cjrc` both read
the answers as CJRC's official evaluate.py does: `is_impossible` is ignored
(the dev file marks 176 questions "true" that have real answers), an answer
with empty text is that annotator's "no answer" (the scorer's ''), and a
question's kind is the one most of its answers have (the first on a tie). One
rule for both tasks: the span task keeps a question of kind "unknown" as
unanswerable, skips one of kind YES/NO (counted), and trains the span answers
of a question of kind "span" only.

`multi_passage_qa`: Su's WebQA/SogouQA layout, `[{id, question, passages:
[{passage, answer}]}]` (a JSON array or JSON lines). Each passage is one
example; its answer spans are every occurrence of the answer in the passage
(the answer has no offset), and an empty answer means "not in this passage".
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from data_adapters.base import Adapter, register_adapter
from data_adapters.examples import Span, SpanQAExample, TextExample
from data_adapters.reading import LabelRule, json_data, records, text_lines
from data_adapters.task_types import CLASSIFICATION, CONTRASTIVE, MRC_SPAN, type_names

if TYPE_CHECKING:
    from collections.abc import Iterator

    from data_adapters.base import Fields, Labels, Options
    from data_adapters.examples import Example
    from data_adapters.report import ReadReport

YES_NO = ("YES", "NO")
PLACEHOLDERS_SKIPPED = "placeholder answers (FAKE_ANSWER, a test file): no gold to learn or score"
UNLOCATED = "no answer matches the context at its answer_start"
YES_NO_ONLY = "YES/NO answer, not a span"
NOT_LEARNT = "not learnt (training), still scored"
UNLOCATED_QUESTION = f"question: {UNLOCATED}: {NOT_LEARNT}"
YES_NO_QUESTION = f"question: {YES_NO_ONLY}: {NOT_LEARNT}"


def impossible(qa):
    # CJRC writes is_impossible as the strings "true"/"false".
    flag = qa.get("is_impossible")
    return flag is True or isinstance(flag, str) and flag.strip().lower() == "true"


def placeholders(answers):
    """CLUE test files' stand-ins for hidden gold: FAKE_ANSWER_n at answer_start -1."""
    return bool(answers) and all(
        isinstance(a, dict) and a.get("answer_start") == -1
        and str(a.get("text", "")).startswith("FAKE_ANSWER") for a in answers)


def answer_kind(answers):
    """unknown (no answer), YES, NO or span: what a CJRC answer is."""
    if not answers:
        return "unknown"
    text = answers[0].get("text") if isinstance(answers[0], dict) else None
    return text if text in YES_NO else "span"


def cjrc_kind(answers):
    """The kind most annotators gave, as CJRC's evaluate.py reads the gold texts:
    no answers or '' -> unknown; YES / NO; anything else a span (ties: the first)."""
    kinds = ["unknown" if not (a.get("text") if isinstance(a, dict) else None)
             else answer_kind([a]) for a in answers] or ["unknown"]
    return max(kinds, key=lambda k: (kinds.count(k), -kinds.index(k)))


@register_adapter("squad")
class SquadAdapter(Adapter):
    # contrastive reads the same questions: each answered question -> its passage
    task_types = type_names(MRC_SPAN, CLASSIFICATION, CONTRASTIVE)
    option_keys = {"placeholder_answers": (str, "skip"), "scorer": (str, "squad"),
                   "unlocated_questions": (str, "skip")}
    predict_options = {"placeholder_answers": "no_gold", "unlocated_questions": "score"}
    scoring_options = {"unlocated_questions": "score"}

    def read(self, paths: list[str], options: Options, fields: Fields, task_type: str | None,
             labels: Labels, report: ReadReport) -> Iterator[Example]:
        if options["placeholder_answers"] not in ("skip", "no_gold"):
            raise ValueError(f"options.placeholder_answers is {options['placeholder_answers']!r}:"
                             " use skip (the default) or no_gold")
        if options["scorer"] not in ("squad", "cjrc"):
            raise ValueError(f"options.scorer is {options['scorer']!r}: use squad (the default) "
                             "or cjrc (CJRC's evaluate.py: is_impossible ignored)")
        if options["unlocated_questions"] not in ("skip", "score"):
            raise ValueError(f"options.unlocated_questions is {options['unlocated_questions']!r}: "
                             "use skip (the default: training) or score")
        cjrc = options["scorer"] == "cjrc"
        keep = options["unlocated_questions"] == "score"
        for path in paths:
            articles = json_data(path, report, "SQuAD")
            if articles is None:
                continue
            rule = LabelRule(task_type, labels)
            for article in articles:
                for paragraph in article.get("paragraphs", []) if isinstance(article, dict) else []:
                    if task_type == CLASSIFICATION.name:
                        yield from self.answer_kinds(paragraph, rule, path, report, cjrc)
                    else:
                        yield from self.paragraph(paragraph, path, report,
                                                  options["placeholder_answers"] == "no_gold", cjrc,
                                                  keep)

    @staticmethod
    def questions(paragraph, path, report):
        """(qa, context, question) for each usable question; bad ones counted as skipped."""
        context = paragraph.get("context")
        if not isinstance(context, str):
            report.skip("paragraph without a context string", path, f"paragraph {paragraph.get('id')}")
            return
        for qa in paragraph.get("qas", []):
            report.count("questions")
            question = qa.get("question")
            if not isinstance(question, str) or not question.strip():
                report.skip("question missing or empty", path, f"id {qa.get('id')}")
                continue
            yield qa, context, question

    @staticmethod
    def paragraph(paragraph, path, report, placeholders_as_no_gold=False, cjrc=False,
                  keep_unlocated=False):
        for qa, context, question in SquadAdapter.questions(paragraph, path, report):
            id_ = qa.get("id")
            # v2 files may list plausible answers on impossible questions: not answers.
            given = [] if impossible(qa) and not cjrc else qa.get("answers") or []
            if cjrc:  # one rule with the classification task: the question's cjrc_kind
                kind = cjrc_kind(given)
                if impossible(qa) and kind != "unknown":
                    report.repair("is_impossible \"true\" with answers: read as the scorer "
                                  "does (by the answers)")
                if kind == "unknown":  # most annotators: no answer
                    yield SpanQAExample(question, context, [], id_)
                    continue
                if kind in YES_NO and not keep_unlocated:  # training; scoring keeps it below
                    report.skip("YES/NO answer, not a span", path, f"id {id_}")  # by most
                    continue
                empty = [a for a in given if isinstance(a, dict) and not a.get("text")]
                if empty:
                    report.filter("empty answer text: that annotator's 'no answer' (CJRC scorer)",
                                  len(empty))
                    given = [a for a in given if a not in empty]
            if placeholders(given):
                if not placeholders_as_no_gold:
                    report.skip(PLACEHOLDERS_SKIPPED, path, f"id {id_}")
                    continue
                report.filter("placeholder answers (FAKE_ANSWER, test file): read without gold")
                given = []
            answers, unplaced = [], []
            for answer in given:
                span = SquadAdapter.place(answer, context)
                if isinstance(span, Span):
                    answers.append(span)
                    continue
                if isinstance(answer, dict) and isinstance(answer.get("text"), str):
                    unplaced.append(answer["text"])
                if answer_kind([answer]) in YES_NO:
                    report.filter("YES/NO answer (not a span; a classification task reads it)")
                else:
                    report.lose_span(span, path, f"id {id_}")
            if given and not answers:
                reason = YES_NO_ONLY if all(answer_kind([a]) in YES_NO for a in given) else UNLOCATED
                if not keep_unlocated:
                    report.filter(f"question: {reason}: {NOT_LEARNT}", 1, path, f"id {id_}")
                    continue
            yield SpanQAExample(question, context, answers, id_,
                                tuple(unplaced) if keep_unlocated else ())

    @staticmethod
    def answer_kinds(paragraph, rule, path, report, cjrc=False):
        for qa, context, question in SquadAdapter.questions(paragraph, path, report):
            if cjrc:
                label, reason = rule.check(cjrc_kind(qa.get("answers") or []))
                if impossible(qa) and label != "unknown":
                    report.repair("is_impossible \"true\" with answers: read as the scorer "
                                  "does (by the answers)")
            else:
                given = [] if impossible(qa) else qa.get("answers") or []
                label, reason = rule.check(answer_kind(given))
            if reason:
                report.skip(reason, path, f"id {qa.get('id')}")
                continue
            yield TextExample(question, context, label, qa.get("id"))

    @staticmethod
    def place(answer, context):
        """A Span, or the reason it cannot be placed."""
        if not isinstance(answer, dict):
            return "answer is not an object"
        text, start = answer.get("text"), answer.get("answer_start")
        if not isinstance(text, str) or not text:
            return "answer without text"
        if not isinstance(start, int) or isinstance(start, bool):
            return "answer_start is not a number"
        if text in YES_NO and start < 0:
            return "YES/NO answer, not a span"
        if start < 0 or start + len(text) > len(context):
            return "answer_start outside the context"
        if context[start:start + len(text)] != text:
            return "answer_start does not point at the answer text"
        return Span(start, start + len(text), text)


@register_adapter("multi_passage_qa")
class MultiPassageQAAdapter(Adapter):
    task_types = type_names(MRC_SPAN, CONTRASTIVE)

    def read(self, paths: list[str], options: Options, fields: Fields, task_type: str | None,
             labels: Labels, report: ReadReport) -> Iterator[Example]:
        for path in paths:
            for line, record in records(path, report):
                report.count("questions")
                if not isinstance(record, dict) or not isinstance(record.get("passages"), list):
                    report.skip("not a {id, question, passages: [...]} record", path, line)
                    continue
                question, id_ = record.get("question"), record.get("id")
                if not isinstance(question, str) or not question.strip():
                    report.skip("question missing or empty", path, line)
                    continue
                for index, passage in enumerate(record["passages"]):
                    example = self.passage(passage, question, f"{id_}-{index}", path, line, report)
                    if example is not None:
                        yield example

    @staticmethod
    def passage(passage, question, id_, path, line, report):
        context = passage.get("passage") if isinstance(passage, dict) else None
        if not isinstance(context, str) or not context.strip():
            report.skip("passage missing or empty", path, line)
            return None
        answer = passage.get("answer") or ""
        answers, start = [], context.find(answer) if answer else -1
        while start >= 0:
            answers.append(Span(start, start + len(answer), answer))
            start = context.find(answer, start + len(answer))
        if answer and not answers:
            report.lose_span("answer not found in its passage", path, line)
            report.skip("passage whose answer is not in it", path, line)
            return None
        return SpanQAExample(question, context, answers, id_)


@register_adapter("cmrc2017_cloze")
class Cmrc2017ClozeAdapter(Adapter):
    """CMRC 2017's cloze files as HFL publishes them (github.com/ymcui/cmrc2017):
    a `*.doc_query` file (train: `.part.0`, `.part.1`) of `N ||| words` lines, one per
    sentence of a document, each document closed by its query `<qid_N> ||| ... XXXXX
    ...`; and a `*.answer` file of `<qid_N> ||| answer` lines. Text is segmented
    into words with spaces. There is no candidate list: the answer is a word of
    the document (the Attention-Sum baselines point at it), so each query is one
    `mrc_span` example whose answers are every occurrence of that word in the
    document. The spaces between words are removed (`join_words`), except
    between two Latin letters or digits, so the text reads as written.

    A split lists its `.doc_query` files and its `.answer` file (told apart by name).
    A query whose answer is not a word of its document is skipped with its line.
    """
    option_keys = {"encoding": (str, "utf-8"), "join_words": (bool, True)}
    task_types = type_names(MRC_SPAN)
    ANSWER_SUFFIX = ".answer"

    def read(self, paths: list[str], options: Options, fields: Fields, task_type: str | None,
             labels: Labels, report: ReadReport) -> Iterator[Example]:
        answer_files = [p for p in paths if str(p).endswith(self.ANSWER_SUFFIX)]
        documents = [p for p in paths if not str(p).endswith(self.ANSWER_SUFFIX)]
        answers = {}
        for path in answer_files:
            for number, qid, answer in self.lines(path, options, report):
                answers[qid] = answer
        for path in documents:
            words = []  # the current document's words, sentence after sentence
            for number, key, text in self.lines(path, options, report):
                if not key.startswith("<qid_"):
                    words.append(text.split())
                    continue
                report.count("questions")
                example = self.example(key, text, words, answers, options, path, number, report)
                words = []
                if example is not None:
                    yield example

    @staticmethod
    def lines(path, options, report):
        for number, line in text_lines(path, report, options["encoding"]):
            line = line.strip()
            if not line:
                continue
            key, bar, text = line.partition(" ||| ")
            if not bar:
                report.skip("line without ' ||| '", path, number)
                continue
            yield number, key.strip(), text.strip()

    @staticmethod
    def example(qid, query, sentences, answers, options, path, number, report):
        if not sentences:
            report.skip("query without a document before it", path, number)
            return None
        answer = answers.get(qid)
        if answer is None:
            report.skip("query without a line in the split's .answer file", path, number)
            return None
        context, starts = Cmrc2017ClozeAdapter.join(sentences, options["join_words"])
        words = [w for sentence in sentences for w in sentence]
        spans = [Span(start, start + len(w), w) for w, start in zip(words, starts) if w == answer]
        if not spans:
            report.skip("answer is not a word of its document", path, number)
            return None
        question = Cmrc2017ClozeAdapter.join([query.split()], options["join_words"])[0]
        return SpanQAExample(question, context, spans, qid)

    @staticmethod
    def join(sentences, join_words):
        """(text, start of each word): words joined without spaces where Chinese."""
        text, starts = "", []
        for sentence in sentences:
            for word in sentence:
                if text and (not join_words or (text[-1].isascii() and text[-1].isalnum()
                                                and word[0].isascii() and word[0].isalnum())):
                    text += " "
                starts.append(len(text))
                text += word
        return text, starts
