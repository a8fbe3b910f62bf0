"""Training tells the user when a contrastive task learns nothing (issue 50 point 5): the
head's signs (in-batch accuracy, chance loss, mean cosine of different texts) against
NumPy, logged per task in metrics.jsonl and the console on TensorFlow and JAX, the
NotLearning warning on a run at chance and not on a learning one, and `Run.encode` on a
run this process did not train."""
import contextlib
import io
import json
import math
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from keras import ops

from mtl_framework import losses
from mtl_framework.families.heads import build_head
from mtl_framework.loop.callbacks import NotLearning
from mtl_framework.tokenizer import build_vocab, count_units, write_vocab

from conftest import ONE_LAYER, REPO

JAX_PYTHON = REPO / ".venv-jax" / "bin" / "python"


# --- the signs against NumPy ----------------------------------------------------------------

def numpy_signs(logits, valid, target, temperature):
    """Row by row: the positive strictly above every other candidate; ln of the candidates;
    the mean cosine (logit x temperature) of a query with its other candidates."""
    correct, chance, cosines = [], [], []
    for row, (scores, keep, own) in enumerate(zip(logits, valid, target)):
        others = [s for column, (s, k) in enumerate(zip(scores, keep)) if k and column != own]
        correct.append(all(scores[own] > s for s in others))
        chance.append(math.log(sum(keep)))
        cosines += [s * temperature for s in others]
    return {"accuracy": np.mean(correct), "chance": np.mean(chance), "cosine": np.mean(cosines)}


def ours(signs):
    return {name: float(value) for name, value in signs.items()}


def test_in_batch_accuracy_chance_and_cosine_equal_numpy_on_fixed_logits():
    """Row 0's positive wins once the masked 9.0 is left out; row 1's ties with another
    candidate (not counted as found); row 2's wins; row 3's loses."""
    logits = np.array([[5.0, 1.0, 2.0, 9.0, 0.0],
                       [1.0, 3.0, 3.0, 0.0, -1.0],
                       [0.0, 1.0, 4.0, 2.0, 3.0],
                       [6.0, 0.5, 1.0, 2.0, 1.5]], np.float32)
    valid = np.array([[1, 1, 1, 0, 1], [1, 1, 1, 1, 1], [1, 0, 1, 1, 1], [1, 1, 1, 1, 0]], bool)
    target = np.array([0, 1, 2, 3])
    expected = numpy_signs(logits, valid, target, 0.05)
    assert expected["accuracy"] == 0.5
    got = ours(losses.ranking_signs(ops.convert_to_tensor(np.where(valid, logits, losses.CHOICE_PAD)),
                                    ops.convert_to_tensor(valid), ops.convert_to_tensor(target), 0.05))
    assert got == pytest.approx(expected, abs=1e-6)


def vectors_and_batch(seed, rows=6, negatives=2, hidden=16):
    """[B, 2 + N, H] vectors (query, positive, hard negatives; rows 1 and 4 share a positive
    id, the last negative of rows 0 and 3 is padding) and their batch keys."""
    rng = np.random.default_rng(seed)
    queries = rng.normal(size=(rows, hidden))
    vectors = np.concatenate([queries[:, None], (queries + rng.normal(size=(rows, hidden)))[:, None],
                              rng.normal(size=(rows, negatives, hidden))], axis=1)
    mask = np.ones((rows, 2 + negatives), np.float32)
    mask[[0, 3], -1] = 0
    ids = np.arange(rows)
    ids[4] = ids[1]
    scores = rng.uniform(0, 5, rows).round()
    return np.float32(vectors), {"text_mask": mask, "positive_id": ids, "score": np.float32(scores)}


def numpy_candidates(vectors, batch, temperature, in_batch):
    """(logits, valid, target) built candidate by candidate from unit vectors."""
    unit = vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)
    rows, texts = unit.shape[:2]
    if in_batch:
        columns = [(j, 1) for j in range(rows)] + [(j, t) for j in range(rows) for t in range(2, texts)]
    else:
        columns = None
    logits, valid = [], []
    for i in range(rows):
        own_columns = columns or [(i, t) for t in range(1, texts)]
        logits.append([unit[i, 0] @ unit[j, t] / temperature for j, t in own_columns])
        valid.append([batch["text_mask"][j, t] > 0 and not (t == 1 and j != i and batch["positive_id"][j]
                                                             == batch["positive_id"][i])
                      for j, t in own_columns])
    target = list(range(rows)) if in_batch else [0] * rows
    return np.array(logits), np.array(valid), target


@pytest.mark.parametrize("in_batch", [True, False], ids=["in_batch", "own_only"])
def test_the_heads_signs_equal_numpy_from_its_vectors(in_batch):
    """The head's loss and signs come from the same logits; with Matryoshka dims the signs
    are the widest prefix's."""
    vectors, batch = vectors_and_batch(0)
    expected = numpy_signs(*numpy_candidates(vectors, batch, 0.05, in_batch), 0.05)
    head = build_head("contrastive", None, 16, in_batch_negatives=in_batch)
    assert head.signs == ("accuracy", "chance", "cosine")
    loss, signs = head.compute_task_loss_and_signs(vectors, batch)
    assert ours(signs) == pytest.approx(expected, abs=1e-5)
    assert float(loss) == pytest.approx(float(head.compute_task_loss(vectors, batch)), abs=1e-6)
    matryoshka = build_head("contrastive", None, 16, in_batch_negatives=in_batch, matryoshka_dims=[8, 12])
    widest = numpy_signs(*numpy_candidates(vectors[..., :12], batch, 0.05, in_batch), 0.05)
    assert ours(matryoshka.compute_task_loss_and_signs(vectors, batch)[1]) == pytest.approx(widest, abs=1e-5)


def test_cosent_signs_are_its_chance_loss_and_the_cosines_across_rows():
    """CoSENT ranks no candidates: no accuracy; chance is its loss when every cosine is equal."""
    vectors, batch = vectors_and_batch(1)
    batch["score"][2] = np.nan
    head = build_head("contrastive", None, 16, loss="cosent")
    assert head.signs == ("chance", "cosine")
    _, signs = head.compute_task_loss_and_signs(vectors, batch)
    scores = batch["score"]
    ordered = sum(1 for a in scores for b in scores if a < b)  # NaN compares false
    unit = vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)
    across = [unit[i, 0] @ unit[j, 1] for i in range(6) for j in range(6) if i != j]
    assert ours(signs) == pytest.approx({"chance": math.log(1 + ordered), "cosine": np.mean(across)},
                                        abs=1e-5)
    collapsed = np.broadcast_to(vectors[:1, :1], vectors.shape)  # every text the same vector
    assert float(head.compute_task_loss(collapsed, batch)) == pytest.approx(math.log(1 + ordered), abs=1e-5)


# --- runs: the logs, the warning, Run.encode -----------------------------------------------------

SPEC = """\
dataset: signs_pairs
format: pairs
files:
  train: signs_pairs/train.jsonl
tasks:
  - name: pairs
    type: contrastive
    max_length: 24
    metric: retrieval
    embedding: {hard_negatives: 0, pooling: mean}
"""
BATCH = 8


def write_task(folder):
    """48 passages of 10 characters, each with a query of 4 characters that stand for 4 of
    its own (each character of the passages has its partner, never in a passage): no word
    in common, so a model that has not learnt the partners is at chance; no negatives, so
    each query's candidates are the batch's 8 positives (chance ln 8). The spec and vocab."""
    rng = np.random.default_rng(0)
    own = [chr(0x4E00 + i) for i in range(0, 600, 5)]
    partner = {c: chr(ord(c) + 1) for c in own}
    passages = ["".join(rng.choice(own, 10, replace=False)) for _ in range(48)]
    records = [{"query": "".join(partner[c] for c in rng.choice(list(p), 4, replace=False)), "pos": p}
               for p in passages]
    data = folder / "data" / "signs_pairs" / "train.jsonl"
    data.parent.mkdir(parents=True)
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    (folder / "specs").mkdir()
    (folder / "specs" / "signs_pairs.yaml").write_text(SPEC, encoding="utf-8")
    write_vocab(build_vocab(count_units(passages + [r["query"] for r in records]), max_size=3000),
                folder / "vocab.txt")
    return [r["query"] for r in records[:6]] + passages[:6]


def experiment(folder, name, lr, steps):
    path = folder / f"{name}.json"
    path.write_text(json.dumps({
        "data_root": str(folder / "data"), "cache_dir": str(folder / "cache"),
        "task_specs": [str(folder / "specs")], "vocab": str(folder / "vocab.txt"),
        "backbone": ONE_LAYER, "tasks": ["pairs"], "tasks_per_update": 1, "batch_size": BATCH,
        "max_length": 24, "steps": steps, "checkpoint_every": steps, "eval_every": 0, "seed": 0,
        "precision": "float32", "optimizer": {"name": "adamw", "lr": lr}}), encoding="utf-8")
    return path


def train(folder, name, lr):
    """`mtl train` in this process: (metrics.jsonl's lines, stdout, stderr)."""
    from mtl_framework import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert cli.main(["train", str(experiment(folder, name, lr, NotLearning.PATIENCE + 10)),
                         "--output", str(folder / name)]) == 0
    lines = (folder / name / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["tasks"]["pairs"] for line in lines], out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One run that learns (lr 1e-2) and one that stays at chance (lr 1e-7), each
    NotLearning.PATIENCE + 10 updates of one micro-batch."""
    folder = tmp_path_factory.mktemp("signs")
    texts = write_task(folder)
    return SimpleNamespace(folder=folder, texts=texts, learning=train(folder, "learning", 1e-2),
                           at_chance=train(folder, "at_chance", 1e-7))


def test_each_update_logs_the_contrastive_tasks_loss_accuracy_chance_and_cosine(runs):
    logged, out, _ = runs.learning
    assert all(set(entry) >= {"loss", "accuracy", "chance", "cosine"} for entry in logged)
    assert all(entry["chance"] == pytest.approx(math.log(BATCH), abs=1e-5) for entry in logged)
    assert all(0 <= entry["accuracy"] <= 1 and -1 <= entry["cosine"] <= 1 for entry in logged)
    last = logged[-10:]
    print(f"learning run: first loss {logged[0]['loss']:.3f}, last 10: loss "
          f"{np.mean([e['loss'] for e in last]):.3f}, accuracy {np.mean([e['accuracy'] for e in last]):.3f}")
    assert np.mean([e["accuracy"] for e in last]) > 0.5 > logged[0]["accuracy"]  # from chance (1 / 8)
    final = [line for line in out.splitlines() if line.startswith(f"update {len(logged)}/")]
    assert len(final) == 1 and "loss/pairs " in final[0] and "accuracy/pairs " in final[0], out[-2000:]
    accuracy = float(final[0].split("accuracy/pairs ")[1].split()[0].rstrip(","))
    assert 0.5 < accuracy <= 1  # the mean since the line before, as metrics.jsonl has them


def test_tensorboard_holds_each_updates_loss_and_signs_as_metrics_jsonl(runs):
    """loop/scalar_log.py writes with tensorboard's own writer on TensorFlow too: tensor
    summaries (as tf.summary v2 writes them) of every update, equal to metrics.jsonl."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    logged = runs.learning[0]
    events = EventAccumulator(str(runs.folder / "learning" / "logs"), size_guidance={"tensors": 0})
    events.Reload()
    for tag, key in (("pairs/loss", "loss"), ("pairs/accuracy", "accuracy"), ("pairs/cosine", "cosine")):
        values = events.Tensors(tag)
        assert [e.step for e in values] == list(range(1, len(logged) + 1)), tag
        np.testing.assert_allclose([float(make_ndarray(e.tensor_proto)) for e in values],
                                   [entry[key] for entry in logged], rtol=1e-6)


def test_a_run_at_chance_warns_once_and_a_learning_run_does_not(runs):
    logged, _, err = runs.at_chance
    warnings = [line for line in err.splitlines() if "is not learning" in line]
    print(warnings)
    assert len(warnings) == 1, err[-3000:]
    assert warnings[0].startswith("warning: task 'pairs' is not learning: its loss has stayed at chance "
                                  f"over its last {NotLearning.PATIENCE} micro-batches (updates 1-")
    assert f"{math.log(BATCH):.3f}" in warnings[0] and "higher learning rate" in warnings[0]
    assert "docs/embeddings.md" in warnings[0]
    window = logged[:NotLearning.PATIENCE]
    loss, chance = (np.mean([e[key] for e in window]) for key in ("loss", "chance"))
    assert loss >= NotLearning.AT_CHANCE * chance
    assert "is not learning" not in runs.learning[2], runs.learning[2][-3000:]


def notice(entries, warmup=0):
    """The warnings NotLearning gives for one micro-batch log per update (entries: {loss,
    chance, cosine})."""
    run = SimpleNamespace(step=0, is_chief=True, model=SimpleNamespace(last_micro_logs=[]),
                          experiment=SimpleNamespace(raw={"optimizer": {"warmup_steps": warmup}}))
    watch, said = NotLearning(run), []
    for update, entry in enumerate(entries, 1):
        run.step, run.model.last_micro_logs = update, [{"task": "t", "finite": True, **entry}]
        with contextlib.redirect_stderr(io.StringIO()) as err:
            watch.on_train_batch_end(update)
        said += [line for line in err.getvalue().splitlines() if line]
    return said


def test_the_warning_reads_the_means_of_a_full_window_after_the_warmup():
    """Collapsed: a window's mean cosine; at chance: a window's mean loss, so a noisy small
    batch (every other micro-batch below 0.98 x chance) still counts; once a task."""
    patience = NotLearning.PATIENCE
    collapsed = {"loss": 1.0, "chance": 4.0, "cosine": 0.9995}
    apart = {**collapsed, "cosine": 0.5}
    (said,) = notice([collapsed] * patience)
    assert "its pooled vectors have collapsed into one over its last" in said
    assert f"(updates 1-{patience}): different texts' mean cosine 0.99950;" in said
    assert notice([collapsed] * (patience - 1) + [apart] + [collapsed] * (patience - 1)) == []
    assert notice([collapsed] * (2 * patience - 1), warmup=patience) == []  # patience - 1 after it
    assert len(notice([collapsed] * 3 * patience)) == 1  # once a task
    noisy = [{"loss": 4.0 * (0.97 if i % 2 else 1.0), "chance": 4.0, "cosine": 0.5, "accuracy": 0.01}
             for i in range(patience)]
    (said,) = notice(noisy)
    assert "its loss has stayed at chance over its last" in said and ": 3.940 against 4.000" in said
    assert "try a higher learning rate" in said
    learning = [{**entry, "loss": 3.8} for entry in noisy]  # 0.95 x chance
    assert notice(learning) == []
    # at 0.9 x chance once (in the warm-up too), then at chance: too high a rate, not too low
    (said,) = notice([{**noisy[0], "loss": 3.0}] + noisy, warmup=1)
    assert "it had learnt (loss 0.75 x chance at update 1) and lost it: try a lower learning rate" in said


def test_run_encode_without_training_uses_the_runs_newest_checkpoint(runs):
    """Run(experiment, existing run).encode() in a process that has not trained it: the
    checkpoint's vectors (Encoder of the run directory), said in one line; a run without a
    checkpoint is refused in one line."""
    from mtl_framework import Run
    from mtl_framework.embedding.encode import Encoder
    from mtl_framework.errors import UserError

    said = []
    run = Run(str(runs.folder / "learning.json"), str(runs.folder / "learning"), log=said.append)
    initial = [w.copy() for w in run.backbone.get_weights()]
    vectors = run.encode(runs.texts)
    expected = Encoder(str(runs.folder / "learning"), log=None).encode(runs.texts)
    np.testing.assert_allclose(vectors, expected, atol=1e-6)
    moved = [not np.allclose(w, w0) for w, w0 in zip(run.backbone.get_weights(), initial)]
    assert sum(moved) > len(moved) // 2  # the checkpoint's weights, not the initial ones
    step = NotLearning.PATIENCE + 10
    assert [line for line in said if line.startswith("encoding with")] == [
        f"encoding with {runs.folder / 'learning' / 'checkpoints' / f'step-{step:08d}'} (step {step}), "
        "the run's newest checkpoint: this Run has not trained"]
    np.testing.assert_array_equal(run.encode(runs.texts), vectors)  # once restored, kept

    fresh = Run(str(runs.folder / "learning.json"), str(runs.folder / "untrained"), log=said.append)
    with pytest.raises(UserError) as refused:
        fresh.encode(runs.texts)
    assert str(refused.value) == (
        f"{runs.folder / 'untrained'}: no checkpoint to encode with, and this Run has not trained: "
        "its weights are the initial ones; call run.train() first (or encode a folder with "
        "Encoder(FOLDER))")
    assert not (runs.folder / "untrained").exists()  # refused: nothing written


@pytest.mark.skipif(not JAX_PYTHON.exists(), reason=".venv-jax is absent (make interop-jax)")
def test_jax_runs_log_the_same_signs(runs):
    """On JAX, each update's line has the task's accuracy, chance (ln 8) and cosine too."""
    path = experiment(runs.folder, "jax", 1e-2, 3)
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu",
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run([str(JAX_PYTHON), "-m", "mtl_framework.cli", "train", str(path), "--output",
                           str(runs.folder / "jax")], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    logged = [json.loads(line)["tasks"]["pairs"] for line in
              Path(runs.folder / "jax" / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(logged) == 3
    for entry in logged:
        assert entry["chance"] == pytest.approx(math.log(BATCH), abs=1e-5)
        assert 0 <= entry["accuracy"] <= 1 and -1 <= entry["cosine"] <= 1
    assert "accuracy/pairs " in done.stdout
