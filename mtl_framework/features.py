"""Features: typed examples -> NumPy arrays per task family (docs/batches.md).

    featurizer = featurizer_for_task(task, tokenizer, data_root)
    features = featurizer.featurize(read_task(task, "train", data_root))
    print(features.report.summary())
    batch = features.batch([0, 5, 7])        # the dict of arrays heads read

Storage (what a cache folder holds, one `.npy` per array, memory-mappable):
a row is one training item (an example; a window for mrc_span and mlm).
Variable-length fields are stored flat: `name` holds all rows' values back to
back and `name.splits` [rows + 1] (int64) says where each row starts, so row i
is `name[splits[i]:splits[i + 1]]`. Fields aligned token for token with
`token_ids` (`segment_ids`, `offsets`, `word_starts`) share `token_ids.splits`.
Per family:

- every family: `token_ids` (uint16 when the vocab fits, else int32) and
  `segment_ids` (int8), ragged per row ([CLS] a [SEP] (b [SEP])).
- classification/matching: `label` [n] int32 (-1 = unlabelled); multi-label:
  `label` [n, n_labels] uint8. regression: `label` [n] float32 (NaN = unlabelled).
- mrc_span: per window `start`, `end` [n] int32 (0, 0 = answer not in this
  window), `example_index` [n] int32, `window_start` [n] int32 (its first
  context token, counted in the context) and `context_position` [n] int32
  (where that token sits in the window); per example `answers` ragged [k, 2]
  (all gold char spans), `example_id` (UTF-8 of str(id), ragged) and
  `context_index` [examples] int32; per context (stored once for the
  questions next to each other that share it, as in SQuAD files)
  `context` (UTF-8 bytes, ragged) and `context_offsets` ragged [t, 2] int32
  (char span of each context token). `mrc_answer` maps a predicted token
  span back to characters.
- multiple_choice/cloze: `token_ids`/`segment_ids` ragged per choice row,
  `choices.splits` [n + 1] (example -> its choice rows), `label` [n] int32.
- extraction_ner: `entities` ragged [m, 3] (type, start, end), `offsets`
  (char span of each token, (0, 0) for [CLS]/[SEP]; for decoding to chars).
- extraction_relation: `triples` ragged [m, 5] (predicate, subject start,
  subject end, object start, object end), `offsets`.
- extraction_event: `arguments` ragged [m, 4] (event number in the example,
  role, start, end), `offsets`.
- coreference: `span1`, `span2` [n, 2] int32, `label` [n] int32, `offsets`.
- mlm: `word_starts` ragged uint8 (whole_word only: 1 on a word's first token);
  masking happens in `batch` from the rng the stream passes (dynamic masking).

Token spans are (start, end) with end INCLUSIVE; [CLS] is position 0.
Truncation is counted, never silent (FeatureReport, kept in meta["report"]):
texts over max_length are cut as bert4keras cuts them (tokens off the longest
part, [SEP] kept) and counted in `truncated`; mrc_span and mlm cut nothing
(windows / several rows) except mrc questions over max_question_length.
Spans lost to truncation are counted in `spans_lost` and their example is
KEPT without them (NER, relation, event), because the rest of its spans
still teach; a coreference example whose span is truncated away is DROPPED
and counted in `dropped`, since it has nothing left to classify, as is any
example whose label is not in the task's labels.
"""
import bisect
import hashlib
import itertools
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np

from data_adapters.examples import (ChoiceExample, CorefExample, EventExample, NERExample,
                                    RelationExample, SpanQAExample, TextExample)

FEATURES_VERSION = 1
FAMILIES = ("classification", "matching", "regression", "mrc_span", "multiple_choice", "cloze",
            "extraction_ner", "extraction_relation", "extraction_event", "coreference", "mlm")


def source_version():
    """FEATURES_VERSION plus a hash of this file: any edit here invalidates cached features."""
    digest = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
    return f"{FEATURES_VERSION}-{digest}"


# ---------------------------------------------------------------- report


class FeatureReport:
    """What featurizing one split did. `truncated`, `spans_lost` and `dropped` count by reason."""

    def __init__(self):
        self.examples = 0  # examples in
        self.rows = 0  # feature rows out (windows for mrc_span / mlm)
        self.truncated = Counter()  # examples that lost tokens
        self.spans = 0  # spans placed on tokens
        self.spans_lost = Counter()  # spans left out of a kept example
        self.spans_widened = 0  # kept spans whose tokens reach past the span (mid-word boundary)
        self.dropped = Counter()  # examples left out entirely
        self.unlabelled = 0

    def as_dict(self):
        return {"examples": self.examples, "rows": self.rows,
                "truncated": dict(self.truncated.most_common()),
                "truncated_total": sum(self.truncated.values()),
                "spans": self.spans, "spans_lost": dict(self.spans_lost.most_common()),
                "spans_lost_total": sum(self.spans_lost.values()),
                "spans_widened": self.spans_widened,
                "dropped": dict(self.dropped.most_common()),
                "dropped_total": sum(self.dropped.values()), "unlabelled": self.unlabelled}

    @classmethod
    def from_dict(cls, data):
        report = cls()
        for key in ("examples", "rows", "spans", "spans_widened", "unlabelled"):
            setattr(report, key, data.get(key, 0))
        for key in ("truncated", "spans_lost", "dropped"):
            setattr(report, key, Counter(data.get(key, {})))
        return report

    def summary(self):
        parts = [f"{self.examples} examples -> {self.rows} rows"]
        for name, counter in (("truncated", self.truncated), ("spans lost", self.spans_lost),
                              ("dropped", self.dropped)):
            if counter:
                reasons = ", ".join(f"{r}: {n}" for r, n in counter.most_common())
                parts.append(f"{sum(counter.values())} {name} ({reasons})")
        if self.spans_widened:
            parts.append(f"{self.spans_widened} spans widened to token boundaries")
        if self.unlabelled:
            parts.append(f"{self.unlabelled} unlabelled")
        return ", ".join(parts)


# ---------------------------------------------------------------- storage


class FeatureWriter:
    """Collects arrays chunk by chunk: in memory, or appended to raw files in
    `directory` and turned into `.npy` at the end, so building a large split
    holds one chunk in memory, not the split."""

    def __init__(self, directory=None):
        self.directory = Path(directory) if directory is not None else None
        self.parts = {}  # name -> list of arrays (memory mode)
        self.files = {}  # name -> [file, dtype, trailing shape, rows] (disk mode)
        self.totals = {}  # ragged name -> values so far

    def add(self, name, array):
        array = np.ascontiguousarray(array)
        if self.directory is None:
            self.parts.setdefault(name, []).append(array)
            return
        if name not in self.files:
            handle = open(self.directory / f"{name}.raw", "wb")
            self.files[name] = [handle, array.dtype, array.shape[1:], 0]
        entry = self.files[name]
        if array.dtype != entry[1] or array.shape[1:] != entry[2]:
            raise ValueError(f"feature array {name!r}: chunk of {array.dtype}{array.shape[1:]} "
                             f"after {entry[1]}{entry[2]}")
        entry[0].write(array.tobytes())
        entry[3] += len(array)

    def add_ragged(self, name, rows, dtype, width=None):
        """Rows of variable length (lists of numbers, or of `width`-tuples);
        token-aligned fields (ALIGNED) write no splits of their own."""
        if name not in self.totals:
            self.totals[name] = 0
            if name not in ALIGNED:
                self.add(name + ".splits", np.zeros(1, np.int64))
        lengths = np.fromiter((len(r) for r in rows), np.int64, count=len(rows))
        flat = list(itertools.chain.from_iterable(rows))
        if width is not None:
            flat = list(itertools.chain.from_iterable(flat))
        values = np.array(flat, dtype=dtype)
        if width is not None:
            values = values.reshape(-1, width)
        self.add(name, values)
        if name not in ALIGNED:
            self.add(name + ".splits", self.totals[name] + np.cumsum(lengths))
        self.totals[name] += int(lengths.sum())

    def add_bytes(self, name, rows):
        """Ragged uint8 rows from bytes objects (UTF-8 texts), without a Python int per byte."""
        if name not in self.totals:
            self.totals[name] = 0
            self.add(name + ".splits", np.zeros(1, np.int64))
        lengths = np.fromiter((len(r) for r in rows), np.int64, count=len(rows))
        self.add(name, np.frombuffer(b"".join(rows), np.uint8))
        self.add(name + ".splits", self.totals[name] + np.cumsum(lengths))
        self.totals[name] += int(lengths.sum())

    def finish(self):
        """name -> array (memory mode) or memory-mapped `.npy` (disk mode)."""
        if self.directory is None:
            return {name: np.concatenate(parts) for name, parts in self.parts.items()}
        arrays = {}
        for name, (handle, dtype, trailing, rows) in self.files.items():
            handle.close()
            raw, path = self.directory / f"{name}.raw", self.directory / f"{name}.npy"
            shape = (rows,) + tuple(trailing)
            if rows == 0:
                np.save(path, np.zeros(shape, dtype))
            else:
                out = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)
                flat = out.reshape(rows, -1)
                per_row = flat.shape[1]
                step = max(1, (1 << 24) // max(1, per_row * dtype.itemsize))  # ~16 MB at a time
                with open(raw, "rb") as f:
                    for start in range(0, rows, step):
                        n = min(step, rows - start)
                        flat[start:start + n] = np.fromfile(f, dtype, n * per_row).reshape(n, per_row)
                out.flush()
                del out, flat
            raw.unlink()
            arrays[name] = np.load(path, mmap_mode="r")
        return arrays


class Features:
    """The arrays of one task split (see the module docstring) plus `meta`
    (family, labels, max_length, settings, vocab ids, report)."""

    def __init__(self, family, arrays, meta):
        self.family, self.arrays, self.meta = family, arrays, meta
        self._lengths = None

    def __len__(self):
        key = "choices.splits" if self.family in CHOICE_FAMILIES else "token_ids.splits"
        return len(self.arrays[key]) - 1

    def __getitem__(self, name):
        return self.arrays[name]

    @property
    def report(self):
        return FeatureReport.from_dict(self.meta["report"])

    @property
    def num_examples(self):
        """Distinct examples (questions, documents) behind the rows (windows, mlm pieces)."""
        return self.meta["num_examples"]

    def splits(self, name):
        return self.arrays[("token_ids" if name in ALIGNED else name) + ".splits"]

    def ragged(self, name, row):
        splits = self.splits(name)
        return self.arrays[name][splits[row]:splits[row + 1]]

    def lengths(self):
        """Tokens per row (the longest choice for multiple_choice/cloze): what buckets sort by."""
        if self._lengths is None:
            lengths = np.diff(self.arrays["token_ids.splits"])
            if self.family in CHOICE_FAMILIES:
                starts = np.asarray(self.arrays["choices.splits"][:-1])
                lengths = np.maximum.reduceat(lengths, starts) if len(starts) else lengths[:0]
            self._lengths = lengths.astype(np.int32)
        return self._lengths

    def batch(self, rows, rng=None, pad_to=None):
        """The dict of docs/batches.md for these rows, padded to the longest row
        (or to `pad_to`). mlm needs `rng` (a np.random.Generator) for its masks."""
        rows = np.asarray(rows, dtype=np.int64)
        if not len(rows):
            raise ValueError("batch() needs at least one row")
        return COLLATE[self.family](self, rows, rng, pad_to)


ALIGNED = ("segment_ids", "offsets", "word_starts")  # share token_ids.splits


def save_meta(features, directory):
    with open(Path(directory) / "meta.json", "w", encoding="utf-8") as f:
        json.dump(features.meta, f, ensure_ascii=False, indent=1)


def load_features(directory):
    """Features from a folder of `.npy` files + meta.json, memory-mapped (nothing read yet)."""
    directory = Path(directory)
    meta_path = directory / "meta.json"
    if not meta_path.is_file():
        raise FileNotFoundError(f"{meta_path} not found: {directory} is not a features folder")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    arrays = {p.name[:-4]: np.load(p, mmap_mode="r") for p in sorted(directory.glob("*.npy"))}
    return Features(meta["family"], arrays, meta)


# ---------------------------------------------------------------- helpers


def _chunks(iterable, size):
    iterator = iter(iterable)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


class TokenLocator:
    """Char spans of one text -> token positions, from the encoding's offsets of
    that text's tokens (bisect over their starts and ends)."""

    def __init__(self, offsets, positions, text, truncated=False):
        self.starts = [s for s, _ in offsets]
        self.ends = [e for _, e in offsets]
        self.positions, self.text, self.truncated = positions, text, truncated

    def locate(self, start, end):
        """((first, last) inclusive, widened) or (None, reason)."""
        first = bisect.bisect_right(self.ends, start)  # first token ending after start
        last = bisect.bisect_left(self.starts, end) - 1  # last token starting before end
        if first > last:
            return None, self._lost_reason(end)
        kept_start, kept_end = self.starts[first], self.ends[last]
        # Characters no token covers (spaces, dropped controls) are not lost.
        if (self.text[start:kept_start] + self.text[kept_end:end]).strip():
            return None, self._lost_reason(end)
        widened = kept_start < start or kept_end > end
        return (self.positions[first], self.positions[last]), widened

    def _lost_reason(self, end):
        if self.truncated and (not self.ends or end > self.ends[-1]):
            return "truncated (past max_length)"
        return "covers no token"


def _segment_tokens(encoding, segment=0):
    """(offsets, positions) of the content tokens of one segment (no specials)."""
    offsets, positions = [], []
    for i, ((s, e), seg) in enumerate(zip(encoding.offsets, encoding.segment_ids)):
        if seg == segment and e > s:
            offsets.append((s, e))
            positions.append(i)
    return offsets, positions


def truncate_longest_first(max_length, *sequences):
    """bert4keras truncate_sequences(max_length, -2, ...) (pop before the last
    token of the longest, first on ties), in place, but a run of pops off one
    sequence is one slice deletion: a 2,000-token C3 dialogue cut to 512 is
    not 1,500 list pops per choice."""
    sequences = [s for s in sequences if s]
    excess = sum(len(s) for s in sequences) - max_length
    while excess > 0:
        longest = max(range(len(sequences)), key=lambda i: (len(sequences[i]), -i))
        others = [len(s) for i, s in enumerate(sequences) if i != longest]
        size = len(sequences[longest])
        # Down to the next longest at once; one at a time on ties (the order alternates).
        cut = max(1, min(size - max(others, default=0), excess, size - 1))
        del sequences[longest][size - 1 - cut:size - 1]
        excess -= cut
    return sequences


def _utf8(texts):
    return [t.encode("utf-8") for t in texts]


# ---------------------------------------------------------------- featurizers


class Featurizer:
    """Base: tokenizer + task settings -> `featurize(examples)`."""

    family = None
    example_types = ()
    defaults = {}  # settings this family takes, with their defaults
    needs_labels = False
    offsets = False  # store token->char offsets (span families)

    def __init__(self, tokenizer, max_length, labels=None, multi_label=False, task="", **settings):
        unknown = sorted(set(settings) - set(self.defaults))
        if unknown:
            allowed = ", ".join(self.defaults) or "none"
            raise ValueError(f"{task or self.family}: unknown feature setting(s) {unknown} for "
                             f"{self.family}; allowed: {allowed}")
        if self.needs_labels and not labels:
            raise ValueError(f"{task or self.family}: {self.family} needs the task's labels "
                             "(`labels:` or `label_file:` in its spec)")
        if not isinstance(max_length, int) or max_length < 4:
            raise ValueError(f"{task or self.family}: max_length must be an int >= 4, "
                             f"got {max_length!r}")
        self.tokenizer, self.max_length, self.task = tokenizer, max_length, task
        self.labels = list(labels) if labels is not None else None
        self.label_index = {label: i for i, label in enumerate(self.labels or [])}
        self.multi_label = bool(multi_label)
        self.settings = {**self.defaults, **settings}
        self.id_dtype = np.uint16 if tokenizer.vocab_size <= 1 << 16 else np.int32

    def config(self):
        """Everything besides the tokenizer that decides the arrays (part of the cache key)."""
        return {"family": self.family, "max_length": self.max_length, "labels": self.labels,
                "multi_label": self.multi_label, "settings": self.settings}

    def featurize(self, examples, directory=None, chunk_size=512):
        """Features of `examples` (any iterable, read once). With `directory`
        the arrays are written there as `.npy` (+ meta.json) as they come."""
        writer, report = FeatureWriter(directory), FeatureReport()
        self.start(writer)
        for chunk in _chunks(examples, chunk_size):
            self.check_types(chunk)
            report.examples += len(chunk)
            self.encode_chunk(chunk, writer, report)
        return self.finish(writer, report, directory)

    def finish(self, writer, report, directory=None):
        """Features from a filled writer: the arrays, and meta describing them
        (`mtl_framework.prepare` fills the writer from chunks encoded in workers)."""
        arrays = writer.finish()
        tok = self.tokenizer
        meta = {"family": self.family, "task": self.task, **self.config(),
                "vocab": {"size": tok.vocab_size, "pad": tok.pad_id, "unk": tok.unk_id,
                          "cls": tok.cls_id, "sep": tok.sep_id, "mask": tok.mask_id},
                "version": source_version(), "report": report.as_dict()}
        features = Features(self.family, arrays, meta)
        report.rows = len(features)
        meta["report"] = report.as_dict()
        # Distinct examples (questions, documents), not rows (windows, mlm pieces):
        # what task sizes for sampling count.
        meta["num_examples"] = report.examples - sum(report.dropped.values())
        if directory is not None:
            save_meta(features, directory)
        return features

    def check_types(self, chunk):
        for example in chunk:
            if not isinstance(example, self.example_types):
                expected = " or ".join(t.__name__ for t in self.example_types)
                raise TypeError(f"{self.task or self.family}: {self.family} features take "
                                f"{expected}, got {type(example).__name__}; check the "
                                "task's `type` against its `format`")

    def start(self, writer):
        """Declare the ragged arrays up front, so an empty split still has them."""
        for name, dtype, width in self.ragged_fields():
            writer.add_ragged(name, [], dtype, width)

    def ragged_fields(self):
        fields = [("token_ids", self.id_dtype, None), ("segment_ids", np.int8, None)]
        if self.offsets:
            fields.append(("offsets", np.int32, 2))
        return fields

    def encode(self, texts, texts_b=None):
        """[(encoding, truncated)]: bert4keras truncation to max_length. Encoded in
        full first, so the ones that lose tokens are known (and re-encoded cut)."""
        if texts_b is not None and any(b is None for b in texts_b):
            single = [i for i, b in enumerate(texts_b) if b is None]
            pair = [i for i, b in enumerate(texts_b) if b is not None]
            out = [None] * len(texts)
            for group, with_b in ((single, False), (pair, True)):
                encoded = self.encode([texts[i] for i in group],
                                      [texts_b[i] for i in group] if with_b else None)
                for i, item in zip(group, encoded):
                    out[i] = item
            return out
        out = []
        for i, encoding in enumerate(self.tokenizer.encode_batch(texts, texts_b)):
            if len(encoding.token_ids) <= self.max_length:
                out.append((encoding, False))
            else:
                text_b = texts_b[i] if texts_b is not None else None
                out.append((self.tokenizer.encode_with_offsets(texts[i], text_b, self.max_length), True))
        return out

    def write_tokens(self, writer, encodings, offsets=False):
        writer.add_ragged("token_ids", [e.token_ids for e in encodings], self.id_dtype)
        writer.add_ragged("segment_ids", [e.segment_ids for e in encodings], np.int8)
        if offsets:
            writer.add_ragged("offsets", [e.offsets for e in encodings], np.int32, 2)

    def index_label(self, label):
        """(index, None) or (None, reason to drop)."""
        index = self.label_index.get(label if isinstance(label, str) else str(label))
        if index is None:
            return None, f"label {label!r} not in the task's labels"
        return index, None


class TextFeaturizer(Featurizer):
    """classification / matching / regression: [CLS] text [SEP] (text_b [SEP])."""

    example_types = (TextExample,)
    family = "classification"

    def start(self, writer):
        super().start(writer)
        if self.family == "regression":
            writer.add("label", np.zeros(0, np.float32))
        elif self.multi_label:
            writer.add("label", np.zeros((0, len(self.labels)), np.uint8))
        else:
            writer.add("label", np.zeros(0, np.int32))

    def encode_chunk(self, chunk, writer, report):
        texts_b = [e.text_b for e in chunk]
        encoded = self.encode([e.text for e in chunk],
                              texts_b if any(b is not None for b in texts_b) else None)
        kept, labels = [], []
        for example, (encoding, truncated) in zip(chunk, encoded):
            label, reason = self.label_of(example.label, report)
            if reason:
                report.dropped[reason] += 1
                continue
            if truncated:
                report.truncated["text over max_length"] += 1
            kept.append(encoding)
            labels.append(label)
        self.write_tokens(writer, kept)
        if self.family == "regression":
            writer.add("label", np.array(labels, np.float32))
        elif self.multi_label:
            writer.add("label", np.array(labels, np.uint8).reshape(-1, len(self.labels)))
        else:
            writer.add("label", np.array(labels, np.int32))

    def label_of(self, label, report):
        if label is None:
            report.unlabelled += 1
            if self.family == "regression":
                return math.nan, None
            return ([0] * len(self.labels) if self.multi_label else -1), None
        if self.family == "regression":
            try:
                return float(label), None
            except (TypeError, ValueError):
                return None, f"label {label!r} is not a number"
        if self.multi_label:
            hot = [0] * len(self.labels)
            for name in ([label] if isinstance(label, str) else label):
                index, reason = self.index_label(name)
                if reason:
                    return None, reason
                hot[index] = 1
            return hot, None
        return self.index_label(label)


class ClassificationFeaturizer(TextFeaturizer):
    family = "classification"
    needs_labels = True


class MatchingFeaturizer(TextFeaturizer):
    family = "matching"
    needs_labels = True


class RegressionFeaturizer(TextFeaturizer):
    family = "regression"


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

    example_types = (SpanQAExample,)
    family = "mrc_span"
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


class ChoiceFeaturizer(Featurizer):
    """multiple_choice / cloze, as bert4keras's CLUE C3: per choice
    [CLS] context [SEP] question [SEP] choice [SEP] (question left out when
    empty); context and question are segment 0, the choice segment 1.
    Too long: tokens come off the longest part first (bert4keras truncate_sequences)."""

    example_types = (ChoiceExample,)
    family = "multiple_choice"

    def start(self, writer):
        super().start(writer)
        writer.add("choices.splits", np.zeros(1, np.int64))
        writer.add("label", np.zeros(0, np.int32))
        self.choice_rows = 0

    def encode_chunk(self, chunk, writer, report):
        tok = self.tokenizer
        contexts = list(dict.fromkeys(e.context for e in chunk))
        questions = list(dict.fromkeys(e.question for e in chunk if e.question.strip()))
        choices = list(dict.fromkeys(c for e in chunk for c in e.choices))
        encoded = {}
        for texts in (contexts, questions, choices):
            encoded.update((t, e.token_ids) for t, e in zip(texts, tok.encode_batch(texts)))
        rows, labels, splits = [], [], []
        for example in chunk:
            if not example.choices:
                report.dropped["no choices"] += 1
                continue
            label = example.label
            if label is None:
                report.unlabelled += 1
                label = -1
            elif not 0 <= label < len(example.choices):
                report.dropped["label index out of range of the choices"] += 1
                continue
            truncated = False
            for choice in example.choices:
                context_ids = list(encoded[example.context])
                question_ids = list(encoded[example.question][1:]) if example.question.strip() else []
                choice_ids = list(encoded[choice][1:])
                before = len(context_ids) + len(question_ids) + len(choice_ids)
                truncate_longest_first(self.max_length, choice_ids, question_ids, context_ids)
                truncated |= len(context_ids) + len(question_ids) + len(choice_ids) < before
                first = len(context_ids) + len(question_ids)
                rows.append((context_ids + question_ids + choice_ids,
                             [0] * first + [1] * len(choice_ids)))
            if truncated:
                report.truncated["context+question+choice over max_length"] += 1
            self.choice_rows += len(example.choices)
            splits.append(self.choice_rows)
            labels.append(label)
        writer.add_ragged("token_ids", [r[0] for r in rows], self.id_dtype)
        writer.add_ragged("segment_ids", [r[1] for r in rows], np.int8)
        writer.add("choices.splits", np.array(splits, np.int64))
        writer.add("label", np.array(labels, np.int32))


class ClozeFeaturizer(ChoiceFeaturizer):
    family = "cloze"


class SpanFeaturizer(Featurizer):
    """Shared by the span families: encode the text, locate char spans on tokens.
    `spans` in the report counts entities, triples (both mentions placed) or
    event roles, as the adapters' ReadReport does."""

    offsets = True
    needs_labels = True
    span_field, span_width = None, None

    def ragged_fields(self):
        return super().ragged_fields() + [(self.span_field, np.int32, self.span_width)]

    def encode_chunk(self, chunk, writer, report):
        encoded = self.encode([e.text for e in chunk])
        kept, spans = [], []
        for example, (encoding, truncated) in zip(chunk, encoded):
            if truncated:
                report.truncated["text over max_length"] += 1
            offsets, positions = _segment_tokens(encoding)
            locator = TokenLocator(offsets, positions, example.text, truncated)
            kept.append(encoding)  # kept even when its spans are lost: the rest still teaches
            spans.append(self.spans_of(example, locator, report))
        self.write_tokens(writer, kept, offsets=True)
        writer.add_ragged(self.span_field, spans, np.int32, self.span_width)

    def place(self, entity, locator, report, what):
        """(start, end) token positions of an Entity, or None (counted as lost)."""
        span, note = locator.locate(entity.start, entity.end)
        if span is None:
            report.spans_lost[f"{what} {note}"] += 1
            return None
        report.spans_widened += note
        return span


class NERFeaturizer(SpanFeaturizer):
    example_types = (NERExample,)
    family = "extraction_ner"
    span_field, span_width = "entities", 3

    def spans_of(self, example, locator, report):
        row = []
        for entity in example.entities:
            type_index = self.label_index.get(entity.type)
            if type_index is None:
                report.spans_lost["entity type not in the task's labels"] += 1
                continue
            span = self.place(entity, locator, report, "entity")
            if span is not None:
                report.spans += 1
                row.append((type_index, *span))
        return row


class RelationFeaturizer(SpanFeaturizer):
    """GPLinker (bert4keras's DuIE example): per triple the subject and object
    token spans; `batch` turns them into entity/head/tail pointer labels."""

    example_types = (RelationExample,)
    family = "extraction_relation"
    span_field, span_width = "triples", 5

    def spans_of(self, example, locator, report):
        row = []
        for triple in example.triples:
            predicate = self.label_index.get(triple.predicate)
            if predicate is None:
                report.spans_lost["predicate not in the task's labels"] += 1
                continue
            subject = self.place(triple.subject, locator, report, "triple's subject")
            object_ = subject and self.place(triple.object, locator, report, "triple's object")
            if subject is not None and object_ is not None:
                report.spans += 1
                row.append((predicate, *subject, *object_))
        return row


def event_role_groups(labels):
    """Each event label's event type (`<event type>:<role>`, or a bare event type for
    its triggers): the EventHead's `role_groups`, so that decoding joins arguments
    into events only within one event type."""
    return [label.split(":", 1)[0] for label in labels]


class EventFeaturizer(SpanFeaturizer):
    """GPLinker for events (bert4keras's DuEE example). Roles are labels
    `<event type>:<role>` with the trigger as role `trigger`; a label that is a
    bare event type marks that type's triggers (its arguments have no role to
    go to and are counted as lost)."""

    example_types = (EventExample,)
    family = "extraction_event"
    span_field, span_width = "arguments", 4

    def role(self, event_type, role):
        index = self.label_index.get(f"{event_type}:{role}")
        if index is None and role == "trigger":
            index = self.label_index.get(event_type)
        return index

    def spans_of(self, example, locator, report):
        row = []
        for number, event in enumerate(example.events):
            parts = ([("trigger", event.trigger)] if event.trigger is not None else [])
            parts += [(argument.type, argument) for argument in event.arguments]
            for role_name, entity in parts:
                role = self.role(event.type, role_name)
                if role is None:
                    report.spans_lost["event role not in the task's labels"] += 1
                    continue
                span = self.place(entity, locator, report, "trigger" if role_name == "trigger"
                                  else "argument")
                if span is not None:
                    report.spans += 1
                    row.append((number, role, *span))
        return row


class CorefFeaturizer(SpanFeaturizer):
    """coreference: the text, and both spans' token positions. An example whose
    span is lost (truncated away) is dropped: it has nothing left to classify."""

    example_types = (CorefExample,)
    family = "coreference"

    def ragged_fields(self):
        return Featurizer.ragged_fields(self)

    def start(self, writer):
        super().start(writer)
        for name in ("span1", "span2"):
            writer.add(name, np.zeros((0, 2), np.int32))
        writer.add("label", np.zeros(0, np.int32))

    def encode_chunk(self, chunk, writer, report):
        encoded = self.encode([e.text for e in chunk])
        kept, rows = [], []
        for example, (encoding, truncated) in zip(chunk, encoded):
            if example.label is None:
                label = -1
            else:
                label, reason = self.index_label(example.label)
                if reason:
                    report.dropped[reason] += 1
                    continue
            offsets, positions = _segment_tokens(encoding)
            locator = TokenLocator(offsets, positions, example.text, truncated)
            spans = [locator.locate(s.start, s.end) for s in (example.span1, example.span2)]
            lost = [note for span, note in spans if span is None]
            if lost:
                report.dropped[f"span {lost[0]}"] += 1
                continue
            if truncated:
                report.truncated["text over max_length"] += 1
            report.unlabelled += example.label is None
            report.spans += 2
            report.spans_widened += sum(note for _, note in spans)
            kept.append(encoding)
            rows.append((spans[0][0], spans[1][0], label))
        self.write_tokens(writer, kept, offsets=True)
        writer.add("span1", np.array([r[0] for r in rows], np.int32).reshape(-1, 2))
        writer.add("span2", np.array([r[1] for r in rows], np.int32).reshape(-1, 2))
        writer.add("label", np.array([r[2] for r in rows], np.int32))


class MLMFeaturizer(Featurizer):
    """mlm: raw text cut into rows of max_length tokens (nothing truncated: a
    long text gives several rows). Masking is dynamic, at batch time: `mask_rate`
    of the tokens (at least one), 80% [MASK] / 10% random / 10% kept; with
    `whole_word` the words jieba finds are masked as wholes."""

    example_types = (str, TextExample, SpanQAExample, ChoiceExample, NERExample, RelationExample,
                     EventExample, CorefExample)
    family = "mlm"
    defaults = {"whole_word": False, "mask_rate": 0.15}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.settings["whole_word"]:
            self.jieba  # whole-word masking needs it (a pinned dependency): fail early

    @property
    def jieba(self):
        # Imported, not stored: a featurizer is pickled to worker processes (prepare.py).
        import jieba
        jieba.setLogLevel(60)
        return jieba

    def ragged_fields(self):
        fields = super().ragged_fields()
        if self.settings["whole_word"]:
            fields.append(("word_starts", np.uint8, None))
        return fields

    def encode_chunk(self, chunk, writer, report):
        from mtl_framework.vocab import example_texts
        texts = []
        for example in chunk:
            found = [example] if isinstance(example, str) else list(example_texts(example))
            found = [t for t in found if t.strip()]
            if not found:
                report.dropped["no text"] += 1
            texts.extend(found)
        piece = self.max_length - 2
        rows, word_starts = [], []
        for text, encoding in zip(texts, self.tokenizer.encode_batch(texts)):
            ids, offsets = encoding.token_ids[1:-1], encoding.offsets[1:-1]
            if not ids:
                continue
            if self.settings["whole_word"]:
                boundaries, at = set(), 0
                for word in self.jieba.cut(text):
                    boundaries.add(at)
                    at += len(word)
                starts = [int(s in boundaries) for s, _ in offsets]
            for begin in range(0, len(ids), piece):
                rows.append([self.tokenizer.cls_id, *ids[begin:begin + piece], self.tokenizer.sep_id])
                if self.settings["whole_word"]:
                    word_starts.append([0, 1, *starts[begin + 1:begin + piece], 0])
        writer.add_ragged("token_ids", rows, self.id_dtype)
        writer.add_ragged("segment_ids", [[0] * len(r) for r in rows], np.int8)
        if self.settings["whole_word"]:
            writer.add_ragged("word_starts", word_starts, np.uint8)


FEATURIZERS = {
    "classification": ClassificationFeaturizer, "matching": MatchingFeaturizer,
    "regression": RegressionFeaturizer, "mrc_span": MRCFeaturizer,
    "multiple_choice": ChoiceFeaturizer, "cloze": ClozeFeaturizer,
    "extraction_ner": NERFeaturizer, "extraction_relation": RelationFeaturizer,
    "extraction_event": EventFeaturizer, "coreference": CorefFeaturizer, "mlm": MLMFeaturizer,
}
CHOICE_FAMILIES = ("multiple_choice", "cloze")


def make_featurizer(family, tokenizer, max_length, labels=None, multi_label=False, task="",
                    **settings):
    if family not in FEATURIZERS:
        raise ValueError(f"{task or 'features'}: no featurizer for family {family!r}; "
                         f"families: {', '.join(FEATURIZERS)}")
    return FEATURIZERS[family](tokenizer, max_length, labels, multi_label, task, **settings)


def featurizer_for_task(task, tokenizer, data_root=None, max_length=None, family=None, **settings):
    """The featurizer of a registry TaskSpec (labels resolved, label files read).
    `family="mlm"` featurizes the task's texts for masked-LM instead."""
    if family == "mlm":
        return make_featurizer("mlm", tokenizer, max_length or task.max_length, task=task.name,
                               **settings)
    labels = task.resolve_labels(data_root) if hasattr(task, "resolve_labels") else task.labels
    return make_featurizer(family or task.type, tokenizer, max_length or task.max_length, labels,
                           getattr(task, "multi_label", False), task.name, **settings)


# ---------------------------------------------------------------- batches


def pad_rows(features, name, rows, length, dtype=np.int32):
    """[len(rows), length] of ragged `name`, zero-padded at the end."""
    values, splits = features[name], features.splits(name)
    out = np.zeros((len(rows), length), dtype)
    for b, row in enumerate(rows):
        start, end = splits[row], splits[row + 1]
        out[b, :end - start] = values[start:end]
    return out


def batch_length(features, rows, pad_to):
    longest = int(features.lengths()[rows].max())
    if pad_to is None:
        return longest
    if pad_to < longest:
        raise ValueError(f"pad_to={pad_to} is shorter than a row of {longest} tokens (task "
                         f"{features.meta.get('task')!r}, max_length {features.meta['max_length']})")
    return pad_to


def _tokens(features, rows, pad_to):
    length = batch_length(features, rows, pad_to)
    return {"token_ids": pad_rows(features, "token_ids", rows, length),
            "segment_ids": pad_rows(features, "segment_ids", rows, length)}


def span_labels(groups, kinds):
    """[B, kinds, S, 2] int32 from per-row {kind: set of (start, end)}; (0, 0) pads."""
    most = max([len(spans) for row in groups for spans in row.values()] + [1])
    out = np.zeros((len(groups), kinds, most, 2), np.int32)
    for b, row in enumerate(groups):
        for kind, spans in row.items():
            if spans:
                out[b, kind, :len(spans)] = sorted(spans)
    return out


def _collate_text(features, rows, rng, pad_to):
    batch = _tokens(features, rows, pad_to)
    label = features["label"][rows]
    batch["label"] = label.astype(np.float32 if label.ndim == 2 or label.dtype.kind == "f" else np.int32)
    return batch


def _collate_mrc(features, rows, rng, pad_to):
    batch = _tokens(features, rows, pad_to)
    lengths = features.lengths()[rows]
    position = np.arange(batch["token_ids"].shape[1])
    # Context = segment 1 minus its closing [SEP].
    batch["context_mask"] = ((batch["segment_ids"] == 1)
                             & (position[None] < lengths[:, None] - 1)).astype(np.int32)
    batch["start"] = features["start"][rows].astype(np.int32)
    batch["end"] = features["end"][rows].astype(np.int32)
    batch["window_id"] = rows.astype(np.int32)
    return batch


def _collate_choice(features, rows, rng, pad_to):
    choice_splits = features["choices.splits"]
    counts = [int(choice_splits[r + 1] - choice_splits[r]) for r in rows]
    most = max(counts)
    length = batch_length(features, rows, pad_to)
    batch = {}
    for name in ("token_ids", "segment_ids"):
        out = np.zeros((len(rows), most, length), np.int32)
        for b, row in enumerate(rows):
            choice_rows = np.arange(choice_splits[row], choice_splits[row + 1])
            out[b, :len(choice_rows)] = pad_rows(features, name, choice_rows, length)
        batch[name] = out
    batch["choice_mask"] = (np.arange(most)[None] < np.array(counts)[:, None]).astype(np.float32)
    batch["label"] = features["label"][rows].astype(np.int32)
    return batch


def _collate_ner(features, rows, rng, pad_to):
    batch = _tokens(features, rows, pad_to)
    groups = []
    for row in rows:
        spans = {}
        for type_, start, end in features.ragged("entities", row):
            spans.setdefault(int(type_), set()).add((int(start), int(end)))
        groups.append(spans)
    batch["entity_labels"] = span_labels(groups, len(features.meta["labels"]))
    return batch


def _collate_relation(features, rows, rng, pad_to):
    batch = _tokens(features, rows, pad_to)
    entities, heads, tails = [], [], []
    for row in rows:
        entity, head, tail = {0: set(), 1: set()}, {}, {}
        for p, sh, st, oh, ot in features.ragged("triples", row).tolist():
            entity[0].add((sh, st))
            entity[1].add((oh, ot))
            head.setdefault(p, set()).add((sh, oh))
            tail.setdefault(p, set()).add((st, ot))
        entities.append(entity)
        heads.append(head)
        tails.append(tail)
    predicates = len(features.meta["labels"])
    batch["entity_labels"] = span_labels(entities, 2)
    batch["head_labels"] = span_labels(heads, predicates)
    batch["tail_labels"] = span_labels(tails, predicates)
    return batch


def _collate_event(features, rows, rng, pad_to):
    batch = _tokens(features, rows, pad_to)
    arguments, heads, tails = [], [], []
    for row in rows:
        argument, events = {}, {}
        for number, role, start, end in features.ragged("arguments", row).tolist():
            argument.setdefault(role, set()).add((start, end))
            events.setdefault(number, []).append((start, end))
        head, tail = set(), set()
        # Link every two arguments of one event by starts and by ends (min, max).
        for spans in events.values():
            for (h1, t1), (h2, t2) in itertools.combinations(spans, 2):
                head.add((min(h1, h2), max(h1, h2)))
                tail.add((min(t1, t2), max(t1, t2)))
        arguments.append(argument)
        heads.append({0: head})
        tails.append({0: tail})
    batch["argument_labels"] = span_labels(arguments, len(features.meta["labels"]))
    batch["head_labels"] = span_labels(heads, 1)
    batch["tail_labels"] = span_labels(tails, 1)
    return batch


def _collate_coref(features, rows, rng, pad_to):
    batch = _tokens(features, rows, pad_to)
    for name in ("span1", "span2", "label"):
        batch[name] = features[name][rows].astype(np.int32)
    return batch


def _collate_mlm(features, rows, rng, pad_to):
    if rng is None:
        raise ValueError("mlm batches mask at random: pass rng (a np.random.Generator; "
                         "TaskStream passes one derived from its seed and position)")
    batch = _tokens(features, rows, pad_to)
    vocab, settings = features.meta["vocab"], features.meta["settings"]
    specials = [vocab[k] for k in ("pad", "unk", "cls", "sep", "mask")]
    normal_ids = np.setdiff1d(np.arange(vocab["size"]), specials)
    token_ids = batch["token_ids"]
    labels = np.zeros_like(token_ids)
    lengths = features.lengths()[rows]
    for b, row in enumerate(rows):
        n = int(lengths[b]) - 2  # content tokens between [CLS] and [SEP]
        if n <= 0:
            continue
        if settings["whole_word"]:
            word_of = np.cumsum(features.ragged("word_starts", row)[1:n + 1]) - 1
        else:
            word_of = np.arange(n)
        sizes = np.bincount(word_of)
        target = max(1, int(round(n * settings["mask_rate"])))
        order = rng.permutation(len(sizes))
        # Words in random order while they fit in the target (whole words, never split).
        chosen = order[np.cumsum(sizes[order]) <= target]
        if not len(chosen):
            chosen = order[:1]
        positions = 1 + np.flatnonzero(np.isin(word_of, chosen))
        labels[b, positions] = token_ids[b, positions]
        draw = rng.random(len(positions))
        token_ids[b, positions[draw < 0.8]] = vocab["mask"]
        random_positions = positions[(draw >= 0.8) & (draw < 0.9)]
        token_ids[b, random_positions] = rng.choice(normal_ids, len(random_positions))
    batch["mlm_labels"] = labels
    return batch


COLLATE = {
    "classification": _collate_text, "matching": _collate_text, "regression": _collate_text,
    "mrc_span": _collate_mrc, "multiple_choice": _collate_choice, "cloze": _collate_choice,
    "extraction_ner": _collate_ner, "extraction_relation": _collate_relation,
    "extraction_event": _collate_event, "coreference": _collate_coref, "mlm": _collate_mlm,
}
