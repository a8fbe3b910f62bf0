"""`mtl data stats`: read tasks' data and report examples, skipped rows and lost spans.
`mtl data show`: a task's first examples as the adapter parsed them (and their tokens).
`mtl data prepare`: build an experiment's vocab and feature caches in worker processes.

    mtl data stats cmrc2018 cluener --data-root ../shared/data
    mtl data stats --split dev --json
    mtl data stats cmrc2018 --vocab runs/demo/vocab.txt --max-length 256

With --vocab, every split is also turned into features (through the feature
cache) and each row says how many examples truncation cut and how many
answer/entity spans it cost, at the spec's max_length or --max-length.

    mtl data show cluener --split dev -n 3 --data-root experiments/demo/data
    mtl data show tnews -n 2 --vocab runs/demo/vocab.txt --data-root experiments/demo/data

    mtl data prepare experiments/demo.yaml --workers 2

Exit status (stats) 0 when every split was read (skips are reported, not failures),
1 when a split could not be read at all (missing file, bad option), 2 for an
unknown task name or invalid specs.
"""
import sys

from mtl_framework.cli import strict_json
from mtl_framework.cli.arguments import add_experiment_data_root, at_least
from mtl_framework.config import registry as reg
from mtl_framework.prepare import stats as data_stats


def register(subparsers):
    parser = subparsers.add_parser("data", help="inspect what the adapters read from task data")
    commands = parser.add_subparsers(dest="data_command", metavar="{stats,show,prepare}")
    parser.set_defaults(func=lambda args: parser.print_help() or 2)

    stats = commands.add_parser("stats", help="per task and split: examples, skipped rows, lost spans")
    stats.add_argument("names", nargs="*", metavar="TASK_OR_DATASET",
                       help="task names or dataset ids (default: every task)")
    add_spec_options(stats)
    stats.add_argument("--split", action="append", metavar="S",
                       help="only this split (repeat for several; default: every split a spec lists)")
    stats.add_argument("--vocab", metavar="VOCAB_TXT", default=None,
                       help="also featurize with this vocab and count truncated examples and "
                            "the spans truncation cuts off")
    stats.add_argument("--max-length", type=at_least(4), metavar="N", default=None,
                       help="with --vocab: this max_length instead of each spec's")
    stats.add_argument("--cache-dir", metavar="DIR", default=None,
                       help="with --vocab: feature cache folder ($MTL_CACHE_DIR wins; "
                            "default ~/.cache/mtl_framework/features)")
    stats.add_argument("--json", action="store_true", help="a JSON list of rows instead of a table")
    stats.set_defaults(func=run_stats)

    show = commands.add_parser("show", help="a task's first examples as the model sees them: "
                                            "texts, labels, spans with their characters, tokens")
    show.add_argument("task", metavar="TASK", help="a task name (see `mtl tasks list`)")
    show.add_argument("--split", default="train", help="default: train")
    show.add_argument("-n", type=at_least(1), default=5, metavar="N",
                      help="how many examples (default 5)")
    add_spec_options(show)
    show.add_argument("--vocab", metavar="VOCAB_TXT", default=None,
                      help="also show the tokens each example is fed as ([CLS] ... [SEP], cut at "
                           "max_length)")
    show.add_argument("--max-length", type=at_least(4), metavar="N", default=None,
                      help="with --vocab: this max_length instead of the spec's")
    show.add_argument("--json", action="store_true", help="one JSON object per example")
    show.set_defaults(func=run_show)

    prepare = commands.add_parser(
        "prepare", help="build an experiment's vocab and feature caches in worker processes")
    prepare.add_argument("experiment", help="experiment YAML (see experiments/demo.yaml)")
    prepare.add_argument("--workers", type=int, default=None, metavar="N",
                         help="worker processes (default: this machine's cores; 1 = this process)")
    add_experiment_data_root(prepare)
    prepare.set_defaults(func=run_prepare)


def add_spec_options(parser):
    """--specs and --data-root, as `stats` and `show` take them."""
    parser.add_argument("--specs", nargs="+", action="extend", default=[], metavar="DIR",
                        help="extra spec directories or files (added to the built-in task_specs/)")
    parser.add_argument("--data-root", metavar="DIR", default=None,
                        help="folder the specs' file paths are relative to "
                             f"(default: $MTL_DATA_ROOT, else ./{data_stats.DEFAULT_DATA_ROOT})")


def run_prepare(args):
    from mtl_framework.config.experiment import ExperimentError
    from mtl_framework.errors import UserError
    from mtl_framework.prepare.pipeline import prepare_experiment

    if args.workers is not None and args.workers < 1:
        raise UserError(f"--workers must be >= 1, got {args.workers}")
    try:
        vocab, features = prepare_experiment(args.experiment, args.workers, args.data_root,
                                             log=lambda m: print(m, file=sys.stderr))
    except (ExperimentError, reg.SpecValidationError, reg.UnknownTaskError) as error:
        raise UserError(str(error)) from None
    except (FileNotFoundError, KeyError) as error:  # a data file or split the specs name
        raise UserError(str(error).strip("'\"")) from None
    except KeyboardInterrupt:
        from mtl_framework.errors import Interrupted

        raise Interrupted(f"interrupted while preparing; `mtl data prepare {args.experiment}` "
                          "continues (finished caches are kept)") from None
    print(f"vocab: {vocab}")
    for name, entry in features.items():
        print(f"{name}: {entry.num_examples} examples, {len(entry)} rows "
              f"(max_length {entry.meta['max_length']})")
    return 0


def run_stats(args):
    data_root = args.data_root or data_stats.default_data_root()
    try:
        # No data_root here: a label file missing for one dataset should fail that
        # task's row (read_task resolves it), not every task.
        registry = reg.load_registry(args.specs)
        tasks = registry.select(args.names) if args.names else list(registry.tasks.values())
    except reg.SpecValidationError as error:
        for problem in error.errors:
            print(problem, file=sys.stderr)
        return 2
    except reg.UnknownTaskError as error:
        print(f"mtl data stats: {error}", file=sys.stderr)
        return 2
    if args.split and not any(split in (task.files or {}) for task in tasks
                              for split in args.split):
        splits = sorted({split for task in tasks for split in task.files or {}})
        print(f"mtl data stats: --split {' '.join(args.split)}: none of the tasks has it; "
              f"their splits: {', '.join(splits)}", file=sys.stderr)
        return 2
    tokenizer = None
    if args.max_length is not None and not args.vocab:
        print("mtl data stats: --max-length needs --vocab (truncation depends on the tokens)",
              file=sys.stderr)
        return 1
    if args.vocab:
        from mtl_framework.tokenizer import Tokenizer

        try:
            tokenizer = Tokenizer(args.vocab)
        except (OSError, ValueError) as error:
            print(f"mtl data stats: --vocab {args.vocab}: {error}", file=sys.stderr)
            return 1
    rows = data_stats.collect(tasks, data_root, args.split, tokenizer, args.max_length,
                              args.cache_dir)
    if args.json:
        strict_json.dump(rows, sys.stdout, ensure_ascii=False, indent=1)
        print()
    else:
        print(data_stats.format_table(rows) if rows else "no task has such a split")
    if not args.vocab and not args.json:
        print("(truncation not counted: add --vocab VOCAB_TXT to featurize and count it)")
    failed = [row for row in rows if "error" in row or "error" in row.get("features", {})]
    if failed:
        print(f"{len(failed)} split(s) could not be read; see `error` above", file=sys.stderr)
    return 1 if failed else 0


def run_show(args):
    import dataclasses

    from mtl_framework.errors import UserError
    from mtl_framework.prepare import show as data_show

    data_root = args.data_root or data_stats.default_data_root()
    try:
        [task] = reg.load_registry(args.specs).select([args.task])[:1]
    except reg.SpecValidationError as error:
        raise UserError("\n".join(map(str, error.errors))) from None
    if args.split not in (task.files or {}):
        raise UserError(f"--split {args.split}: task {task.name!r} has no such split; its "
                        f"splits: {', '.join(task.files or {}) or 'none'} ({task.spec_path})")
    if args.max_length is not None and not args.vocab:
        raise UserError("--max-length needs --vocab (it says where the tokens are cut)")
    tokenizer = None
    if args.vocab:
        from mtl_framework.tokenizer import Tokenizer

        try:
            tokenizer = Tokenizer(args.vocab)
        except (OSError, ValueError) as error:
            raise UserError(f"--vocab {args.vocab}: {error}") from None
    try:
        if args.json:
            found, _ = data_show.examples(task, args.split, data_root, args.n)
            encoder = data_show.featurizer(task, tokenizer, data_root, args.max_length) \
                if tokenizer else None
            for example in found:
                row = {"type": type(example).__name__, **dataclasses.asdict(example)}
                if encoder is not None:
                    row["tokens"] = data_show.token_lines(example, encoder)
                print(strict_json.dumps(row, ensure_ascii=False, default=str))
            return 0
        for lines in data_show.show(task, args.split, data_root, args.n, tokenizer,
                                    args.max_length):
            print("\n".join(lines))
    except (OSError, ValueError, KeyError) as error:
        raise UserError(str(error).strip("'\"")) from None
    return 0
