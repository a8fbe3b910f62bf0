"""`mtl data show` prints examples as the model sees them, and `mtl data stats` warns when a
span task's texts are glued to position digits (issue 34: a naive Weibo NER spec read
`科0技1…` without a word)."""
import json
from pathlib import Path

from mtl_framework import cli
from mtl_framework.config.registry import load_paths, load_registry
from mtl_framework.prepare import stats as data_stats

ROOT = Path(__file__).resolve().parents[1]
DEMO_DATA = ROOT / "experiments" / "demo" / "data"
# Weibo NER's layout: "char+position<TAB>tag", a blank line between sentences.
WEIBO = ["科0\tB-ORG.NAM", "技1\tI-ORG.NAM", "全0\tO", "方1\tO", "位2\tO", "", "我0\tO", "在0\tO",
         "北0\tB-GPE.NAM", "京1\tI-GPE.NAM", "等0\tO", "你0\tB-PER.NOM", ""]
SPEC = """dataset: naive_weibo
format: tagged_chars
files: {train: weibo.conll}
options: {separator: "\\t", scheme: BIO%s}
tasks:
  - name: naive_weibo
    type: extraction_ner
    labels: [PER, ORG, LOC, GPE]
    max_length: 32
    metric: span_f1
"""


def show(capsys, *argv):
    capsys.readouterr()
    code = cli.main(["data", "show", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_ner_spans_are_shown_with_the_characters_they_cover(capsys):
    code, out, _ = show(capsys, "cluener", "--split", "dev", "-n", "2", "--data-root", DEMO_DATA)
    assert code == 0
    rows = [json.loads(line) for line in
            (DEMO_DATA / "cluener" / "dev.json").read_text(encoding="utf-8").splitlines()[:2]]
    for row in rows:  # CLUENER: {type: {mention: [[start, end_inclusive]]}}
        assert f"  text: {row['text']}" in out.splitlines()
        for kind, mentions in row["label"].items():
            for mention, places in mentions.items():
                for start, end in places:
                    assert f"    {kind} [{start}, {end + 1}) {mention!r}" in out.splitlines()
    assert out.count("#") == 2 and out.startswith("#1 cluener dev (extraction_ner, format span_json)")


def test_tokens_are_what_the_tokenizer_gives_for_the_pair_cut_at_max_length(capsys, tmp_path):
    from mtl_framework.tokenizer import Tokenizer, build_vocab, count_units, write_vocab

    rows = [line.split("\t") for line in
            (DEMO_DATA / "afqmc" / "dev.txt").read_text(encoding="utf-8").splitlines()[:2]]
    vocab = tmp_path / "vocab.txt"
    write_vocab(build_vocab(count_units([t for row in rows for t in row[:2]]), max_size=500), vocab)
    code, out, _ = show(capsys, "afqmc", "--split", "dev", "-n", "2", "--data-root", DEMO_DATA,
                        "--vocab", vocab, "--max-length", 12)
    assert code == 0
    tokenizer = Tokenizer(str(vocab))
    token_lines = [line.strip() for line in out.splitlines() if line.strip().startswith("tokens")]
    expected = []
    for text, text_b, label in rows:
        ids, _ = tokenizer.encode(text, text_b, max_length=12)
        expected.append(f"tokens ({len(ids)}): " + " ".join(tokenizer.id_to_token(i) for i in ids))
        assert f"  label: {label}" in out.splitlines()
    assert token_lines == expected
    assert out.count("truncated: text over max_length (max_length 12)") == 2


def test_unknown_split_and_task_are_one_line_exit_2(capsys):
    code, _, err = show(capsys, "cluener", "--split", "validation", "--data-root", DEMO_DATA)
    assert code == 2 and err.splitlines() == [
        f"error: --split validation: task 'cluener' has no such split; its splits: train, dev, test "
        f"({load_registry().tasks['cluener'].spec_path})"]
    code, _, err = show(capsys, "clueners", "--data-root", DEMO_DATA)
    assert code == 2 and len(err.splitlines()) == 1 and "did you mean 'cluener'" in err


def test_stats_warns_on_texts_glued_to_position_digits_and_names_the_option(tmp_path, capsys):
    (tmp_path / "weibo.conll").write_text("\n".join(WEIBO) + "\n", encoding="utf-8")
    rows = {}
    for name, options in (("naive", ""), ("fixed", ", strip_position_digits: true")):
        spec = tmp_path / f"{name}.yaml"
        spec.write_text(SPEC % options, encoding="utf-8")
        [task] = load_paths([spec]).tasks.values()
        [rows[name]] = data_stats.collect([task], tmp_path)
    [warning] = rows["naive"]["warnings"]
    assert warning.startswith("2 of the first 2 texts look glued to position digits (e.g. "
                              "'科0技1全0方1位2')") and "strip_position_digits: true" in warning
    assert "warnings" not in rows["fixed"]
    assert "warning: 2 of the first 2" in data_stats.format_table([rows["naive"]])
    # the suffixed types this spec's labels lack point at the options that read them
    [reason] = [r for r in rows["fixed"]["filtered"] if "'ORG.NAM'" in r]
    assert "options.keep_suffix: NAM keeps these as 'ORG'" in reason and "strip_suffix" in reason
    # and `mtl data show` shows the glued text as read
    code, out, _ = show(capsys, "naive_weibo", "--specs", tmp_path / "naive.yaml",
                        "--data-root", tmp_path, "-n", "1")
    assert code == 0 and "  text: 科0技1全0方1位2" in out.splitlines()


def test_stats_give_a_regression_target_its_range(tmp_path):
    scores = [4.5, 0.5, 4.8, 0.2]
    (tmp_path / "sts.tsv").write_text("".join(f"句子{i}\t句子{i}b\t{v}\n" for i, v in enumerate(scores)),
                                      encoding="utf-8")
    spec = tmp_path / "sts.yaml"
    spec.write_text("dataset: tiny_sts\nformat: delimited\nfiles: {train: sts.tsv}\n"
                    "fields: {text: 0, text_b: 1, label: 2}\ntasks:\n  - {name: tiny_sts, type: "
                    "regression, max_length: 32, metric: spearman}\n", encoding="utf-8")
    [row] = data_stats.collect(load_paths([spec]).tasks.values(), tmp_path)
    assert row["label_range"] == {"min": 0.2, "max": 4.8, "mean": round(sum(scores) / 4, 4)}
    assert "labels 0.2..4.8 (mean 2.5)" in data_stats.format_table([row])
