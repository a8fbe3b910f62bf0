"""`mtl mine-negatives MODEL --task TASK --output NEGATIVES.jsonl [--ranks 10-100] [--negatives 7]`:
hard negatives for a contrastive task's pairs, mined with MODEL's current encoder
(evaluation/mine_negatives.py), written as FlagEmbedding's {"query", "pos", "neg"} lines
that a `format: pairs` task reads (docs/embeddings.md)."""
import json
import os
import sys

from mtl_framework import cli
from mtl_framework.cli.arguments import at_least
from mtl_framework.errors import UserError


def register(subparsers):
    parser = subparsers.add_parser("mine-negatives",
                                   help="mine hard negatives for a contrastive task with an encoder")
    parser.add_argument("model", help="a run directory or a model folder (the encoder that mines)")
    parser.add_argument("--task", required=True, help="a contrastive task whose pairs get negatives")
    parser.add_argument("--output", required=True, metavar="FILE.jsonl",
                        help="the pairs with their negatives; replaced only with --force")
    parser.add_argument("--force", action="store_true", help="replace an existing --output")
    parser.add_argument("--split", default="train", help="the task's split to mine (default: train)")
    parser.add_argument("--data-root", default=os.environ.get("MTL_DATA_ROOT"),
                        help="dataset root (default: $MTL_DATA_ROOT)")
    parser.add_argument("--specs", nargs="+", default=[], metavar="DIR", help="extra task spec folders")
    parser.add_argument("--corpus", metavar="FILE",
                        help="passages to draw negatives from, one per line (default: the "
                             "split's distinct positives)")
    parser.add_argument("--ranks", default="10-100", metavar="FIRST-LAST",
                        help="draw from the passages ranked FIRST to LAST-1, from 0, own "
                             "positives left out (default 10-100)")
    parser.add_argument("--negatives", type=at_least(1), default=7,
                        help="negatives per query (default 7, FlagEmbedding's train_group_size 8)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=at_least(1), default=32)
    parser.set_defaults(func=run)


def parse_ranks(value):
    try:
        low, high = (int(v) for v in value.split("-"))
    except ValueError:
        raise UserError(f"--ranks {value}: give FIRST-LAST, e.g. 10-100") from None
    if not 0 <= low < high:
        raise UserError(f"--ranks {value}: FIRST must be >= 0 and below LAST, e.g. 10-100")
    return low, high


def run(args):
    ranks = parse_ranks(args.ranks)
    if not args.output.endswith(".jsonl"):
        raise UserError(f"--output {args.output}: give a .jsonl file")
    from mtl_framework.evaluation.predict import check_output

    check_output(args.output, [args.corpus], args.model, args.force)
    if args.corpus and not os.path.isfile(args.corpus):
        raise UserError(f"--corpus {args.corpus}: no such file")
    if not args.data_root or not os.path.isdir(args.data_root):
        raise UserError(f"--data-root {args.data_root}: no such folder (or set MTL_DATA_ROOT)")
    from mtl_framework.config.registry import load_registry
    from mtl_framework.config.spec_schema import EMBEDDING_TYPE

    registry = load_registry(args.specs)
    task = registry.tasks.get(args.task)
    if task is None or task.type != EMBEDDING_TYPE:
        raise UserError(f"--task {args.task}: not a {EMBEDDING_TYPE} task of the registry "
                        "(`mtl tasks list` shows their type)")
    if args.split not in task.files:
        raise UserError(f"--split {args.split}: task {task.name} has splits {', '.join(task.files)}")
    corpus = None
    if args.corpus:
        with open(args.corpus, encoding="utf-8") as f:
            corpus = [line.rstrip("\r\n") for line in f if line.strip()]
    from mtl_framework.console import progress_bar
    from mtl_framework.evaluation.embedding_suite import task_texts
    from mtl_framework.evaluation.encode import Encoder, use_encoding_threads
    from mtl_framework.evaluation.mine_negatives import mine_negatives

    if cli.PROGRAM:  # the `mtl` program: its own process, started for this
        use_encoding_threads()

    log = lambda message: print(message, file=sys.stderr)  # noqa: E731
    encoder = Encoder(args.model, log=log)
    queries, positives, _, _ = task_texts(task, args.split, args.data_root, encoder.tokenizer)
    if not queries:
        raise UserError(f"task {task.name}: no pairs in its {args.split} split")
    texts = len(dict.fromkeys(queries)) + len(dict.fromkeys(corpus or positives))
    with progress_bar("encode", texts, leave=False, unit="text") as bar:
        records = mine_negatives(encoder, list(zip(queries, positives)), corpus, ranks,
                                 args.negatives, args.seed, args.batch_size, bar.update)
    temporary = f"{args.output}.tmp{os.getpid()}"
    with open(temporary, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    os.replace(temporary, args.output)  # whole or not at all
    short = sum(len(r["neg"]) < args.negatives for r in records)
    print(f"wrote {args.output}: {len(records)} queries, {args.negatives} negatives each from "
          f"ranks {ranks[0]}-{ranks[1]}" + (f" ({short} with fewer: a small corpus)" if short else ""))
    return 0
