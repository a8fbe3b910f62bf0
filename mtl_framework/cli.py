"""The `mtl` command line: one module per command group in `mtl_framework.commands`.

Each command module defines `register(subparsers)`, which adds its parser and
sets `func` (called with the parsed arguments; its return value is the exit code).

A mistake of the user's (`errors.UserError`) ends as one `error: file:line:
message` line per problem on stderr and exit code 2, with no traceback; any
other exception is a bug of ours and keeps its traceback. TensorFlow's own log
lines are off unless `mtl --verbose ...` or MTL_VERBOSE=1: TF_CPP_MIN_LOG_LEVEL=2
for what it silences, and `tf_log_filter` for the lines TensorFlow writes to fd 2
regardless (for the command; a caller's `main([...])` is the Python API, filtered from
TensorFlow's import on as `import mtl_framework` does).
"""
import argparse
import importlib
import itertools
import os
import sys

from mtl_framework import tf_log_filter
from mtl_framework.errors import Interrupted, UserError

INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C

# Command groups in the order `mtl --help` lists them.
COMMANDS = ["vocab", "tasks", "data", "train", "evaluate", "predict", "export", "finetune",
            "benchmark", "report"]


class VersionAction(argparse.Action):
    """`mtl --version`: read the installed versions only when asked (not on every command)."""

    def __init__(self, option_strings, dest, help=None):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from mtl_framework.provenance import describe, provenance

        print(describe(provenance()))
        parser.exit()


def build_parser():
    parser = argparse.ArgumentParser(
        prog="mtl", allow_abbrev=False,  # `--verbose` is also read before parsing
        description="Supervised multi-task pretraining of Chinese RoFormerV2 encoders.",
    )
    parser.add_argument("--verbose", action="store_true",
                        help="show TensorFlow's own log lines and warnings (also: MTL_VERBOSE=1)")
    parser.add_argument("--version", action=VersionAction,
                        help="print the version, the source commit and the versions of "
                             "TensorFlow, Keras, tokenizers and Python, then exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"mtl_framework.commands.{name}").register(subparsers)
    return parser


def verbose_requested(argv):
    """`--verbose` before the command, or MTL_VERBOSE set (known before parsing)."""
    options = itertools.takewhile(lambda arg: arg.startswith("-"), argv)
    return "--verbose" in options or os.environ.get("MTL_VERBOSE", "") not in ("", "0")


def main(argv=None):
    """The `mtl` program with argv None (sys.argv; fd 2 filtered), else `mtl *argv`
    in this process (a test's or notebook's stderr left as it is)."""
    if argv is None and verbose_requested(sys.argv[1:]):
        tf_log_filter.disabled = True  # nor on import (the library's filter)
    elif argv is None:
        with tf_log_filter.tensorflow_lines_dropped():
            return run_command(sys.argv[1:])
    return run_command(sys.argv[1:] if argv is None else argv)


def run_command(argv):
    parser = build_parser()
    args = parser.parse_args(argv)
    if not verbose_requested(argv):
        tf_log_filter.quiet_tensorflow()
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
