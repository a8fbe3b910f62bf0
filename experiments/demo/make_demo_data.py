"""Cut the bundled demo samples from the real datasets (run once; output is committed).

    python experiments/demo/make_demo_data.py ../shared/data experiments/demo/data

Takes the first records of each file, unchanged, so the demo reads exactly the
official formats through the same task specs as full runs.
"""
import json
import os
import sys

SAMPLES = {  # path under the data root -> (kind, records kept)
    # the tasks the demo learns get enough rows for a 2-layer model to beat the majority class
    "tnews/train.json": ("lines", 2000), "tnews/dev.json": ("lines", 300),
    "chnsenticorp/train.tsv": ("lines", 1500), "chnsenticorp/dev.tsv": ("lines", 300),
    "cluener/train.json": ("json_stream", 1000), "cluener/dev.json": ("json_stream", 200),
    "afqmc/train.txt": ("lines", 400), "afqmc/dev.txt": ("lines", 100),
    "cluewsc2020/train.json": ("lines", 400), "cluewsc2020/dev.json": ("lines", 100),
    "duie/train_data_5000.json": ("lines", 400), "duie/dev_data_2000_todd.json": ("lines", 100),
    "c3/c3-d-train.json": ("json_list", 120), "c3/c3-d-dev.json": ("json_list", 40),
    "c3/c3-m-train.json": ("json_list", 120), "c3/c3-m-dev.json": ("json_list", 40),
    "cmrc2018/train.json": ("squad", 60), "cmrc2018/dev.json": ("squad", 15),
}


def json_stream(text):
    decoder, position = json.JSONDecoder(), 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position >= len(text):
            return
        obj, position = decoder.raw_decode(text, position)
        yield obj


def cut(source, target, kind, n):
    with open(source, encoding="utf-8") as f:
        if kind == "lines":
            out = "".join(line for _, line in zip(range(n), f))
        elif kind == "json_stream":
            out = "".join(json.dumps(o, ensure_ascii=False) + "\n"
                          for _, o in zip(range(n), json_stream(f.read())))
        elif kind == "json_list":
            out = json.dumps(json.load(f)[:n], ensure_ascii=False)
        else:  # squad: keep the first n articles
            data = json.load(f)
            data["data"] = data["data"][:n]
            out = json.dumps(data, ensure_ascii=False)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, "w", encoding="utf-8") as f:
        f.write(out)


def main(source_root, target_root):
    for path, (kind, n) in SAMPLES.items():
        cut(os.path.join(source_root, path), os.path.join(target_root, path), kind, n)
        print(f"{path}: first {n} {'articles' if kind == 'squad' else 'records'}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
