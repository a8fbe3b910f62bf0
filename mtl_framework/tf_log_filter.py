"""TensorFlow's own log lines held back from the user, at the file-descriptor level.

TensorFlow's C++ code logs through absl straight to file descriptor 2, and some of it
ignores TF_CPP_MIN_LOG_LEVEL: absl's `WARNING: All log messages before
absl::InitializeLog() is called are written to STDERR` and the `I0000 ... port.cc:153]
oneDNN custom operations are on ...` notice on some CPUs. Python never sees these
writes, so `mtl` points fd 2 at a pipe read by a small filter process that copies
everything to the real stderr except such lines. Python's own `sys.stderr` writes to
the real stderr directly, so a terminal stays a terminal (progress bars) and our
`error:` lines never go through the filter.

Fatal lines (`F0000 ...`) pass: they say why the process is about to abort, and the
filter, being a process of its own, outlives the abort to print them. This file is
also the filter's program (`python -I -S tf_log_filter.py`: the standard library only).
"""
import contextlib
import os
import re
import select
import subprocess
import sys

TENSORFLOW_LINE = re.compile(
    rb"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    # absl / glog: severity (info, warning, error), MMDD hh:mm:ss.micros, thread, file:line]
    rb"|[IWE]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^\s\]]+:\d+\] "
    # TensorFlow's older format: 2026-11-24 14:00:00.123456: I tensorflow/...cc:182]
    rb"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWE] [^\s\]]+:\d+\] "
    # the second line of cpu_feature_guard's message (shown when TF_CPP_MIN_LOG_LEVEL < 2):
    # a line without a header of its own, so matched by its text
    rb"|To enable the following instructions: .*rebuild TensorFlow with the appropriate "
    rb"compiler flags\.$")


def is_tensorflow_line(line):
    return TENSORFLOW_LINE.match(line) is not None


def write_all(fd, data):
    while data:
        data = data[os.write(fd, data):]


def chunks(source, stop=None):
    """Reads of fd `source` until end of file, or, once fd `stop` is readable (a byte
    written or its writer gone), until the pipe holds nothing more. A child process that
    inherited the pipe (multiprocessing's resource tracker lives until `mtl` exits) keeps
    it open: waiting for end of file would wait for that child."""
    while True:
        if stop is not None and stop in select.select([source, stop], [], [])[0]:
            os.set_blocking(source, False)  # the writer is done: drain what was written
            stop = None
        try:
            chunk = os.read(source, 1 << 16)
        except BlockingIOError:
            return
        if not chunk:
            return
        yield chunk


def copy_without_tensorflow_lines(source, target, stop=None):
    """Copy fd `source` to fd `target` (see `chunks` for `stop`), dropping TensorFlow's
    log lines.

    absl writes each line with one write() (atomic on a pipe up to 4 KiB), so a read
    holds whole log lines; a trailing piece that starts like one waits for its newline,
    any other piece (a progress bar's `\\r` update) is passed on at once.
    """
    held = b""
    for chunk in chunks(source, stop):
        lines = (held + chunk).splitlines(keepends=True)
        unfinished = not lines[-1].endswith((b"\n", b"\r"))
        held = lines.pop() if unfinished and is_tensorflow_line(lines[-1]) else b""
        write_all(target, b"".join(line for line in lines if not is_tensorflow_line(line)))
    if held and not is_tensorflow_line(held):
        write_all(target, held)


@contextlib.contextmanager
def tensorflow_lines_dropped():
    """Within: fd 2 (C++ code, child processes) goes through the filter process;
    `sys.stderr` is a new writer on the real stderr. On exit fd 2 is restored and the
    filter told (a byte on a second pipe) to copy what the pipe holds and end, without
    waiting for child processes that still hold the pipe's other end."""
    sys.stderr.flush()
    try:
        real_stderr = os.dup(2)
    except OSError:  # no stderr at all (`2>&-`): nothing to filter
        yield
        return
    # A session of its own: Ctrl-C in a terminal interrupts `mtl`, not its filter.
    stop_read, stop_write = os.pipe()  # not inherited by the children `mtl` starts
    filter_process = subprocess.Popen(
        [sys.executable, "-I", "-S", os.path.abspath(__file__), str(stop_read)],
        stdin=subprocess.PIPE, stdout=real_stderr, pass_fds=[stop_read], start_new_session=True)
    os.close(stop_read)
    python_stderr = sys.stderr
    sys.stderr = open(real_stderr, "w", buffering=1, encoding=python_stderr.encoding,
                      errors=python_stderr.errors, closefd=False)
    os.dup2(filter_process.stdin.fileno(), 2)
    filter_process.stdin.close()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(real_stderr, 2)
        sys.stderr = python_stderr
        os.close(real_stderr)
        # Every write to the pipe before this point is in it: the filter copies them and ends.
        with contextlib.suppress(OSError):
            os.write(stop_write, b"\n")
        os.close(stop_write)
        with contextlib.suppress(subprocess.TimeoutExpired):
            filter_process.wait(timeout=5)


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError, KeyboardInterrupt):
        stop = int(sys.argv[1]) if len(sys.argv) > 1 else None
        copy_without_tensorflow_lines(sys.stdin.fileno(), sys.stdout.fileno(), stop)
