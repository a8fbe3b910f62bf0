"""Every family's harness case (tests/family_harness.py) on every architecture's
backbone: the families are architecture-blind (tiny backbones, hidden 16)."""
import keras
import pytest
from family_harness import HIDDEN, head_on, run_on_backbone, run_packed_parity, run_read_rows_parity
from test_families import harness_case, tokenizer  # noqa: F401 (the fixture)

from mtl_framework import architectures
from mtl_framework.families import FAMILIES
from mtl_framework.step.distributed import precision_policy


@pytest.fixture(scope="module", params=architectures.ARCHITECTURES)
def backbone(request, tokenizer):  # noqa: F811
    keras.utils.set_random_seed(0)
    dims = dict(vocab_size=tokenizer.vocab_size, num_layers=2, hidden_size=HIDDEN, num_heads=2,
                intermediate_size=32, dropout=0.1)
    if request.param == "albert":
        dims["embedding_size"] = HIDDEN  # the mlm head ties to the token embedding
    built = architectures.build_backbone(architectures.backbone_config(request.param, None, **dims))
    built.build()
    return built


@pytest.mark.parametrize("name", list(FAMILIES))
def test_family_on_every_architecture(backbone, tokenizer, name):  # noqa: F811
    run_on_backbone(harness_case(tokenizer, name), backbone)


def quiet_backbone(architecture, tokenizer):  # noqa: F811
    """The `backbone` fixture's dims without dropout: packed and padded calls draw their
    masks over different layouts, so their parity is checked with none."""
    keras.utils.set_random_seed(0)
    dims = dict(vocab_size=tokenizer.vocab_size, num_layers=2, hidden_size=HIDDEN, num_heads=2,
                intermediate_size=32, dropout=0.0, attention_dropout=0.0)
    if architecture == "albert":
        dims["embedding_size"] = HIDDEN
    built = architectures.build_backbone(architectures.backbone_config(architecture, None, **dims))
    built.build()
    return built


@pytest.mark.parametrize("precision", ["float32", "mixed_bfloat16"])
@pytest.mark.parametrize("architecture", architectures.ARCHITECTURES)
def test_packed_micro_batch_equals_padded(tokenizer, architecture, precision):  # noqa: F811
    """Issue 52 point 2: every family's training loss and gradients with the backbone
    packed equal the padded call's (family_harness.run_packed_parity: within 1e-5 of the
    loss, 2e-6 of the largest gradient entry, or the padded call's own float32 noise),
    padded choices, padded MLM positions and pointer padding included, in float32 and
    under mixed precision (bfloat16 compute: the same bounds hold)."""
    with precision_policy(precision):
        backbone = quiet_backbone(architecture, tokenizer)
        for name in FAMILIES:
            run_packed_parity(harness_case(tokenizer, name), backbone)


@pytest.mark.parametrize("precision", ["float32", "mixed_bfloat16"])
@pytest.mark.parametrize("architecture", architectures.ARCHITECTURES)
def test_last_layer_at_read_rows_equals_padded(tokenizer, architecture, precision):  # noqa: F811
    """Issue 52 point 5: every family whose head reads a few positions ([CLS], each
    choice's [CLS], MLM's masked tokens, the coreference spans' ends) trains with the
    backbone's last layer at those rows alone: the same function as the padded call
    (family_harness.run_read_rows_parity: float64 gradients within 1e-9 of the largest
    entry, the loss in the backbone's precision within 1e-5). Families that read every
    position give no read_positions and run as before."""
    with precision_policy(precision):
        backbone = quiet_backbone(architecture, tokenizer)
        reading = []
        for name in FAMILIES:
            case = harness_case(tokenizer, name)
            if head_on(case, backbone).read_positions(case.batch) is not None:
                run_read_rows_parity(case, backbone)
                reading.append(name)
    assert reading == ["classification", "matching", "regression", "multiple_choice", "cloze",
                       "coreference", "mlm"]
