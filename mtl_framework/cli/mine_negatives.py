"""`mtl mine-negatives MODEL --task TASK --output NEGATIVES.jsonl [--ranks 10-100] [--negatives 7]`:
hard negatives for a contrastive task's pairs, mined with MODEL's current encoder
(embedding/mine_negatives.py), written as FlagEmbedding's {"query", "pos", "neg"} lines
that a `format: pairs` task reads (docs/embeddings.md)."""
import json
import os
import sys

from mtl_framework import cli
from mtl_framework.cli.arguments import SEED, add_task_sources, at_least
from mtl_framework.errors import UserError
from mtl_framework.files import write_atomic


def register(subparsers):
    parser = subparsers.add_parser("mine-negatives",
                                   help="mine hard negatives for a contrastive task with an encoder")
    parser.add_argument("model", help="a run directory or a model folder (the encoder that mines)")
    parser.add_argument("--task", required=True, help="a contrastive task whose pairs get negatives")
    parser.add_argument("--output", required=True, metavar="FILE.jsonl",
                        help="the pairs with their negatives; replaced only with --force")
    parser.add_argument("--force", action="store_true", help="replace an existing --output")
    parser.add_argument("--split", default="train", help="the task's split to mine (default: train)")
    add_task_sources(parser)
    parser.add_argument("--corpus", metavar="FILE",
                        help="passages to draw negatives from, one per line (default: the "
                             "split's distinct positives)")
    parser.add_argument("--ranks", default="10-100", metavar="FIRST-LAST",
                        help="draw from the passages ranked FIRST to LAST-1, from 0, own "
                             "positives left out (default 10-100)")
    parser.add_argument("--negatives", type=at_least(1), default=7,
                        help="negatives per query (default 7, FlagEmbedding's train_group_size 8)")
    parser.add_argument("--seed", type=SEED, default=0)
    parser.add_argument("--batch-size", type=at_least(1), default=32)
    parser.set_defaults(func=run)


def parse_ranks(value, count):
    """(FIRST, LAST) of --ranks, a window that holds --negatives passages."""
    try:
        low, high = (int(v) for v in value.split("-"))
    except ValueError:
        raise UserError(f"--ranks {value}: give FIRST-LAST, e.g. 10-100") from None
    if not 0 <= low < high:
        raise UserError(f"--ranks {value}: FIRST must be >= 0 and below LAST, e.g. 10-100")
    if high - low < count:
        raise UserError(f"--ranks {value}: a window of {high - low} passages, fewer than "
                        f"--negatives {count}: widen it (e.g. --ranks {low}-{low + max(90, count)}) "
                        f"or give --negatives {high - low}")
    return low, high


def task_files(task, data_root):
    """Every file the task's spec names under `data_root`: each split's, and the names
    mirrors give them (file_aliases)."""
    aliases = getattr(task, "file_aliases", None) or {}
    for files in (task.files or {}).values():
        for relative in files if isinstance(files, list) else [files]:
            for name in (relative, *aliases.get(relative, ())):
                yield os.path.join(data_root, name)


def read_corpus(path):
    """--corpus's passages, one per non-blank line (a passage's place in it means nothing)."""
    from mtl_framework.cli.encode import text_lines

    passages = [line for line in text_lines(path, "--corpus") if line.strip()]
    if not passages:
        raise UserError(f"--corpus {path}: no passages (the file is empty or blank): give "
                        "the passages to draw negatives from, one per line, or leave --corpus "
                        "out (the split's own positives)")
    return passages


def positive_pairs(task, split, queries, positives, scores):
    """The (query, positive) pairs whose score is at or above the task's positive_score
    (an unscored pair is a positive), and how many scored below; a scored task (STS, a
    0/1 matching label) holds its negative pairs too, which are no positives to mine for."""
    import math

    from mtl_framework.families.contrastive import embedding_settings

    threshold = embedding_settings(task)["positive_score"]
    kept = [(q, p) for q, p, score in zip(queries, positives, scores)
            if math.isnan(score) or score >= threshold]
    if not kept:
        raise UserError(f"task {task.name}: none of its {len(queries)} {split} pairs scores at "
                        f"or above its embedding.positive_score {threshold:g}: no positive pair "
                        "to mine negatives for (set positive_score in its spec to the score a "
                        "positive has)")
    return kept, len(queries) - len(kept), threshold


def check_reach(passages, ranks, source):
    """Refuse a corpus with no passage at rank FIRST or past (every query would get none)."""
    if len(passages) <= ranks[0]:
        raise UserError(f"--ranks {ranks[0]}-{ranks[1]}: {source} holds {len(passages)} "
                        f"passages, none at rank {ranks[0]} or past: give --ranks "
                        f"0-{len(passages)}, or a larger --corpus")


def run(args):
    ranks = parse_ranks(args.ranks, args.negatives)
    if not args.output.endswith(".jsonl"):
        raise UserError(f"--output {args.output}: give a .jsonl file")
    if args.corpus and not os.path.isfile(args.corpus):
        raise UserError(f"--corpus {args.corpus}: no such file")
    if not args.data_root or not os.path.isdir(args.data_root):
        raise UserError(f"--data-root {args.data_root}: no such folder (or set MTL_DATA_ROOT)")
    from mtl_framework.config.registry import load_registry
    from mtl_framework.config.spec_schema import EMBEDDING_TYPE
    from mtl_framework.evaluation.predict import check_output

    registry = load_registry(args.specs)
    task = registry.tasks.get(args.task)
    if task is None or task.type != EMBEDDING_TYPE:
        raise UserError(f"--task {args.task}: not a {EMBEDDING_TYPE} task of the registry "
                        "(`mtl tasks list` shows their type)")
    if args.split not in task.files:
        raise UserError(f"--split {args.split}: task {task.name} has splits {', '.join(task.files)}")
    # never the files it reads: the corpus, the task's own data (its train file with the
    # user's negatives), the model's
    check_output(args.output, [args.corpus, *task_files(task, args.data_root)], args.model,
                 args.force, what="negatives")
    corpus = read_corpus(args.corpus) if args.corpus else None
    from mtl_framework.console import progress_bar
    from mtl_framework.embedding.encode import Encoder, use_encoding_threads
    from mtl_framework.embedding.mine_negatives import mine_negatives
    from mtl_framework.embedding.suite import task_texts

    if cli.PROGRAM:  # the `mtl` program: its own process, started for this
        use_encoding_threads()

    log = lambda message: print(message, file=sys.stderr)  # noqa: E731
    encoder = Encoder(args.model, task=args.task, any_task=True, log=log)
    queries, positives, scores, _ = task_texts(task, args.split, args.data_root,
                                                encoder.tokenizer)
    if not queries:
        raise UserError(f"task {task.name}: no pairs in its {args.split} split")
    pairs, below, threshold = positive_pairs(task, args.split, queries, positives, scores)
    passages = list(dict.fromkeys(corpus or (p for _, p in pairs)))
    check_reach(passages, ranks, f"--corpus {args.corpus}" if corpus else
                f"the {args.split} split's distinct positives")
    texts = len(dict.fromkeys(q for q, _ in pairs)) + len(passages)
    prefixed = args.task if args.task in encoder.settings.prompts else None
    with progress_bar("encode", texts, leave=False, unit="text") as bar:
        records = mine_negatives(encoder, pairs, corpus, ranks, args.negatives, args.seed,
                                 args.batch_size, bar.update, task=prefixed)
    write_atomic(args.output, lambda temporary: write_records(temporary, records))
    short = sum(len(r["neg"]) < args.negatives for r in records)
    notes = [f"{below} pair(s) scored below positive_score {threshold:g} left out: not "
             "positives"] if below else []
    if short:
        notes.append(f"{short} with fewer: the {len(passages)} passages, less each query's own "
                     f"positives and itself, do not reach rank {ranks[1] - 1}: give a larger "
                     "--corpus, or --ranks starting lower")
    print(f"wrote {args.output}: {len(records)} queries, {args.negatives} negatives each from "
          f"ranks {ranks[0]}-{ranks[1]}" + "".join(f"; {note}" for note in notes))
    return 0


def write_records(path, records):
    with open(path, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
