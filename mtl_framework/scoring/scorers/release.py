"""What the scorers share: the release files of a split, SQuAD-style gold, answers by id."""
import json
import sys
from collections import Counter

from data_adapters import split_paths

SHOW_IDS = 3  # repeated ids named in the warning; the count says how many more
_warned = set()  # the file lists warned about: once a process, not at every evaluation


def release_paths(task, split, data_root):
    """The files of `split` as the spec lists them (absent optional files left out)."""
    if split not in task.files:
        raise ValueError(f"task {task.name!r} has no {split!r} split")
    return split_paths(task, split, data_root)[0]


def read_json(path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def squad_gold(task, split, data_root, ids=None):
    """The split's SQuAD-style files as one {"data": [...]} dict (files concatenated);
    with `ids`, only those questions (paragraphs left without one are dropped)."""
    articles = []
    paths = release_paths(task, split, data_root)
    for path in paths:
        articles += read_json(path)["data"]
    warn_repeated_ids(articles, paths)
    if ids is None:
        return {"data": articles}
    keep = {str(i).strip() for i in ids}
    kept = []
    for article in articles:
        paragraphs = []
        for paragraph in article.get("paragraphs", []):
            qas = [qa for qa in paragraph.get("qas", []) if str(qa.get("id")).strip() in keep]
            if qas:
                paragraphs.append({**paragraph, "qas": qas})
        if paragraphs:
            kept.append({**article, "paragraphs": paragraphs})
    return {"data": kept}


def answers_by_id(examples, decoded):
    """{question id: answer text}: a prediction file as SQuAD-style scripts read it."""
    return {str(example.id).strip(): text for example, text in zip(examples, decoded)}


def warn_repeated_ids(articles, paths):
    """One warning (stderr) when question ids repeat in SQuAD-style gold: a prediction
    file holds one answer per id, so every question of a repeated id is scored against
    the same (the last) prediction, and the publisher's score moves without a word."""
    counts = Counter(str(qa.get("id")).strip() for article in articles
                     for paragraph in article.get("paragraphs", []) for qa in paragraph.get("qas", []))
    repeated = [(id_, n) for id_, n in counts.items() if n > 1]
    where = ", ".join(map(str, paths))
    if not repeated or where in _warned:
        return
    _warned.add(where)
    named = ", ".join(f"{id_!r} x{n}" for id_, n in repeated[:SHOW_IDS])
    more = f" and {len(repeated) - SHOW_IDS} more" if len(repeated) > SHOW_IDS else ""
    print(f"warning: {where}: {len(repeated)} question id(s) repeated ({named}{more}): a "
          "prediction file holds one answer per id, so each repeat is scored against one "
          "question's prediction; give every question its own id", file=sys.stderr, flush=True)
