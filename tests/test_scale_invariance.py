"""Loss-weight invariance through `mtl train` (gradient_norm balancing: README "Training: the mixture").

Under `balancing: gradient_norm` each micro-batch's gradient is divided by its
backbone norm, so multiplying one task's loss by 1000 leaves the summed update,
and so the trained backbone, unchanged; under `balancing: none` the weighted
task dominates the sum and the backbone comes out different. Dropout is 0, so
the loss weight is the only difference between two runs.
"""
import numpy as np
import pytest
from run_harness import SMALL_BACKBONE, write_experiment

from mtl_framework import cli
from mtl_framework.saving.trained import load_run_backbone


def trained_backbone(tmp_path, balancing, weight):
    name = f"{balancing}-{weight}"
    experiment = write_experiment(
        tmp_path / f"{name}.yaml", backbone={**SMALL_BACKBONE, "dropout": 0.0},
        tasks=[{"name": "tnews", "loss_weight": weight}, "afqmc"], sampling="uniform",
        balancing=balancing, tasks_per_update=2, batch_size=4, max_length=16,
        optimizer={"name": "adamw", "lr": 0.001, "weight_decay": 0.01}, steps=4, seed=5,
        checkpoint_every=0)
    assert cli.main(["train", str(experiment), "--output", str(tmp_path / name)]) == 0
    backbone, state = load_run_backbone(str(tmp_path / name))
    assert state["step"] == 4
    return [np.asarray(v) for v in backbone.trainable_variables]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("scale")
    return {(balancing, weight): trained_backbone(tmp_path, balancing, weight)
            for balancing in ("gradient_norm", "none") for weight in (1, 1000)}


def test_gradient_norm_backbone_does_not_depend_on_loss_weight(runs):
    for light, heavy in zip(runs["gradient_norm", 1], runs["gradient_norm", 1000]):
        np.testing.assert_allclose(heavy, light, rtol=1e-4, atol=1e-6)


def test_no_balancing_backbone_follows_the_weighted_task(runs):
    differences = [np.abs(heavy - light).max()
                   for light, heavy in zip(runs["none", 1], runs["none", 1000])]
    # Four AdamW steps of lr 1e-3 move a weight by at most ~4e-3: 1e-4 is a clear change.
    assert max(differences) > 1e-4, differences
