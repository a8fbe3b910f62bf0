"""The `mtl` command line: one module per command group in `mtl_framework.commands`.

Each command module defines `register(subparsers)`, which adds its parser and
sets `func` (called with the parsed arguments; its return value is the exit code).

A mistake of the user's (`errors.UserError`) ends as one `error: file:line:
message` line per problem on stderr and exit code 2, with no traceback; any
other exception is a bug of ours and keeps its traceback. TensorFlow's start-up
log lines are off unless `mtl --verbose ...` or MTL_VERBOSE=1.
"""
import argparse
import importlib
import os
import sys
import warnings

from mtl_framework.errors import Interrupted, UserError

INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C

# Command groups in the order `mtl --help` lists them.
COMMANDS = ["vocab", "tasks", "data", "train", "evaluate", "predict", "export", "finetune",
            "benchmark", "report"]


def build_parser():
    parser = argparse.ArgumentParser(
        prog="mtl",
        description="Supervised multi-task pretraining of Chinese RoFormerV2 encoders.",
    )
    parser.add_argument("--verbose", action="store_true",
                        help="show TensorFlow's own log lines and warnings (also: MTL_VERBOSE=1)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"mtl_framework.commands.{name}")
        except ModuleNotFoundError as error:
            if error.name == f"mtl_framework.commands.{name}":
                continue  # command not built yet: absent rather than a stub
            raise
        module.register(subparsers)
    return parser


def quiet_tensorflow():
    """TensorFlow's C++ start-up lines (CPU features, oneDNN) and Python-side noise off;
    set before TensorFlow is imported. A level the user set in the environment wins."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    warnings.filterwarnings("ignore", module=r"(keras|tensorflow)(\.|$)")


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if not (args.verbose or os.environ.get("MTL_VERBOSE", "") not in ("", "0")):
        quiet_tensorflow()
    if not getattr(args, "func", None):
        parser.print_help()
        return 0 if args.command is None else 2
    try:
        return args.func(args) or 0
    except UserError as error:  # the user's mistake: one line per problem, no traceback
        for line in str(error).splitlines() or [type(error).__name__]:
            print(f"error: {line}", file=sys.stderr)
        return 2
    except Interrupted as error:  # Ctrl-C where a command knows how to continue
        print(f"\n{error}", file=sys.stderr)
        return INTERRUPTED
    except KeyboardInterrupt:  # Ctrl-C anywhere else: nothing half-written is kept
        print(f"\ninterrupted: mtl {args.command} stopped", file=sys.stderr)
        return INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
