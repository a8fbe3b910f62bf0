"""`text_lines`: plain text, one document per line, for masked-LM corpora.

    tasks:
      - {name: mlm, rate: 0.2, corpus: wiki_zh}     # a file or a folder of them,
                                                    # relative to the experiment file

A folder is read file by file in sorted path order (sub-folders included), so
runs repeat; files whose name does not end with `extension` are skipped and
counted. Lines are streamed: nothing holds more than the line being read.
Blank lines are skipped and counted with their file:line; surrounding white
space is stripped.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from data_adapters.base import Adapter, register_adapter
from data_adapters.examples import TextExample
from data_adapters.reading import codec

if TYPE_CHECKING:
    from collections.abc import Iterator

    from data_adapters.base import Fields, Labels, Options
    from data_adapters.examples import Example
    from data_adapters.report import ReadReport


@register_adapter("text_lines")
class TextLinesAdapter(Adapter):
    option_keys = {
        "encoding": (str, "utf-8"),
        "extension": (str, ".txt"),  # in a folder, other files are skipped (and counted)
    }
    task_types = ("mlm",)

    def read(self, paths: list[str], options: Options, fields: Fields, task_type: str | None,
             labels: Labels, report: ReadReport) -> Iterator[Example]:
        for root in paths:
            for path in self.files(root, options["extension"], report):
                with open(path, encoding=codec(options["encoding"]), errors="strict") as f:
                    for number, line in enumerate(f, 1):
                        text = line.strip()
                        if not text:
                            report.skip("blank line", path, number)
                            continue
                        report.count("documents")
                        yield TextExample(text)

    @staticmethod
    def files(root, extension, report):
        """The corpus files under `root` (itself when it is not a folder), sorted."""
        if not os.path.isdir(root):
            yield root
            return
        for folder, subfolders, names in os.walk(root):
            subfolders.sort()  # in place: os.walk then visits them in this order
            for name in sorted(names):
                path = os.path.join(folder, name)
                if extension and not name.endswith(extension):
                    report.skip(f"file name does not end with {extension} (options.extension)", path)
                    continue
                yield path
