"""The `mtl` command line: one module per command group in `mtl_framework.commands`.

Each command module defines `register(subparsers)`, which adds its parser and
sets `func` (called with the parsed arguments; its return value is the exit code).
"""
import argparse
import importlib
import os
import sys

from mtl_framework.errors import UserError

# Command groups in the order `mtl --help` lists them.
COMMANDS = ["vocab", "tasks", "data", "train", "evaluate", "predict", "export", "finetune",
            "benchmark", "report"]


def build_parser():
    parser = argparse.ArgumentParser(
        prog="mtl",
        description="Supervised multi-task pretraining of Chinese RoFormerV2 encoders.",
    )
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


def main(argv=None):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0 if args.command is None else 2
    try:
        return args.func(args) or 0
    except UserError as error:  # the user's mistake: one line, no traceback
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
