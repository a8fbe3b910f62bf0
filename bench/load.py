"""CPU and load readings shared by the benchmarks (the machine is shared: every
result records how busy it was). Linux /proc; zeros or None elsewhere."""
import os


def proc_cpu_seconds(pid):
    """utime + stime of a process from /proc (0 where /proc is not there)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def child_pids(pid=None):
    """The live child processes of `pid` (default: this process), from /proc's children
    lists of its threads (a worker pool's processes, without reaching into the pool)."""
    pid = os.getpid() if pid is None else pid
    found = set()
    try:
        for thread in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{thread}/children") as f:
                found.update(int(p) for p in f.read().split())
    except OSError:
        pass
    return sorted(found)


def machine_busy_seconds():
    """CPU seconds all processes have used since boot (idle and iowait left out)."""
    try:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
        return (sum(values[:8]) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def load_average():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def cpu_seconds():
    """User + system CPU seconds of this process."""
    times = os.times()
    return times.user + times.system


def cpu_model():
    """The CPU's model name from /proc/cpuinfo, or None where it cannot be read."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return None
