"""`mtl export RUN_DIR --format keras|bert4keras|keras-hub --output DIR [--with-heads]`."""


def register(subparsers):
    parser = subparsers.add_parser("export", help="export a run's trained backbone")
    parser.add_argument("run_dir")
    parser.add_argument("--format", required=True, choices=["keras", "bert4keras", "keras-hub"])
    parser.add_argument("--output", required=True)
    parser.add_argument("--with-heads", action="store_true",
                        help="keras format: also keep the task heads (for a continued "
                             "multi-task run: experiment `backbone: {init: DIR}`)")
    parser.set_defaults(func=run)


def run(args):
    from mtl_framework.export import export

    path = export(args.run_dir, args.format, args.output, with_heads=args.with_heads)
    print(f"exported {args.format} backbone{' and task heads' if args.with_heads else ''} "
          f"to {path}")
    return 0
