"""Print the first predictions of `mtl predict` beside their dev inputs and gold labels.

    python experiments/demo/show_predictions.py TASK PREDICTIONS.jsonl [--data-root DIR] [-n 5]

The predictions are of TASK's dev file under the data root (default: the demo
samples), one JSON line per example in input order, as `mtl predict` writes them.
"""
import argparse
import json
import os

from data_adapters import read_task
from mtl_framework.config.registry import load_registry

HERE = os.path.dirname(os.path.abspath(__file__))


def gold(example):
    if hasattr(example, "entities"):
        return [{"type": e.type, "text": example.text[e.start:e.end]} for e in example.entities]
    return getattr(example, "label", None)


def shown(prediction, text):
    if isinstance(prediction, list):  # spans: the mention and its type are what a reader checks
        return [{"type": p.get("type"), "text": p.get("text")} if isinstance(p, dict) else p
                for p in prediction]
    return prediction


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task")
    parser.add_argument("predictions")
    parser.add_argument("--data-root", default=os.path.join(HERE, "data"))
    parser.add_argument("-n", type=int, default=5)
    args = parser.parse_args()
    (task,) = load_registry().select([args.task])
    with open(args.predictions, encoding="utf-8") as f:
        predictions = [json.loads(line) for _, line in zip(range(args.n), f)]
    print(f"{args.task}: first {len(predictions)} dev examples")
    for example, line in zip(read_task(task, "dev", args.data_root), predictions):
        print(f"  {example.text[:48]}")
        print(f"    predicted {json.dumps(shown(line['prediction'], example.text), ensure_ascii=False)}"
              f"   gold {json.dumps(gold(example), ensure_ascii=False)}")


if __name__ == "__main__":
    main()
