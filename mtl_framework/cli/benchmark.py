"""`mtl benchmark EXPORT [EXPORT...] --suite SUITE.yaml --data-root DIR --output DIR`:
fine-tune each exported backbone on each task of a suite for each seed; scores with 95%
intervals and paired differences (see mtl_framework.transfer.benchmark). A suite of `kind:
embeddings` (suites/embeddings.yaml) scores each run or folder zero-shot as C-MTEB does
instead (mtl_framework.embedding.suite)."""
import os

from mtl_framework import cli
from mtl_framework.cli.arguments import add_task_sources
from mtl_framework.errors import UserError
from mtl_framework.formats import loadable


def register(subparsers):
    parser = subparsers.add_parser(
        "benchmark", help="fine-tune exported encoders on a suite of tasks and compare them")
    parser.add_argument("exports", nargs="+", metavar="EXPORT",
                        help="backbone folders `mtl finetune` starts from (`mtl export RUN_DIR --format "
                             f"{'|'.join(loadable())}`); with two or "
                             "more, each pair is compared as the earlier export minus the later "
                             "one, paired by seed")
    parser.add_argument("--suite", required=True, help="suite YAML (e.g. suites/clue_small.yaml)")
    add_task_sources(parser)
    parser.add_argument("--output", required=True,
                        help="results folder; run again with the same folder to resume")
    parser.add_argument("--cache-dir", default=None, help="features cache (default: OUTPUT/cache)")
    parser.add_argument("--keep-checkpoints", action="store_true",
                        help="keep each fine-tune's checkpoint (default: removed once scored)")
    parser.add_argument("--mteb-data", metavar="DIR", default=None,
                        help="an embeddings suite: also write each task's data to DIR as "
                             "bench/mteb_local.py gives it to mteb (docs/embeddings.md)")
    parser.set_defaults(func=run)


def suite_kind(path):
    from mtl_framework.config.yaml_io import load_yaml

    data = load_yaml(path).data
    return data.get("kind") if isinstance(data, dict) else None


def run(args):
    from mtl_framework.transfer.benchmark import benchmark

    if suite_kind(args.suite) == "embeddings":
        from mtl_framework.embedding.encode import use_encoding_threads
        from mtl_framework.embedding.suite import embedding_benchmark

        if cli.PROGRAM:  # the `mtl` program: its own process, started for this
            use_encoding_threads()

        results = embedding_benchmark(args.exports, args.suite, args.data_root, args.output,
                                      args.specs, log=lambda message: print(message, flush=True),
                                      mteb_data=args.mteb_data)
        with open(os.path.join(args.output, "results.md"), encoding="utf-8") as f:
            print("\n" + f.read())
        print(f"wrote {os.path.join(args.output, 'results.json')}, results.md "
              f"({len(results['rows'])} rows)")
        return 0

    if args.mteb_data is not None:
        raise UserError(f"--mteb-data: for an embeddings suite (`kind: embeddings`); "
                            f"{args.suite} fine-tunes: leave the flag out")
    results = benchmark(args.exports, args.suite, args.data_root, args.output,
                        task_specs=args.specs, cache_dir=args.cache_dir,
                        keep_checkpoints=args.keep_checkpoints,
                        log=lambda message: print(message, flush=True))
    with open(os.path.join(args.output, "results.md"), encoding="utf-8") as f:
        print("\n" + f.read())
    print(f"wrote {os.path.join(args.output, 'results.json')}, results.md, results.png "
          f"({len(results['rows'])} rows)")
    return 0
