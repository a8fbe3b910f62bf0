"""Write the demo's dev table where README can quote it: RUN_DIR/dev_scores.json and .md.

    python experiments/demo/dev_table.py RUN_DIR [--readme README.md]

Everything comes from the run's own files: the last dev evaluation (evaluations.jsonl),
the training start (provenance.jsonl: versions, commit) and its last update
(metrics.jsonl), plus the machine it ran on. With --readme, the block between README's
two `make demo` markers is replaced by the table: README quotes the demo, with its date
and machine, instead of scores typed by hand.
"""
import argparse
import json
import os
import platform
import time
from datetime import datetime

from mtl_framework.rundir import RunDir
from mtl_framework.rundir import run_dir as layout
from mtl_framework.rundir.provenance import describe
from mtl_framework.saving.model_card import dev_table, last_dev_evaluation

BEGIN = "<!-- make demo: dev scores (experiments/demo/dev_table.py --readme) -->"
END = "<!-- end of make demo's dev scores -->"


def cpu_name():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def summary(run_dir):
    """The JSON record: date, machine, provenance of the training start, training time, scores."""
    evaluation = last_dev_evaluation(run_dir)
    if evaluation is None:
        raise SystemExit(f"{run_dir}: no dev evaluation in {layout.EVALUATIONS}")
    starts = RunDir(run_dir).read_provenance()
    if not starts:
        raise SystemExit(f"{run_dir}: no {layout.PROVENANCE} (trained by an older mtl_framework)")
    start = starts[-1]
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        last_update = json.loads(f.readlines()[-1])["time"]
    started = datetime.strptime(start["time"], "%Y-%m-%dT%H:%M:%S%z").timestamp()
    return {"date": time.strftime("%Y-%m-%d", time.gmtime(last_update)),
            "machine": f"{cpu_name()}, {os.cpu_count()} cores, {platform.system()} "
                       f"{platform.machine()}",
            "provenance": start, "train_seconds": round(last_update - started),
            "evaluation": evaluation}


def markdown(run_dir, record):
    return "\n".join([
        f"`make demo` on {record['date']}, {record['machine']}; "
        f"{describe(record['provenance'])}; training {record['train_seconds']} s.", "",
        *dev_table(run_dir)]) + "\n"


def quote_in_readme(readme, table):
    """README's text with the block between BEGIN and END replaced by `table`."""
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{readme}: no `{BEGIN}` ... `{END}` block to replace")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table}{END}{tail}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("run_dir")
    parser.add_argument("--readme", help="also replace the dev table quoted in this README")
    args = parser.parse_args()
    record = summary(args.run_dir)
    table = markdown(args.run_dir, record)
    with open(os.path.join(args.run_dir, "dev_scores.json"), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1, ensure_ascii=False)
    with open(os.path.join(args.run_dir, "dev_scores.md"), "w", encoding="utf-8") as f:
        f.write(table)
    print(table, end="")
    if args.readme:
        text = quote_in_readme(args.readme, table)
        with open(args.readme, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"quoted in {args.readme}")


if __name__ == "__main__":
    main()
