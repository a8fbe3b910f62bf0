"""What reading a task's data gives: examples, skipped rows and lost spans, per split.

    rows = collect(registry.select(["cmrc2018"]), "/data")
    print(format_table(rows))

Each row is the ReadReport of one (task, split) plus where it came from; a
split that cannot be read (missing file, bad option) gets an `error` instead.
Nothing here imports TensorFlow: reading is plain Python.
"""
import os

from data_adapters import ReadReport, read_task

DEFAULT_DATA_ROOT = "data"
# Counted alongside the examples, in this order, when an adapter reports them.
UNITS = ("questions", "texts", "entities", "triples", "events", "arguments", "unanswerable",
         "unlabelled")


def default_data_root():
    return os.environ.get("MTL_DATA_ROOT") or DEFAULT_DATA_ROOT


def split_stats(task, split, data_root):
    files = task.files[split]
    row = {"task": task.name, "dataset": task.dataset, "split": split, "format": task.format,
           "files": files if isinstance(files, list) else [files]}
    report = ReadReport()
    try:
        for _ in read_task(task, split, data_root, report):
            pass
    except (OSError, ValueError, KeyError) as error:
        row["error"] = str(error)
        return row
    row.update(report.as_dict())
    return row


def collect(tasks, data_root, splits=None):
    """One row per task and split (all the task's splits, or those in `splits`)."""
    rows = []
    for task in tasks:
        for split in task.files:
            if not splits or split in splits:
                rows.append(split_stats(task, split, data_root))
    return rows


def format_table(rows):
    """A table of counts, then each skip/loss reason under its row with its first place."""
    header = ("task", "split", "examples", "skipped", "spans", "lost", "counts")
    table, notes = [header], {}
    for index, row in enumerate(rows):
        if "error" in row:
            table.append((row["task"], row["split"], "-", "-", "-", "-", "ERROR"))
            notes[index] = [f"error: {row['error']}"]
            continue
        counts = ", ".join(f"{unit} {row[unit]}" for unit in UNITS if row.get(unit))
        table.append((row["task"], row["split"], str(row["examples"]), str(row["skipped_total"]),
                      str(row["spans"]), str(row["spans_lost_total"]), counts))
        lines = []
        for kind, key in (("skipped", "skipped"), ("lost", "spans_lost")):
            for reason, detail in row[key].items():
                first = f" (first: {detail['first'][0]})" if detail["first"] else ""
                lines.append(f"{kind} {detail['count']}: {reason}{first}")
        for reason, count in row.get("filtered", {}).items():
            lines.append(f"filtered {count}: {reason}")
        notes[index] = lines
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    out = []
    for index, cells in enumerate(table):
        out.append("  ".join(c.rjust(w) if 2 <= i <= 5 else c.ljust(w)
                             for i, (c, w) in enumerate(zip(cells, widths))).rstrip())
        out.extend("    " + note for note in notes.get(index - 1, []))
    return "\n".join(out)
