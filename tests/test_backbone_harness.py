"""tests/backbone_harness.py on every architecture and every (architecture, format) pair
a converter exists for (architectures.converter, formats.FORMATS): build and call,
padding exactness, the packed call, mixed precision, the converter's save/load round trip, and parity
with the format's own library both ways."""
import backbone_harness as harness
import pytest

from mtl_framework import architectures
from mtl_framework.formats import FORMATS, OURS

CASES = harness.cases()
REFERENCED = [(a, f) for a, f in CASES if not FORMATS[f].ours]  # ours has no other library


def case_id(case):
    return "-".join(case)


# each harness check on one architecture alone: built and called, padding exactness, the
# packed call, mixed precision
CHECKS = {"backbone": harness.run_backbone_test, "padding": harness.run_padding_test,
          "packed": harness.run_packed_test, "mixed_precision": harness.run_mixed_precision_test}


@pytest.mark.parametrize("architecture", architectures.ARCHITECTURES)
@pytest.mark.parametrize("check", CHECKS)
def test_architecture(check, architecture):
    CHECKS[check](architecture)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_save_load_round_trip(case, tmp_path):
    harness.run_saving_test(*case, tmp_path)


@pytest.mark.parametrize("case", REFERENCED, ids=case_id)
def test_converter_parity(case, real_batch, real_vocab, real_sentences, tmp_path):
    harness.run_parity_test(*case, real_batch, real_vocab, real_sentences[0][:24], tmp_path)


def test_every_architecture_has_its_preset_and_a_reference():
    """The cases come from the tables: a new architecture or format is in them at once."""
    assert {a for a, _ in CASES} == set(architectures.ARCHITECTURES)
    assert all((a, OURS) in CASES for a in architectures.ARCHITECTURES)
    assert {f for _, f in REFERENCED} <= set(harness.REFERENCES)
