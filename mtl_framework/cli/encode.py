"""`mtl encode RUN_OR_FOLDER --text "..." [--text ...]` and
`mtl encode RUN_OR_FOLDER --input TEXTS.txt --output OUT.npy|OUT.jsonl`.

Sentence embeddings, pooled and normalised as the run's contrastive tasks were trained
(embedding/encode.py): from a run directory (its newest checkpoint, or --checkpoint), an
export of ours, or any folder we read (a `--format transformers` export reads its
sentence-transformers pooling). Texts come from --text (repeatable; `-` reads stdin, one
text per line) or --input (one text per line, or a .jsonl of {"text": ...} objects). Out:
.npy (float32 [n, H]) or .jsonl ({"text", "embedding"} per line); with --text and no
--output, JSON lines on stdout. A progress bar on a terminal; nothing else on stdout.
"""
import io
import json
import os
import sys

from mtl_framework import cli
from mtl_framework.cli.arguments import at_least
from mtl_framework.cli.predict import read_texts
from mtl_framework.errors import UserError
from mtl_framework.files import write_atomic

OUTPUT_KINDS = (".npy", ".jsonl")
BOM = "\ufeff"  # a UTF-8 BOM, decoded: Windows editors start a file with it


def register(subparsers):
    parser = subparsers.add_parser("encode", help="sentence embeddings from a run or a folder")
    parser.add_argument("model", help="a run directory, an export, or a model folder we read")
    parser.add_argument("--text", action="append", metavar="TEXT",
                        help="a text to encode (repeat for more; `-`: one text per line of stdin)")
    parser.add_argument("--input", metavar="FILE",
                        help="texts: one per line, or a .jsonl of {\"text\": ...} objects")
    parser.add_argument("--output", metavar="OUT", help="OUT.npy (float32 [n, H]) or OUT.jsonl "
                        "(default with --text: JSON lines on stdout); replaced only with --force")
    parser.add_argument("--force", action="store_true", help="replace an existing --output")
    parser.add_argument("--side", choices=("query", "passage"), default=None,
                        help="prefix the texts with the task's query_prefix or passage_prefix")
    parser.add_argument("--task", help="the contrastive task whose settings and prefixes to use "
                        "(when the run trained several that differ)")
    parser.add_argument("--checkpoint", default=None,
                        help="a run's checkpoint: best, or a step number (default: the newest)")
    parser.add_argument("--pooling", default=None, metavar="cls|mean",
                        help="instead of the trained pooling")
    parser.add_argument("--batch-size", type=at_least(1), default=32)
    parser.add_argument("--max-length", type=at_least(4), default=None, metavar="N",
                        help="tokens per text (default: the run's max_length)")
    parser.add_argument("--dim", type=at_least(1), default=None, metavar="N",
                        help="the vector's first N features (a Matryoshka width the run "
                        "trained: embedding.matryoshka_dims), L2-normalised after the cut "
                        "where the model normalises; another N is given with a note")
    parser.set_defaults(func=run)


def input_texts(path):
    """The texts of --input: one per line of a text file, row i of the output being line
    i (line_texts); or {"text": ...} per record of a .jsonl (blank lines between records
    skipped). A UTF-8 BOM is no part of the first text (text_lines), as training reads it."""
    lines = text_lines(path, "--input")
    if path.endswith(".jsonl"):
        texts = [record_text(path, number, line) for number, line in enumerate(lines, 1)
                 if line.strip()]
        if not texts:
            raise UserError(f"--input {path}: no texts (every line is blank)")
        return texts
    texts = line_texts(lines, path)
    if not texts:
        raise UserError(f"--input {path}: no texts (every line is blank"
                        + (" or holds only characters the tokenizer drops" if any(
                            line.strip() for line in lines) else "") + ")")
    return texts


def line_texts(lines, where):
    """Texts of lines, one each, row i of the output being line i (--input's lines and
    `--text -`'s stdin alike): a line with no text for the tokenizer (blank, or only
    characters it drops: U+200B, \\x00) before a text is refused naming it: encoded, it would
    be a vector of no text, the same for every such line (a prediction of one is refused
    too); dropped, every row after it would stand against the wrong line. Such lines at the
    end shift nothing and are left out."""
    from mtl_framework.tokenizer import keeps_text

    lines = list(lines)
    if lines and lines[0].startswith(BOM):  # stdin's; a file's is gone already
        lines[0] = lines[0][len(BOM):]
    while lines and not keeps_text(lines[-1]):
        lines.pop()
    textless = [number for number, line in enumerate(lines, 1) if not keeps_text(line)]
    if textless:
        raise UserError(textless_message(lines, textless, where))
    return lines


def textless_message(lines, textless, where):
    more = f" (and {len(textless) - 1} more: lines {', '.join(map(str, textless[1:4]))}" \
        f"{', ...' if len(textless) > 4 else ''})" if len(textless) > 1 else ""
    if not any(lines[number - 1].strip() for number in textless):
        return (f"{where}:{textless[0]}: a blank line{more}: row i of the output is the "
                "vector of line i, and a blank line has no text to encode: remove the blank "
                "lines (e.g. `grep -v '^[[:space:]]*$'`)")
    first = lines[textless[0] - 1]
    kind = "a blank line" if not first.strip() else \
        f"a line of characters the tokenizer drops only ({first!r})"
    return (f"{where}:{textless[0]}: {kind}{more}: row i of the output is the vector of line "
            "i, and a line that is blank or holds only zero-width, format or control "
            "characters has no text to encode: remove such lines")


def text_arguments(values):
    """--text's texts: stdin's lines (`-`) by line_texts' rule, each text the tokenizer keeps."""
    from mtl_framework.tokenizer import keeps_text

    return read_texts(values, lambda lines: line_texts(lines, "--text - (stdin)"), keeps_text)


def record_text(path, number, line):
    from mtl_framework.tokenizer import keeps_text

    try:
        record = json.loads(line)
    except ValueError as error:
        raise UserError(f"{path}:{number}: not JSON ({error}): one "
                        "{\"text\": ...} object per line") from None
    text = record.get("text") if isinstance(record, dict) else None
    if not isinstance(text, str) or not text.strip():
        raise UserError(f"{path}:{number}: no non-empty \"text\" string")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:  # a \ud83d escape without its pair
        raise UserError(f"{path}:{number}: \"text\" holds a lone UTF-16 surrogate "
                        f"({text[error.start]!r} at character {error.start}, e.g. half an "
                        "emoji), which no UTF-8 text has: escape the whole character (both "
                        "halves) or leave it out") from None
    if not keeps_text(text):
        raise UserError(f"{path}:{number}: \"text\" {text!r} holds only characters the "
                        "tokenizer drops (zero-width, format or control characters): it has "
                        "no text to encode; give a text or leave the record out")
    return text


def text_lines(path, flag):
    """The lines of a UTF-8 text file (line ends removed; universal newlines; a UTF-8 BOM
    is not part of the first line, as the training adapters read it); other bytes are one
    line naming the line and byte offset."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise UserError(f"{path}:{line}: {flag}: not UTF-8 (byte 0x{data[error.start]:02x} at "
                        f"byte offset {error.start}): convert it, e.g. `iconv -f GBK -t "
                        "UTF-8`") from None
    return [line.rstrip("\n") for line in io.StringIO(text.removeprefix(BOM), newline=None)]


def check_output(path, force, inputs, model):
    if not path.endswith(OUTPUT_KINDS):
        raise UserError(f"--output {path}: give a .npy or .jsonl file")
    from mtl_framework.evaluation.predict import check_output as check

    check(path, inputs, model, force, what="vectors")


def run(args):
    if bool(args.text) == bool(args.input):
        raise UserError("mtl encode: give --text TEXT (repeatable; `-` reads stdin) or "
                        "--input FILE, one of them")
    if args.input and (os.path.isdir(args.input) or not os.path.exists(args.input)):
        raise UserError(f"--input {args.input}: "
                        + ("a folder: give a file" if os.path.isdir(args.input) else "no such file"))
    if args.input and not args.output:
        raise UserError("mtl encode: --input needs --output OUT.npy or OUT.jsonl")
    if not os.path.isdir(args.model):
        raise UserError(f"{args.model}: no such folder: give a run directory or a model folder")
    if args.output:
        check_output(args.output, args.force, [args.input], args.model)
    texts = text_arguments(args.text) if args.text else input_texts(args.input)
    from mtl_framework.console import progress_bar
    from mtl_framework.embedding.encode import Encoder, use_encoding_threads

    if cli.PROGRAM:  # the `mtl` program: its own process, started for this
        use_encoding_threads()

    log = lambda message: print(message, file=sys.stderr)  # noqa: E731 (stdout holds the vectors)
    encoder = Encoder(args.model, args.checkpoint, args.pooling, task=args.task,
                      max_length=args.max_length, log=log)
    with progress_bar("encode", len(texts), leave=False, unit="text") as bar:
        vectors = encoder.encode(texts, args.side, args.task, args.batch_size, bar.update,
                                 dim=args.dim)
    if args.output:
        write_vectors(args.output, texts, vectors)
        log(f"wrote {args.output}: {len(texts)} x {vectors.shape[1]} "
            f"({encoder.pooling} pooling{', normalised' if encoder.normalize else ''})")
    else:
        write_json_lines(sys.stdout, texts, vectors)
    return 0


def write_vectors(path, texts, vectors):
    """OUT.npy or OUT.jsonl written beside and renamed (files.py): a full disk or
    a kill leaves an earlier file whole, never cut."""
    import numpy as np

    def write(temporary):
        if path.endswith(".npy"):
            with open(temporary, "wb") as f:  # a file object: np.save would add ".npy"
                np.save(f, vectors)
        else:
            with open(temporary, "w", encoding="utf-8") as f:
                write_json_lines(f, texts, vectors)

    write_atomic(path, write)


def write_json_lines(stream, texts, vectors):
    for text, vector in zip(texts, vectors):
        stream.write(json.dumps({"text": text, "embedding": [round(float(x), 7) for x in vector]},
                                ensure_ascii=False) + "\n")
