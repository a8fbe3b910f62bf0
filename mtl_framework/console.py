"""Progress on the console: a bar on a terminal, plain lines anywhere else.

    with progress_bar("features", total) as bar:
        bar.update(n)

On a terminal, a tqdm bar (examples/s, ETA). Written to a file or a pipe (a log of
`mtl train > log.txt`, CI), a bar's `\\r` redraws, colours and `\\b` bytes would fill
it, so the same calls write plain lines instead: one a minute while it runs and one
when it ends (`features: 2,200 examples in 2.6 s (846/s)`).
"""
import sys
import time


def interactive(stream=None):
    stream = stream or sys.stderr
    return hasattr(stream, "isatty") and stream.isatty()


class PlainBar:
    """What of tqdm's interface mtl uses (update, set_postfix_str, close, a context
    manager), as plain lines on `stream`."""

    EVERY = 60.0  # seconds between lines while it runs

    def __init__(self, stage, total=None, stream=None, unit="examples", summary=True):
        self.stage, self.total, self.unit, self.summary = stage, total, unit, summary
        self.stream = stream or sys.stderr
        self.n, self.postfix, self.closed = 0, "", False
        self.started = self.said = time.monotonic()

    def update(self, n=1):
        self.n += n
        now = time.monotonic()
        if now - self.said >= self.EVERY:
            self.said = now
            of = f"/{self.total:,}" if self.total else ""
            self.write(f"{self.stage}: {self.n:,}{of} {self.unit}"
                       + (f" ({self.postfix})" if self.postfix else "")
                       + f", {now - self.started:.0f} s")

    def set_postfix_str(self, text, refresh=True):
        self.postfix = text

    def close(self):
        if self.closed:
            return
        self.closed = True
        if self.summary and self.n:
            seconds = time.monotonic() - self.started
            rate = f" ({self.n / seconds:,.0f}/s)" if seconds > 0 else ""
            self.write(f"{self.stage}: {self.n:,} {self.unit} in {seconds:.1f} s{rate}")

    def write(self, line):
        print(line, file=self.stream, flush=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def progress_bar(stage, total=None, stream=None, leave=True, unit="ex"):
    """A tqdm bar on a terminal, else a PlainBar (its closing line only when `leave`)."""
    stream = stream or sys.stderr
    if not interactive(stream):
        return PlainBar(stage, total, stream, "examples", summary=leave)
    from tqdm import tqdm

    return tqdm(total=total, desc=stage, unit=unit, unit_scale=True, dynamic_ncols=True,
                mininterval=0.5, file=stream, leave=leave)
