"""`mtl train EXPERIMENT.yaml [--output DIR] [--resume] [--distribution none|mirrored|multi_worker]`."""
import sys


def register(subparsers):
    parser = subparsers.add_parser("train", help="mixed multi-task pretraining from an experiment YAML")
    parser.add_argument("experiment", help="experiment YAML (see experiments/demo.yaml)")
    parser.add_argument("--output", default=None, help="run directory (default: output_dir or runs/NAME)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the run directory's latest checkpoint")
    parser.add_argument("--distribution", choices=("none", "mirrored", "multi_worker"), default=None,
                        help="override the experiment's `distribution`: mirrored = all local "
                             "devices, multi_worker = the cluster in $TF_CONFIG (run it on every host)")
    parser.set_defaults(func=run)


def run(args):
    from mtl_framework.experiment import ExperimentError
    from mtl_framework.registry import SpecValidationError
    from mtl_framework.trainer import Run

    try:
        Run(args.experiment, args.output, distribution=args.distribution).train(resume=args.resume)
    except (ExperimentError, SpecValidationError) as error:
        print(error, file=sys.stderr)
        return 2
    except FileExistsError as error:
        print(f"mtl train: {error}", file=sys.stderr)
        return 2
    return 0
