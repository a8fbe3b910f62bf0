"""`mtl train EXPERIMENT.yaml [--output DIR] [--resume] [--data-root DIR]
[--distribution none|mirrored|multi_worker] [--set KEY=VALUE ...] [--print-config]`.

The experiment, its tasks and files and the run directory are checked before
TensorFlow is imported (plan.plan_run): a mistake costs a second, not a
model build, and a refused command writes nothing. `--set optimizer.lr=1e-4`
overrides a key (dotted path, value read as YAML) before the checks;
`--print-config` prints the resolved experiment and writes nothing.
"""
import shlex
import sys

import yaml

from mtl_framework.cli.arguments import add_experiment_data_root
from mtl_framework.config.experiment import DISTRIBUTION
from mtl_framework.errors import Interrupted
from mtl_framework.rundir import RunDir


def register(subparsers):
    parser = subparsers.add_parser("train", help="mixed multi-task pretraining from an experiment YAML")
    parser.add_argument("experiment", help="experiment YAML (see experiments/demo.yaml)")
    parser.add_argument("--output", default=None, help="run directory (default: output_dir or runs/NAME)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the run directory's latest checkpoint")
    add_experiment_data_root(parser)
    parser.add_argument("--distribution", choices=DISTRIBUTION, default=None,
                        help="override the experiment's `distribution`: mirrored = all local "
                             "devices, multi_worker = the cluster in $TF_CONFIG (run it on every host)")
    parser.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="overrides",
                        help="override an experiment key before it is checked, e.g. --set "
                             "optimizer.lr=1e-4 --set steps=500 (dotted keys; the value is read "
                             "as YAML); repeatable")
    parser.add_argument("--print-config", action="store_true",
                        help="print the resolved experiment (extends merged, --set applied, "
                             "paths absolute) and exit without writing anything")
    parser.set_defaults(func=command)


def command(args):
    """`mtl train`: the resolved experiment printed (`--print-config`), or the run trained."""
    if args.print_config:
        print_config(args)
        return 0
    return run(args)


def run(args):
    """Plan, then train: the plan's checks first, TensorFlow only once they hold."""
    from mtl_framework.plan import plan_run

    plan = plan_run(args.experiment, args.output, args.data_root, resume=args.resume,
                    overrides=args.overrides)
    started = plan.run.newest_step() if args.resume else 0
    run = None
    try:
        from mtl_framework.loop.run import Run  # imports TensorFlow: only once the plan holds

        run = Run(plan.experiment, distribution=args.distribution, plan=plan)
        run.train(resume=args.resume)
    except KeyboardInterrupt:
        step = run.step if run is not None and run.step else started
        raise Interrupted(interrupted_line(args, plan.run_dir, step)) from None
    return 0


def print_config(args, out=None):
    """The experiment as the run directory would keep it, then the defaults it leaves
    unset as comments; checked like `mtl train` checks it, data folders aside."""
    out = out or sys.stdout  # looked up now: a caller may have replaced it since import
    from mtl_framework.config.experiment import DEFAULTS, load_experiment
    from mtl_framework.config.precision import AS_NAMED, run_precision

    experiment = load_experiment(args.experiment, args.overrides)
    resolved = experiment.resolved(experiment.data_root_path(args.data_root)[0])
    # as `mtl train` settles it: $MTL_PRECISION for a precision not named (a bad value
    # refused as train refuses it), `auto` by this CPU
    policy, why = run_precision(experiment)
    out.write(yaml.safe_dump(resolved, allow_unicode=True, sort_keys=False))
    unset = {key: value for key, value in DEFAULTS.items() if key not in resolved}
    if "precision" in unset:
        unset["precision"] = experiment.precision  # $MTL_PRECISION stands in for the default
    if unset:
        out.write("# defaults (not given):\n")
        for line in yaml.safe_dump(unset, allow_unicode=True, sort_keys=False).splitlines():
            out.write(f"#   {line}\n")
    if why != AS_NAMED:
        out.write(f"# a new run computes in {policy} ({why})\n")


def interrupted_line(args, run_dir, step):
    """Where Ctrl-C stopped and the command that continues (the newest checkpoint: a
    resume trains the updates after it again, bit-identical to an uninterrupted run)."""
    resume_from = RunDir(run_dir).newest_step()
    command = ["mtl", "train", args.experiment, "--output", run_dir]
    if args.data_root:
        command += ["--data-root", args.data_root]
    if args.distribution:
        command += ["--distribution", args.distribution]
    for override in args.overrides or ():
        command += ["--set", override]
    if resume_from:
        return (f"interrupted at update {step}; `{shlex.join(command + ['--resume'])}` "
                f"continues from update {resume_from}")
    return (f"interrupted at update {step}, before the first checkpoint; "
            f"`{shlex.join(command)}` starts again from update 0")
