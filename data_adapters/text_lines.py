"""`text_lines`: plain text, one document per line, for masked-LM corpora.

    tasks:
      - {name: mlm, rate: 0.2, corpus: wiki_zh}     # a file or a folder of them,
                                                    # relative to the experiment file

A folder is read file by file in sorted path order (sub-folders included), so
runs repeat; files whose name does not end with `extension` are skipped and
counted; symlinked sub-folders are followed, a folder reached twice (a symlink
loop), a FIFO or device, and an unreadable file are skipped and counted. Lines
are streamed in blocks; a line that is not `encoding` text (a GBK file in a
UTF-8 corpus) and blank lines are skipped and counted with their file:line;
surrounding white space is stripped.
"""
from __future__ import annotations

import os
import re
import stat
from typing import TYPE_CHECKING

from data_adapters.base import Adapter, register_adapter
from data_adapters.examples import TextExample
from data_adapters.reading import codec
from data_adapters.task_types import MLM, type_names

if TYPE_CHECKING:
    from collections.abc import Iterator

    from data_adapters.base import Fields, Labels, Options
    from data_adapters.examples import Example
    from data_adapters.report import ReadReport


UNDECODED = re.compile("[\udc80-\udcff]")  # bytes surrogateescape could not decode


@register_adapter("text_lines")
class TextLinesAdapter(Adapter):
    option_keys = {
        "encoding": (str, "utf-8"),
        "extension": (str, ".txt"),  # in a folder, other files are skipped (and counted)
    }
    task_types = type_names(MLM)

    def read(self, paths: list[str], options: Options, fields: Fields, task_type: str | None,
             labels: Labels, report: ReadReport) -> Iterator[Example]:
        for root in paths:
            for path in self.files(root, options["extension"], report):
                try:
                    yield from self.documents(path, options["encoding"], report)
                except OSError as error:  # chmod 000, a file gone or turned into a loop
                    report.skip(f"file cannot be read ({error.strerror or error})", path)

    @staticmethod
    def documents(path, encoding, report):
        """A file's lines as they arrive (a FIFO streams); a line that is not `encoding`
        text is skipped and counted (its bytes come through as U+DC80-U+DCFF)."""
        number = 0
        try:
            with open(path, encoding=codec(encoding), errors="surrogateescape") as f:
                for number, line in enumerate(f, 1):
                    text = line.strip()
                    if not text:
                        report.skip("blank line", path, number)
                    elif UNDECODED.search(text):
                        report.skip(f"line is not valid {encoding} text; set options.encoding "
                                    "if the file uses another", path, number)
                    else:
                        report.count("documents")
                        yield TextExample(text)
        except UnicodeDecodeError as error:  # a codec that cannot escape (utf-16 ...)
            report.skip(f"the rest of the file is not valid {encoding} text ({error.reason})",
                        path, number + 1)

    @staticmethod
    def files(root, extension, report):
        """The corpus files under `root` (itself when it is not a folder), sorted.
        Symlinked sub-folders are read; a folder reached again (a symlink loop) and
        what is not a regular file (a FIFO would block for ever) are skipped and counted."""
        if not os.path.isdir(root):
            yield root
            return
        visited = set()
        for folder, subfolders, names in os.walk(root, followlinks=True):
            info = os.stat(folder)
            if (info.st_dev, info.st_ino) in visited:
                report.skip("folder already read (a symlink loop)", folder)
                subfolders[:] = []
                continue
            visited.add((info.st_dev, info.st_ino))
            subfolders.sort()  # in place: os.walk then visits them in this order
            for name in sorted(names):
                path = os.path.join(folder, name)
                if extension and not name.endswith(extension):
                    report.skip(f"file name does not end with {extension} (options.extension)", path)
                    continue
                try:
                    regular = stat.S_ISREG(os.stat(path).st_mode)
                except OSError as error:  # a symlink loop or a dangling link
                    report.skip(f"file cannot be read ({error.strerror or error})", path)
                    continue
                if not regular:
                    report.skip("not a regular file (a FIFO, socket or device)", path)
                    continue
                yield path
