"""Child process of tests/test_jax*.py: mixed updates of a tiny model on the backend its
KERAS_BACKEND names, from weights in a file, written back to a file.

    python tests/jax_worker.py OUT.npz [--init IN.npz] [--updates 10] [--balancing A,B,..]
        [--devices N]

Writes OUT.npz: every trainable weight by name (layer_variable_names), plus
`__losses__` (each micro-batch's loss, in order), `__seconds__` and `__cpu__` (each
update's wall and process CPU time); with several balancing methods, each from the same
start, every key prefixed `METHOD:`. Prints one JSON line {"backend",
"tensorflow_imported", "devices"}. The batches and the model come from fixed seeds, so
two backends given the same --init compute the same updates. `--devices N` (JAX):
keras.distribution.DataParallel over N local devices.
"""
import argparse
import json
import os
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--init")
parser.add_argument("--updates", type=int, default=10)
parser.add_argument("--balancing", default="gradient_norm")
parser.add_argument("--devices", type=int, default=0)
parser.add_argument("--size", default=None, help="a backbone preset (speed: bench only); default tiny")
parser.add_argument("--length", type=int, default=10)
parser.add_argument("--rows", type=int, default=4)
args = parser.parse_args()
if args.devices:  # before JAX starts: the CPU shown as N devices
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.devices}"

import keras  # noqa: E402
import numpy as np  # noqa: E402

from mtl_framework import RoFormerV2Backbone  # noqa: E402
from mtl_framework.architectures.roformer_v2.presets import backbone_config  # noqa: E402
from mtl_framework.families.heads import build_head  # noqa: E402
from mtl_framework.step.model import MultiTaskModel  # noqa: E402
from mtl_framework.step.variable_names import layer_variable_names  # noqa: E402

if args.devices:
    keras.distribution.set_distribution(keras.distribution.DataParallel())

TINY = dict(vocab_size=60, num_layers=2, hidden_size=32, num_heads=2, intermediate_size=64,
            dropout=0.0, exact_padding=False)
TASKS = ("cls3", "cls2", "ner", "cls3", "ner", "cls2")


def make_model(balancing):
    keras.utils.set_random_seed(3)
    config = TINY if args.size is None else backbone_config(
        args.size, vocab_size=12000, dropout=0.0, exact_padding=False)
    backbone = RoFormerV2Backbone(**config)
    backbone.build()
    hidden = config["hidden_size"]
    heads = {"cls3": build_head("classification", 3, hidden, name="cls3"),
             "cls2": build_head("classification", 2, hidden, name="cls2"),
             "ner": build_head("extraction_ner", 4, hidden, name="ner")}
    model = MultiTaskModel(backbone, heads, tasks_per_update=len(TASKS), balancing=balancing)
    model.compile(optimizer=keras.optimizers.AdamW(learning_rate=1e-2))
    model.build_all()
    return model


def trainable_names(model):
    named = layer_variable_names(model.backbone, "backbone")
    for task, head in model.heads.items():
        named.update(layer_variable_names(head, task))
    return {name: v for name, v in named.items() if v.trainable}


def micro_batches(seed, length=args.length, rows=args.rows):
    rng = np.random.default_rng(seed)
    out = []
    for task in TASKS:
        ids = rng.integers(5, 60, size=(rows, length)).astype("int32")
        ids[:, 0], ids[min(2, rows - 1), length - 3:] = 2, 0
        batch = {"token_ids": ids, "segment_ids": np.zeros_like(ids)}
        if task == "ner":
            labels = np.zeros((rows, 4, 2, 2), "int32")
            labels[:, 1, 0] = (1, 2)  # one entity of type 1 per row
            batch["entity_labels"] = labels
        else:
            batch["label"] = rng.integers(0, int(task[-1]), size=rows).astype("int32")
        out.append((task, batch))
    return out


results, devices = {}, len(keras.distribution.list_devices()) if args.devices else 1
for method in args.balancing.split(","):
    model = make_model(method)
    named = trainable_names(model)
    if args.init:
        stored = np.load(args.init)
        for name, variable in named.items():
            variable.assign(stored[name])
    losses, seconds, cpu = [], [], []
    for update in range(args.updates):
        start, start_cpu = time.perf_counter(), time.process_time()
        logs = model.run_update(micro_batches(update))
        seconds.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        losses.extend(log["loss"] for log in logs)
    prefix = f"{method}:" if "," in args.balancing else ""
    results.update({prefix + name: np.asarray(v.numpy()) for name, v in named.items()})
    results.update({prefix + "__losses__": np.array(losses), prefix + "__seconds__": np.array(seconds),
                    prefix + "__cpu__": np.array(cpu)})
np.savez(args.out, **results)
print(json.dumps({"backend": keras.backend.backend(),
                  "tensorflow_imported": "tensorflow" in sys.modules, "devices": devices}))
