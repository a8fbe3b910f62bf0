"""`mtl export RUN_DIR --format keras|bert4keras|keras-hub --output DIR`."""


def register(subparsers):
    parser = subparsers.add_parser("export", help="export a run's trained backbone")
    parser.add_argument("run_dir")
    parser.add_argument("--format", required=True, choices=["keras", "bert4keras", "keras-hub"])
    parser.add_argument("--output", required=True)
    parser.set_defaults(func=run)


def run(args):
    from mtl_framework.export import export

    path = export(args.run_dir, args.format, args.output)
    print(f"exported {args.format} backbone to {path}")
    return 0
