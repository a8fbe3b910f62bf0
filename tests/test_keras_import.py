"""The `mtl` program imports Keras without scikit-learn and matplotlib.pyplot, which Keras
imports whenever they are installed and `mtl` never uses through it (cli/keras_import.py:
1.2 s of each command's start-up); both still import afterwards, for the suite's scorers and
`mtl report`. A caller's process (`main([...])`) imports Keras as it would anyway."""
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXTRAS = "sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in ('sklearn', 'matplotlib')})"


def child(call):
    code = textwrap.dedent(f"""
        import contextlib, io, sys
        from mtl_framework import cli
        with contextlib.redirect_stdout(io.StringIO()):
            {call}
        import keras
        print({EXTRAS})
        import matplotlib.pyplot, sklearn.metrics
        print({EXTRAS})
        """)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.splitlines()[-2:]


def test_the_program_imports_keras_without_its_unused_extras_and_they_import_later():
    call = "sys.argv = ['mtl', 'tasks', 'list']; code = cli.main()"
    assert child(call) == ["[]", "['matplotlib', 'sklearn']"]


def test_a_callers_process_imports_keras_as_it_would():
    assert child("cli.main(['tasks', 'list'])") == ["['matplotlib', 'sklearn']"] * 2
