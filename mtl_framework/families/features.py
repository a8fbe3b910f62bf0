"""Features: typed examples -> NumPy arrays per task family (docs/batches.md).

What every family shares: the storage (FeatureWriter, FeatureReport, Features,
memory-mapped folders), the base Featurizer and helpers. Each family's own
featurizer and batch function live in mtl_framework/families/.

    from mtl_framework.families import featurizer_for_task
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
  (char span of each context token). `families.mrc.mrc_answer` maps a predicted token
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
import itertools
import json
from collections import Counter
from pathlib import Path

import numpy as np

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


NPY_HEADER_BYTES = 128  # room for any array's .npy header; a multiple of 64 keeps the data aligned


def npy_header(dtype, shape):
    """A .npy (version 1.0) header for `dtype`/`shape`, padded with spaces to
    NPY_HEADER_BYTES so it can be written before the row count is known and
    overwritten in place once it is."""
    text = repr({"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                 "fortran_order": False, "shape": tuple(int(n) for n in shape)}).encode("latin1")
    room = NPY_HEADER_BYTES - 10 - 1  # magic (6) + version (2) + length (2); the final newline
    if len(text) > room:
        raise ValueError(f"a .npy header of {len(text)} bytes does not fit {room}: {text!r}")
    return (b"\x93NUMPY\x01\x00" + (NPY_HEADER_BYTES - 10).to_bytes(2, "little")
            + text + b" " * (room - len(text)) + b"\n")


class FeatureWriter:
    """Collects arrays chunk by chunk: in memory, or appended to `.npy` files in
    `directory` whose headers are written last (into bytes reserved up front), so
    building a large split holds one chunk in memory, not the split, and never
    maps or copies a whole array."""

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
            handle = open(self.directory / f"{name}.npy", "wb")
            handle.write(npy_header(array.dtype, (0,) + array.shape[1:]))  # rewritten by finish
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
            handle.seek(0)
            handle.write(npy_header(dtype, (rows,) + tuple(trailing)))
            handle.close()
            arrays[name] = np.load(self.directory / f"{name}.npy", mmap_mode="r")
        return arrays


class Features:
    """The arrays of one task split (see the module docstring) plus `meta`
    (family, labels, max_length, settings, vocab ids, report). `collate` is the
    family's batch function (mtl_framework.families gives it; without it the
    arrays can be read but not batched)."""

    def __init__(self, family, arrays, meta, collate=None):
        self.family, self.arrays, self.meta = family, arrays, meta
        self.collate = collate
        self._lengths = None

    def __len__(self):
        return len(self.arrays[self.rows_key]) - 1

    @property
    def rows_key(self):
        """The splits that count rows: an example's choice rows form one row (CHOICES)."""
        return CHOICES if CHOICES in self.arrays else "token_ids.splits"

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
            if CHOICES in self.arrays:
                starts = np.asarray(self.arrays[CHOICES][:-1])
                lengths = np.maximum.reduceat(lengths, starts) if len(starts) else lengths[:0]
            self._lengths = lengths.astype(np.int32)
        return self._lengths

    def batch(self, rows, rng=None, pad_to=None):
        """The dict of docs/batches.md for these rows, padded to the longest row
        (or to `pad_to`). mlm needs `rng` (a np.random.Generator) for its masks."""
        rows = np.asarray(rows, dtype=np.int64)
        if not len(rows):
            raise ValueError("batch() needs at least one row")
        if self.collate is None:
            raise ValueError(f"features of {self.family!r} have no batch function: load them with "
                             "mtl_framework.families.load_features")
        return self.collate(self, rows, rng, pad_to)


ALIGNED = ("segment_ids", "offsets", "word_starts")  # share token_ids.splits
CHOICES = "choices.splits"  # multiple_choice / cloze: example -> its choice rows


def save_meta(features, directory):
    with open(Path(directory) / "meta.json", "w", encoding="utf-8") as f:
        json.dump(features.meta, f, ensure_ascii=False, indent=1)


def read_features(directory, collate=None):
    """Features from a folder of `.npy` files + meta.json, memory-mapped (nothing read yet);
    `families.load_features` adds the family's batch function."""
    directory = Path(directory)
    meta_path = directory / "meta.json"
    if not meta_path.is_file():
        raise FileNotFoundError(f"{meta_path} not found: {directory} is not a features folder")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    arrays = {p.name[:-4]: np.load(p, mmap_mode="r") for p in sorted(directory.glob("*.npy"))}
    return Features(meta["family"], arrays, meta, collate)


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


def segment_tokens(encoding, segment=0):
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


# ---------------------------------------------------------------- featurizers


class Featurizer:
    """Base: tokenizer + task settings -> `featurize(examples)`. The families
    (mtl_framework/families/) subclass it; make a featurizer with
    `families.make_featurizer`, which gives it its family's `collate`."""

    family = None
    collate = None  # the family's batch function (batch-time code: not in the cache key)
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
        (`mtl_framework.prepare.pipeline` fills the writer from chunks encoded in workers)."""
        arrays = writer.finish()
        tok = self.tokenizer
        meta = {"family": self.family, "task": self.task, **self.config(),
                "vocab": {"size": tok.vocab_size, "pad": tok.pad_id, "unk": tok.unk_id,
                          "cls": tok.cls_id, "sep": tok.sep_id, "mask": tok.mask_id},
                "report": report.as_dict()}
        features = Features(self.family, arrays, meta, self.collate)
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


def pad_tokens(features, rows, pad_to):
    """token_ids and segment_ids of `rows`, padded to the batch length."""
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

