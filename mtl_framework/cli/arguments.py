"""Command modules of `mtl` (see cli.py), and the argument types and options they share."""
import argparse
import os


def at_least(minimum, kind=int, maximum=None):
    """An argparse type: a `kind` number >= minimum (and <= maximum, if given; argparse
    reports anything else as a usage error, exit 2)."""

    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {text}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be <= {maximum}, got {text}")
        return value

    return parse


SEED = at_least(0, int, 2**32 - 1)  # numpy's seeds are 32-bit


def add_experiment_data_root(parser):
    """--data-root of a command that reads an experiment (plan.plan_run's order of places)."""
    parser.add_argument("--data-root", metavar="DIR", default=None,
                        help="folder the task specs' file paths are relative to (default: the "
                             "experiment's data_root, else $MTL_DATA_ROOT, else ./data)")


def add_task_sources(parser):
    """--data-root and --specs of a command that reads tasks without an experiment."""
    parser.add_argument("--data-root", default=os.environ.get("MTL_DATA_ROOT"),
                        help="dataset root (default: $MTL_DATA_ROOT)")
    parser.add_argument("--specs", nargs="+", default=[], metavar="DIR", help="extra task spec folders")


def positive_float(text):
    """An argparse type: a float > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def check_rope_scaling(text):
    """--rope-scaling's form (`none` or TYPE:FACTOR[:ORIGINAL_MAX_LENGTH], rope_scaling.parse)
    checked before the command touches anything: a UserError (one line, exit 2) if not.
    Kept as text: the trained length it may need is filled in from the run or folder."""
    from mtl_framework.architectures import rope_scaling
    from mtl_framework.errors import UserError

    if text is not None:
        try:
            rope_scaling.parse(text, original_max_length=2)
        except ValueError as error:
            raise UserError(str(error)) from None
    return text
