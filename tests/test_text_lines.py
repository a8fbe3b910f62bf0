"""`text_lines` MLM corpora: counts (blank lines skipped with file:line), folder
order, streaming (a FIFO proves nothing reads ahead), and a run whose mlm reads
its own corpus: vocab, size in documents, masking rate and whole words."""
import os
import threading

import numpy as np
import pytest

from data_adapters import ReadReport, read_files
from mtl_framework.loop.run import Run

DOCS = ["今天天气很好，我们去公园散步。", "北京是中国的首都。", "机器学习需要大量的数据。",
        "他喜欢在周末读书和写字。", "这家饭店的菜非常好吃。"]


def test_counts_blank_lines_and_strips(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(f"{DOCS[0]}\n\n  {DOCS[1]}  \n   \n{DOCS[2]}\n", encoding="utf-8")
    report = ReadReport()
    texts = [e.text for e in read_files("text_lines", path, report=report)]
    assert texts == DOCS[:3]
    assert report.examples == 3 and report.units["documents"] == 3
    assert report.skipped == {"blank line": 2}
    assert report.places[("skipped", "blank line")] == [f"{path}:2", f"{path}:4"]


def test_folder_read_in_sorted_order_other_files_counted(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "2.txt").write_text(DOCS[3] + "\n", encoding="utf-8")
    (tmp_path / "b" / "1.txt").write_text(DOCS[2] + "\n", encoding="utf-8")
    (tmp_path / "a.txt").write_text(DOCS[0] + "\n" + DOCS[1] + "\n", encoding="utf-8")
    (tmp_path / "notes.md").write_text("not a corpus file\n", encoding="utf-8")
    report = ReadReport()
    texts = [e.text for e in read_files("text_lines", tmp_path, report=report)]
    assert texts == DOCS[:4]
    assert sum(report.skipped.values()) == 1 and "notes.md" in str(report.places)


def test_lines_are_streamed(tmp_path):
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    first_read = threading.Event()

    def writer():
        with open(fifo, "w", encoding="utf-8") as f:
            f.write(DOCS[0] + "\n")
            f.flush()
            assert first_read.wait(20), "the reader did not yield before the file ended"
            f.write(DOCS[1] + "\n")

    thread = threading.Thread(target=writer)
    thread.start()
    examples = read_files("text_lines", fifo)
    assert next(examples).text == DOCS[0]  # while the writer still holds the file open
    first_read.set()
    assert [e.text for e in examples] == [DOCS[1]]
    thread.join(5)


EXPERIMENT = """
data_root: {root}
cache_dir: {root}/cache
backbone: {{num_layers: 1, hidden_size: 32, num_heads: 2, intermediate_size: 64, vocab_size: 500}}
tasks: [{{name: mlm, corpus: ../corpus, whole_word: {whole_word}, mask_rate: 0.3}}]
batch_size: 4
tasks_per_update: 1
max_length: 16
steps: 1
seed: {seed}
"""


@pytest.mark.parametrize("whole_word", [False, True])
def test_run_mlm_reads_its_own_corpus(tmp_path, whole_word):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    lines = [DOCS[i % len(DOCS)] for i in range(40)]
    (corpus / "part1.txt").write_text("\n".join(lines[:25]) + "\n\n", encoding="utf-8")
    (corpus / "part2.txt").write_text("\n".join(lines[25:]) + "\n", encoding="utf-8")
    (tmp_path / "experiments").mkdir()
    experiment = tmp_path / "experiments" / "mlm.yaml"  # the corpus path is relative to it
    experiment.write_text(EXPERIMENT.format(root=tmp_path, whole_word=str(whole_word).lower(),
                                            seed=1))
    run = Run(str(experiment), output=str(tmp_path / "run"), log=lambda *_: None)
    saved = run.plan.resolved["tasks"][0]  # what experiment.yaml keeps once training starts
    assert saved["corpus"] == str(corpus)  # stored absolute: the run rebuilds from anywhere
    # the vocab comes from the corpus: every character of it is known
    ids = run.tokenizer.encode("".join(DOCS))[0]
    assert run.tokenizer.unk_id not in ids
    stream = run.mixture.streams["mlm"]
    features = stream.streams[0].features
    assert features.report.examples == 40  # documents, the blank line skipped
    assert len(features) > 40  # max_length 16 cuts long documents into several rows
    masked = real = 0
    for _ in range(50):
        batch = stream.next_batch()
        content = batch["token_ids"] != 0
        masked += int((batch["mlm_labels"] != 0).sum())
        real += int(content.sum()) - 2 * len(batch["token_ids"])
    assert 0.2 < masked / real < 0.34  # mask_rate 0.3 (whole words round the target down)
    assert features.meta["settings"]["whole_word"] is whole_word
    if whole_word:  # a jieba word is masked whole or not at all
        rows = np.arange(len(features))
        batch = features.batch(rows, np.random.default_rng(0))
        split_words = 0
        for b, row in enumerate(rows):
            starts = features.ragged("word_starts", row)
            n = len(starts) - 2
            word_of = np.cumsum(starts[1:n + 1]) - 1
            labelled = batch["mlm_labels"][b, 1:n + 1] != 0
            for word in np.unique(word_of):
                split_words += len(set(labelled[word_of == word].tolist())) > 1
        assert split_words == 0 and (np.diff(word_of) == 0).any()  # multi-char words exist


def test_editing_a_corpus_file_changes_its_cache_key(tmp_path):
    """A folder corpus is keyed by every file in it, not by the folder's own mtime."""
    from mtl_framework.plan import mlm_corpus_task
    from mtl_framework.prepare.cache import data_files

    (tmp_path / "corpus" / "sub").mkdir(parents=True)
    (tmp_path / "corpus" / "a.txt").write_text(DOCS[0] + "\n", encoding="utf-8")
    (tmp_path / "corpus" / "sub" / "b.txt").write_text(DOCS[1] + "\n", encoding="utf-8")
    experiment = type("Experiment", (), {"path": str(tmp_path / "x.yaml"), "max_length": 32,
                                         "resolve_path": lambda self, p: str(tmp_path / p)})()
    task = mlm_corpus_task(experiment, {"corpus": "corpus"})
    before = data_files(task, "train", tmp_path)
    assert [entry[0].rsplit("/", 1)[-1] for entry in before] == ["a.txt", "b.txt"]
    (tmp_path / "corpus" / "sub" / "b.txt").write_text(DOCS[1] + DOCS[2] + "\n", encoding="utf-8")
    assert data_files(task, "train", tmp_path) != before
