"""The torch workers' command line (imported from beside them: they run as scripts in the
torch venv): `WORKER COMMAND ARGS...`, or `WORKER batch JOBS.json` to run each of JOBS
(a list of [COMMAND, ARGS...]) in turn in one process, torch being slow to import."""
import json


def run(commands, argv):
    command, *args = argv
    if command != "batch":
        commands[command](*args)
        return
    with open(args[0], encoding="utf-8") as f:
        for name, *rest in json.load(f):
            commands[name](*rest)
