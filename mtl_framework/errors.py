"""Errors a user can cause and fix.

`mtl` prints `str(error)` of a `UserError` as one line on stderr and exits 2;
any other exception is a bug of ours and keeps its traceback.
"""


class UserError(Exception):
    """A mistake the user can fix: the CLI prints str(error) on one line and exits 2.

    The message names the file (and line or field) and the fix, e.g.
    `experiments/x.yaml:4: keep_checkpoints must be >= 1 (got -1)`.
    """


class Interrupted(Exception):
    """Ctrl-C: the CLI prints str(error) (where the work stopped and the command that
    continues it) as one line and exits 130, as a shell does for SIGINT."""
