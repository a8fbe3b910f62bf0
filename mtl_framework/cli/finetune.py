"""`mtl finetune EXPORTED_DIR TASK [--data-root DIR] [--steps N] [--batch-size N] [--lr X]
[--output RUN_DIR] ...`: one task trained from an exported or released backbone folder
(a format of `mtl_framework.formats` that loads), then scored on dev."""
import contextlib
import sys

from mtl_framework.cli import strict_json
from mtl_framework.cli.arguments import SEED, at_least, check_rope_scaling, positive_float
from mtl_framework.config.experiment import OPTIMIZERS
from mtl_framework.formats import loadable


def register(subparsers):
    parser = subparsers.add_parser(
        "finetune", help="fine-tune one task from an exported backbone and score it on dev")
    parser.add_argument("export_dir", help=f"a backbone folder ({', '.join(loadable())}): "
                             "an `mtl export`, or a released RoFormerV2, BERT or ALBERT checkpoint")
    parser.add_argument("task", help="task name (see `mtl tasks list`)")
    parser.add_argument("--data-root", default=None,
                        help="dataset root (default: $MTL_DATA_ROOT or ./data)")
    parser.add_argument("--specs", nargs="+", default=[], metavar="DIR",
                        help="extra task spec folders")
    parser.add_argument("--output", default=None, help="run directory (default: runs/finetune-TASK)")
    parser.add_argument("--steps", type=at_least(1), default=None, help="optimizer updates (default 200)")
    parser.add_argument("--batch-size", type=at_least(1), default=None, help="default 16")
    parser.add_argument("--lr", type=positive_float, default=None, help="peak learning rate (default 2e-5)")
    parser.add_argument("--warmup-steps", type=at_least(0), default=None, help="default steps // 10")
    parser.add_argument("--weight-decay", type=at_least(0.0, float), default=None, help="default 0.01")
    parser.add_argument("--optimizer", default=None, choices=OPTIMIZERS)
    parser.add_argument("--max-length", type=at_least(4), default=None,
                        help="default 128; may exceed the length the backbone was trained at "
                        "(see --rope-scaling)")
    parser.add_argument("--rope-scaling", default=None, metavar="TYPE:FACTOR",
                        help="linear|ntk|dynamic_ntk:FACTOR[:TRAINED_LENGTH], or none "
                        "(default: the backbone folder's)")
    parser.add_argument("--dropout", type=float, default=None, help="default: the export's")
    parser.add_argument("--seed", type=SEED, default=None)
    parser.add_argument("--cache-dir", default=None, help="features cache folder")
    parser.add_argument("--eval-split", default="dev")
    parser.add_argument("--eval-max-examples", type=at_least(1), default=None, metavar="N",
                        help="score only the first N examples (default: all)")
    parser.add_argument("--json", action="store_true", help="print the evaluation as JSON")
    parser.set_defaults(func=run)


def run(args):
    check_rope_scaling(args.rope_scaling)  # before anything is read or written
    from mtl_framework.transfer.finetune import finetune

    log = (lambda message: print(message, file=sys.stderr)) if args.json else print
    # --json: stdout holds only the JSON (Keras's progress bar goes to stderr)
    quiet = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    with quiet:
        _, line = finetune(
            args.export_dir, args.task, output=args.output, data_root=args.data_root,
            task_specs=args.specs, cache_dir=args.cache_dir, eval_split=args.eval_split,
            eval_max_examples=args.eval_max_examples, log=log, steps=args.steps,
            batch_size=args.batch_size, lr=args.lr, warmup_steps=args.warmup_steps,
            weight_decay=args.weight_decay, optimizer=args.optimizer, max_length=args.max_length,
            dropout=args.dropout, seed=args.seed, rope_scaling=args.rope_scaling)
    if args.json:
        strict_json.dump(line, sys.stdout, ensure_ascii=False, indent=1, default=float)
        print()
    return 0
