"""Build a task mixture in Python and train it with stock Keras callbacks.

    python examples/train_mixture.py [--output runs/example] [--steps 60]

The experiment is a dict, checked exactly as a YAML file is (a mistake names its
key). Keras's `logs` hold `loss/<task>`, `rate/<task>`, `dev/<task>` and
`dev/aggregate`, one Keras epoch per evaluation, so EarlyStopping and CSVLogger
need nothing of ours. The run is exported as a keras preset with its heads, for
examples/finetune_classifier.py and examples/predict_ner.py.
"""
import argparse
import os

DEMO_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "experiments",
                         "demo", "data")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="runs/example")
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args(argv)

    import keras

    from mtl_framework.config.experiment import Experiment
    from mtl_framework.loop.run import Run
    from mtl_framework.saving.writer import export

    experiment = Experiment.from_dict({
        "data_root": DEMO_DATA,
        "backbone": {"num_layers": 2, "hidden_size": 64, "num_heads": 4,
                     "intermediate_size": 128, "vocab_size": 3000, "dropout": 0.1},
        "tasks": [{"name": "tnews", "rate": 0.3}, {"name": "chnsenticorp", "rate": 0.3},
                  {"name": "cluener", "rate": 0.4}],
        "sampling": "fixed", "batch_size": 16, "max_length": 64, "tasks_per_update": 3,
        "optimizer": {"name": "adamw", "lr": 0.002, "warmup_steps": 5},
        "steps": args.steps, "eval_every": max(1, args.steps // 3), "eval_batches": 4,
        "checkpoint_every": 0, "keep_best": {"metric": "aggregate"},
    })
    run = Run(experiment, output=args.output, callbacks=[
        keras.callbacks.EarlyStopping(monitor="dev/aggregate", mode="max", patience=2),
        keras.callbacks.CSVLogger(os.path.join(args.output, "epochs.csv")),
    ])
    run.train()
    export(args.output, "keras", os.path.join(args.output, "export"), with_heads=True,
           checkpoint="best", force=True)
    print(f"dev scores: {os.path.join(args.output, 'epochs.csv')}; "
          f"best checkpoint exported to {os.path.join(args.output, 'export')}")


if __name__ == "__main__":  # feature caches are built in worker processes (spawn)
    main()
