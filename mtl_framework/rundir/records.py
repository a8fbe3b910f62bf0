"""JSON-lines records of a run (metrics.jsonl, evaluations.jsonl, provenance.jsonl): read,
appended and cut back, each robust to the one line a killed write can leave unfinished."""
import errno
import json
import os
import sys
import uuid

from mtl_framework.errors import UserError

TEMPORARY = ".tmp-"


class DamagedFile(UserError, ValueError):
    """A run file that cannot be read (path:line: reason)."""


def warn(message):
    print(f"warning: {message}", file=sys.stderr, flush=True)


def drop_cut_last_line(path):
    """Truncate a JSON-lines file after its last newline (a killed append's rest)."""
    try:
        with open(path, "rb+") as f:
            data = f.read()
            if data and not data.endswith(b"\n"):
                f.truncate(data.rfind(b"\n") + 1)
                warn(f"{path}: removed an unfinished last line (a killed write)")
    except FileNotFoundError:
        pass


class RecordNotWritten(UserError):
    """A record line a write failure (a full disk) kept out of its file, which is as it
    was: the caller may show what the line held before this ends the command."""


def no_space_or(error):
    """An OSError's reason as a user reads it."""
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return "no space left on the device"
    return error.strerror or str(error)


def append_whole(path, text, what):
    """`text` appended to `path` whole or not at all: on a failed write the file is cut
    back to its size before (a full disk can take part of a line), then a
    RecordNotWritten naming `what`."""
    size = os.path.getsize(path) if os.path.isfile(path) else None
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(text)
    except OSError as error:
        try:
            if size is None:
                os.remove(path)
            else:
                os.truncate(path, size)
        except OSError:
            pass
        raise RecordNotWritten(f"{path}: {no_space_or(error)}: {what} could not be recorded; "
                               "the file is as it was: free space, then run the command "
                               "again") from None


def trim_records(path, step, log=print):
    """Cut a JSON-lines record file (metrics.jsonl, evaluations.jsonl) back to the lines
    of updates <= `step`, the step a run (re)starts from: the updates after it are trained
    again and write their lines again, so each step is in the file once. A last line
    without its newline (a killed append) is dropped rather than appended onto. Rewritten
    atomically, and only when something changes. Returns the number of lines dropped."""
    if not os.path.exists(path):
        return 0
    if not os.path.isfile(path):
        raise UserError(f"{path}: not a file (the run's record of each step is kept there): "
                        "move it away")
    with open(path, encoding="utf-8", errors="replace") as f:
        texts = f.readlines()
    kept, cut, later = [], 0, 0
    for number, text in enumerate(texts, 1):
        if not text.endswith("\n") and number == len(texts):
            cut = 1  # an unfinished append
            continue
        try:
            record = json.loads(text)
        except ValueError:
            kept.append(text)  # a damaged middle line is the user's to see (report names it)
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int) and \
                record["step"] > step:
            later += 1
            continue
        kept.append(text)
    if not (cut or later):
        return 0
    temporary = f"{path}{TEMPORARY}{uuid.uuid4().hex}"
    try:
        with open(temporary, "w", encoding="utf-8") as f:
            f.writelines(kept)
        os.replace(temporary, path)
    except BaseException as error:  # a full disk, a Ctrl-C: no temporary left, the file as it was
        if os.path.exists(temporary):
            os.remove(temporary)
        if not isinstance(error, OSError):
            raise
        raise UserError(f"{path}: {no_space_or(error)} while cutting it back to the updates "
                        f"<= {step} for the resume; it is as it was: free space, then "
                        "resume again") from None
    if log:
        log(f"{path}: " + ", ".join(
            ([f"{later} line(s) of updates after {step} removed (trained again)"] if later else [])
            + (["an unfinished last line (a killed write) removed"] if cut else [])))
    return cut + later


def other_settings(line):
    """Whether an evaluations.jsonl line was scored at another length or rotary scaling
    than the run trained with (`mtl evaluate --max-length/--rope-scaling` records them)."""
    return "max_length" in line or "rope_scaling" in line


def read_lines(path, log=None, cut_last=True):
    """Every JSON line of `path` ([] when it does not exist). A last line without its
    newline is an append a kill cut short: skipped (named through `log`, when given).
    Any other line that is not JSON: a DamagedFile naming the line."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        texts = f.readlines()
    lines = []
    for number, text in enumerate(texts, 1):
        if not text.strip():
            continue
        try:
            lines.append(json.loads(text))
        except json.JSONDecodeError as error:
            if cut_last and number == len(texts) and not text.endswith("\n"):
                if log:
                    log(f"warning: {path}:{number}: an unfinished last line (a killed write); "
                        "skipped")
                continue
            raise DamagedFile(f"{path}:{number}: not a JSON line ({error}); delete or fix "
                              "that line") from None
    return lines
