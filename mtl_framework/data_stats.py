"""What reading a task's data gives: examples, skipped rows and lost spans, per split.

    rows = collect(registry.select(["cmrc2018"]), "/data")
    print(format_table(rows))

Each row is the ReadReport of one (task, split) plus where it came from; a
split that cannot be read (missing file, bad option) gets an `error` instead.
Given a tokenizer, each row also gets `features`: what turning the examples into
token arrays at the task's max_length did (truncated examples, spans cut off by
truncation, dropped examples), through the feature cache so a second call is fast.
Nothing here imports TensorFlow: reading and featurizing are plain Python.
"""
import os

from data_adapters import ReadReport, read_task

DEFAULT_DATA_ROOT = "data"
# Counted alongside the examples, in this order, when an adapter reports them.
UNITS = ("questions", "texts", "entities", "triples", "events", "arguments", "unanswerable",
         "unlabelled")


def default_data_root():
    return os.environ.get("MTL_DATA_ROOT") or DEFAULT_DATA_ROOT


def split_stats(task, split, data_root, tokenizer=None, max_length=None, cache_dir=None):
    files = task.files[split]
    named = files if isinstance(files, list) else [files]
    row = {"task": task.name, "dataset": task.dataset, "split": split, "format": task.format,
           "files": read_names(task, split, data_root, named)}
    if row["files"] != named:  # a mirror's name (an alias) was read: say which file
        row["spec_files"] = named
    report = ReadReport()
    try:
        for _ in read_task(task, split, data_root, report):
            pass
    except (OSError, ValueError, KeyError) as error:
        row["error"] = str(error)
        return row
    row.update(report.as_dict())
    if tokenizer is not None:
        row["features"] = feature_stats(task, split, data_root, tokenizer, max_length, cache_dir)
    return row


def read_names(task, split, data_root, named):
    """The files a split is read from, relative to the data root: the spec's names, or
    the alias a mirror gives a file where that is what is there."""
    from data_adapters import split_paths

    try:
        present, _ = split_paths(task, split, data_root)
    except (KeyError, OSError):
        return named
    out = []
    for path in present:
        try:
            out.append(str(path.relative_to(data_root)))
        except ValueError:
            out.append(str(path))
    return out if len(out) == len(named) else named


def feature_stats(task, split, data_root, tokenizer, max_length=None, cache_dir=None):
    """The FeatureReport of one split at `max_length` (default: the spec's), or an `error`."""
    from mtl_framework.cache import cached_features

    length = max_length or task.max_length
    try:
        features = cached_features(task, split, tokenizer, data_root, cache_dir, length)
    except (OSError, ValueError, KeyError) as error:
        return {"max_length": length, "error": str(error)}
    return {"max_length": length, **features.report.as_dict()}


def collect(tasks, data_root, splits=None, tokenizer=None, max_length=None, cache_dir=None):
    """One row per task and split (all the task's splits, or those in `splits`)."""
    rows = []
    for task in tasks:
        for split in task.files:
            if not splits or split in splits:
                rows.append(split_stats(task, split, data_root, tokenizer, max_length, cache_dir))
    return rows


def format_table(rows):
    """A table of counts, then each skip/loss reason under its row with its first place.
    `lost` counts spans the adapter could not place on the text; with features,
    `truncated` counts examples cut to max_length and `cut` the spans that cost."""
    with_features = any("features" in row for row in rows)
    header = ("task", "split", "examples", "skipped", "spans", "lost")
    header += ("truncated", "cut", "counts") if with_features else ("counts",)
    numeric = range(2, len(header) - 1)
    table, notes = [header], {}
    for index, row in enumerate(rows):
        if "error" in row:
            table.append((row["task"], row["split"]) + ("-",) * (len(header) - 3) + ("ERROR",))
            notes[index] = [f"error: {row['error']}"]
            continue
        counts = ", ".join(f"{unit} {row[unit]}" for unit in UNITS if row.get(unit))
        cells = (row["task"], row["split"], str(row["examples"]), str(row["skipped_total"]),
                 str(row["spans"]), str(row["spans_lost_total"]))
        lines = []
        for kind, key in (("skipped", "skipped"), ("lost", "spans_lost")):
            for reason, detail in row[key].items():
                first = f" (first: {detail['first'][0]})" if detail["first"] else ""
                lines.append(f"{kind} {detail['count']}: {reason}{first}")
        for reason, count in row.get("filtered", {}).items():
            places = row.get("filtered_places", {}).get(reason)
            lines.append(f"filtered {count}: {reason}"
                         + (f" (first: {places[0]})" if places else ""))
        for reason, count in row.get("repaired", {}).items():
            lines.append(f"repaired {count}: {reason}")
        if row.get("spec_files"):
            lines.append(f"read: {', '.join(row['files'])} (the spec names "
                         f"{', '.join(row['spec_files'])}; a mirror's name for it)")
        for path in row.get("absent", []):
            lines.append(f"absent: {path} (optional; the split's other files were read)")
        if with_features:
            feature_cells, feature_lines = _feature_columns(row.get("features"))
            cells += feature_cells
            lines += feature_lines
        table.append(cells + (counts,))
        notes[index] = lines
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    out = []
    for index, cells in enumerate(table):
        out.append("  ".join(c.rjust(w) if i in numeric else c.ljust(w)
                             for i, (c, w) in enumerate(zip(cells, widths))).rstrip())
        out.extend("    " + note for note in notes.get(index - 1, []))
    return "\n".join(out)


def _feature_columns(stats):
    """(truncated, cut) cells and the reasons under the row, from a `features` entry."""
    if not stats:
        return ("-", "-"), []
    if "error" in stats:
        return ("-", "-"), [f"features error: {stats['error']}"]
    lines = [f"at max_length {stats['max_length']}: {stats['rows']} feature rows"]
    for kind, key in (("truncated", "truncated"), ("cut", "spans_lost"), ("dropped", "dropped")):
        lines += [f"{kind} {count}: {reason}" for reason, count in stats[key].items()]
    return (str(stats["truncated_total"]), str(stats["spans_lost_total"])), lines
