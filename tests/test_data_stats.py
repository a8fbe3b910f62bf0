"""`mtl data stats`: per task and split, examples, skipped rows and lost spans."""
import argparse
import json
from pathlib import Path

from data_adapters.qa import UNLOCATED_QUESTION
from mtl_framework.cli import data as data_command
from mtl_framework.prepare import stats as data_stats

from conftest import json_objects

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
    assert ((squad["task"], squad["split"], squad["examples"], squad["questions"])
            == ("fixture_squad", "train", 2, 4))
    assert squad["filtered"][UNLOCATED_QUESTION] == 1
    assert squad["skipped"]["placeholder answers (FAKE_ANSWER, a test file): no gold to learn "
                            "or score"]["first"] == [
        f"{FIXTURES / 'qa/squad_v1.json'} (id TRAIN_1_QUERY_3)"]
    assert squad["spans"] == 5 and squad["spans_lost_total"] == 2
    assert squad["spans_lost"]["answer_start does not point at the answer text"]["first"] == [
        f"{FIXTURES / 'qa/squad_v1.json'} (id TRAIN_1_QUERY_{i})" for i in (1, 2)]
    assert pairs_train["examples"] == 3 and pairs_train["skipped_total"] == 2
    assert "not found" in pairs_dev["error"] and "--data-root" in pairs_dev["error"]


def test_stats_table_lists_reasons_under_each_row(capsys):
    code = mtl("stats", "fixture_squad", "--specs", str(SPECS), "--data-root", str(FIXTURES))
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["task", "split", "examples", "skipped", "spans", "lost", "counts"]
    assert lines[1].split()[:6] == ["fixture_squad", "train", "2", "1", "5", "2"]
    assert "questions 4" in lines[1]
    assert any(line.strip().startswith("filtered 1: question: no answer matches the context")
               for line in lines)
    assert any(line.strip().startswith("skipped 1: placeholder answers") for line in lines)
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


def test_stats_counts_truncation_and_cut_spans_on_real_ner(shared_data, tmp_path, capsys):
    """At max_length 24 on cluener dev, `truncated` and `cut` equal counts made
    directly: a text is truncated when [CLS] text [SEP] is over 24 tokens, an
    entity is cut when [CLS] + the tokens of the text up to its end pass 23."""
    from mtl_framework.tokenizer import Tokenizer, build_vocab, count_units, write_vocab

    records = json_objects(shared_data / "cluener" / "dev.json")
    texts = [record["text"] for record in records]
    vocab = tmp_path / "vocab.txt"
    write_vocab(build_vocab(count_units(texts), max_size=3000), vocab)
    tokenizer, limit = Tokenizer(str(vocab)), 24
    truncated = sum(len(tokenizer.encode(text)[0]) > limit for text in texts)
    ends = [(record["text"], end) for record in records
            for mentions in record["label"].values() for spans in mentions.values()
            for _, end in spans]
    cut = sum(len(tokenizer.encode(text[:end + 1])[0]) - 1 > limit - 1 for text, end in ends)
    assert (len(ends), truncated, cut) == (3072, 1163, 1156)

    code = mtl("stats", "cluener", "--data-root", str(shared_data), "--split", "dev", "--json",
               "--vocab", str(vocab), "--max-length", str(limit), "--cache-dir", str(tmp_path / "cache"))
    (row,) = json.loads(capsys.readouterr().out)
    assert code == 0
    assert row["features"]["max_length"] == 24 and row["features"]["rows"] == 1343
    assert row["features"]["truncated"] == {"text over max_length": truncated}
    assert row["features"]["spans_lost"] == {"entity truncated (past max_length)": cut}

    code = mtl("stats", "cluener", "--data-root", str(shared_data), "--split", "dev",
               "--vocab", str(vocab), "--max-length", str(limit), "--cache-dir", str(tmp_path / "cache"))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[6:8] == ["truncated", "cut"]
    assert lines[1].split()[:8] == ["cluener", "dev", "1343", "0", "3072", "0", "1163", "1156"]
    assert "    cut 1156: entity truncated (past max_length)" in lines


def test_stats_max_length_needs_a_vocab(capsys):
    code = mtl("stats", "fixture_squad", "--specs", str(SPECS), "--data-root", str(FIXTURES),
               "--max-length", "64")
    assert code == 1 and "--max-length needs --vocab" in capsys.readouterr().err


def test_stats_bad_vocab_names_the_file(tmp_path, capsys):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("a\nb\n", encoding="utf-8")
    code = mtl("stats", "fixture_squad", "--specs", str(SPECS), "--data-root", str(FIXTURES),
               "--vocab", str(vocab))
    err = capsys.readouterr().err
    assert code == 1 and str(vocab) in err and "[PAD]" in err
