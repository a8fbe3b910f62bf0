"""Extractive reading comprehension (mrc_span): [CLS] question [SEP] context window [SEP].

A long context gives several windows (rows); evaluation and prediction decode
each window and keep, per question, the best span over its windows.
"""
import numpy as np

from data_adapters.task_types import MRC_SPAN
from mtl_framework.families.base import Family
from mtl_framework.families.features import Featurizer, TokenLocator, pad_tokens


def _utf8(texts):
    return [t.encode("utf-8") for t in texts]


NO_WINDOW = "answer in no single window (longer than a window, or cut by stride >= window)"


class MRCFeaturizer(Featurizer):
    """mrc_span: [CLS] question [SEP] context window [SEP]. Windows of the
    context start every `stride` tokens (Google BERT's doc_stride: the step
    between window starts, at most a window's length so no token is skipped)
    until one reaches the context's end; each holds as many context tokens as
    max_length leaves after the question. `stride: null` (the default) is half
    a window, at most 128: 128 at max_length 512 (Google's default), about 55
    at 128, so windows overlap by half and an answer shorter than that
    overlap always lies wholly inside one. The question
    keeps at most `max_question_length` tokens (more is counted as truncated).
    A window's target is the first answer lying wholly inside it, else (0, 0)."""

    example_types = MRC_SPAN.examples
    family = MRC_SPAN.name
    defaults = {"stride": None, "max_question_length": 64}

    offsets = False  # context_offsets instead, once per example

    def ragged_fields(self):
        return super().ragged_fields() + [
            ("context_offsets", np.int32, 2), ("context", np.uint8, None),
            ("answers", np.int32, 2), ("example_id", np.uint8, None)]

    def start(self, writer):
        super().start(writer)
        for name in ("start", "end", "example_index", "window_start", "context_position",
                     "context_index"):
            writer.add(name, np.zeros(0, np.int32))
        self.examples_done = self.contexts_done = 0

    def encode_chunk(self, chunk, writer, report):
        stride, max_question = self.settings["stride"], self.settings["max_question_length"]
        if stride is not None and (not isinstance(stride, int) or stride < 1):
            raise ValueError(f"{self.task}: mrc_span stride must be a whole number >= 1 "
                             f"(or null: half a window), got {stride!r}")
        questions = self.tokenizer.encode_batch([e.question for e in chunk])
        contexts = list(dict.fromkeys(e.context for e in chunk))  # SQuAD: questions share contexts
        encoded = dict(zip(contexts, self.tokenizer.encode_batch(contexts)))
        windows, starts, ends, example_index, window_starts, positions = [], [], [], [], [], []
        answers = []
        context_number = {c: self.contexts_done + i for i, c in enumerate(contexts)}
        for example, question in zip(chunk, questions):
            q_ids = question.token_ids[1:-1]
            if len(q_ids) > max_question:
                q_ids = q_ids[:max_question]
                report.truncated["question over max_question_length"] += 1
            context = encoded[example.context]
            c_ids, c_offsets = context.token_ids[1:-1], context.offsets[1:-1]
            room = self.max_length - len(q_ids) - 3
            if room < 1:
                raise ValueError(f"{self.task}: max_length {self.max_length} leaves no room for "
                                 f"the context after a {len(q_ids)}-token question; raise "
                                 "max_length or lower max_question_length")
            locator = TokenLocator(c_offsets, list(range(len(c_ids))), example.context)
            spans = []
            for answer in example.answers:
                span, note = locator.locate(answer.start, answer.end)
                if span is None:
                    report.spans_lost[f"answer {note}"] += 1
                    continue
                report.spans += 1
                report.spans_widened += note
                spans.append(span)
            answers.append([(a.start, a.end) for a in example.answers])
            head = [self.tokenizer.cls_id, *q_ids, self.tokenizer.sep_id]
            placed = False
            window_start = 0
            while True:
                window_end = min(window_start + room, len(c_ids))
                ids = head + c_ids[window_start:window_end] + [self.tokenizer.sep_id]
                start = end = 0
                for first, last in spans:
                    if first >= window_start and last < window_end:
                        shift = len(head) - window_start
                        start, end = first + shift, last + shift
                        placed = True
                        break
                windows.append((ids, [0] * len(head) + [1] * (len(ids) - len(head))))
                window_starts.append(window_start)
                positions.append(len(head))
                starts.append(start)
                ends.append(end)
                example_index.append(self.examples_done)
                if window_end >= len(c_ids):
                    break
                window_start += min(stride, room) if stride else min(128, max(1, room // 2))
            if spans and not placed:
                report.spans_lost[NO_WINDOW] += len(spans)
                report.spans -= len(spans)
            self.examples_done += 1
        writer.add_ragged("token_ids", [w[0] for w in windows], self.id_dtype)
        writer.add_ragged("segment_ids", [w[1] for w in windows], np.int8)
        writer.add("window_start", np.array(window_starts, np.int32))
        writer.add("context_position", np.array(positions, np.int32))
        writer.add("context_index", np.array([context_number[e.context] for e in chunk], np.int32))
        writer.add_ragged("context_offsets", [encoded[c].offsets[1:-1] for c in contexts], np.int32, 2)
        writer.add("start", np.array(starts, np.int32))
        writer.add("end", np.array(ends, np.int32))
        writer.add("example_index", np.array(example_index, np.int32))
        writer.add_bytes("context", _utf8(contexts))
        self.contexts_done += len(contexts)
        writer.add_ragged("answers", answers, np.int32, 2)
        writer.add_bytes("example_id", _utf8(["" if e.id is None else str(e.id) for e in chunk]))


def mrc_answer(features, window_id, start, end):
    """A predicted token span of window `window_id` as characters of its example:
    {example_index, id, start, end (half-open), text}; text "" for (0, 0)."""
    example = int(features["example_index"][window_id])
    context_index = int(features["context_index"][example])
    context = bytes(features.ragged("context", context_index)).decode("utf-8")
    answer = {"example_index": example,
              "id": bytes(features.ragged("example_id", example)).decode("utf-8")}
    if start == 0 and end == 0:
        return {**answer, "start": 0, "end": 0, "text": ""}
    offsets = features.ragged("context_offsets", context_index)
    shift = int(features["window_start"][window_id]) - int(features["context_position"][window_id])
    if not (0 <= start + shift <= end + shift < len(offsets)):
        raise ValueError(f"token span ({start}, {end}) is not on the context of window {window_id}")
    char_start, char_end = int(offsets[start + shift][0]), int(offsets[end + shift][1])
    return {**answer, "start": char_start, "end": char_end, "text": context[char_start:char_end]}


def mrc_gold(features, example):
    """The gold answer texts of one example (all of them, for EM/F1)."""
    context_index = int(features["context_index"][example])
    context = bytes(features.ragged("context", context_index)).decode("utf-8")
    return [context[s:e] for s, e in features.ragged("answers", example)]

def collate_mrc(features, rows, rng, pad_to):
    batch = pad_tokens(features, rows, pad_to)
    lengths = features.lengths()[rows]
    position = np.arange(batch["token_ids"].shape[1])
    # Context = segment 1 minus its closing [SEP].
    batch["context_mask"] = ((batch["segment_ids"] == 1)
                             & (position[None] < lengths[:, None] - 1)).astype(np.int32)
    batch["start"] = features["start"][rows].astype(np.int32)
    batch["end"] = features["end"][rows].astype(np.int32)
    batch["window_id"] = rows.astype(np.int32)
    return batch


def example_rows(features, max_examples):
    """The windows of the first `max_examples` questions (all windows of each)."""
    return np.flatnonzero(np.asarray(features["example_index"]) < max_examples)


def best_windows(features, windows):
    """{example index: (its best-scoring window, its lowest null score)}, examples in order:
    a question's answer is the best real span over all its windows (shared with predict)."""
    best, null = {}, {}
    for window in windows:
        example = int(features["example_index"][window["window_id"]])
        null[example] = min(null.get(example, np.inf), window["null_score"])
        # `not in best`: a question whose windows hold no context token (score -inf) still
        # gets its (empty) answer rather than vanishing from the results
        if example not in best or window["score"] > best[example]["score"]:
            best[example] = window
    return {example: (best[example], null[example]) for example in sorted(best)}


def answers(features, windows):
    """Per question (example index) the answer text of its best window, and the
    gold answers: a window's real span wins over "no answer" when it scores higher
    than the question's lowest null score (SQuAD 2.0 practice; CMRC2018 always
    has an answer, so the best span there is the best real one)."""
    predictions, references = [], []
    for example, (window, null) in best_windows(features, windows).items():
        gold = mrc_gold(features, example)
        if not gold and window["score"] <= null:
            text = ""
        else:
            text = mrc_answer(features, window["window_id"], window["start"], window["end"])["text"]
        predictions.append(text)
        references.append(gold)
    return predictions, references


def outputs(features, windows):
    """What `mtl predict` writes per question: the best window's answer text and start."""
    out = []
    for window, _ in best_windows(features, windows).values():
        answer = mrc_answer(features, window["window_id"], window["start"], window["end"])
        out.append({"text": answer["text"], "start": answer["start"]})
    return out


FAMILIES = (
    Family(MRC_SPAN.name, MRCFeaturizer, collate_mrc,
           {"context_mask": ("int32", 2), "start": ("int32", 1), "end": ("int32", 1),
            "window_id": ("int32", 1)},
           example_rows=example_rows, window_answers=answers, window_outputs=outputs,
           hub_task="question-answering"),
)
