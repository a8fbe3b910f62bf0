"""Kill-and-resume exactness: `mtl train` killed (SIGKILL) between checkpoints and
run again with --resume ends with the very same state as an uninterrupted run:
model, optimizer, residual alpha, dropout seeds, sampler and stream positions, and the
balancing's state (dwa: window sums and counts, two window means, the weights;
tests/test_balancing_resume.py does the same for the other stateful methods, `slow`)."""
import json

from run_harness import (
    RESUMABLE,
    assert_same_final_state,
    finished,
    kill_between_checkpoints,
    mtl,
    updates_logged,
    write_experiment,
)

STEPS, CHECKPOINT_EVERY = 24, 4
BALANCING = {"normalize": "gradient_norm", "weights": "dwa", "window": 2}


def train(experiment, run_dir, log, resume=False):
    return mtl("train", experiment, "--output", run_dir, *(["--resume"] if resume else []), log=log)


def test_killed_and_resumed_run_equals_uninterrupted_run(tmp_path):
    experiment = write_experiment(tmp_path / "experiment.yaml", **RESUMABLE, balancing=BALANCING,
                                  steps=STEPS, checkpoint_every=CHECKPOINT_EVERY)
    a, b = tmp_path / "A", tmp_path / "B"
    # The two runs overlap to halve the wall time (the feature cache is written
    # atomically, so they may race to build it).
    uninterrupted = train(experiment, a, tmp_path / "A.log")
    killed = train(experiment, b, tmp_path / "B.log")

    # Kill between checkpoints: after the first one and at least one more update,
    # so the resumed run redoes the updates the kill lost.
    steps_at_kill = kill_between_checkpoints(killed, b, CHECKPOINT_EVERY, 240)
    assert STEPS not in steps_at_kill, "the kill came after the run had finished"
    updates_at_kill = updates_logged(b)
    assert steps_at_kill and updates_at_kill < STEPS
    print(f"killed after update {updates_at_kill}, checkpoints {steps_at_kill}")

    finished(uninterrupted, tmp_path / "A.log")
    resumed = train(experiment, b, tmp_path / "B.log", resume=True)
    finished(resumed, tmp_path / "B.log")
    assert f"resumed from {b / 'checkpoints'}" in (tmp_path / "B.log").read_text(errors="replace")

    trainer_a, trainer_b, differences = assert_same_final_state(a, b, STEPS, steps_at_kill)
    assert trainer_a["step"] == trainer_b["step"] == STEPS
    own = [name for name in trainer_a["variables"] if name.startswith("balancing/dwa/")]
    assert len(own) == 5 * 3, "dwa's state is checkpointed under balancing/dwa/<field>/<task>"
    assert all(differences[name] == 0 for name in own), {name: differences[name] for name in own}
    logged = [[json.loads(line).get("balancing_weights") for line in open(run / "metrics.jsonl")]
              for run in (a, b)]
    assert logged[0][-1] is not None and len(set(map(str, logged[0][-1].values()))) > 1
    assert logged[0][-1] == logged[1][-1]
