"""What a training run shows stock Keras callbacks, and keep_best / patience.

    Run(experiment, callbacks=[keras.callbacks.EarlyStopping(monitor="dev/tnews", mode="max"),
                               keras.callbacks.CSVLogger("log.csv")]).train()

A run's Keras epoch is `eval_every` updates (the whole run when it is 0), ending
at the run's evaluation steps (the first epoch of a resumed run and the last may
be shorter), so an epoch's logs carry that evaluation's dev scores as a Keras
`validation_data` epoch carries `val_*`. Keras's `logs` hold, per update and per
epoch:

  loss             the update's mean micro-batch loss (as before)
  loss/<task>      the task's mean loss over its micro-batches since the epoch began
                   (NaN while the task has not been drawn in this epoch)
  accuracy/<task>  likewise, a contrastive (InfoNCE) task's in-batch accuracy: the
                   fraction of its queries whose positive scores above every other
                   candidate (TaskHead.signs; metrics.jsonl also has each task's chance
                   loss and the mean cosine of different texts, NotLearning below)
  rate/<task>      the sampler's rate for the task
  dev/<task>       the task's dev score, dev/aggregate their mean: in the logs of
                   the update that was evaluated and of the epoch it ends

keep_best / patience (experiment keys) are `BestTracker`: each evaluation's
score of the chosen metric against the best so far (strictly better counts, as
in HF Trainer's `metric_for_best_model` / `greater_is_better` and jiant's
`do_save_best` / `no_improvements_for_n_evals`). Its state is saved in every
checkpoint's trainer.json, so a resumed run keeps and stops exactly as an
uninterrupted one.
"""
import collections
import math
import sys
import time

import keras
import numpy as np

from mtl_framework.rundir.records import warn

# Keras's warning when an epoch ends before steps_per_epoch; here that is intended.
EPOCH_CUT_WARNING = "Your input ran out of data"


class EvaluationEpochs(keras.callbacks.Callback):
    """Ends each Keras epoch at the next evaluation step (or the run's last step)."""

    def __init__(self, run, epoch_updates):
        super().__init__()
        self.run, self.epoch_updates = run, epoch_updates

    def on_epoch_begin(self, epoch, logs=None):
        end = min((epoch + 1) * self.epoch_updates, self.run.experiment.steps)
        self.run.model.epoch_updates_left = end - self.run.step

    def on_train_end(self, logs=None):
        self.run.model.epoch_updates_left = None


SIGNS = ("accuracy", "chance", "cosine")  # every head's signs (TaskHead.signs) that are logged


class TaskMeans:
    """Per task, the means of its finite micro-batches' values (loss and the head's signs)
    since the last reset: what TaskLogs gives per epoch and Progress per line."""

    def __init__(self):
        self.sums = {}  # (task, key) -> [sum, count]

    def add(self, micro_logs):
        for entry in micro_logs:
            if entry["finite"]:
                for key in ("loss", *SIGNS):
                    if key in entry:
                        total = self.sums.setdefault((entry["task"], key), [0.0, 0])
                        total[0] += float(entry[key])
                        total[1] += 1

    def mean(self, task, key):
        """NaN while the task has had no finite micro-batch since the reset."""
        total, count = self.sums.get((task, key), (0.0, 0))
        return total / count if count else math.nan


class TaskLogs(keras.callbacks.Callback):
    """Per-task losses (accuracies), rates and the latest dev scores into Keras's `logs`
    (in place: Keras hands every callback of one call the same dict, and this one comes
    first)."""

    def __init__(self, run):
        super().__init__()
        self.run = run
        self.means = TaskMeans()  # this epoch's

    def on_epoch_begin(self, epoch, logs=None):
        self.means = TaskMeans()

    def on_train_batch_end(self, batch, logs=None):
        self.means.add(self.run.model.last_micro_logs)
        self.add(logs)

    def on_epoch_end(self, epoch, logs=None):
        self.add(logs)

    def add(self, logs):
        if logs is None:
            return
        heads = self.run.model.heads
        for task, rate in self.run.rates.items():
            logs[f"loss/{task}"] = self.means.mean(task, "loss")
            if "accuracy" in heads[task].signs:
                logs[f"accuracy/{task}"] = self.means.mean(task, "accuracy")
            logs[f"rate/{task}"] = float(rate)
        evaluation = self.run.last_evaluation
        if evaluation is not None and evaluation["step"] == self.run.step:
            logs.update(dev_logs(evaluation))


def dev_logs(evaluation):
    """{dev/<task>: score, dev/aggregate: mean} of an evaluations.jsonl line (None -> NaN)."""
    logs = {f"dev/{task}": _number(entry.get("score"))
            for task, entry in evaluation["tasks"].items()}
    logs["dev/aggregate"] = _number(evaluation.get("aggregate"))
    return logs


def _number(value):
    return float(value) if isinstance(value, (int, float)) else math.nan


class Progress(keras.callbacks.ProgbarLogger):
    """The run's console: a header per evaluation interval, `evaluation 2/4 (updates
    61-120)` (Keras's epoch), then on a terminal Keras's progress bar with `loss`, and the
    loss and in-batch accuracy of each task that has signs (TaskHead.signs: contrastive
    tasks; the other per-task keys would fill the line; metrics.jsonl has them), ended
    before the evaluation table prints; to a file or pipe plain lines instead, no control
    bytes: one at the interval's end and one a minute while it runs, each task's values
    the means since the line before. Put it before the run's own callbacks, so the bar's
    line is closed when the evaluation writes."""

    SHOWN = ("loss",)
    PLAIN_EVERY = 60.0  # seconds between plain lines within an interval

    def __init__(self, run, interactive=None):
        super().__init__()
        self.run = run
        self.interactive = sys.stdout.isatty() if interactive is None else interactive
        self.first = self.last = self.started = self.said = None
        self.means = TaskMeans()  # of the micro-batches since the last line (a terminal: update)

    def on_epoch_begin(self, epoch, logs=None):
        exp = self.run.experiment
        every = exp.eval_every or exp.steps
        self.first, self.last = self.run.step + 1, min((epoch + 1) * every, exp.steps)
        self.started = self.said = time.monotonic()
        evaluations = math.ceil(exp.steps / every)
        what = f"evaluation {epoch + 1}/{evaluations}" if exp.eval_every else "training"
        print(f"{what} (updates {self.first}-{self.last})", flush=True)
        self._reset_progbar()
        if self.interactive:
            self.target = self.last - self.first + 1
            self._maybe_init_progbar()

    def on_train_batch_end(self, batch, logs=None):
        self.means.add(self.run.model.last_micro_logs)
        shown = self.shown(logs)
        step = self.first + batch
        if self.interactive:
            if step >= self.last:  # the line ends before the evaluation prints
                self.progbar.update(batch + 1, list(shown.items()), finalize=True)
                self.progbar = None
            elif self.progbar is not None:
                self.progbar.update(batch + 1, list(shown.items()), finalize=False)
            self.means = TaskMeans()  # the bar averages each key over the updates that give it
            return
        now = time.monotonic()
        if step >= self.last or now - self.said >= self.PLAIN_EVERY:
            self.said, self.means = now, TaskMeans()
            print(f"update {step}/{self.run.experiment.steps}: "
                  + ", ".join(f"{k} {v:.4f}" for k, v in shown.items())
                  + f" ({now - self.started:.0f} s since update {self.first - 1})", flush=True)

    def on_epoch_end(self, epoch, logs=None):
        if self.interactive and self.progbar is not None:  # stopped early (stop_training)
            self.progbar.update(self.progbar._seen_so_far, [], finalize=True)
        self.progbar = None

    def shown(self, logs):
        shown = {key: float(value) for key, value in (logs or {}).items() if key in self.SHOWN}
        for task, head in self.run.model.heads.items():
            for key in ("loss", "accuracy"):
                value = self.means.mean(task, key)
                if head.signs and not math.isnan(value):  # drawn since the last line
                    shown[f"{key}/{task}"] = value
        return shown


class NotLearning(keras.callbacks.Callback):
    """One warning per task, on stderr, when a task whose head has signs (TaskHead.signs:
    contrastive) learns nothing after the learning rate's warm-up: over its last PATIENCE
    micro-batches its mean loss is at chance (at least AT_CHANCE x their mean loss of
    vectors that tell no texts apart: ln of a query's candidates for InfoNCE), or its
    pooled vectors have collapsed (different texts' mean cosine at least COLLAPSED). Means,
    not each micro-batch: a small batch's loss is noisy. A task whose loss had once been
    at most LEARNT x chance (from the first update on) learnt, then lost it: the warning
    then says to lower the learning rate, else to raise it. The thresholds come from the
    learning-rate runs of docs/embeddings.md ("Learning rates")."""

    AT_CHANCE = 0.98
    COLLAPSED = 0.999
    PATIENCE = 100
    LEARNT = 0.9

    def __init__(self, run):
        super().__init__()
        self.run = run
        self.warmup = int((run.experiment.raw.get("optimizer") or {}).get("warmup_steps", 0))
        self.recent = {}  # task -> deque of its last PATIENCE (update, finite micro-batch log)
        self.lowest = {}  # task -> (its lowest loss / chance so far, the update)
        self.warned = set()

    def on_train_batch_end(self, batch, logs=None):
        update = self.run.step  # RunLogger has counted this update
        if not self.run.is_chief:
            return
        for entry in self.run.model.last_micro_logs:
            task = entry["task"]
            if task in self.warned or not entry["finite"] or "chance" not in entry:
                continue
            if entry["chance"] > 0:
                self.lowest[task] = min(self.lowest.get(task, (math.inf, 0)),
                                        (entry["loss"] / entry["chance"], update))
            if update <= self.warmup:
                continue
            recent = self.recent.setdefault(task, collections.deque(maxlen=self.PATIENCE))
            recent.append((update, entry))
            said = self.message(task, recent) if len(recent) == self.PATIENCE else None
            if said:
                self.warned.add(task)
                warn(said)

    def message(self, task, recent):
        """The warning when `recent` (a full window) is at chance or collapsed, else None."""
        def mean(key):
            return float(np.mean([entry[key] for _, entry in recent]))
        over = f"over its last {len(recent)} micro-batches (updates {recent[0][0]}-{recent[-1][0]})"
        if mean("chance") > 0 and mean("loss") >= self.AT_CHANCE * mean("chance"):
            accuracy = f", in-batch accuracy {mean('accuracy'):.3f}" if "accuracy" in recent[0][1] else ""
            seen = (f"its loss has stayed at chance {over}: {mean('loss'):.3f} against "
                    f"{mean('chance'):.3f}, the loss of vectors that tell no texts apart{accuracy}")
        elif mean("cosine") >= self.COLLAPSED:
            seen = (f"its pooled vectors have collapsed into one {over}: different texts' mean "
                    f"cosine {mean('cosine'):.5f}")
        else:
            return None
        lowest, when = self.lowest.get(task, (math.inf, 0))
        if lowest <= self.LEARNT:
            advice = (f"it had learnt (loss {lowest:.2f} x chance at update {when}) and lost it: "
                      "try a lower learning rate")
        else:
            advice = "try a higher learning rate"
        return (f"task {task!r} is not learning: {seen}; {advice} (optimizer.lr; "
                "docs/embeddings.md, \"Learning rates\", shows what trained)")


class BestTracker:
    """The best dev score so far (keep_best) and evaluations since it (patience)."""

    def __init__(self, metric="aggregate", mode="max", patience=None):
        self.metric, self.mode, self.patience = metric, mode, patience
        self.best, self.best_step, self.since_best = None, None, 0

    def score(self, evaluation):
        value = evaluation.get("aggregate") if self.metric == "aggregate" else \
            evaluation["tasks"].get(self.metric, {}).get("score")
        return float(value) if isinstance(value, (int, float)) and np.isfinite(value) else None

    def update(self, step, evaluation):
        """Record an evaluation; True when its score is strictly better than the best."""
        score = self.score(evaluation)
        better = score is not None and (self.best is None or (
            score > self.best if self.mode == "max" else score < self.best))
        if better:
            self.best, self.best_step, self.since_best = score, step, 0
        else:
            self.since_best += 1
        return better

    @property
    def name(self):
        return f"dev {self.metric}"

    def exhausted(self):
        return bool(self.patience) and self.since_best >= self.patience

    def stop_reason(self):
        best = (f"no evaluation gave a {self.name} at all: is the dev split readable? "
                "`mtl data stats TASK --split dev` counts its rows") if self.best is None else \
            f"best {self.best:.4f} at update {self.best_step}"
        return (f"{self.name} has not improved ({self.mode}) for {self.since_best} "
                f"evaluation(s) (patience {self.patience}; {best})")

    def state(self):
        return {"metric": self.metric, "mode": self.mode, "best": self.best,
                "best_step": self.best_step, "since_best": self.since_best}

    def restore(self, state):
        if state:
            self.best, self.best_step, self.since_best = \
                state["best"], state["best_step"], state["since_best"]
