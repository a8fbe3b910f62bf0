"""What produced a run or an export: our version, the source commit, the versions that matter.

Read from the installed packages' metadata (importlib.metadata), so nothing here
imports TensorFlow: `mtl --version` stays fast. The commit is that of the checkout
the package is imported from, and only when it is one (a `.git` beside the
`mtl_framework` folder): an installed wheel inside some other repository has none.
"""
import functools
import importlib.metadata
import importlib.util
import os
import platform
import subprocess
import sys

from mtl_framework import __version__

# Import names whose versions are recorded; TensorFlow's comes from whichever
# distribution provides it (tensorflow, tensorflow-cpu, ...).
DEPENDENCIES = ("tensorflow", "keras", "tokenizers", "jax")
SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def installed_version(import_name):
    """Version of the distribution that provides `import_name`, or None: the distribution
    of that name first, then any that provides it (`providers`)."""
    if importlib.util.find_spec(import_name) is None:  # not importable: nothing to scan for
        return None
    for distribution in (import_name, *providers().get(import_name, [])):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


@functools.lru_cache(maxsize=None)
def providers():
    """{import name: [distributions]}, read once: it scans every installed distribution's
    file list (0.2 s a call in .venv, 0.8 s of each `mtl train`'s start-up when it ran
    per dependency)."""
    return importlib.metadata.packages_distributions()


def git(*args):
    done = subprocess.run(["git", "-C", SOURCE, *args], capture_output=True, text=True,
                          timeout=10)
    return done.stdout.strip() if done.returncode == 0 else None


def source_commit():
    """(commit, dirty) of the checkout the package runs from, or (None, None)."""
    if not os.path.exists(os.path.join(SOURCE, ".git")):  # a folder, or a worktree's file
        return None, None
    try:
        commit = git("rev-parse", "HEAD")
        changes = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):  # no git program
        return None, None
    return commit, (None if commit is None or changes is None else bool(changes))


@functools.lru_cache(maxsize=None)
def _provenance():
    commit, dirty = source_commit()
    record = {"mtl_framework": __version__, "commit": commit, "dirty": dirty,
              "python": platform.python_version()}
    record.update({name: installed_version(name) for name in DEPENDENCIES})
    record["keras_backend"] = keras_backend()
    return record


def keras_backend():
    """The Keras backend this process runs on (KERAS_BACKEND, else Keras's default)."""
    keras = sys.modules.get("keras")
    if keras is not None:
        return keras.backend.backend()
    return os.environ.get("KERAS_BACKEND", "tensorflow")


def provenance():
    """{"mtl_framework", "commit", "dirty", "python", "tensorflow", "keras", "tokenizers"}
    of this process (computed once: the code a process runs does not change under it)."""
    return dict(_provenance())


def describe(record):
    """One line: `mtl_framework 0.1.0 (commit f484fc3+changes; TensorFlow 2.21.0, ...)`."""
    commit = record.get("commit")
    source = f"commit {commit[:12]}{'+changes' if record.get('dirty') else ''}; " if commit else ""
    versions = ", ".join(f"{label} {record.get(key) or 'not installed'}" for key, label in
                         (("tensorflow", "TensorFlow"), ("keras", "Keras"),
                          ("tokenizers", "tokenizers"), ("python", "Python")))
    return f"mtl_framework {record['mtl_framework']} ({source}{versions})"
