"""`mtl vocab build`: a character-level vocab.txt from text files and/or task data."""
import os

from mtl_framework import tokenizer as vocab
from mtl_framework.cli.arguments import at_least
from mtl_framework.errors import UserError
from mtl_framework.files import check_file, write_text_atomic


def register(subparsers):
    parser = subparsers.add_parser("vocab", help="build vocabularies")
    sub = parser.add_subparsers(dest="vocab_command", metavar="SUBCOMMAND", required=True)
    build = sub.add_parser("build", help="character-level vocab.txt (bert4keras layout)")
    build.add_argument("--text", nargs="*", default=[], metavar="FILE",
                       help="plain-text files, one text per line")
    build.add_argument("--tasks", nargs="*", default=[], metavar="TASK",
                       help="task names or dataset ids whose train split supplies text")
    build.add_argument("--specs", nargs="*", default=None, metavar="DIR", help="extra spec dirs")
    build.add_argument("--data-root", default=None, help="data root for --tasks")
    build.add_argument("--split", default="train", help="split read for --tasks (default train)")
    build.add_argument("--max-size", type=at_least(len(vocab.SPECIAL_TOKENS) + 1), default=12000,
                       help="vocab size cap (default 12000)")
    build.add_argument("--min-count", type=at_least(1), default=1, help="drop rarer units (default 1)")
    build.add_argument("--cased", action="store_true", help="keep case (default: lower-case)")
    build.add_argument("--output", required=True, help="vocab.txt to write (a new file)")
    build.add_argument("--force", action="store_true",
                       help="replace --output if it exists (refused otherwise: it may be a "
                            "trained run's vocab.txt)")
    build.set_defaults(func=run_build)


def task_texts(tasks, data_root, split):
    from data_adapters import read_task

    for task in tasks:
        for example in read_task(task, split, data_root):
            yield from vocab.example_texts(example)


def run_build(args):
    if not args.text and not args.tasks:
        raise UserError("mtl vocab build: give --text FILE... and/or --tasks NAME...")
    missing = [f"{path}: {'a folder, not a text file' if os.path.isdir(path) else 'no such file'} "
               "(--text)" for path in args.text if not os.path.isfile(path)]
    tasks = []
    if args.tasks:  # every file checked before anything is read or written
        from mtl_framework.config.registry import load_registry
        from mtl_framework.plan import missing_files
        from mtl_framework.prepare.stats import default_data_root

        data_root = args.data_root or default_data_root()
        tasks = load_registry(args.specs).select(args.tasks)
        missing += missing_files(tasks, data_root, args.split)
    if missing:
        raise UserError("\n".join(missing))
    check_file(args.output, "--output")  # before reading anything
    if os.path.lexists(args.output) and not args.force:
        raise UserError(f"--output {args.output}: exists (a run's vocab.txt cannot be replaced "
                        "without losing the run): write to a new file, or pass --force")
    for path in args.text:
        if os.path.exists(args.output) and os.path.samefile(path, args.output):
            raise UserError(f"--output {args.output}: is the --text file {path}: write the "
                            "vocab to another file")
    counts = vocab.count_units(vocab.read_text_lines(args.text), lowercase=not args.cased)
    if args.tasks:
        counts.update(vocab.count_units(task_texts(tasks, data_root, args.split),
                                        lowercase=not args.cased))
    tokens = vocab.build_vocab(counts, args.max_size, args.min_count)
    if len(tokens) == len(vocab.SPECIAL_TOKENS):
        sources = ", ".join([f"--text {p}" for p in args.text] + [f"--tasks {t}" for t in args.tasks])
        raise UserError(f"{sources}: no text to build a vocab from ({sum(counts.values())} "
                        f"units, none with --min-count {args.min_count}); nothing written to "
                        f"{args.output}")
    write_text_atomic(args.output, "".join(token + "\n" for token in tokens))
    covered = sum(counts[t] for t in tokens)
    total = sum(counts.values()) or 1
    print(f"wrote {args.output}: {len(tokens)} tokens from {len(counts)} distinct units "
          f"({covered / total:.2%} of {total} occurrences covered)")
    return 0
