"""`mtl report RUN_DIR [--output DIR]`: PNG plots of a run's metrics."""


def register(subparsers):
    parser = subparsers.add_parser("report", help="plot a run's training metrics and dev scores")
    parser.add_argument("run_dir", help="run directory written by `mtl train`")
    parser.add_argument("--output", default=None, help="folder for the PNG files (default: RUN_DIR/plots)")
    parser.add_argument("--force", action="store_true",
                        help="replace PNG files of the same names already in --output")
    parser.set_defaults(func=run)


def run(args):
    from mtl_framework.plots import write_report

    for path in write_report(args.run_dir, args.output, force=args.force):
        print(path)
    return 0
