"""Checks on where a command will write, made before it does any work: an hour of
training or predicting never ends in "cannot write", and a refusal writes nothing."""
import os

from mtl_framework.errors import UserError


def nearest_existing(path):
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def not_stdout(path, flag):
    """`-` is stdout to most tools: a file or folder named `-` in the current folder is
    never what was meant (`./-` still names one)."""
    if str(path) == "-":
        raise UserError(f"{flag} -: mtl writes no file to stdout through `-`: give a path "
                        "(`mtl predict --text` prints to stdout without --output; `./-` "
                        "names a file called -)")


def not_inside(path, folder, flag, what):
    """`path` is not `folder` nor under it: a command never writes into the folder it
    reads (`what` says which that is, and why it matters)."""
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    if path == folder or path.startswith(folder.rstrip(os.sep) + os.sep):
        raise UserError(f"{flag} {path}: inside {folder}, {what}: write it outside that folder")


def check_folder(path, flag="--output"):
    """`path` will be a folder (created if missing): not a file, and under a folder
    this process can write."""
    not_stdout(path, flag)
    if os.path.exists(path) and not os.path.isdir(path):
        raise UserError(f"{flag} {path}: exists and is not a folder: give a folder")
    base = nearest_existing(path)
    if not os.path.isdir(base):
        raise UserError(f"{flag} {path}: {base} is a file, not a folder: give another path")
    if not os.access(base, os.W_OK | os.X_OK):
        raise UserError(f"{flag} {path}: {base} is not writable: give another path")


def check_file(path, flag="--output"):
    """`path` will be a file: not a folder, in an existing folder this process can write."""
    not_stdout(path, flag)
    if os.path.isdir(path):
        raise UserError(f"{flag} {path}: is a folder: give the path of a file (in it, or "
                        "elsewhere)")
    if os.path.exists(path) and not os.path.isfile(path):  # a write-then-rename would
        raise UserError(f"{flag} {path}: is not a regular file (a device, FIFO or socket): "
                        "give the path of a file")  # replace the node itself
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UserError(f"{flag} {path}: its folder {parent} does not exist: create it first")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{flag} {path}: its folder {parent} is not writable")


def usual_mode(path):
    """rw for whom the umask allows, as `open()` makes files: a file written through
    mkstemp (0600) or a library's temporary would otherwise differ from its siblings."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


def write_text_atomic(path, text):
    """`text` into `path` whole or not at all (a temporary file beside it, renamed)."""
    def write(temporary):
        with open(temporary, "w", encoding="utf-8") as f:
            f.write(text)

    return write_atomic(path, write)


def write_atomic(path, write, suffix="", remedy="free space or write elsewhere"):
    """`write(temporary)` makes the file beside `path` (`suffix`: an ending the writer
    needs, as matplotlib's .png), which is then renamed over `path`: whole or not at all.
    A failed write (a full disk) leaves `path` as it was and is one line saying `remedy`."""
    temporary = f"{path}.tmp-{os.getpid()}{suffix}"
    try:
        write(temporary)
        os.replace(temporary, path)
    except OSError as error:
        _remove(temporary)
        raise UserError(f"{path}: could not be written ({error.strerror or error}); it is as "
                        f"it was: {remedy}") from None
    except BaseException:  # Ctrl-C: `path` as it was, and no half-written file beside it
        _remove(temporary)
        raise
    return path


def _remove(temporary):
    if os.path.exists(temporary):
        os.remove(temporary)
