"""Fine-tune a classifier from an exported encoder, then predict raw strings.

    python examples/finetune_classifier.py [--export runs/example/export] [--output runs/example_ft]

The export is any backbone folder (`mtl export` keras / bert4keras / roformer-pytorch,
or a released bert4keras checkpoint). chnsenticorp's demo sample trains the head;
the predictions are label names from its task spec.
"""
import argparse
import os

DEMO_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "experiments",
                         "demo", "data")
REVIEWS = ["房间干净，服务周到，下次还来。", "设备老旧，隔音很差，不会再住了。"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", default="runs/example/export")
    parser.add_argument("--output", default="runs/example_ft")
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args(argv)

    from mtl_framework.evaluation.predict import load_model
    from mtl_framework.transfer.finetune import finetune

    run, scores = finetune(args.export, "chnsenticorp", output=args.output, data_root=DEMO_DATA,
                           steps=args.steps, batch_size=16, lr=1e-3, max_length=64)
    print(f"chnsenticorp dev accuracy: {scores['tasks']['chnsenticorp']['score']:.4f}")
    model = load_model(args.output, data_root=DEMO_DATA)
    for review, label in zip(REVIEWS, model.predict_texts("chnsenticorp", REVIEWS)):
        print(f"{label:>8}  {review}")


if __name__ == "__main__":
    main()
