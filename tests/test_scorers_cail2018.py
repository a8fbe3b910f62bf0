"""CAIL2018's judger figures (charges and articles) on 24 prediction sets."""
import pytest
from official_fixtures import assert_figures, load, shared_file

from mtl_framework.scorers import cail2018

FIXTURE = load("cail2018")


@pytest.fixture(scope="module")
def gold():
    folder = shared_file("real_formats", "cail2018")
    read = lambda name: (folder / name).read_text(encoding="utf-8").splitlines()
    return {"accusations": read("accu.txt"), "articles": [int(n) for n in read("law.txt")],
            "truth": FIXTURE["truth"]}


def test_fixture_names_the_script():
    assert FIXTURE["source"] == cail2018.SOURCE
    assert len(FIXTURE["sets"]) >= 20


@pytest.mark.parametrize("name", sorted(FIXTURE["sets"]))
def test_equals_the_judger(gold, name):
    entry = FIXTURE["sets"][name]
    ours = cail2018.score(gold, entry["predictions"])
    assert set(ours) == {"accusation", "articles", "score"}
    assert_figures(ours, entry["official"], name)


def test_absent_labels_score_one_and_micro_half_is_pooled():
    # 3 labels: label 3 in neither side scores 1.0; label 1 hit, label 2 missed
    # micro = 2*1/(2+0+1) = 2/3, macro = (1 + 0 + 1)/3
    assert cail2018.subtask_score([{1, 2}], [{1}], 3) == pytest.approx((2 / 3 + 2 / 3) / 2)


def test_label_names_count_as_their_ids(gold):
    """predictions_from_decoded writes label names; they score as the judger's ids."""
    names = [{"accusation": [gold["accusations"][i - 1] for i in p["accusation"]]}
             for p in FIXTURE["sets"]["mixed_seed0"]["predictions"]]
    charges = {**gold, "articles": None}
    assert cail2018.score(charges, names)["score"] == pytest.approx(
        FIXTURE["sets"]["mixed_seed0"]["official"]["accusation"])
