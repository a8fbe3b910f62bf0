"""CMRC 2019 sentence cloze: the official eval/cmrc2019_evaluate.py, QAC and PAC.

Gold: the dataset JSON ({"data": [{context_id, answers, ...}]}); predictions:
{context_id: [choice index per blank, in blank order]}. Per passage the blanks whose
prediction equals the answer (compared as strings) are right, minus one for each
answer the prediction list is too short to reach (never below 0). QAC = right blanks /
all blanks; PAC = passages with every blank right / passages. A passage without
prediction scores 0.
"""
from data_adapters.task_types import CLOZE, type_names
from mtl_framework.scoring.scorers.release import read_json, release_paths

SOURCE = {"repository": "ymcui/cmrc2019", "path": "eval/cmrc2019_evaluate.py",
          "commit": "eae5c105997292c29e7d56e7d3eaf24026b91e3f"}
PRIMARY = "qac"
TASK_TYPES = type_names(CLOZE)  # the families it scores
FORMATS = ("cmrc2019",)  # the release files its gold is read from
MISSING = -1  # a blank our examples do not hold (skipped while reading): never right


def right_blanks(answers, predictions):
    reached = min(len(answers), len(predictions))
    right = sum(str(answers[k]) == str(predictions[k]) for k in range(reached))
    return max(0, right - (len(answers) - reached))


def score(gold, predictions):
    """{"qac", "pac", "questions", "passages"}."""
    qac = pac = questions = passages = 0
    for passage in gold["data"]:
        answers = passage["answers"]
        right = right_blanks(answers, predictions.get(passage["context_id"], []))
        qac += right
        pac += right == len(answers)
        questions += len(answers)
        passages += 1
    return {"qac": qac / questions if questions else 0.0,
            "pac": pac / passages if passages else 0.0,
            "questions": questions, "passages": passages}


def gold_from_release(task, split, data_root, ids=None):
    """The split's files' passages (CMRC 2019 dev reads trial and dev); with `ids`
    (`<context_id>-<blank>` example ids, a partial evaluation's first examples), the
    passages those examples come from, each up to its last blank among them."""
    data = []
    for path in release_paths(task, split, data_root):
        data += read_json(path)["data"]
    if ids is not None:
        last = {}
        for id_ in ids:
            passage, number = str(id_).rsplit("-", 1)
            last[passage] = max(last.get(passage, 0), int(number))
        data = [{**p, "answers": p["answers"][:last[str(p["context_id"])]]}
                for p in data if str(p["context_id"]) in last]
    return {"data": data}


def predictions_from_decoded(task, examples, decoded):
    """{context_id: [index, ...]} from per-blank examples `<context_id>-<n>`."""
    by_passage = {}
    for example, choice in zip(examples, decoded):
        passage, number = str(example.id).rsplit("-", 1)
        by_passage.setdefault(passage, {})[int(number)] = choice["index"]
    return {passage: [blanks.get(n, MISSING) for n in range(1, max(blanks) + 1)]
            for passage, blanks in by_passage.items()}
