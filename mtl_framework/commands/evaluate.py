"""`mtl evaluate RUN_DIR [--split dev] [--tasks T...] [--max-examples N] [--json]`.

Scores the run's latest checkpoint on each task's split with the spec's metric,
next to the task's majority baseline, and appends the result to
RUN_DIR/evaluations.jsonl (which `mtl report` plots and `mtl export` cites).
The model is rebuilt from the checkpoint alone (evaluation.evaluate_run): no optimizer
or mixture; a damaged newest checkpoint is named and the one before it scored.
"""
import json
import sys


def register(subparsers):
    parser = subparsers.add_parser("evaluate", help="score a run's latest checkpoint on dev")
    parser.add_argument("run_dir", help="a run directory written by `mtl train`")
    parser.add_argument("--split", default="dev", help="split to score (default: dev)")
    parser.add_argument("--tasks", nargs="+", metavar="TASK", help="only these tasks")
    parser.add_argument("--max-examples", type=int, default=None, metavar="N",
                        help="only the first N examples of each task (default: all)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--json", action="store_true", help="print the evaluation as JSON")
    parser.set_defaults(func=run)


def run(args):
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from mtl_framework.evaluation import evaluate_run, format_results
    from mtl_framework.experiment import ExperimentError
    from mtl_framework.registry import SpecValidationError

    log = (lambda message: print(message, file=sys.stderr)) if args.json else print
    try:
        line = evaluate_run(args.run_dir, args.split, args.tasks, args.batch_size,
                            args.max_examples, log=log)
    except (FileNotFoundError, ValueError, ExperimentError, SpecValidationError) as error:
        print(f"mtl evaluate: {error}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(line, sys.stdout, ensure_ascii=False, indent=1, default=float)
        print()
    else:
        print(format_results(line))
    return 0
