"""CLUE 1.1 leaderboard submission files, one per CLUE task (docs/predict.md gives the sources).

    clue_files_for(["tnews", "cluener"])   # the ClueFiles those tasks fill
    id_problem(clue_file, rows)            # why the rows' ids cannot key the file, or None
    file_text(clue_file, rows, labels)     # rows: [(example, prediction)] in input order

`mtl predict RUN_DIR --clue` (predict.predict_clue) predicts each source task's test
split and writes these files.

Two layouts, as CLUE's submission instructions and Su's CLUE-bert4keras write them:
- classification tasks and NER: one JSON object per line, in the test file's order,
  `{"id": ..., "label": ...}`; the scorer reads the lines in order, so the order is
  the input's and the ids are the dataset's own (never a line or batch index);
- cmrc2018 and chid: the whole file is one JSON object, `{question id: answer text}`
  and `{"#idiom012345#": candidate index}`.

A task whose examples carry no usable id is skipped with the reason, never numbered.
"""
import json
import re
from dataclasses import dataclass

# TNEWS' label codes by label_desc (CLUE's tnews_public/labels.json); the spec reads label_desc.
TNEWS_CODES = {
    "news_story": "100", "news_culture": "101", "news_entertainment": "102",
    "news_sports": "103", "news_finance": "104", "news_house": "106", "news_car": "107",
    "news_edu": "108", "news_tech": "109", "news_military": "110", "news_travel": "112",
    "news_world": "113", "news_stock": "114", "news_agriculture": "115", "news_game": "116"}
CHID_BLANK = re.compile(r"#idiom\d+#")


@dataclass(frozen=True)
class ClueFile:
    name: str  # the file name the leaderboard expects
    tasks: tuple  # run tasks whose test predictions fill it, in this order
    layout: str  # "lines" (one JSON object per example) or "object" (one JSON object)
    label: str  # how a prediction becomes the file's value (see `value`)
    ids: str = "any"  # "any", "int" (CLUE-numbered questions) or "chid" (#idiomNNNNNN# blanks)


CLUE_FILES = (
    ClueFile("afqmc_predict.json", ("afqmc",), "lines", "name"),
    ClueFile("tnews11_predict.json", ("tnews",), "lines", "tnews_code"),
    ClueFile("iflytek_predict.json", ("iflytek",), "lines", "index"),
    ClueFile("cmnli_predict.json", ("cmnli",), "lines", "name"),
    ClueFile("ocnli_50k_predict.json", ("ocnli",), "lines", "name"),
    ClueFile("cluewsc11_predict.json", ("cluewsc",), "lines", "name"),
    ClueFile("csl_predict.json", ("csl",), "lines", "name"),
    ClueFile("cmrc2018_predict.json", ("cmrc2018",), "object", "answer_text"),
    ClueFile("c311_predict.json", ("c3_d", "c3_m"), "lines", "choice_index", ids="int"),
    ClueFile("chid11_predict.json", ("chid",), "object", "choice_index", ids="chid"),
    ClueFile("cluener_predict.json", ("cluener",), "lines", "cluener"),
)


def clue_files_for(task_names):
    """The CLUE files at least one of whose source tasks is among `task_names`."""
    names = set(task_names)
    return [f for f in CLUE_FILES if names & set(f.tasks)]


def id_problem(clue_file, rows):
    """Why these rows' ids cannot key the file, or None. rows: [(example, prediction)]."""
    for number, (example, _) in enumerate(rows, 1):
        id_ = example.id
        if id_ is None:
            return (f"example {number} has no id (the test file carries none; CLUE's own "
                    "test.json numbers its rows): not numbered by line, see docs/predict.md")
        if clue_file.ids == "int" and not isinstance(id_, int):
            return (f"question id {id_!r} is not CLUE's: CLUE's c3 test1.1.json numbers its "
                    "questions (`id`), this release does not")
        if clue_file.ids == "chid" and not (isinstance(id_, str) and CHID_BLANK.fullmatch(id_)):
            return (f"id {id_!r} is not a CLUE 1.1 ChID blank (#idiomNNNNNN#): this is another "
                    "release (FewCLUE's test_public numbers passages)")
    return None


def value(clue_file, example, prediction, labels):
    """The file's value for one prediction (see predict.py for the prediction shapes)."""
    if clue_file.label == "name":
        return prediction
    if clue_file.label == "tnews_code":
        return TNEWS_CODES[prediction]
    if clue_file.label == "index":  # IFLYTEK's codes are the label positions 0-118
        return str(labels.index(prediction))
    if clue_file.label == "answer_text":
        return prediction["text"]
    if clue_file.label == "choice_index":
        return prediction["index"]
    if clue_file.label == "cluener":  # {type: {mention: [[start, end inclusive], ...]}}
        label = {}
        for entity in prediction:
            spans = label.setdefault(entity["type"], {}).setdefault(entity["text"], [])
            spans.append([entity["start"], entity["end"] - 1])
        return label
    raise ValueError(f"unknown CLUE label kind {clue_file.label!r}")


def file_text(clue_file, rows, labels):
    """The file's content for rows [(example, prediction)] in input order."""
    if clue_file.ids == "int":
        rows = sorted(rows, key=lambda row: row[0].id)  # both c3 halves in CLUE's numbering
    if clue_file.layout == "object":
        mapping = {str(e.id): value(clue_file, e, p, labels) for e, p in rows}
        return json.dumps(mapping, ensure_ascii=False, indent=2) + "\n"
    lines = []
    for example, prediction in rows:
        line = {"id": example.id, "label": value(clue_file, example, prediction, labels)}
        if clue_file.label == "choice_index":
            line["label"] = str(line["label"])  # CLUE's c3 lines carry the index as a string
        if clue_file.label == "tnews_code":
            line["label_desc"] = prediction
        if clue_file.label == "cluener":
            line = {"id": example.id, "text": example.text, "label": line["label"]}
        lines.append(json.dumps(line, ensure_ascii=False))
    return "\n".join(lines) + "\n"
