"""`mtl data stats`: per task and split, examples, skipped rows and lost spans."""
import argparse
import json
from pathlib import Path

from mtl_framework import data_stats
from mtl_framework.commands import data as data_command

FIXTURES = Path(__file__).parent / "fixtures" / "adapters"
SPECS = FIXTURES / "specs"


def mtl(*argv):
    """Run `mtl data ...` through its own parser (no other command is imported)."""
    parser = argparse.ArgumentParser(prog="mtl")
    data_command.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["data", *argv])
    return args.func(args)


def test_stats_json_per_split(capsys):
    code = mtl("stats", "fixture_squad", "fixture_pairs", "--specs", str(SPECS),
               "--data-root", str(FIXTURES), "--json")
    rows = json.loads(capsys.readouterr().out)
    assert code == 1  # fixture_pairs lists a dev file that does not exist
    squad, pairs_train, pairs_dev = rows
    assert (squad["task"], squad["split"], squad["examples"], squad["questions"]) == ("fixture_squad", "train", 2, 4)
    assert squad["skipped"]["no answer matches the context at its answer_start"]["count"] == 2
    assert squad["spans"] == 6 and squad["spans_lost_total"] == 3
    assert squad["spans_lost"]["answer_start outside the context"]["first"] == [
        f"{FIXTURES / 'qa/squad_v1.json'} (id TRAIN_1_QUERY_3)"]
    assert pairs_train["examples"] == 3 and pairs_train["skipped_total"] == 2
    assert "not found" in pairs_dev["error"] and "--data-root" in pairs_dev["error"]


def test_stats_table_lists_reasons_under_each_row(capsys):
    code = mtl("stats", "fixture_squad", "--specs", str(SPECS), "--data-root", str(FIXTURES))
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["task", "split", "examples", "skipped", "spans", "lost", "counts"]
    assert lines[1].split()[:6] == ["fixture_squad", "train", "2", "2", "6", "3"]
    assert "questions 4" in lines[1]
    assert any(line.strip().startswith("skipped 2: no answer matches the context") for line in lines)
    assert any(line.strip().startswith("lost 2: answer_start does not point at the answer text")
               for line in lines)


def test_stats_split_filter_and_default_data_root(capsys, monkeypatch):
    monkeypatch.setenv("MTL_DATA_ROOT", str(FIXTURES))
    code = mtl("stats", "fixture_pairs", "--specs", str(SPECS), "--split", "train", "--json")
    rows = json.loads(capsys.readouterr().out)
    assert code == 0 and [(r["task"], r["split"]) for r in rows] == [("fixture_pairs", "train")]
    monkeypatch.delenv("MTL_DATA_ROOT")
    assert data_stats.default_data_root() == "data"


def test_stats_unknown_task_suggests_a_name(capsys):
    code = mtl("stats", "fixture_pair", "--specs", str(SPECS))
    assert code == 2
    assert "did you mean 'fixture_pairs'" in capsys.readouterr().err


def test_stats_on_real_data(shared_data, capsys):
    code = mtl("stats", "cmrc2018", "ocnli", "--data-root", str(shared_data), "--split", "dev", "--json")
    rows = {row["task"]: row for row in json.loads(capsys.readouterr().out)}
    assert code == 0
    assert (rows["cmrc2018"]["questions"], rows["cmrc2018"]["examples"]) == (3219, 3216)
    assert rows["ocnli"]["skipped"]["label '-' is in skip_labels"]["count"] == 50
