"""The `mtl` command line: one module per command group in `mtl_framework.cli.arguments`.

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
import signal
import sys

from mtl_framework import tf_log_filter
from mtl_framework.cli import keras_import
from mtl_framework.errors import Interrupted, UserError

INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C (and here SIGTERM)
PIPE_CLOSED = 141  # 128 + SIGPIPE, what a shell reports for `yes | head -1`'s yes

# Command groups in the order `mtl --help` lists them.
COMMANDS = ["vocab", "tasks", "data", "train", "evaluate", "predict", "encode", "mine-negatives",
            "export", "finetune", "benchmark", "report"]


class VersionAction(argparse.Action):
    """`mtl --version`: read the installed versions only when asked (not on every command)."""

    def __init__(self, option_strings, dest, help=None):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from mtl_framework.rundir.provenance import describe, provenance

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
        importlib.import_module(f"mtl_framework.cli.{name.replace('-', '_')}").register(subparsers)
    return parser


def verbose_requested(argv):
    """`--verbose` before the command, or MTL_VERBOSE set (known before parsing)."""
    options = itertools.takewhile(lambda arg: arg.startswith("-"), argv)
    return "--verbose" in options or os.environ.get("MTL_VERBOSE", "") not in ("", "0")


# True in the `mtl` program (main with argv None); False for `mtl *argv` run in a caller's
# process, whose settings (TensorFlow's threads) a command must leave as they are.
PROGRAM = False


def main(argv=None):
    """The `mtl` program with argv None (sys.argv; fd 2 filtered; SIGTERM handled as
    Ctrl-C), else `mtl *argv` in this process (a test's or notebook's stderr and signal
    handlers left as they are)."""
    if argv is not None:
        return run_command(argv)
    global PROGRAM
    PROGRAM = True
    keras_import.without_unused_extras()
    signal.signal(signal.SIGTERM, terminated)
    try:
        if verbose_requested(sys.argv[1:]):
            tf_log_filter.disabled = True  # nor on import (the library's filter)
            code = run_command(sys.argv[1:])
        else:
            with tf_log_filter.tensorflow_lines_dropped():
                code = run_command(sys.argv[1:])
        sys.stdout.flush()  # a closed pipe shows here, not in Python's flush at exit
        return code
    except BrokenPipeError:  # `mtl ... | head -1`: the reader left; end quietly, as Unix tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's flush at exit would fail again
        return PIPE_CLOSED


def terminated(signum, frame):
    """SIGTERM (`kill`, a scheduler's stop) as Ctrl-C: the command's own clean-up runs
    (temporary folders removed, the resume line printed) and it ends with one line."""
    raise KeyboardInterrupt


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
    except (ImportError, ValueError):  # Keras could not load its backend here
        problem = backend_problem()
        if problem is None:
            raise
        print(f"error: {problem}", file=sys.stderr)
        return 2


BACKENDS = ("tensorflow", "jax")  # step/__init__.py's: what mtl trains on


def backend_problem():
    """Why Keras's backend (KERAS_BACKEND) cannot run mtl in this Python, as one line
    saying what to set or install; None when it can. Asked only after an import failed:
    commands that need no Keras (tasks, data) run whatever KERAS_BACKEND says."""
    import importlib.util

    import mtl_framework

    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    installed = [name for name in BACKENDS if importlib.util.find_spec(name) is not None]
    if backend in installed:
        return None
    here = f"this Python, {sys.executable}"
    if backend not in BACKENDS:
        fix = (f"set KERAS_BACKEND={installed[0]} (installed here)" if installed
               else "install tensorflow or jax and set KERAS_BACKEND to it")
        return f"KERAS_BACKEND={backend}: mtl runs on tensorflow or jax only ({here}): {fix}"
    given = ("KERAS_BACKEND is not set, so mtl uses tensorflow" if mtl_framework.BACKEND_DEFAULTED
             else f"KERAS_BACKEND={backend}")
    fix = (f"set KERAS_BACKEND={installed[0]} (installed here), or install {backend}"
           if installed else f"install {backend}")
    return f"{given}, which is not installed in {here}: {fix}"
