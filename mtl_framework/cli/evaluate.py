"""`mtl evaluate RUN_DIR [--split dev] [--data-root DIR] [--tasks T...] [--max-examples N]
[--max-length N] [--rope-scaling TYPE:FACTOR] [--json]`.

Scores the run's latest checkpoint on each task's split with the spec's metric,
next to the task's majority baseline, and appends the result to
RUN_DIR/evaluations.jsonl (which `mtl report` plots and `mtl export` cites).
The model is rebuilt from the checkpoint alone (evaluation.evaluate_run): no optimizer
or mixture; a damaged newest checkpoint is named and the one before it scored.
"""
import sys

from mtl_framework.cli import strict_json
from mtl_framework.cli.arguments import at_least, check_rope_scaling


def register(subparsers):
    parser = subparsers.add_parser("evaluate", help="score a run's latest checkpoint on dev")
    parser.add_argument("run_dir", help="a run directory written by `mtl train`")
    parser.add_argument("--split", default="dev", help="split to score (default: dev)")
    parser.add_argument("--data-root", metavar="DIR", default=None,
                        help="where the data is now (default: the run's data_root)")
    parser.add_argument("--tasks", nargs="+", metavar="TASK", help="only these tasks")
    parser.add_argument("--max-examples", type=at_least(1), default=None, metavar="N",
                        help="only the first N examples of each task (default: all)")
    parser.add_argument("--max-length", type=at_least(4), default=None, metavar="N",
                        help="cap each task's max_length at N instead of the run's; may exceed "
                        "the trained length (see --rope-scaling)")
    parser.add_argument("--rope-scaling", default=None, metavar="TYPE:FACTOR",
                        help="linear|ntk|dynamic_ntk:FACTOR, or none (default: the run's)")
    parser.add_argument("--batch-size", type=at_least(1), default=32)
    parser.add_argument("--json", action="store_true", help="print the evaluation as JSON")
    parser.set_defaults(func=run)


def run(args):
    check_rope_scaling(args.rope_scaling)  # before anything is read or written
    from mtl_framework.evaluation.dev import evaluate_run
    from mtl_framework.rundir.records import RecordNotWritten

    log = (lambda message: print(message, file=sys.stderr)) if args.json else print
    try:
        line = evaluate_run(args.run_dir, args.split, args.tasks, args.batch_size,
                            args.max_examples, log=log, data_root=args.data_root,
                            max_length=args.max_length, rope_scaling=args.rope_scaling)
    except RecordNotWritten as error:  # a full disk: the scores first, then the error's line
        show(error.line, args.json)
        raise
    show(line, args.json)
    return 0


def show(line, as_json):
    from mtl_framework.evaluation.dev import format_results

    if as_json:
        strict_json.dump(line, sys.stdout, ensure_ascii=False, indent=1, default=float)
        print()
    else:
        print(format_results(line))
