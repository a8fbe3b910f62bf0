"""`mtl train EXPERIMENT.yaml [--output DIR] [--resume] [--data-root DIR]
[--distribution none|mirrored|multi_worker]`.

The experiment, its tasks and files and the run directory are checked before
TensorFlow is imported (preflight.plan_run): a mistake costs a second, not a
model build, and a refused command writes nothing.
"""


def register(subparsers):
    parser = subparsers.add_parser("train", help="mixed multi-task pretraining from an experiment YAML")
    parser.add_argument("experiment", help="experiment YAML (see experiments/demo.yaml)")
    parser.add_argument("--output", default=None, help="run directory (default: output_dir or runs/NAME)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the run directory's latest checkpoint")
    parser.add_argument("--data-root", metavar="DIR", default=None,
                        help="folder the task specs' file paths are relative to (default: the "
                             "experiment's data_root, else $MTL_DATA_ROOT, else ./data)")
    parser.add_argument("--distribution", choices=("none", "mirrored", "multi_worker"), default=None,
                        help="override the experiment's `distribution`: mirrored = all local "
                             "devices, multi_worker = the cluster in $TF_CONFIG (run it on every host)")
    parser.set_defaults(func=run)


def run(args):
    from mtl_framework.preflight import plan_run

    plan = plan_run(args.experiment, args.output, args.data_root, resume=args.resume)
    from mtl_framework.trainer import Run  # imports TensorFlow: only once the plan holds

    Run(args.experiment, distribution=args.distribution, plan=plan).train(resume=args.resume)
    return 0
