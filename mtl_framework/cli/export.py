"""`mtl export RUN_DIR --format FORMAT --output DIR [--with-heads] [--force]
[--checkpoint latest|best|STEP] [--embedding-task NAME]`: FORMAT one of
`mtl_framework.formats.FORMATS`."""
from mtl_framework.formats import NAMES


def register(subparsers):
    parser = subparsers.add_parser("export", help="export a run's trained backbone")
    parser.add_argument("run_dir")
    parser.add_argument("--format", required=True, choices=NAMES)
    parser.add_argument("--output", required=True,
                        help="a new or empty folder (an earlier export only with --force)")
    parser.add_argument("--with-heads", action="store_true",
                        help="keras format: also keep the task heads (for a continued "
                             "multi-task run: experiment `backbone: {init: DIR}`)")
    parser.add_argument("--force", action="store_true",
                        help="replace an earlier export in --output; nothing of it is kept")
    parser.add_argument("--checkpoint", default="latest", metavar="latest|best|STEP",
                        help="which checkpoint: the newest readable one (default), keep_best's "
                             "best-by-dev one, or step N's")
    parser.add_argument("--embedding-task", metavar="NAME",
                        help="transformers format: the contrastive task whose pooling, "
                             "normalisation and prefixes the sentence-transformers model "
                             "takes (needed when the run's contrastive tasks differ)")
    parser.set_defaults(func=run)


def run(args):
    from mtl_framework.files import not_stdout
    from mtl_framework.saving.writer import export

    not_stdout(args.output, "--output")
    # Errors (no run, damaged checkpoints, a non-empty --output) are UserErrors: one line.
    path = export(args.run_dir, args.format, args.output, with_heads=args.with_heads,
                  force=args.force, checkpoint=args.checkpoint,
                  embedding_task=args.embedding_task)
    print(f"exported {args.format} backbone{' and task heads' if args.with_heads else ''} "
          f"to {path}")
    return 0
