"""`mtl tasks list` and `mtl tasks validate`: the registry from the command line.

Only the registry is imported (no TensorFlow), so both answer in well under a second.
"""
import sys
from pathlib import Path

from mtl_framework.cli import strict_json
from mtl_framework.config import registry as reg
from mtl_framework.errors import UserError


def register(subparsers):
    parser = subparsers.add_parser("tasks", help="list and validate task specs")
    commands = parser.add_subparsers(dest="tasks_command", metavar="{list,validate}")
    parser.set_defaults(func=lambda args: parser.print_help() or 2)

    listing = commands.add_parser("list", help="the registered tasks, one per line")
    listing.add_argument("--specs", nargs="+", action="extend", default=[], metavar="DIR",
                         help="extra spec directories or files (added to the built-in task_specs/)")
    listing.add_argument("--data-root", metavar="DIR",
                         help="where the data lives (to read label files shipped with it)")
    listing.add_argument("--json", action="store_true", help="a JSON list instead of a table")
    listing.set_defaults(func=list_tasks)

    validate = commands.add_parser("validate", help="check spec files; each problem as file:line: message")
    validate.add_argument("paths", nargs="*", metavar="PATH",
                          help=f"spec files or directories (default: {reg.BUILTIN_SPECS})")
    validate.add_argument("--data-root", metavar="DIR",
                          help="also check label files that ship with the data")
    validate.set_defaults(func=validate_specs)


def list_tasks(args):
    try:
        registry = reg.load_registry(args.specs, data_root=args.data_root)
    except reg.SpecValidationError as error:
        raise spec_errors(error.errors) from None
    rows = [describe(task, args.data_root, registry.datasets.get(task.dataset))
            for task in registry.tasks.values()]
    if args.json:
        strict_json.dump(rows, sys.stdout, ensure_ascii=False, indent=1)
        print()
        return 0
    table = [("name", "dataset", "family", "#labels", "metric", "verified")]
    for row in rows:
        count = len(row["labels"]) if row["labels"] is not None else ("file" if row["label_file"] else "-")
        table.append((row["name"], row["dataset"], row["family"], str(count), row["metric"],
                      row["verified"] or "-"))
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for r in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())
    families = {}
    for row in rows:
        families[row["family"]] = families.get(row["family"], 0) + 1
    print(f"\n{len(rows)} tasks in {len(registry.datasets)} datasets: "
          + ", ".join(f"{family} {n}" for family, n in families.items()))
    print(verified_line(registry.datasets.values()))
    return 0


# What `verified` says of a dataset's spec (spec_schema.VERIFIED).
VERIFIED_MEANS = {
    "data": "read against real release files in ../shared/data",
    "real_formats": "read against excerpts of the published files in ../shared/real_formats",
    "documentation": "written from the publisher's documentation only",
}


def verified_line(datasets):
    """`datasets by what their spec was checked against: data 27 (...), ...`."""
    counts = {}
    for dataset in datasets:
        counts[dataset.verified or "not stated"] = counts.get(dataset.verified or "not stated", 0) + 1
    order = list(VERIFIED_MEANS) + ["not stated"]
    return "datasets by what their spec was checked against: " + "; ".join(
        f"{key} {counts[key]}" + (f" ({VERIFIED_MEANS[key]})" if key in VERIFIED_MEANS else "")
        for key in order if key in counts)


def describe(task, data_root=None, dataset=None):
    """One task as a JSON-ready dict; `labels` is null when it lives in an unreachable file;
    `verified` is its dataset spec's (data, real_formats, documentation; "" unstated)."""
    try:
        labels = task.resolve_labels(data_root)
    except FileNotFoundError:
        labels = None
    return {
        "name": task.name, "dataset": task.dataset, "family": task.type, "format": task.format,
        "labels": labels, "label_file": task.label_file, "multi_label": task.multi_label,
        "metric": task.metric, "max_length": task.max_length, "rate": task.rate,
        "loss_weight": task.loss_weight,
        "verified": getattr(dataset, "verified", "") if dataset is not None else "",
    }


def validate_specs(args):
    paths = [Path(p) for p in args.paths] or [reg.BUILTIN_SPECS]
    try:
        registry = reg.load_paths(paths, data_root=args.data_root)
    except reg.SpecValidationError as error:
        raise spec_errors(error.errors) from None
    clashes = builtin_clashes(registry, paths)
    if clashes:
        raise UserError("\n".join(clashes))
    files, _ = reg.spec_files(paths)
    print(f"ok: {len(files)} spec files, {len(registry.datasets)} datasets, {len(registry.tasks)} tasks")
    return 0


def spec_errors(errors):
    """Every problem as one `error: file:line: message` line (exit 2, like every refusal)."""
    return UserError("\n".join(str(error) for error in errors))


def builtin_clashes(registry, paths):
    """Names of these specs that a built-in task or dataset already has: an experiment
    loads both (built-in first), where the name would mean two things."""
    builtin_dir = reg.BUILTIN_SPECS.resolve()
    if any(Path(p).resolve() == builtin_dir or builtin_dir in Path(p).resolve().parents
           for p in paths):
        return []
    try:
        builtin = reg.load_paths([reg.BUILTIN_SPECS])
    except reg.SpecValidationError:
        return []  # the built-in specs' own problems are `mtl tasks validate`'s to show
    names = {**{n: d for n, d in builtin.datasets.items()}, **builtin.tasks}
    problems = []
    for kind, mine in (("dataset", registry.datasets), ("task", registry.tasks)):
        for name, spec in mine.items():
            if name in names:
                other = names[name]
                problems.append(f"{spec.spec_path}:{spec.line}: {kind} name {name!r} is also a "
                                f"built-in name ({other.spec_path}:{other.line}); an experiment "
                                "loads both: rename it")
    return sorted(problems)
