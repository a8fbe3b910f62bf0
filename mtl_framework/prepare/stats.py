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
import re

from data_adapters import ReadReport, read_task
from data_adapters.examples import PairExample
from mtl_framework.families import family

DEFAULT_DATA_ROOT = "data"
# Counted alongside the examples, in this order, when an adapter reports them.
UNITS = ("questions", "texts", "entities", "triples", "events", "arguments", "unanswerable",
         "unlabelled", "negatives")


# Span tasks' texts are checked for characters glued to what the format put beside
# them: Weibo NER's `科0技1` (position in the word) read without strip_position_digits,
# or a tag column read into the text (`我O爱O北B-LOC`). Natural text rarely has three
# such characters in a row; a spec that reads them so has it on most lines.
SPAN_FIELDS = ("entities", "triples", "events")
GLUE_SAMPLE = 200
GLUED = {
    "position digits": (re.compile(r"(?:[\u4e00-\u9fff]\d{1,2}){3,}"),
                        "options.strip_position_digits: true (format tagged_chars) removes them"),
    "tags": (re.compile(r"(?:[\u4e00-\u9fff][/_]?(?:[BIEMS][-_][A-Za-z.]+|O)){3,}"),
             "check options.separator (between character and tag) and the format"),
}


def glued_warning(texts, share=0.3):
    """A warning when at least `share` of the texts hold a run of characters glued to
    position digits or tags, with an example; None otherwise."""
    for kind, (pattern, fix) in GLUED.items():
        found = [match.group() for match in map(pattern.search, texts) if match]
        if texts and len(found) >= share * len(texts):
            return (f"{len(found)} of the first {len(texts)} texts look glued to {kind} "
                    f"(e.g. {found[0][:12]!r}): the model would read them as text; {fix}")
    return None


def default_data_root():
    return os.environ.get("MTL_DATA_ROOT") or DEFAULT_DATA_ROOT


def split_stats(task, split, data_root, tokenizer=None, max_length=None, cache_dir=None):
    files = task.files[split]
    named = files if isinstance(files, list) else [files]
    row = {"task": task.name, "dataset": task.dataset, "split": split, "format": task.format,
           "files": read_names(task, split, data_root, named)}
    if row["files"] != named:  # a mirror's name (an alias) was read: say which file
        row["spec_files"] = named
    report, span_texts, values, negatives = ReadReport(), [], [], 0
    numeric = family(task.type).numeric_label
    try:
        for example in read_task(task, split, data_root, report):
            if len(span_texts) < GLUE_SAMPLE and any(hasattr(example, f) for f in SPAN_FIELDS):
                span_texts.append(example.text)
            target = numeric_target(example) if numeric else None
            if isinstance(target, (int, float)) and not isinstance(target, bool):
                values.append(float(target))
            if isinstance(example, PairExample):
                negatives += len(example.negatives)
    except (OSError, ValueError, KeyError) as error:
        row["error"] = str(error)
        return row
    row.update(report.as_dict())
    if negatives:  # pairs: the hard negatives their rows carry (after dropping bad ones)
        row["negatives"] = negatives
    if values:  # a numeric target's range: a 0-5 STS score read as 0-1 shows here
        row["label_range"] = {"min": min(values), "max": max(values),
                              "mean": round(sum(values) / len(values), 4)}
    warning = glued_warning(span_texts)
    if warning:
        row["warnings"] = [warning]
    if tokenizer is not None:
        row["features"] = feature_stats(task, split, data_root, tokenizer, max_length, cache_dir)
    return row


def numeric_target(example):
    """The number a numeric family learns from an example: a label (regression, a text-pair
    contrastive task's score), a pair's `score`, or None (a question and its passage)."""
    return getattr(example, "label", getattr(example, "score", None))


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
    from mtl_framework.prepare.cache import cached_features

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
        if row.get("label_range"):
            span = row["label_range"]
            counts += (", " if counts else "") + \
                f"labels {span['min']:g}..{span['max']:g} (mean {span['mean']:g})"
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
        lines += [f"warning: {warning}" for warning in row.get("warnings", [])]
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
