"""Command modules of `mtl` (see cli.py), and the argument types they share."""
import argparse


def at_least(minimum, kind=int):
    """An argparse type: a `kind` number >= minimum (argparse reports anything else as a
    usage error, exit 2)."""

    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {text}")
        return value

    return parse


def positive_float(text):
    """An argparse type: a float > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value
