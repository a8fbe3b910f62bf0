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
import atexit
import contextlib
import importlib.abc
import os
import re
import select
import subprocess
import sys
import warnings

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


class StderrFilter:
    """fd 2 (C++ code, child processes) through the filter process from `start()` to
    `stop()`; `sys.stderr`, when it is the process's own, a new writer on the real stderr
    meanwhile (a terminal stays a terminal for progress bars). `stop` restores fd 2 and
    tells the filter (a byte on a second pipe) to copy what the pipe holds and end,
    without waiting for child processes that still hold the pipe's other end."""

    def __init__(self):
        self.process = None

    def start(self):
        try:
            sys.stderr.flush()
            self.real_stderr = os.dup(2)
        except (OSError, ValueError):  # no stderr at all (`2>&-`): nothing to filter
            return self
        # A session of its own: Ctrl-C in a terminal interrupts `mtl`, not its filter.
        stop_read, self.stop_write = os.pipe()  # not inherited by the children we start
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-S", os.path.abspath(__file__), str(stop_read)],
            stdin=subprocess.PIPE, stdout=self.real_stderr, pass_fds=[stop_read],
            start_new_session=True)
        os.close(stop_read)
        self.python_stderr = sys.stderr
        if _writes_to_fd_2(sys.stderr):
            sys.stderr = open(self.real_stderr, "w", buffering=1, encoding=sys.stderr.encoding,
                              errors=sys.stderr.errors, closefd=False)
        os.dup2(self.process.stdin.fileno(), 2)
        self.process.stdin.close()
        os.environ[FILTERED] = fd_2_identity()  # children writing into it start no filter
        return self

    def stop(self):
        if self.process is None:
            return
        process, self.process = self.process, None
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
        os.dup2(self.real_stderr, 2)
        os.environ.pop(FILTERED, None)
        if sys.stderr is not self.python_stderr and _writes_to_fd_2(self.python_stderr):
            sys.stderr = self.python_stderr
        os.close(self.real_stderr)
        # Every write to the pipe before this point is in it: the filter copies them and ends.
        with contextlib.suppress(OSError):
            os.write(self.stop_write, b"\n")
        os.close(self.stop_write)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)


def _writes_to_fd_2(stream):
    try:
        return stream.fileno() == 2
    except (AttributeError, OSError, ValueError):  # a notebook's or a test's own stream
        return False


@contextlib.contextmanager
def tensorflow_lines_dropped():
    """Within: TensorFlow's lines on fd 2 dropped (StderrFilter)."""
    global active
    if filtered_already():  # the library's filter, started on import, or a parent's
        yield
        return
    active = StderrFilter().start()
    try:
        yield
    finally:
        active.stop()
        active = None


# ---------------------------------------------------------------- the Python API

active = None  # the StderrFilter running, if any
disabled = False  # `mtl --verbose`: nothing filtered
FILTERED = "MTL_STDERR_FILTERED"  # the filter's pipe, while one runs (see filtered_already)


def verbose():
    return disabled or os.environ.get("MTL_VERBOSE", "") not in ("", "0")


def fd_2_identity():
    try:
        status = os.fstat(2)
    except OSError:
        return ""
    return f"{status.st_dev}:{status.st_ino}"


def filtered_already():
    """A filter runs here, or fd 2 is the pipe of a parent's filter (a child started with
    its stderr elsewhere, `capture_output=True`, is not filtered by it: it starts its own)."""
    recorded = os.environ.get(FILTERED)
    return active is not None or bool(recorded) and recorded == fd_2_identity()


def quiet_tensorflow():
    """TensorFlow's C++ start-up lines (CPU features, oneDNN) and Python-side noise off;
    set before TensorFlow is imported. A level the user set in the environment wins."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    warnings.filterwarnings("ignore", module=r"(keras|tensorflow)(\.|$)")


def filter_for_the_process():
    """What `import mtl_framework` does unless MTL_VERBOSE=1 (or `mtl`, which filters
    its command on its own): TensorFlow quieted and its lines on fd 2 dropped for the
    rest of the process (stopped at exit), from the moment TensorFlow is first imported
    (at once if it already is)."""
    global active
    if verbose() or filtered_already():
        return
    quiet_tensorflow()
    active = StderrFilter().start()
    atexit.register(_stop_at_exit)


def _stop_at_exit():
    global active
    if active is not None:
        active.stop()
        active = None


class _OnTensorFlowImport(importlib.abc.MetaPathFinder):
    """Starts `filter_for_the_process` when `tensorflow` is first imported: the data
    tools, which never import it, start no filter process. (It stays in sys.meta_path,
    finding nothing: removing it while the import walks the list would skip the next
    finder.)"""

    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" and "tensorflow" not in sys.modules:
            filter_for_the_process()
        return None


def quiet_on_tensorflow_import():
    """Called by `mtl_framework/__init__.py`."""
    if verbose():
        return
    if "tensorflow" in sys.modules:
        filter_for_the_process()
    elif not any(isinstance(f, _OnTensorFlowImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _OnTensorFlowImport())


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError, KeyboardInterrupt):
        stop = int(sys.argv[1]) if len(sys.argv) > 1 else None
        copy_without_tensorflow_lines(sys.stdin.fileno(), sys.stdout.fileno(), stop)
