"""`mtl predict RUN_DIR --task TASK --text "..." [--text ...]`,
`mtl predict RUN_DIR --task TASK --input FILE --output OUT.jsonl` and
`mtl predict RUN_DIR --clue --output DIR`.

RUN_DIR is a run directory (its latest checkpoint) or a keras export written with
`mtl export --with-heads`. The first form prints one JSON line per text (`--text -`:
one text per line of stdin; `--separator SEP` splits a pair); the second writes one
JSON line per input example (`id` + `prediction`, input order); the third writes the
CLUE 1.1 submission files of the run's CLUE tasks from their test splits
(docs/predict.md).
"""
import io
import os
import sys

from mtl_framework.cli import strict_json
from mtl_framework.cli.arguments import at_least, check_rope_scaling


def register(subparsers):
    parser = subparsers.add_parser("predict", help="predict with a run's task heads")
    parser.add_argument("run_dir", help="a run directory, or a keras export with --with-heads")
    parser.add_argument("--task", help="the task whose head predicts (one of the run's)")
    parser.add_argument("--text", action="append", metavar="TEXT",
                        help="a text to predict (repeat for more; `-`: one text per line of "
                             "stdin); prints one JSON line per text")
    parser.add_argument("--separator", metavar="SEP",
                        help="with --text: split each text at SEP into a pair (text, text_b), "
                             "e.g. --separator '|||' for matching tasks")
    parser.add_argument("--input", metavar="FILE", help="examples in the task spec's format "
                        "(only the fields a prediction reads are needed: no label)")
    parser.add_argument("--clue", action="store_true",
                        help="write the CLUE 1.1 submission files from the test splits")
    parser.add_argument("--output",
                        help="OUT.jsonl (with --input; with --text, default: stdout) or a "
                             "folder (with --clue); an existing file is replaced only with "
                             "--force, the input never")
    parser.add_argument("--force", action="store_true",
                        help="replace existing output file(s)")
    parser.add_argument("--data-root", help="data folder (label files, --clue test files); "
                        "default: the run's")
    parser.add_argument("--specs", nargs="+", default=[], metavar="DIR",
                        help="extra task spec folders or files")
    parser.add_argument("--batch-size", type=at_least(1), default=32)
    parser.add_argument("--max-length", type=at_least(4), default=None, metavar="N",
                        help="cap each task's max_length (default: the run's max_length); may "
                        "exceed the trained length (see --rope-scaling)")
    parser.add_argument("--rope-scaling", default=None, metavar="TYPE:FACTOR",
                        help="linear|ntk|dynamic_ntk:FACTOR, or none (default: the run's)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(func=run)


def run(args):
    check_rope_scaling(args.rope_scaling)  # before anything is read or written
    from mtl_framework.errors import UserError
    from mtl_framework.evaluation.predict import check_output, load_model

    if args.clue == bool(args.task):
        raise UserError("mtl predict: give either --task TASK (with --text TEXT or --input FILE) "
                        "or --clue")
    if args.task and not args.input and not args.text:
        raise UserError("mtl predict: --task needs --input FILE (examples in the task's format) "
                        "or --text TEXT (repeatable; `-` reads stdin)")
    if args.input and args.text:
        raise UserError("mtl predict: give --input FILE or --text TEXT, not both")
    if args.separator is not None and not args.text:
        raise UserError("mtl predict: --separator splits --text values: give --text")
    if args.separator == "":
        raise UserError("mtl predict: --separator is empty: give the string between text and "
                        "text_b, e.g. '|||'")
    if not args.text and not args.output:
        raise UserError("mtl predict: --output is needed with "
                        + ("--clue (a folder)" if args.clue else "--input (OUT.jsonl)"))
    if args.input and (os.path.isdir(args.input) or not os.path.exists(args.input)):
        # a pipe (`--input /dev/stdin`, `<(...)`) is read like a file
        raise UserError(f"--input {args.input}: "
                        + ("a folder: give a file" if os.path.isdir(args.input) else "no such file"))
    if args.data_root and not os.path.isdir(args.data_root):
        raise UserError(f"--data-root {args.data_root}: no such folder")
    if not os.path.isdir(args.run_dir):
        raise UserError(f"{args.run_dir}: no such folder: give a run directory or a keras "
                        "export written with --with-heads")
    # the outputs before any work: an hour of predictions never ends in "cannot write"
    if args.output:
        check_output(args.output, [args.input], args.run_dir, args.force, folder=args.clue)
    texts = read_texts(args.text) if args.text else None
    to_stderr = args.json or (args.text and not args.output)  # stdout holds the JSON
    log = (lambda message: print(message, file=sys.stderr)) if to_stderr else print
    model = load_model(args.run_dir, args.data_root, args.specs, args.max_length, log=log,
                       rope_scaling=args.rope_scaling)
    if args.clue:
        summary = model.predict_clue(args.output, args.batch_size, args.force)
        if not args.json:
            for name, rows in summary["written"].items():
                print(f"wrote {args.output}/{name} ({rows} rows)")
            for name, reason in summary["skipped"].items():
                print(f"skipped {name}: {reason}")
    elif texts is not None:
        summary = model.predict_text_lines(args.task, texts, args.separator, args.output,
                                           args.batch_size)
    else:
        summary = model.predict_file(args.task, args.input, args.output, args.batch_size)
    if args.json:
        stream = sys.stderr if to_stderr and not args.output else sys.stdout
        strict_json.dump(summary, stream, ensure_ascii=False, indent=1)
        print(file=stream)
    return 0


def read_texts(values, stdin_texts=None, has_text=str.strip):
    """The --text values in order (`mtl predict`, `mtl encode`: the messages name the flag,
    not the command), `-` replaced by stdin's lines (one text each; blank
    lines skipped, a trailing newline or `\r` removed; or `stdin_texts(lines)`'s). Refused in
    one line: bytes that are not UTF-8 (an argument or stdin, with the byte offset), and an
    empty --text (training skips empty rows: its label would mean nothing), or one
    `has_text` finds none in (mtl encode: only characters the tokenizer drops)."""
    from mtl_framework.errors import UserError

    texts = []
    for number, value in enumerate(values, 1):
        if value == "-":
            lines = [line.rstrip("\r\n") for line in stdin_lines()]
            texts += stdin_texts(lines) if stdin_texts else [line for line in lines if line.strip()]
            continue
        utf8_text(argument_bytes(value), f"--text #{number}")
        if not has_text(value):
            dropped = f" (its characters {value!r} are all ones the tokenizer drops)" \
                if value.strip() else ""
            raise UserError(f"--text #{number} is empty{dropped}: give a text (training "
                            "skips empty texts, so a prediction for one means nothing)")
        texts.append(value)
    if not texts:
        raise UserError("--text: no text given" + (" (stdin was empty)"
                                                                 if "-" in values else ""))
    return texts


def stdin_lines():
    """stdin's lines, decoded as UTF-8 from its bytes (a pipe of another encoding, or of
    binary data, is refused naming the byte, not read as replacement characters)."""
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a text stream given in place of stdin (Python callers)
        return list(sys.stdin)
    # universal newlines, as iterating sys.stdin splits them
    return list(io.StringIO(utf8_text(stream.read(), "--text - (stdin)"), newline=None))


def argument_bytes(value):
    """The bytes a --text argument was given as: Python hands undecodable argv bytes on as
    U+DC80..U+DCFF (surrogateescape); any other lone surrogate (a Python caller's string)
    as its UTF-8-style encoding, which strict decoding then refuses at the same place."""
    try:
        return value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogatepass")


def utf8_text(data, where):
    """`data` decoded as UTF-8, or a UserError naming `where` and the offending byte."""
    from mtl_framework.errors import UserError

    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise UserError(f"{where}: not UTF-8 (byte 0x{data[error.start]:02x} at "
                        f"byte offset {error.start}, line {line}): convert it, e.g. "
                        "`iconv -f GBK -t UTF-8`") from None
