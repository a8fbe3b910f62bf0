"""One writer per run directory: an exclusive flock on the folder itself."""
import errno
import fcntl
import os

from mtl_framework.errors import UserError


class RunLock:
    """An exclusive flock on the run directory itself, held until release() or the process
    ends (the OS drops it then, so a killed run leaves no stale lock). No lock file: there
    is nothing a user could delete to let a second writer in, and nothing left behind that
    looks stale (a `train.lock` of older versions is ignored). Taken before the first
    write; a second writer is refused with the holder's PID (from the kernel's lock table,
    /proc/locks) and writes nothing."""

    def __init__(self, run_dir):
        self.path, self.fd = run_dir, None
        try:
            self.fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as error:
            raise UserError(f"{run_dir}: cannot open the run directory to lock it "
                            f"({error.strerror}): train into another --output") from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            holder = lock_holder(self.fd)
            os.close(self.fd)
            self.fd = None
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise UserError(f"{run_dir}: cannot lock the run directory "
                                f"({error.strerror}): train into another --output") from None
            raise UserError(f"{run_dir}: another `mtl train` (pid {holder or 'unknown'}) is "
                            "writing this run directory; wait for it to end, or train into "
                            "another --output") from None

    def release(self):
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None

    __del__ = release


def lock_holder_of(run_dir):
    """The PID of a process holding the run directory's lock now, else None."""
    try:
        fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return lock_holder(fd) or "unknown"
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def lock_holder(fd):
    """The PID holding a flock on the open file `fd`, from /proc/locks (Linux), or None."""
    inode = str(os.fstat(fd).st_ino)
    try:
        with open("/proc/locks", encoding="ascii") as f:
            table = f.read().splitlines()
    except OSError:
        return None
    for line in table:  # "1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234 0 EOF"; waiters have "->"
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == inode:
            return int(fields[4])
    return None
