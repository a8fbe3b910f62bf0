"""From scratch, our RoFormerV2 vs bert4keras 0.11.5's, trained the same way (issue 12).

    .venv/bin/python -m bench.init_vs_bert4keras [--data-root ../shared/data]
        [--seeds 0 1 2] [--steps 400] [--sides ours bert4keras ours_old] [--quick]

One single-task run per (task, side, seed) on TNEWS (classification, accuracy)
and CLUENER (NER, span F1), scored on dev:

- same data: one char vocab built from both tasks' train text; features made
  once by our featurizer; per seed one list of train batches (our length-bucketed
  TaskStream order) written to an .npz that BOTH sides read, so a seed means the
  same batches in the same order on both sides; the dev batches likewise;
- same model size (tiny L2-H128-A2-I512, head size 64, dropout 0.1, no residual
  warm-up: bert4keras has none), same loss (softmax CE; GPLinker's sparse
  multilabel CE summed over types, mean over rows), same optimizer (Keras Adam,
  eps 1e-7: Keras 3 on ours, tf-keras on theirs), same learning-rate schedule
  (linear warm-up, linear decay to 0), same number of updates;
- what differs: the implementation and the initial weights, each side drawing
  its own with its own rule. `ours` is this repository's initializer,
  `bert4keras` is bert4keras's model, layers and initializer in a legacy
  tf-keras subprocess (bench/bert4keras_init_worker.py), `ours_old` is ours
  with the initialisation before issue 12 re-created (one TruncatedNormal
  instance, hence one seed, for every backbone weight with the hidden-size std;
  heads TruncatedNormal(0.02), pointers lecun_normal shared by both Dense).

Decoding is the same for both sides: argmax; spans scoring > 0 without [CLS]
and [SEP], the 256 best kept (our EntityHead.decode). Writes the study into
bench/results/init_vs_bert4keras.{json,md}: every run's score, mean and 95%
interval (t) per side, and the paired per-seed difference ours - bert4keras. A study is
named by its tasks and updates (`tnews_cluener300`, `cluener600`) unless --study names it;
the file keeps its other studies (bench/studies.py), and re-running one replaces its entry.
Dev: the first --dev-examples rows of each dev split (TNEWS 4032 of 10000 by default, to
save CPU on a shared machine; all 1343 of CLUENER).
The machine is shared: the JSON records the load average.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import REPO, child_env
from bench.bert4keras_init_worker import learning_rate  # one schedule for both sides
from bench.load import cpu_model, load_average
from bench.studies import read_study, write_study

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

TASKS = {"tnews": "classification", "cluener": "ner"}
SIDES = ["ours", "bert4keras", "ours_old"]
FULL = dict(num_layers=2, hidden_size=128, num_heads=2, intermediate_size=512, head_size=64,
            steps=300, warmup=30, batch_size=32, max_length=64, lr=1e-3, vocab_size=6000,
            dev_examples=4032)
QUICK = dict(FULL, steps=20, warmup=4)
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228}


def log(message):
    print(message, flush=True)


# ------------------------------------------------------------------ data, once


def save_batches(path, prefix, batches, keys):
    arrays = {f"{prefix}_count": np.array(len(batches))}
    for i, batch in enumerate(batches):
        arrays.update({f"{prefix}_{i}/{k}": np.asarray(batch[k]) for k in keys})
    np.savez(path, **arrays)


def load_batches(path, prefix):
    from bench.bert4keras_init_worker import batches

    return batches(path, prefix)


def prepare(args, work):
    """Vocab, features, bert_config.json and the batch files both sides read."""
    from data_adapters import read_task
    from mtl_framework.architectures.roformer_v2.bert4keras import bert_config_from_config
    from mtl_framework.architectures.roformer_v2.presets import backbone_config
    from mtl_framework.config.registry import load_registry
    from mtl_framework.mixing.mixture import TaskStream, iterate_batches
    from mtl_framework.prepare.cache import cached_features
    from mtl_framework.tokenizer import Tokenizer, build_vocab, count_units, example_texts, write_vocab

    tasks = {t.name: t for t in load_registry().select(list(args.tasks))}
    vocab = work / "vocab.txt"
    if not vocab.exists():
        texts = (t for task in tasks.values() for ex in read_task(task, "train", args.data_root)
                 for t in example_texts(ex))
        write_vocab(build_vocab(count_units(texts), max_size=args.vocab_size), vocab)
    tokenizer = Tokenizer(str(vocab))
    config = backbone_config(vocab_size=tokenizer.vocab_size, dropout=0.1,
                             **{k: getattr(args, k) for k in ("num_layers", "hidden_size",
                                                              "num_heads", "intermediate_size")})
    with open(work / "bert_config.json", "w") as f:
        json.dump(bert_config_from_config(config), f)
    data = {}
    for name, task in tasks.items():
        keys = ["token_ids", "segment_ids", "label" if TASKS[name] == "classification"
                else "entity_labels"]
        length = min(task.max_length, args.max_length)
        train = cached_features(task, "train", tokenizer, args.data_root, work / "cache",
                                max_length=length)
        dev = cached_features(task, "dev", tokenizer, args.data_root, work / "cache",
                              max_length=length)
        dev_path = work / f"{name}-dev-{args.dev_examples}.npz"
        if not dev_path.exists():
            rows = min(len(dev), args.dev_examples)
            save_batches(dev_path, "dev", [b for b in iterate_batches(dev, 64)][:math.ceil(rows / 64)],
                         keys)
        for seed in args.seeds:
            path = work / f"{name}-train-{seed}-{args.steps}.npz"
            if not path.exists():
                stream = TaskStream(train, args.batch_size, seed=seed)
                save_batches(path, "train", [stream.next_batch() for _ in range(args.steps)], keys)
        labels = task.resolve_labels(args.data_root)
        data[name] = {"labels": len(labels), "train_rows": len(train),
                      "dev_rows": min(len(dev), math.ceil(args.dev_examples / 64) * 64),
                      "dev_rows_in_split": len(dev),
                      "dev": str(dev_path),
                      "truncated_dev": dev.report.as_dict().get("truncated_total"),
                      "spans_lost_dev": dev.report.as_dict().get("spans_lost_total")}
    return config, data


# ------------------------------------------------------------------ our side


def old_initialisation(backbone, head, config):
    """The weights as this repository drew them before issue 12 (see the module doc)."""
    import keras

    shared = keras.initializers.TruncatedNormal(
        stddev=1.13684723 / math.sqrt(config["hidden_size"]) * config["num_layers"] ** -0.5)
    for variable in backbone.trainable_variables:
        variable.assign(shared(variable.shape))
    if hasattr(head, "dense"):
        head.dense.kernel.assign(keras.initializers.TruncatedNormal(stddev=0.02)(head.dense.kernel.shape))
    else:
        lecun = keras.initializers.get("lecun_normal")
        for dense in (head.pointer.p_dense, head.pointer.q_dense):
            dense.kernel.assign(lecun(dense.kernel.shape))


def run_ours(args, config, name, info, seed, old=False):
    import keras
    import tensorflow as tf

    from mtl_framework import RoFormerV2Backbone
    from mtl_framework.families.heads import build_head

    keras.backend.clear_session()
    keras.utils.set_random_seed(seed)
    backbone = RoFormerV2Backbone(**config)
    backbone.build()
    family = "classification" if TASKS[name] == "classification" else "extraction_ner"
    extra = {} if family == "classification" else {"head_size": args.head_size}
    head = build_head(family, info["labels"], config["hidden_size"], name=name,
                      num_layers=config["num_layers"], **extra)
    if old:
        old_initialisation(backbone, head, config)
    variables = backbone.trainable_variables + head.trainable_variables
    optimizer = keras.optimizers.Adam(args.lr)
    optimizer.build(variables)

    def inputs(batch):
        return {"token_ids": batch["token_ids"], "segment_ids": batch["segment_ids"]}

    @tf.function(reduce_retracing=True)
    def train_step(batch):
        with tf.GradientTape() as tape:
            outputs = head(backbone(inputs(batch), training=True), batch, training=True)
            loss = head.compute_task_loss(outputs, batch)
        optimizer.apply(tape.gradient(loss, variables), variables)
        return loss

    @tf.function(reduce_retracing=True)
    def predict(batch):
        return head(backbone(inputs(batch), training=False), batch, training=False)

    losses, start = [], time.perf_counter()
    train = load_batches(work_path(args, f"{name}-train-{seed}-{args.steps}.npz"), "train")
    for step, batch in enumerate(train):
        optimizer.learning_rate.assign(learning_rate(step, args.lr, args.warmup, args.steps))
        losses.append(float(train_step(batch)))
    train_s = time.perf_counter() - start
    predictions, gold = [], []
    for batch in load_batches(info["dev"], "dev"):
        predictions += head.decode(predict(batch).numpy(), batch)
        gold += head.targets(batch)
    return {"losses": losses, "predictions": predictions, "gold": gold, "train_s": train_s}


# ------------------------------------------------------------------ their side


def run_bert4keras(args, name, info, seed, gold_from):
    from mtl_framework.families.heads import spans_from_scores

    request = {"config": str(work_path(args, "bert_config.json")), "task": TASKS[name],
               "labels": info["labels"], "head_size": args.head_size,
               "train": str(work_path(args, f"{name}-train-{seed}-{args.steps}.npz")),
               "dev": info["dev"], "seed": seed, "lr": args.lr, "warmup": args.warmup,
               "steps": args.steps}
    with tempfile.TemporaryDirectory() as tmp:
        request_path, out_path = Path(tmp, "request.json"), Path(tmp, "out.json")
        request_path.write_text(json.dumps(request))
        env = child_env(TF_KERAS="1", TF_USE_LEGACY_KERAS="1", CUDA_VISIBLE_DEVICES="")
        done = subprocess.run([sys.executable, "-m", "bench.bert4keras_init_worker",
                               str(request_path), str(out_path)], env=env,
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"bert4keras worker failed:\n{done.stderr[-3000:]}")
        result = json.loads(out_path.read_text())
    if TASKS[name] == "ner":  # the candidates back into scores, decoded by our head's rule
        decoded = []
        for candidates, batch_row in zip(result["predictions"], gold_from["lengths"]):
            scores = np.full((info["labels"], batch_row, batch_row), -np.inf)
            for h, s, e, score in candidates:
                scores[h, s, e] = score
            decoded.append(spans_from_scores(scores, batch_row, 0.0, gold_from["max_spans"]))
        result["predictions"] = decoded
    result["gold"] = gold_from["gold"]
    return result


# ------------------------------------------------------------------ scoring


def score(name, predictions, gold):
    from mtl_framework.scoring.metrics import accuracy, set_f1

    if TASKS[name] == "classification":
        return float(accuracy(predictions, gold))
    return float(set_f1(predictions, gold)[0])


def interval(values):
    """Mean and 95% t interval (half-width 0 for one value)."""
    values = np.asarray(values, dtype=float)
    mean = float(values.mean())
    if len(values) < 2:
        return mean, [mean, mean]
    half = T975.get(len(values) - 1, 1.96) * float(values.std(ddof=1)) / math.sqrt(len(values))
    return mean, [mean - half, mean + half]


def work_path(args, name):
    return Path(args.work_dir) / name


def dev_reference(args, name, info):
    """Gold structures and row lengths of the dev batches (for the bert4keras side's decode)."""
    from mtl_framework.families.heads import build_head

    batches = load_batches(info["dev"], "dev")
    if TASKS[name] == "classification":
        return {"gold": [int(v) for b in batches for v in b["label"]]}
    head = build_head("extraction_ner", info["labels"], args.hidden_size, head_size=args.head_size)
    return {"gold": [g for b in batches for g in head.targets(b)],
            "lengths": [int(n) for b in batches for n in (b["token_ids"] != 0).sum(-1)],
            "max_spans": head.max_spans}


def markdown(result):
    s = result["settings"]
    lines = [
        "# Initialisation: ours vs bert4keras 0.11.5, from scratch",
        "",
        f"RoFormerV2 L{s['num_layers']}-H{s['hidden_size']}-A{s['num_heads']}-I"
        f"{s['intermediate_size']}, dropout 0.1, char vocab {result['vocab_size']}; "
        f"{s['steps']} updates of {s['batch_size']} rows (max_length {s['max_length']}), Adam lr "
        f"{s['lr']} ({s['warmup']} warm-up updates, linear decay to 0); seeds {s['seeds']}. Both "
        "sides read the same batch files (same batches, same order per seed); each draws its own "
        "initial weights by its own rule. Dev (the first rows of the split, TNEWS accuracy, "
        "CLUENER span F1, one decoding rule for both sides): " + ", ".join(
            f"{n} {d['dev_rows']} of {d['dev_rows_in_split']} rows" for n, d in result["data"].items())
        + ".",
        "",
        "| task | side | mean | 95% interval | runs |",
        "|---|---|---|---|---|",
    ]
    for name, sides in result["summary"].items():
        for side, entry in sides.items():
            runs = ", ".join(f"{v:.4f}" for v in entry["scores"])
            lines.append(f"| {name} | {side} | {entry['mean']:.4f} | "
                         f"[{entry['ci95'][0]:.4f}, {entry['ci95'][1]:.4f}] | {runs} |")
    lines += ["", "Paired by seed (same batches), mean difference and 95% interval:", "",
              "| task | difference | mean | 95% interval |", "|---|---|---|---|"]
    for name, diffs in result["paired"].items():
        for label, entry in diffs.items():
            lines.append(f"| {name} | {label} | {entry['mean']:+.4f} | "
                         f"[{entry['ci95'][0]:+.4f}, {entry['ci95'][1]:+.4f}] |")
    lines += ["", "Train seconds per run (mean): " + ", ".join(
        f"{name} {side} "
        f"{np.mean([r['train_s'] for r in result['runs'] if r['task'] == name and r['side'] == side]):.0f}"
        for name in result["summary"] for side in result["summary"][name]),
        f"Written by an invocation of {result['wall_s']:.0f} s on {result['cpu']} (load average "
        f"{result['load_average'][0]} -> {result['load_average'][1]}); the runs may come from "
        "earlier or parallel invocations with the same settings (--add-runs), on a shared "
        "machine: train seconds are not comparable between sides.", ""]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", default=os.environ.get(
        "MTL_DATA_ROOT", str(REPO.parent / "shared" / "data")))
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--sides", nargs="+", default=SIDES, choices=SIDES)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--quick", action="store_true", help="smoke check: 20 updates")
    for key, value in FULL.items():
        parser.add_argument("--" + key.replace("_", "-"), type=type(value), default=None)
    parser.add_argument("--work-dir", default=str(REPO / ".cache" / "init_vs_bert4keras"))
    parser.add_argument("--output-dir", default=None,
                        help="default bench/results (--quick: the work folder)")
    parser.add_argument("--study", default=None,
                        help="the study's name in init_vs_bert4keras.json (default: the tasks, "
                             "then the updates, e.g. tnews_cluener300)")
    parser.add_argument("--add-runs", metavar="JSON", nargs="+", default=[],
                        help="also keep the runs of these results files (same settings), "
                             "e.g. a side measured in a parallel invocation")
    args = parser.parse_args()
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    output = Path(args.output_dir or (args.work_dir if args.quick else REPO / "bench" / "results"))
    args.study = args.study or f"{'_'.join(args.tasks)}{args.steps}"
    work = Path(args.work_dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    args.work_dir = str(work)
    started, load_start = time.perf_counter(), load_average()
    config, data = prepare(args, work)
    log(f"prepared in {time.perf_counter() - started:.0f} s: {data}")
    runs = previous_runs(args, output.joinpath("init_vs_bert4keras.json"))
    for path in args.add_runs:
        runs += [r for r in previous_runs(args, Path(path)) if r not in runs]
    for name in args.tasks:
        reference = dev_reference(args, name, data[name])
        for seed in args.seeds:
            for side in args.sides:
                if any((r["task"], r["side"], r["seed"]) == (name, side, seed) for r in runs):
                    continue  # measured by an earlier invocation with the same settings
                if side == "bert4keras":
                    result = run_bert4keras(args, name, data[name], seed, reference)
                else:
                    result = run_ours(args, config, name, data[name], seed, old=side == "ours_old")
                value = score(name, result["predictions"], result["gold"])
                runs.append({"task": name, "side": side, "seed": seed, "score": value,
                             "train_s": round(result["train_s"], 1),
                             "loss_first_20": float(np.mean(result["losses"][:20])),
                             "loss_last_50": float(np.mean(result["losses"][-50:]))})
                log(f"{name} seed {seed} {side}: {value:.4f} (train {result['train_s']:.0f} s, "
                    f"loss {runs[-1]['loss_first_20']:.3f} -> {runs[-1]['loss_last_50']:.3f}) "
                    f"load {load_average()}")
                # written after every run: an interrupted comparison keeps what it measured
                write_results(args, output, config, data, runs, started, load_start)
    print(write_results(args, output, config, data, runs, started, load_start))


def settings_of(args):
    return {**{k: getattr(args, k) for k in FULL}}


def previous_runs(args, path):
    """The runs of the study in a results file, made with the same settings (so sides and seeds can
    be added in several invocations on a busy machine)."""
    old = read_study(path, args.study)
    if old is None:
        return []
    same = {k: v for k, v in old["settings"].items() if k != "seeds"} == settings_of(args)
    return old["runs"] if same else []


def write_results(args, output, config, data, runs, started, load_start):
    summary, paired = {}, {}
    sides = list(dict.fromkeys(SIDES))
    seeds = sorted({r["seed"] for r in runs})
    for name in dict.fromkeys(r["task"] for r in runs):
        summary[name] = {}
        for side in sides:
            scores = [r["score"] for r in runs if r["task"] == name and r["side"] == side]
            if scores:
                mean, ci = interval(scores)
                summary[name][side] = {"mean": mean, "ci95": ci, "scores": scores}
        by_seed = {(r["side"], r["seed"]): r["score"] for r in runs if r["task"] == name}
        paired[name] = {}
        for side in [s for s in sides if s != "bert4keras"]:
            both = [s for s in seeds if (side, s) in by_seed and ("bert4keras", s) in by_seed]
            if both:
                diffs = [by_seed[(side, s)] - by_seed[("bert4keras", s)] for s in both]
                mean, ci = interval(diffs)
                paired[name][f"{side} - bert4keras"] = {"mean": mean, "ci95": ci,
                                                        "values": diffs, "seeds": both}
    settings = {**settings_of(args), "seeds": seeds}
    result = {"settings": settings, "vocab_size": config["vocab_size"], "data": data,
              "runs": runs, "summary": summary, "paired": paired,
              "load_average": [load_start, load_average()], "cpu": cpu_model(),
              "wall_s": time.perf_counter() - started}
    write_study(output / "init_vs_bert4keras.json", "bench/init_vs_bert4keras.py",
                "Initialisation: ours vs bert4keras 0.11.5, from scratch", args.study, result,
                markdown)
    return markdown(result)


if __name__ == "__main__":
    main()
