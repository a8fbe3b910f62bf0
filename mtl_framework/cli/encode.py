"""`mtl encode RUN_OR_FOLDER --text "..." [--text ...]` and
`mtl encode RUN_OR_FOLDER --input TEXTS.txt --output OUT.npy|OUT.jsonl`.

Sentence embeddings, pooled and normalised as the run's contrastive tasks were trained
(evaluation/encode.py): from a run directory (its newest checkpoint, or --checkpoint), an
export of ours, or any folder we read (a `--format transformers` export reads its
sentence-transformers pooling). Texts come from --text (repeatable; `-` reads stdin, one
text per line) or --input (one text per line, or a .jsonl of {"text": ...} objects). Out:
.npy (float32 [n, H]) or .jsonl ({"text", "embedding"} per line); with --text and no
--output, JSON lines on stdout. A progress bar on a terminal; nothing else on stdout.
"""
import contextlib
import json
import os
import sys

from mtl_framework import cli
from mtl_framework.cli.arguments import at_least
from mtl_framework.cli.predict import read_texts
from mtl_framework.errors import UserError

OUTPUT_KINDS = (".npy", ".jsonl")


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
    parser.add_argument("--pooling", choices=("cls", "mean"), default=None,
                        help="instead of the trained pooling")
    parser.add_argument("--batch-size", type=at_least(1), default=32)
    parser.add_argument("--max-length", type=at_least(4), default=None, metavar="N",
                        help="tokens per text (default: the run's max_length)")
    parser.set_defaults(func=run)


def input_texts(path):
    """The texts of --input: one per non-blank line, or {"text": ...} per line of a .jsonl."""
    texts = []
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                if path.endswith(".jsonl"):
                    try:
                        record = json.loads(line)
                    except ValueError as error:
                        raise UserError(f"{path}:{number}: not JSON ({error}): one "
                                        "{\"text\": ...} object per line") from None
                    text = record.get("text") if isinstance(record, dict) else None
                    if not isinstance(text, str) or not text.strip():
                        raise UserError(f"{path}:{number}: no non-empty \"text\" string")
                    texts.append(text)
                else:
                    texts.append(line.rstrip("\r\n"))
    except UnicodeDecodeError as error:
        raise UserError(f"{path}: not UTF-8 (byte {error.start}): save it as UTF-8") from None
    if not texts:
        raise UserError(f"{path}: no texts (every line is blank)")
    return texts


def check_output(path, force, inputs):
    if not path.endswith(OUTPUT_KINDS):
        raise UserError(f"--output {path}: give a .npy or .jsonl file")
    from mtl_framework.evaluation.predict import check_output as check

    check(path, inputs, None, force)


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
        check_output(args.output, args.force, [args.input])
    texts = read_texts(args.text) if args.text else input_texts(args.input)
    from mtl_framework.console import progress_bar
    from mtl_framework.evaluation.encode import Encoder, use_encoding_threads

    if cli.PROGRAM:  # the `mtl` program: its own process, started for this
        use_encoding_threads()

    log = lambda message: print(message, file=sys.stderr)  # noqa: E731 (stdout holds the vectors)
    encoder = Encoder(args.model, args.checkpoint, args.pooling, task=args.task,
                      max_length=args.max_length, log=log)
    with progress_bar("encode", len(texts), leave=False, unit="text") as bar:
        vectors = encoder.encode(texts, args.side, args.task, args.batch_size, bar.update)
    if args.output and args.output.endswith(".npy"):
        import numpy as np

        np.save(args.output, vectors)
    else:
        stream = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
        with stream if args.output else contextlib.nullcontext(stream):  # stdout stays open
            for text, vector in zip(texts, vectors):
                stream.write(json.dumps({"text": text, "embedding": [round(float(x), 7)
                                                                     for x in vector]},
                                        ensure_ascii=False) + "\n")
    if args.output:
        log(f"wrote {args.output}: {len(texts)} x {vectors.shape[1]} "
            f"({encoder.pooling} pooling{', normalised' if encoder.normalize else ''})")
    return 0

