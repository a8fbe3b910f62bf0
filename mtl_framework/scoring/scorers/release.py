"""What the scorers share: the release files of a split, SQuAD-style gold, answers by id."""
import json

from data_adapters import split_paths


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
    for path in release_paths(task, split, data_root):
        articles += read_json(path)["data"]
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
