"""CAIL2018's judger figures (charges and articles) on 24 prediction sets."""
import pytest
from official_fixtures import assert_figures, assert_names_the_script, load, shared_file

from mtl_framework.scoring.scorers import cail2018

FIXTURE = load("cail2018")


@pytest.fixture(scope="module")
def gold():
    folder = shared_file("real_formats", "cail2018")
    read = lambda name: (folder / name).read_text(encoding="utf-8").splitlines()
    return {"accusations": read("accu.txt"), "articles": [int(n) for n in read("law.txt")],
            "truth": FIXTURE["truth"]}


def test_fixture_names_the_script():
    assert_names_the_script(FIXTURE, cail2018)


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


def test_publisher_entry_reads_the_release_layout(gold, tmp_path):
    """`scorer: cail2018` on the spec's own paths: the gold labels as decoded names score
    1.0, and a fixture set's names give the judger's figure."""
    import json
    import shutil

    from data_adapters import read_task
    from mtl_framework.config.registry import load_registry
    from mtl_framework.scoring import scorers

    folder = tmp_path / "cail2018"
    (folder / "final_all_data" / "exercise_contest").mkdir(parents=True)
    for name in ("accu.txt", "law.txt"):
        shutil.copy(shared_file("real_formats", "cail2018", name), folder / name)
    cases = [{"fact": f"案情{i}", "meta": meta} for i, meta in enumerate(FIXTURE["truth"])]
    (folder / "final_all_data" / "exercise_contest" / "data_valid.json").write_text(
        "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cases), encoding="utf-8")
    entry = FIXTURE["sets"]["mixed_seed3"]
    for task in load_registry().select(["cail_charge", "cail_article"]):
        assert task.scorer == "cail2018"
        examples = list(read_task(task, "dev", tmp_path))
        field = "articles" if task.name == "cail_article" else "accusation"
        assert scorers.publisher_entry(task, "dev", tmp_path, examples,
                                       [e.label for e in examples])["score"] == 1.0
        names = gold["articles"] if field == "articles" else gold["accusations"]
        decoded = [[str(names[i - 1]) for i in p[field]] for p in entry["predictions"]]
        result = scorers.publisher_entry(task, "dev", tmp_path, examples, decoded)
        assert result["score"] == pytest.approx(entry["official"][field], abs=1e-12)
