"""Predict named-entity spans from raw strings with a trained run (or a --with-heads export).

    python examples/predict_ner.py [--model runs/example/export]

Each span is {"type", "start", "end", "text"}, half-open character offsets, and
text == sentence[start:end].
"""
import argparse
import os

DEMO_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "experiments",
                         "demo", "data")
SENTENCES = ["浙商银行企业信贷部叶老桂博士则从另一个角度对五道门槛进行了解读。",
             "他在北京大学读书，毕业后去了腾讯公司。"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="runs/example/export",
                        help="a run directory or a keras export written --with-heads")
    args = parser.parse_args(argv)

    from mtl_framework.evaluation.predict import load_model

    model = load_model(args.model, data_root=DEMO_DATA)
    for sentence, spans in zip(SENTENCES, model.predict_texts("cluener", SENTENCES)):
        print(sentence)
        for span in spans:
            print(f"  {span['type']:<12} {span['start']:>3}-{span['end']:<3} {span['text']}")
    return model


if __name__ == "__main__":
    main()
