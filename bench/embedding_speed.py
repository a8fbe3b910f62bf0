"""Sentence-embedding speed against sentence-transformers (issue 43, point 6 "Speed"), CPU.

    .venv/bin/python -m bench.embedding_speed --st-python /work/venv-st6/bin/python [--rounds 6]

Both sides run the SAME model: a BERT `small` (L6/H384/A6, FFN 1536, random weights after
one update) trained by `mtl train` for one step on AFQMC and exported with `mtl export
--format transformers` (or `--model DIR`, such a folder); mtl_framework reads the folder
with saving.load_backbone / Encoder, sentence-transformers with SentenceTransformer(DIR)
(its mean pooling, from 1_Pooling). The same pairs and texts: AFQMC train pairs labelled
1 as (query, positive), AFQMC dev sentences to encode (../shared/data/afqmc).

- Training, pairs per second. Batches of `--batch` pairs, tokenized once by our
  tokenizer (the folder's vocab.txt) and given to both sides as the same token ids, each
  side padding as it does (ours: one [B, 2, L] batch, L the longest text, which the step
  cuts per side to each side's longest and runs packed, its token-wise work on the real
  tokens alone, layers.Packing: 45% of these padded positions; ST: the query and positive
  columns each tokenized to their own longest, every position computed); collation is
  outside the timing on both sides.
  Ours: MultiTaskModel.run_update with one contrastive task (InfoNCE with in-batch
  negatives, temperature 0.05 = ST's scale 20, mean pooling as the folder's),
  AdamW (lr 1e-4, weight decay 0.01), gradient_norm balancing: the step a run with only
  that task takes. sentence-transformers: a plain PyTorch loop over the model, its
  MultipleNegativesRankingLoss (scale 20, cosine) and torch.optim.AdamW (same lr and
  decay): forward, backward, step, zero_grad; no SentenceTransformerTrainer (its dataset
  and collator would add their own overhead to its side).
- Encoding, sentences per second: Encoder(DIR).encode(texts, batch_size) against
  SentenceTransformer.encode(texts, batch_size): both tokenize, sort by length and batch
  inside the timed call.

Precision: float32 on both sides, and our `auto` (mixed_bfloat16 on a CPU with AMX /
AVX512-BF16: bfloat16 compute, float32 weights) against sentence-transformers with
torch.autocast(cpu, bfloat16) for training (what a Trainer's bf16=True does) and the
model cast to bfloat16 for encoding (model_kwargs torch_dtype / .bfloat16(), as its docs
advise); our Encoder at auto likewise holds the weights in bfloat16 (encoding_precision).

sentence-transformers runs three ways (`--sides`): `st`, torch as installed (its default
threads: 2 here); `st_1thread`, torch.set_num_threads(1); `st_passive`, 2 threads with
OMP_WAIT_POLICY=PASSIVE. On this shared machine torch's OpenMP threads wait for each other
by spinning while other jobs hold a core, which makes `st` several times slower than on
a quiet machine; the other two show torch without that (1 thread beat 2 in a probe under
load: 0.8 against 3.8 CPU seconds for the same 128 sentences).

Each side and precision is a worker process (ours in this Python, sentence-transformers
in `--st-python`; ours twice: training with `mtl train`'s TensorFlow threads, encoding in
a process set up as `mtl encode` sets itself, embedding/encode.py ENCODING_THREADS),
built and warmed up once (ours traces its step); the parent then runs rounds, and in each
round every measurement runs on both sides in turn, A B then B A
(the shared machine's load hits both alike). Medians per side; ratios of the medians and
the median of each round's paired ratio; the load average beside every timing. torch
keeps its default threads (2 here); TensorFlow its default (both cores).

Writes bench/results/embedding_speed.json and .md (--quick: a temporary folder unless
--output-dir says where).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

from bench import REPO, JsonWorker, child_env, write_results
from bench.load import cpu_model, load_average
from mtl_framework.embedding.encode import ENCODING_THREADS

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

DATA = REPO.parent / "shared" / "data" / "afqmc"
MAX_LENGTH = 128
LR, WEIGHT_DECAY, TEMPERATURE = 1e-4, 0.01, 0.05
EXPERIMENT = """\
name: embedding_speed
data_root: {data_root}
backbone: {{architecture: bert, size: small, vocab_size: 8000}}
tasks:
  - {{name: afqmc_sts}}
batch_size: 8
max_length: 64
optimizer: {{name: adamw, lr: 0.0001}}
steps: 1
seed: 0
precision: float32
"""
SIDES = ("ours", "st", "st_1thread", "st_passive")
# sentence-transformers sides: (torch threads, None: its default; environment of the worker).
# OMP_WAIT_POLICY=PASSIVE: torch's 2 OpenMP threads sleep instead of spinning while they wait
ST_SIDES = {"st": (None, {}), "st_1thread": (1, {}), "st_passive": (None, {"OMP_WAIT_POLICY": "PASSIVE"})}
PRECISIONS = ("float32", "auto")
# Our encoding runs in a worker of its own, with the TensorFlow threads `mtl encode` sets
# (embedding/encode.py ENCODING_THREADS); training in the "ours" worker, with `mtl train`'s.
ENCODING_SIDE = "ours_encode"


# --- data ---------------------------------------------------------------------------

def afqmc(split):
    rows = []
    with open(DATA / f"{split}.txt", encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) == 3:
                rows.append(parts)
    return rows


def make_data(model_dir, batch, batches, sentences, seed=0):
    """{"batches": [[[query ids], [positive ids]] x batch] x batches, "texts": [...]}: our
    tokenizer's ids (the folder's vocab, [CLS] text [SEP], cut to MAX_LENGTH)."""
    from mtl_framework.tokenizer import Tokenizer

    tokenizer = Tokenizer(str(Path(model_dir) / "vocab.txt"))
    pairs = [(a, b) for a, b, label in afqmc("train") if label == "1"]
    rng = np.random.default_rng(seed)
    chosen = [pairs[i] for i in rng.permutation(len(pairs))[:batch * batches]]

    def ids(texts):
        return [e.token_ids for e in tokenizer.encode_batch(texts, max_length=MAX_LENGTH)]

    queries, positives = ids([q for q, _ in chosen]), ids([p for _, p in chosen])
    rows = [[q, p] for q, p in zip(queries, positives)]
    texts = list(dict.fromkeys(t for a, b, _ in afqmc("dev") for t in (a, b)))[:sentences]
    return {"batches": [rows[i:i + batch] for i in range(0, len(rows), batch)], "texts": texts,
            "pairs_source": "AFQMC train, label 1, shuffled (seed 0)",
            "texts_source": "AFQMC dev sentences, unique, in file order",
            "tokens_per_batch_mean": float(np.mean([sum(len(q) + len(p) for q, p in rows[i:i + batch])
                                                     for i in range(0, len(rows), batch)]))}


def make_model(workdir, log):
    """A BERT small export of a one-update run (mtl train + mtl export --format transformers)."""
    experiment = Path(workdir) / "embedding_speed.yaml"
    experiment.write_text(EXPERIMENT.format(data_root=DATA.parent), encoding="utf-8")
    run, folder = Path(workdir) / "run", Path(workdir) / "export"
    for command in (["train", str(experiment), "--output", str(run)],
                    ["export", str(run), "--format", "transformers", "--output", str(folder)]):
        log("mtl " + " ".join(command))
        subprocess.run([sys.executable, "-m", "mtl_framework", *command], check=True,
                       env=child_env(CUDA_VISIBLE_DEVICES=""), stdout=subprocess.DEVNULL)
    return folder


# --- workers -------------------------------------------------------------------------

def positive_id(ids):
    return zlib.crc32(np.asarray(ids, np.int32).tobytes()) & 0x7FFFFFFF


class OursWorker:
    def __init__(self, model_dir, precision, data):
        import keras
        import tensorflow as tf

        from mtl_framework import saving
        from mtl_framework.embedding.encode import Encoder
        from mtl_framework.families.heads import build_head
        from mtl_framework.step.distributed import precision_policy
        from mtl_framework.step.model import MultiTaskModel
        from mtl_framework.step.optimizers import build_optimizer

        keras.utils.set_random_seed(0)
        with precision_policy(precision):
            backbone = saving.load_backbone(model_dir)
            head = build_head("contrastive", None, backbone.config["hidden_size"], name="pairs",
                              pooling="mean", temperature=TEMPERATURE)
            self.model = MultiTaskModel(backbone, {"pairs": head}, tasks_per_update=1)
        self.model.compile(optimizer=build_optimizer(
            {"name": "adamw", "lr": LR, "weight_decay": WEIGHT_DECAY}, total_steps=10 ** 6))
        self.model.build_all()
        self.batches = [self.collate(rows) for rows in data["batches"]]
        self.encoder = Encoder(model_dir, precision=precision, max_length=MAX_LENGTH)
        self.texts = data["texts"]
        from mtl_framework.config.precision import resolve_precision

        self.info = {"side": "ours", "policy": resolve_precision(precision)[0],
                     "tensorflow": tf.__version__, "keras": keras.__version__,
                     "encoder_policy": self.encoder.precision,
                     "encoder_pooling": self.encoder.pooling,
                     "encoder_normalize": self.encoder.normalize,
                     "tf_threads": {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                                    "inter_op": tf.config.threading.get_inter_op_parallelism_threads()},
                     "lanes": self.model.lanes}

    @staticmethod
    def collate(rows):
        """collate_pairs' layout: [B, 2, L], L the batch's longest text."""
        length = max(len(ids) for row in rows for ids in row)
        token_ids = np.zeros((len(rows), 2, length), np.int32)
        for b, row in enumerate(rows):
            for k, ids in enumerate(row):
                token_ids[b, k, :len(ids)] = ids
        return {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids),
                "text_mask": np.ones((len(rows), 2), np.float32),
                "score": np.ones(len(rows), np.float32),
                "positive_id": np.array([positive_id(row[1]) for row in rows], np.int32)}

    def train(self, indices):
        losses = []
        for i in indices:
            logs = self.model.run_update([("pairs", self.batches[i])])
            losses.append(float(logs[0]["loss"]))
        return losses

    def encode(self, count):
        return self.encoder.encode(self.texts[:count], batch_size=self.batch_size)


class STWorker:
    def __init__(self, model_dir, precision, data, threads=None):
        import sentence_transformers
        import torch
        import transformers
        from sentence_transformers import SentenceTransformer
        try:  # sentence-transformers 6.x; 3.x-5.x: sentence_transformers.losses
            from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
        except ImportError:
            from sentence_transformers.losses import MultipleNegativesRankingLoss

        self.torch = torch
        if threads:
            torch.set_num_threads(threads)
        torch.manual_seed(0)
        self.model = SentenceTransformer(str(model_dir), device="cpu")
        self.model.max_seq_length = MAX_LENGTH
        self.loss = MultipleNegativesRankingLoss(self.model, scale=1 / TEMPERATURE)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
        self.autocast = precision == "auto"
        self.encoder = SentenceTransformer(str(model_dir), device="cpu")
        self.encoder.max_seq_length = MAX_LENGTH
        if self.autocast:
            self.encoder = self.encoder.to(torch.bfloat16)
        self.encoder.eval()
        self.batches = [[self.features([row[k] for row in rows]) for k in (0, 1)]
                        for rows in data["batches"]]
        self.texts = data["texts"]
        self.info = {"side": "st", "sentence_transformers": sentence_transformers.__version__,
                     "transformers": transformers.__version__, "torch": torch.__version__,
                     "torch_threads": torch.get_num_threads(),
                     "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "unset (libgomp's default)"),
                     "training": "torch.autocast(cpu, bfloat16), float32 weights" if self.autocast
                                 else "float32",
                     "encoding": "model cast to bfloat16" if self.autocast else "float32",
                     "pooling": str(self.model[1]),
                     "tokenizer_agrees": self.tokenizer_agrees(model_dir, data)}

    def tokenizer_agrees(self, model_dir, data):
        """Fraction of the encoded texts its tokenizer turns into our ids (first 200)."""
        from mtl_framework.tokenizer import Tokenizer  # numpy + tokenizers: both venvs have them

        ours = Tokenizer(str(Path(model_dir) / "vocab.txt"))
        texts = data["texts"][:200]
        mine = [e.token_ids for e in ours.encode_batch(texts, max_length=MAX_LENGTH)]
        theirs = self.model.tokenizer(texts, truncation=True, max_length=MAX_LENGTH)["input_ids"]
        return sum(a == b for a, b in zip(mine, theirs)) / len(texts)

    def features(self, rows):
        torch = self.torch
        length = max(len(ids) for ids in rows)
        ids = torch.zeros((len(rows), length), dtype=torch.long)
        mask = torch.zeros_like(ids)
        for b, row in enumerate(rows):
            ids[b, :len(row)] = torch.tensor(row)
            mask[b, :len(row)] = 1
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}

    def train(self, indices):
        torch, losses = self.torch, []
        self.model.train()
        for i in indices:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.autocast):
                loss = self.loss(self.batches[i], None)
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            losses.append(float(loss.detach()))
        return losses

    def encode(self, count):
        return self.encoder.encode(self.texts[:count], batch_size=self.batch_size,
                                   convert_to_numpy=True, show_progress_bar=False)


def worker_main(side, model_dir, precision, data_path, batch_size):
    data = json.loads(Path(data_path).read_text(encoding="utf-8"))
    start = time.perf_counter()
    if side in ("ours", ENCODING_SIDE):
        worker = OursWorker(model_dir, precision, data)
    else:
        worker = STWorker(model_dir, precision, data, ST_SIDES[side][0])
    worker.batch_size = batch_size
    worker.info["build_s"] = round(time.perf_counter() - start, 2)
    print(json.dumps(worker.info), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        wall, cpu = time.perf_counter(), time.process_time()
        if command["op"] == "train":
            out = {"loss": worker.train(command["batches"])}
        elif command["op"] == "encode":
            vectors = np.asarray(worker.encode(command["count"]), np.float32)
            out = {"shape": list(vectors.shape)}
            if command.get("save"):
                np.save(command["save"], vectors)
        else:
            raise ValueError(command)
        out.update(wall_s=time.perf_counter() - wall, cpu_s=time.process_time() - cpu)
        print(json.dumps(out), flush=True)


class Worker(JsonWorker):
    def __init__(self, side, precision, python, model_dir, data_path, batch_size, log_path):
        self.side, self.precision = side, precision
        command = [python, "-m", "bench.embedding_speed", "--worker", side, "--model", str(model_dir),
                   "--precision", precision, "--data", str(data_path), "--batch", str(batch_size)]
        extra = ENCODING_THREADS if side == ENCODING_SIDE else ST_SIDES.get(side, (None, {}))[1]
        environment = child_env(CUDA_VISIBLE_DEVICES="", **extra)
        super().__init__(command, log_path, environment, f"worker {side} {precision}", cwd=REPO)
        self.info = self.read()

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=60)
        self.log.close()


# --- the parent ------------------------------------------------------------------------

def median(values):
    return statistics.median(values)


def summarize(samples, unit_count):
    """samples: [{"round", "wall_s", "cpu_s", ...}] -> medians and rate."""
    wall = median([s["wall_s"] for s in samples])
    return {"median_wall_s": round(wall, 4), "median_cpu_s": round(median([s["cpu_s"] for s in samples]), 4),
            "per_second": round(unit_count / wall, 2), "samples": samples}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--st-python", default="/work/venv-st6/bin/python",
                        help="a Python with sentence-transformers (and torch)")
    parser.add_argument("--model", help="a `mtl export --format transformers` folder (default: make one)")
    parser.add_argument("--batch", type=int, default=32, help="pairs per training batch and "
                        "sentences per encoding batch")
    parser.add_argument("--train-batches", type=int, default=3, help="training batches per timing")
    parser.add_argument("--sentences", type=int, default=1024, help="sentences per encoding timing")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    parser.add_argument("--sides", nargs="+", default=list(SIDES), choices=SIDES,
                        help="ours first, then the sentence-transformers variants")
    parser.add_argument("--quick", action="store_true", help="2 rounds, 1 batch, 128 sentences")
    parser.add_argument("--output-dir")
    parser.add_argument("--worker", choices=SIDES + (ENCODING_SIDE,), help=argparse.SUPPRESS)
    parser.add_argument("--precision", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main(args.worker, args.model, args.precision, args.data, args.batch)
    if args.quick:
        args.rounds, args.train_batches, args.sentences = 2, 1, 128
    if args.sides[0] != "ours" or len(args.sides) < 2:
        parser.error("--sides: ours first, then at least one sentence-transformers side")
    workdir = Path(tempfile.mkdtemp(prefix="bench_embedding_speed_"))
    started = time.perf_counter()

    def log(message):
        print(f"[{time.perf_counter() - started:6.0f}s] {message}", flush=True)

    model_dir = Path(args.model) if args.model else make_model(workdir, log)
    pool = 4 * args.train_batches  # each timing takes the next train_batches batches, cycling
    data = make_data(model_dir, args.batch, pool + 2, args.sentences)
    data_path = workdir / "data.json"
    data_path.write_text(json.dumps(data), encoding="utf-8")
    workers = {}
    for precision in args.precisions:
        for side in [ENCODING_SIDE] + args.sides:
            log(f"starting {side} {precision}")
            python = sys.executable if side in ("ours", ENCODING_SIDE) else args.st_python
            workers[side, precision] = Worker(side, precision, python, model_dir, data_path,
                                              args.batch, workdir / f"{side}_{precision}.log")
    # warm-up, the same work on every side: ours traces its step and its encoder's shapes
    warm, check = {}, min(args.sentences, 4 * args.batch)
    for key, worker in workers.items():
        first = worker.ask(op="train", batches=[pool, pool + 1])
        worker.ask(op="encode", count=check, save=str(workdir / f"{key[0]}_{key[1]}.npy"))
        warm["/".join(key)] = {"first_two_train_updates_s": round(first["wall_s"], 2), "loss": first["loss"]}
        log(f"warmed up {key}")
    agreement = {}
    for precision in args.precisions:
        ours = np.load(workdir / f"{ENCODING_SIDE}_{precision}.npy")
        theirs = np.load(workdir / f"{args.sides[1]}_{precision}.npy")
        agreement[precision] = {"sentences": check, "max_abs_difference": float(np.abs(ours - theirs).max()),
                                "min_cosine": float(np.min(np.sum(ours * theirs, 1) / (
                                    np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1))))}
    samples = {(m, p, s): [] for m in ("train", "encode") for p in args.precisions for s in args.sides}
    cursor = 0
    for r in range(args.rounds):
        for measure in ("train", "encode"):
            for precision in args.precisions:
                sides = args.sides if r % 2 == 0 else args.sides[::-1]  # A B C, then C B A
                indices = [(cursor + i) % pool for i in range(args.train_batches)]
                for side in sides:
                    before = load_average()
                    if measure == "train":
                        out = workers[side, precision].ask(op="train", batches=indices)
                    else:  # ours: the process `mtl encode` is (its TensorFlow threads)
                        encoder = ENCODING_SIDE if side == "ours" else side
                        out = workers[encoder, precision].ask(op="encode", count=args.sentences)
                    samples[measure, precision, side].append(
                        {"round": r, "wall_s": round(out["wall_s"], 4), "cpu_s": round(out["cpu_s"], 4),
                         "load_average": before})
                if measure == "train":
                    cursor += args.train_batches
        log(f"round {r + 1}/{args.rounds}: " + "; ".join(
            f"{m} {p} " + " ".join(f"{s} {samples[m, p, s][-1]['wall_s']:.2f}" for s in args.sides)
            for m in ("train", "encode") for p in args.precisions))
    for worker in workers.values():
        worker.close()
    pairs_per_timing = args.batch * args.train_batches
    results = {}
    for precision in args.precisions:
        for measure, units in (("train", pairs_per_timing), ("encode", args.sentences)):
            ours = summarize(samples[measure, precision, "ours"], units)
            entry = {"unit": "pairs/s" if measure == "train" else "sentences/s", "ours": ours}
            for side in args.sides[1:]:
                st = summarize(samples[measure, precision, side], units)
                paired = [t["wall_s"] / o["wall_s"] for o, t in zip(ours["samples"], st["samples"])]
                entry[side] = {**st, "ours_over_it": round(ours["per_second"] / st["per_second"], 3),
                               "ours_over_it_paired": round(median(paired), 3),
                               "ours_ahead": ours["per_second"] > st["per_second"]}
            results[f"{measure} {precision}"] = entry
    report = {"settings": {"batch": args.batch, "train_batches_per_timing": args.train_batches,
                           "sentences_per_timing": args.sentences, "rounds": args.rounds,
                           "max_length": MAX_LENGTH, "lr": LR, "weight_decay": WEIGHT_DECAY,
                           "temperature": TEMPERATURE, "model": str(model_dir),
                           "backbone": json.loads((model_dir / "config.json").read_text()),
                           "data": {k: v for k, v in data.items() if k not in ("batches", "texts")},
                           "quick": args.quick},
              "workers": {"/".join(k): w.info for k, w in workers.items()},
              "warm_up": warm, "agreement_of_encodings": agreement, "results": results,
              "load_average_end": load_average(),
              "environment": {"cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
                              "python": platform.python_version()},
              "wall_seconds": round(time.perf_counter() - started, 1),
              "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
              "notes": ["Shared 2-core machine: other jobs ran meanwhile (each sample's load_average "
                        "is the 1/5/15-minute load just before it); read the paired ratios.",
                        "Training excludes collation on both sides (ours: the NumPy batch dict; ST: "
                        "the torch feature dicts); encoding includes tokenization on both sides."]}
    out = Path(args.output_dir or (workdir if args.quick else REPO / "bench" / "results"))
    write_results(out, "embedding_speed", report, markdown(report))


def markdown(report):
    w = report["workers"]
    ours = next(v for k, v in w.items() if k.startswith("ours/"))
    st = next(v for k, v in w.items() if k.startswith("st"))
    s = report["settings"]
    default_threads = w.get("st/float32", st)["torch_threads"]
    names = {"st": f"sentence-transformers, torch default threads ({default_threads})",
             "st_1thread": "sentence-transformers, torch 1 thread",
             "st_passive": f"sentence-transformers, {default_threads} threads, OMP_WAIT_POLICY=PASSIVE"}
    lines = ["# Sentence embeddings: speed against sentence-transformers", "",
             f"{report['environment']['cpu_model']}, {report['environment']['cpu_count']} cores (shared). "
             f"Ours: TF {ours['tensorflow']}, Keras {ours['keras']}. sentence-transformers "
             f"{st['sentence_transformers']}, transformers {st['transformers']}, torch {st['torch']}. "
             "The same BERT small folder (L6/H384/A6, random weights) on every side, "
             f"batch {s['batch']}, AFQMC pairs / sentences, max_length {s['max_length']}; "
             f"{s['rounds']} interleaved rounds. Training: {s['train_batches_per_timing']} updates of "
             f"{s['batch']} pairs per timing, ST in a plain PyTorch loop (model + "
             "MultipleNegativesRankingLoss + AdamW). Encoding: "
             f"{s['sentences_per_timing']} sentences per timing (Encoder.encode against "
             "SentenceTransformer.encode). Medians of wall time.", "",
             "| measure | precision | side | per second | CPU s per timing | ours / it (medians) | "
             "ours / it (paired by round) |", "|---|---|---|---|---|---|---|"]
    for name, r in report["results"].items():
        measure, precision = name.split()
        lines.append(f"| {measure} ({r['unit']}) | {precision} | ours | {r['ours']['per_second']:.1f} | "
                     f"{r['ours']['median_cpu_s']:.2f} | | |")
        for side, v in r.items():
            if side in names:
                lines.append(f"| | | {names[side]} | {v['per_second']:.1f} | {v['median_cpu_s']:.2f} | "
                             f"{v['ours_over_it']:.2f}x | {v['ours_over_it_paired']:.2f}x |")
    threads = ", ".join(f"{k}={v}" for k, v in ENCODING_THREADS.items())
    lines += ["", "auto: ours mixed_bfloat16 for training (bfloat16 compute, float32 weights), "
              "bfloat16 weights for encoding (nothing is trained); ST autocast bfloat16 for "
              "training, the model cast to bfloat16 for encoding.", "",
              f"Ours trains in a process with TensorFlow's default threads (`mtl train`'s) and "
              f"encodes in one with `mtl encode`'s ({threads}: one thread an op, one batch a "
              "core).", "",
              "Same model check (the warm-up's encodings of the same sentences, ours against ST): "
              + "; ".join(
                  f"{p}: max |ours - ST| {a['max_abs_difference']:.2e}, least cosine {a['min_cosine']:.6f}"
                  for p, a in report["agreement_of_encodings"].items()) + ".", "",
              f"Run: `python -m bench.embedding_speed`, finished {report['finished']} "
              f"({report['wall_seconds']:.0f} s)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
