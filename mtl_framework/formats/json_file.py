"""A format's JSON config, a bad one as a UserError (the format modules' one reader;
kept out of formats/__init__.py so that they need not import the table)."""
import json

from mtl_framework.errors import UserError

PROVENANCE_FILE = "provenance.json"  # every export of ours (saving/model_card.py)


def read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except ValueError as error:  # cut short, another format, not UTF-8
        raise UserError(f"{path}: not valid JSON ({error}): copy the model's file again (or "
                        "export the folder again)") from None
