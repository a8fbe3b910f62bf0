"""bench/balancing.py's pilot splits a release's train file in the publisher's own format:
written back whole, every format reads exactly the examples the original gives; split in
two, the parts read as the original's examples, none lost or doubled, none repaired."""
import dataclasses
import shutil

import pytest

from bench import balancing
from data_adapters import read_task
from data_adapters.report import ReadReport
from mtl_framework.config.registry import load_registry

# one task per unit kind (cluener's train.json is concatenated pretty-printed JSON)
TASKS = ["resume", "cluener", "chnsenticorp", "c3_m", "cmrc2018", "weibo_nam"]


def examples(task, root, split="train"):
    report = ReadReport()
    found = read_task(task, split, root, report)
    return [dataclasses.asdict(e) if dataclasses.is_dataclass(e) else e for e in found], report


def not_read(report):
    """Units read as no example: rows skipped, and questions filtered out of training
    (a reading-comprehension question none of whose answers can be located)."""
    return sum(report.skipped.values()) + sum(
        n for reason, n in report.filtered.items() if reason.startswith("question:"))


def place(root, source, relative):
    """`relative`'s folder under root, with the data's other files linked in."""
    folder = root / relative.split("/")[0]
    if not folder.exists():
        shutil.copytree(source / relative.split("/")[0], folder, symlinks=True)
    return root / relative


@pytest.mark.parametrize("name", TASKS)
def test_pilot_split_reads_the_same_examples(name, shared_data, tmp_path):
    task = load_registry().tasks[name]
    kind = balancing.UNIT_KINDS[task.format]
    units, prefix, sizes = balancing.read_units(shared_data / task.files["train"], kind)
    original, report = examples(task, shared_data)
    assert sum(sizes) == len(original) + not_read(report)  # the pilot's count

    whole = tmp_path / "whole"
    balancing.write_units(place(whole, shared_data, task.files["train"]), kind, units, prefix)
    rewritten, _ = examples(task, whole)
    assert rewritten == original

    held = set(range(0, len(units), 7))  # every 7th unit to dev, the rest stays train
    split = tmp_path / "split"
    train = place(split, shared_data, task.files["train"])
    train.unlink()
    (split / task.files["dev"]).unlink()
    balancing.write_units(train, kind, [u for i, u in enumerate(units) if i not in held], prefix)
    balancing.write_units(split / task.files["dev"], kind, [u for i, u in enumerate(units) if i in held],
                          prefix)
    kept, kept_report = examples(task, split, "train")
    held_out, held_report = examples(task, split, "dev")
    assert sorted(map(repr, kept + held_out)) == sorted(map(repr, original))
    assert len(held_out) + not_read(held_report) == sum(sizes[i] for i in held)
    assert kept_report.skipped + held_report.skipped == report.skipped
