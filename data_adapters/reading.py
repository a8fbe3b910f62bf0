"""What the format families share: decoding lines, JSON records with their line
numbers, field lookup and the label rules of text tasks.

Text is decoded in large blocks, and line by line only in a block that does
not decode, so that a bad byte costs one skipped line (with its number)
instead of the whole file.
"""
import json
import math
import re
import unicodedata

from data_adapters.task_types import numeric_label

_decoder = json.JSONDecoder()


def codec(encoding):
    # utf-8-sig reads plain UTF-8 too and drops the BOM some CSVs start with
    # (nlpcc14_sc), which would otherwise stick to the first header name.
    return "utf-8-sig" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding


BLOCK = 1 << 24  # bytes decoded at a time: whole-block decoding is fast, memory stays bounded
BOM = b"\xef\xbb\xbf"


GZIP = b"\x1f\x8b"  # every gzip file starts with these two bytes


def text_lines(path, report, encoding=None):
    """(line number, text) for each line, newline kept; undecodable lines skipped.
    `encoding`: the format's `options.encoding`; None for a format that has no such option
    (JSON is UTF-8): then a skipped line's fix is to convert the file, not to set it."""
    settable, encoding = encoding is not None, encoding or "utf-8"
    fix = "set options.encoding if the file uses another" if settable else \
        "this format reads UTF-8: convert the file, e.g. `iconv -f GBK -t UTF-8`"
    plain = "utf-8" if codec(encoding) == "utf-8-sig" else encoding
    number = 0
    with open(path, "rb") as f:
        block = f.read(BLOCK)
        if plain == "utf-8" and block.startswith(BOM):
            block = block[len(BOM):]
        if plain == "utf-8" and block.startswith((b"\xff\xfe", b"\xfe\xff")):
            # Windows "Unicode" (UTF-16) files: every line would be skipped one by one
            report.skip("the file is UTF-16 (it starts with a UTF-16 byte-order mark): "
                        + ("set options.encoding: utf-16, or " if settable else "")
                        + "save it as UTF-8", path, 1)
            return
        if block.startswith(GZIP):  # a .gz given as the file: every line would be skipped
            report.skip("the file is gzip-compressed: decompress it (gunzip) and point the "
                        "spec at the result", path, 1)
            return
        while block:
            block += f.readline()  # end the block at a line end: no character is cut
            try:
                lines = block.decode(plain).split("\n")
            except UnicodeDecodeError:
                lines = None
            if lines is None:  # find the bad lines one by one
                pieces = [raw + b"\n" for raw in block.split(b"\n")]
                pieces[-1] = pieces[-1][:-1]  # b"" when the block ends with a newline
                for raw in pieces if pieces[-1] else pieces[:-1]:
                    number += 1
                    try:
                        yield number, raw.decode(plain)
                    except UnicodeDecodeError as error:
                        report.skip(f"line is not valid {encoding} text ({error.reason}); "
                                    + fix, path, number)
            else:
                last = lines.pop()  # "" when the block ends with a newline
                for line in lines:
                    number += 1
                    yield number, line + "\n"
                if last:
                    number += 1
                    yield number, last
            block = f.read(BLOCK)


def read_text(path, encoding="utf-8"):
    """A whole file as text (whole-file JSON formats); ValueError naming the file if undecodable."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        return data.decode(codec(encoding))
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise ValueError(f"{path}:{line}: not valid {encoding} text ({error.reason}); "
                         "save it as UTF-8") from None


def json_document(path, report):
    """A whole-file JSON document, or None after counting the file as skipped (bad JSON)."""
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as error:
        report.skip(f"bad JSON ({error.msg}); the file cannot be read", path, error.lineno)
        return None


def json_data(path, report, name, bare_list=False):
    """The `data` list of a whole-file JSON document `{"data": [...]}` (with `bare_list`,
    a document that is the list itself too), or None after report.skip."""
    data = json_document(path, report)
    if data is None:
        return None
    entries = data.get("data") if isinstance(data, dict) else data if bare_list else None
    if not isinstance(entries, list):
        report.skip(f"not {name} JSON (expected {{\"data\": [...]}})", path, 1)
        return None
    return entries


def json_records(path, report):
    """(line, value) for each JSON value of a JSON-lines file, also when objects
    are pretty-printed over several lines (CLUENER) or written back to back on
    one line (bq_corpus dev-r.json). A value that does not parse is skipped
    with its line; reading resumes at the next line starting with `{`."""
    pending, start = "", 0  # text not parsed yet, and the line it starts on
    for number, line in text_lines(path, report):
        if not pending:
            stripped = line.strip()
            if not stripped:
                continue
            try:
                value = json.loads(stripped)  # the common case: one object per line
            except ValueError:
                pending, start = line, number
            else:
                if whole_text(value, stripped, path, number, report):
                    yield number, value
                continue
        elif line.startswith("{") and not _nested(pending):
            # A new top-level object begins while the previous one never closed.
            _skip_bad_json(pending, path, start, report)
            pending, start = line, number
        else:
            pending += line
        # An object can only be complete on a line ending with } or ].
        if pending.rstrip().endswith(("}", "]")):
            pending, start = yield from _drain(pending, start, path, report)
    if pending.strip():
        _skip_bad_json(pending, path, start, report)


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def whole_text(value, text, path, line, report):
    """False (the record skipped and counted) when a JSON record's strings hold a lone
    UTF-16 surrogate (`"\\ud83d"`, half an emoji): no UTF-8 text has one, and the
    tokenizer cannot take it. Only records whose text escapes a surrogate are checked."""
    if not _SURROGATE_ESCAPE.search(text):
        return True
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        report.skip("a lone UTF-16 surrogate (\\ud800-\\udfff escape without its pair, e.g. "
                    "half an emoji)", path, line)
        return False
    return True


def _drain(text, line, path, report):
    """Yield the complete values at the start of `text`; return (rest, its line)."""
    position, size = 0, len(text)
    while True:
        while position < size and text[position].isspace():
            if text[position] == "\n":
                line += 1
            position += 1
        if position == size:
            return "", 0
        try:
            value, end = _decoder.raw_decode(text, position)
        except ValueError:
            return text[position:], line
        if whole_text(value, text[position:end], path, line, report):
            yield line, value
        line += text.count("\n", position, end)
        position = end


def _nested(pending):
    """Whether a `{` at the start of the next line can belong to the pending
    object: only if that object opened on a line of its own (pretty-printed;
    json.dumps(indent=0) starts nested objects at column 0 too) and is still
    open. In JSON lines a truncated record must not swallow the next one."""
    if pending.lstrip().split("\n", 1)[0].strip() not in ("{", "["):
        return False
    text = pending.strip()
    try:
        _decoder.raw_decode(text)
        return False
    except json.JSONDecodeError as error:
        return error.pos >= len(text)


def _skip_bad_json(text, path, line, report):
    try:
        _decoder.raw_decode(text.strip())
        problem = "text after the JSON value"
    except ValueError as error:
        problem = error.msg if hasattr(error, "msg") else str(error)
    report.skip(f"bad JSON ({problem})", path, line)


def json_array_records(path, report):
    """(line, item) for each item of a file holding one JSON array."""
    text = read_text(path)
    position = _skip_space(text, 0)
    if position == len(text) or text[position] != "[":
        report.skip("not a JSON array (the file should start with `[`); for one object "
                    "per line use format jsonl", path, _line_at(text, position))
        return
    position = _skip_space(text, position + 1)
    line = _line_at(text, position)
    if text.startswith("]", position):
        return
    while True:
        try:
            value, end = _decoder.raw_decode(text, position)
        except ValueError as error:
            report.skip(f"bad JSON ({error.msg}); the rest of the file cannot be read",
                        path, _line_at(text, error.pos))
            return
        yield line, value
        line += text.count("\n", position, end)
        after = _skip_space(text, end)
        line += text.count("\n", end, after)
        if text.startswith("]", after):
            return
        if not text.startswith(",", after):
            report.skip("bad JSON (expected `,` or `]` after an array item); the rest "
                        "of the file cannot be read", path, line)
            return
        position = _skip_space(text, after + 1)
        line += text.count("\n", after, position)


def records(path, report):
    """JSON records of either layout: an array (`[` first) or JSON lines."""
    with open(path, "rb") as f:
        head = f.read(64).lstrip(b"\xef\xbb\xbf \t\r\n")
    if head.startswith(b"["):
        return json_array_records(path, report)
    return json_records(path, report)


def text_records(path, report):
    """(line, record, its `text`) of each JSON record (either layout) with a non-empty
    `text`; a record without one is skipped with its line."""
    for line, record in records(path, report):
        text = record.get("text") if isinstance(record, dict) else None
        if not isinstance(text, str) or not text:
            report.skip("record without a `text`", path, line)
            continue
        yield line, record, text


def record_examples(paths, report, example):
    """The examples `example(record, path, line)` builds from each JSON record of `paths`
    (either layout); None from it means skipped (it told the report why)."""
    for path in paths:
        for line, record in records(path, report):
            built = example(record, path, line)
            if built is not None:
                yield built


def _skip_space(text, position):
    size = len(text)
    while position < size and text[position] in " \t\r\n\ufeff":
        position += 1
    return position


def _line_at(text, position):
    return text.count("\n", 0, position) + 1


def unsegment(text):
    """Word-segmented Chinese (`小 猴 呢 ，`) as written: the spaces go, except
    between two Latin letters or digits (`iPhone 7`)."""
    words = text.split()
    out = ""
    for word in words:
        if out and out[-1].isascii() and out[-1].isalnum() and word[0].isascii() and word[0].isalnum():
            out += " "
        out += word
    return out


# ----- fields of flat records -------------------------------------------------

MISSING = object()


def lookup(record, key):
    """record[key]: a plain key, a dotted key into nested objects, or a column index."""
    if isinstance(record, (list, tuple)):
        if isinstance(key, int) and -len(record) <= key < len(record):
            return record[key]
        if isinstance(key, str) and key.lstrip("-").isdigit():
            return lookup(record, int(key))
        return MISSING
    if not isinstance(record, dict):
        return MISSING
    if key in record:
        return record[key]
    key = str(key)
    if key in record:
        return record[key]
    value = record
    for part in key.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.lstrip("-").isdigit() and -len(value) <= int(part) < len(value):
            value = value[int(part)]
        else:
            return MISSING
    return value


def field_text(record, source, join):
    """The text of a field: one key, or a list of keys joined; list values joined."""
    sources = source if isinstance(source, list) else [source]
    pieces = []
    for key in sources:
        value = lookup(record, key)
        if value is MISSING or value is None:
            return MISSING, key
        if isinstance(value, list):
            value = join.join(str(v) for v in value)
        pieces.append(value if isinstance(value, str) else str(value))
    return join.join(pieces), None


def label_text(value):
    """A raw label as the string the spec's `labels:` use (1 -> "1", true -> "true")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return value if isinstance(value, str) else str(value)


class LabelRule:
    """skip_labels, then label_map, then the task's label list, in that order.

    `check(raw)` returns (label, None) or (None, reason to skip the record).
    Regression tasks get a float; a list of labels (multi-label) stays a list."""

    def __init__(self, task_type, labels=None, skip_labels=(), label_map=None):
        self.regression = numeric_label(task_type)
        self.labels = set(labels) if labels else None
        self.skip_labels = {label_text(v) for v in skip_labels or ()}
        self.label_map = {label_text(k): label_text(v) for k, v in (label_map or {}).items()}

    def check(self, raw):
        if raw is None or raw is MISSING:
            return None, None  # unlabelled (test splits); counted by the report
        if isinstance(raw, list):
            labels = []
            for item in raw:
                label, reason = self.check(item)
                if reason:
                    return None, reason
                labels.append(label)
            return labels, None
        label = label_text(raw)
        if label in self.skip_labels:
            return None, f"label {label!r} is in skip_labels"
        label = self.label_map.get(label, label)
        if self.regression:
            try:
                value = float(label)
            except ValueError:
                return None, f"label {label!r} is not a number (regression)"
            if not math.isfinite(value):  # nan, inf, 1e999: no loss could be computed on it
                return None, f"label {label!r} is not a finite number (regression)"
            return value, None
        if self.labels is not None and label not in self.labels:
            twin = self.normalised().get(unicodedata.normalize("NFKC", label).strip())
            if twin is not None:  # ａ for a, a full-width digit, a stray space: say so
                return None, (f"label {label!r} is not in the task's labels, but equals "
                              f"{twin!r} after Unicode NFKC normalisation (full-width or "
                              "compatibility forms, spaces): write that label in the spec, or "
                              "map it with options.label_map")
            return None, f"label {label!r} is not in the task's labels"
        return label, None

    def normalised(self):
        """{NFKC form of a task label: the label}, built on the first label that misses."""
        if not hasattr(self, "_normalised"):
            self._normalised = {unicodedata.normalize("NFKC", str(label)).strip(): label
                                for label in self.labels or ()}
        return self._normalised
