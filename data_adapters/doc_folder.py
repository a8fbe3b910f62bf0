"""`doc_folder`: one folder per label, one document per file (THUCNews, Fudan).

    files: {train: thucnews}            # thucnews/体育/0.txt, thucnews/财经/1.txt, ...
    options: {encoding: gbk, extension: .txt}

The label is the name of the folder right under the split's folder; the text
is the whole file. Files are read in sorted order so that runs repeat.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from data_adapters.base import Adapter, register_adapter
from data_adapters.examples import TextExample
from data_adapters.reading import LabelRule, codec
from data_adapters.task_types import CLASSIFICATION, type_names

if TYPE_CHECKING:
    from collections.abc import Iterator

    from data_adapters.base import Fields, Labels, Options
    from data_adapters.examples import Example
    from data_adapters.report import ReadReport


@register_adapter("doc_folder")
class DocFolderAdapter(Adapter):
    option_keys = {
        "encoding": (str, "utf-8"),
        "extension": (str, ".txt"),  # other files are skipped (and counted)
    }
    task_types = type_names(CLASSIFICATION)

    def read(self, paths: list[str], options: Options, fields: Fields, task_type: str | None,
             labels: Labels, report: ReadReport) -> Iterator[Example]:
        rule = LabelRule(task_type, labels)
        extension = options["extension"]
        for root in paths:
            if not os.path.isdir(root):
                raise NotADirectoryError(f"{root}: format doc_folder reads a folder with one "
                                         "sub-folder per label, not a file")
            for path, label_folder in self.documents(root):
                if label_folder is None:
                    report.skip("file is not inside a label folder", path)
                    continue
                if extension and not path.endswith(extension):
                    report.skip(f"file name does not end with {extension} (options.extension)", path)
                    continue
                label, reason = rule.check(label_folder)
                if reason:
                    report.skip(reason, path)
                    continue
                try:
                    with open(path, encoding=codec(options["encoding"])) as f:
                        text = f.read()
                except UnicodeDecodeError as error:
                    report.skip(f"not valid {options['encoding']} text ({error.reason}); "
                                "set options.encoding", path)
                    continue
                if not text.strip():
                    report.skip("empty document", path)
                    continue
                yield TextExample(text.strip(), None, label, os.path.relpath(path, root))

    @staticmethod
    def documents(root):
        """(path, label folder or None) for every file below root, sorted."""
        for folder, subfolders, names in os.walk(root):
            subfolders.sort()
            relative = os.path.relpath(folder, root)
            label = None if relative == "." else relative.split(os.sep)[0]
            for name in sorted(names):
                yield os.path.join(folder, name), label
