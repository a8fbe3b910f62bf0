"""Every family's harness case (tests/family_harness.py) on every architecture's
backbone: the families are architecture-blind (tiny backbones, hidden 16)."""
import keras
import pytest
from family_harness import HIDDEN, run_on_backbone
from test_families import harness_case, tokenizer  # noqa: F401 (the fixture)

from mtl_framework import architectures
from mtl_framework.families import FAMILIES


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
