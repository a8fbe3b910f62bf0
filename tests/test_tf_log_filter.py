"""TensorFlow's own stderr lines are held back from `mtl` users on any CPU (issue 22).

What TensorFlow prints depends on the CPU, so these tests do not wait for it: a child
process runs the real `mtl` program with an import hook that writes absl's lines to
fd 2 (as TensorFlow's C++ code does, bypassing Python) while `tensorflow` is imported,
and the tests check what reaches the child's stderr.
"""
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from mtl_framework import tf_log_filter

REPO = Path(__file__).resolve().parents[1]
NOTICE = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
ONEDNN = (b"I0000 00:00:1764000000.123456    4242 port.cc:153] oneDNN custom operations are on. "
          b"You may see slightly different numerical results due to floating-point round-off errors "
          b"from different computation orders. To turn them off, set the environment variable "
          b"`TF_ENABLE_ONEDNN_OPTS=0`.\n")
CUDA = b"E0000 00:00:1764000000.223456    4242 cuda_dnn.cc:8310] Unable to register cuDNN factory\n"
OLD_FORMAT = (b"2026-11-24 14:00:00.123456: I tensorflow/core/platform/cpu_feature_guard.cc:182] "
              b"This TensorFlow binary is optimized to use available CPU instructions\n")
# As the `tensorflow` wheel 2.21 wrote it on this machine (one write, two lines).
CPU_GUARD = (b"I0000 00:00:1795534244.279844   32011 cpu_feature_guard.cc:227] This TensorFlow "
             b"binary is optimized to use available CPU instructions in performance-critical "
             b"operations.\nTo enable the following instructions: AVX2 AVX512F AVX512_VNNI "
             b"AVX512_BF16 AVX512_FP16 AVX_VNNI AMX_TILE AMX_INT8 AMX_BF16 FMA, in other "
             b"operations, rebuild TensorFlow with the appropriate compiler flags.\n")
FATAL = (b"F0000 00:00:1764000000.323456    4242 cpu_feature_guard.cc:95] The TensorFlow library was "
         b"compiled to use AVX512F instructions, but these aren't available on your machine.\n")


def copied(*writes):
    """What `copy_without_tensorflow_lines` passes on of these writes to a pipe."""
    source_read, source_write = os.pipe()
    target_read, target_write = os.pipe()
    for data in writes:
        os.write(source_write, data)
    os.close(source_write)
    tf_log_filter.copy_without_tensorflow_lines(source_read, target_write)
    os.close(target_write)
    with os.fdopen(target_read, "rb") as target:
        return target.read()


def test_filter_drops_absl_and_tensorflow_lines_and_passes_everything_else():
    ours = ["error: x.yaml:3: steps must be >= 1 (got 0)\n", "训练 50%\r", "训练 100%\n",
            "I0000 is how a line of ours may start\n", "Traceback (most recent call last):\n"]
    writes = [NOTICE, ONEDNN, ours[0].encode(), NOTICE + ONEDNN + CUDA, OLD_FORMAT, CPU_GUARD,
              *(line.encode() for line in ours[1:]), FATAL, b"unfinished"]
    assert copied(*writes) == "".join(ours).encode() + FATAL + b"unfinished"


def test_a_log_line_cut_by_a_read_is_held_until_its_newline(tmp_path):
    # A file as the source: reads of 64 KiB end 60 bytes into the oneDNN line.
    filler = b"k" * (65536 - 60 - 1) + b"\n"
    source = tmp_path / "stderr.bin"
    source.write_bytes(filler + ONEDNN + b"after\n")
    target = tmp_path / "copy.bin"
    with open(source, "rb") as reader, open(target, "wb") as writer:
        tf_log_filter.copy_without_tensorflow_lines(reader.fileno(), writer.fileno())
    assert target.read_bytes() == filler + b"after\n"


def run_mtl(tmp_path, *args, at_import=""):
    """`mtl *args` in a child whose import of `tensorflow` first runs `at_import`."""
    script = tmp_path / "noisy_mtl.py"
    script.write_text(textwrap.dedent(f"""\
        import importlib.abc, os, sys

        class NoisyTensorFlow(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name == "tensorflow":
                    {at_import or "pass"}
                return None

        sys.meta_path.insert(0, NoisyTensorFlow())
        from mtl_framework.cli import main
        sys.argv = ["mtl", *{list(map(str, args))!r}]
        sys.exit(main())
        """), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "MTL_VERBOSE")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, str(script)], capture_output=True, env=env, cwd=tmp_path,
                          timeout=300)


def absl_writes(*lines):
    return "; ".join(f"os.write(2, {line!r})" for line in lines)


def test_error_after_noisy_tensorflow_import_is_one_line_and_verbose_shows_the_lines(tmp_path):
    # `mtl evaluate` imports TensorFlow before it finds that the folder is no run.
    empty = tmp_path / "empty"
    empty.mkdir()
    noise = absl_writes(NOTICE, ONEDNN, NOTICE, ONEDNN)
    done = run_mtl(tmp_path, "evaluate", empty, at_import=noise)
    assert done.returncode == 2
    [line] = done.stderr.decode().splitlines()
    assert line.startswith(f"error: {empty}") and "experiment.yaml" in line

    verbose = run_mtl(tmp_path, "--verbose", "evaluate", empty, at_import=noise)
    assert verbose.returncode == 2
    assert verbose.stderr.startswith(NOTICE + ONEDNN + NOTICE + ONEDNN)
    assert verbose.stderr.decode().splitlines()[-1] == line


def test_a_real_import_failure_is_still_shown(tmp_path):
    failure = "raise ImportError('libtensorflow_framework.so.2: cannot open shared object file')"
    done = run_mtl(tmp_path, "evaluate", tmp_path, at_import=f"{absl_writes(NOTICE)}; {failure}")
    stderr = done.stderr.decode()
    assert done.returncode == 1 and "Traceback" in stderr
    assert stderr.splitlines()[-1] == \
        "ImportError: libtensorflow_framework.so.2: cannot open shared object file"
    assert NOTICE.decode().rstrip() not in stderr.splitlines()  # (the traceback quotes the hook)


def test_a_fatal_line_before_an_abort_is_shown(tmp_path):
    # The filter is a process of its own: it prints what the aborted process wrote last.
    done = run_mtl(tmp_path, "evaluate", tmp_path,
                   at_import=f"{absl_writes(NOTICE, ONEDNN, FATAL)}; os.abort()")
    assert done.returncode == -signal.SIGABRT
    assert done.stderr == FATAL


def test_python_stderr_stays_a_terminal_inside_the_filter(tmp_path):
    # Progress bars ask sys.stderr.isatty(): only fd 2 goes through the filter.
    import pty

    controller, terminal = pty.openpty()
    code = ("import os, sys; from mtl_framework import tf_log_filter as f\n"
            "with f.tensorflow_lines_dropped():\n"
            "    print(sys.stderr.isatty(), os.isatty(2), flush=True)\n"
            "print(sys.stderr.isatty(), os.isatty(2))\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=terminal,
                          env=env, timeout=60)
    os.close(terminal)
    os.close(controller)
    assert done.stdout.decode().split() == ["True", "False", "True", "True"]


def test_the_filter_ends_with_mtl_while_a_child_still_holds_its_pipe(tmp_path):
    # multiprocessing's resource tracker (started by `mtl data prepare --workers 2`) inherits
    # fd 2 and lives until `mtl` exits. Here a child holds the pipe for two minutes: the
    # filter must still copy every line written before the end of the `with` and then end,
    # so the test's stderr pipe (the filter's stdout) closes long before the child does.
    holder_code = (f"import os, time; os.write(2, {b'from the child' + bytes([10]) + ONEDNN!r}); "
                   "print('written', flush=True); time.sleep(120)")
    code = textwrap.dedent(f"""\
        import os, subprocess, sys
        from mtl_framework import tf_log_filter as f
        with f.tensorflow_lines_dropped():
            holder = subprocess.Popen([sys.executable, "-c", {holder_code!r}],
                                      stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
            print(holder.pid, flush=True)
            holder.stdout.readline()
            for i in range(3000):
                os.write(2, b"line %d\\n" % i + ({ONEDNN!r} if i % 7 == 0 else b""))
            os.write(2, b"last, unfinished")
        """)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env)
    holder = int(child.stdout.readline())
    try:
        stdout, stderr = child.communicate(timeout=60)
        assert child.returncode == 0
        alive = subprocess.run(["kill", "-0", str(holder)], capture_output=True).returncode == 0
        assert alive  # the pipe was still held when the filter ended
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(holder, signal.SIGKILL)
    expected = b"from the child\n" + b"".join(b"line %d\n" % i for i in range(3000)) + b"last, unfinished"
    assert stderr == expected


def python_api(tmp_path, body, **env_extra):
    """A child Python that imports mtl_framework, then `tensorflow` (a stand-in module
    whose import writes `NOTICE + ONEDNN` to fd 2 as TensorFlow's C++ code does), then
    runs `body`."""
    script = tmp_path / "api.py"
    script.write_text(textwrap.dedent(f"""\
        import importlib.abc, importlib.util, os, sys, types

        class NoisyTensorFlow(importlib.abc.MetaPathFinder, importlib.abc.Loader):
            def find_spec(self, name, path, target=None):
                if name == "tensorflow":
                    return importlib.util.spec_from_loader(name, self)
            def create_module(self, spec):
                return types.ModuleType(spec.name)
            def exec_module(self, module):
                os.write(2, {NOTICE + ONEDNN!r})

        sys.meta_path.insert(0, NoisyTensorFlow())
        import mtl_framework
        import tensorflow
        """) + textwrap.dedent(body), encoding="utf-8")
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CPP_MIN_LOG_LEVEL", "MTL_VERBOSE", tf_log_filter.FILTERED)}
    env.update(PYTHONPATH=str(REPO), **env_extra)
    return subprocess.run([sys.executable, str(script)], capture_output=True, env=env,
                          cwd=tmp_path, timeout=120)


def test_the_python_api_drops_tensorflows_lines_from_its_import_on(tmp_path):
    body = f"""
        os.write(2, {CUDA!r} + b"a line of the user's\\n")  # TensorFlow at its first op
        print("python's stderr", file=sys.stderr, flush=True)
        print(os.environ["TF_CPP_MIN_LOG_LEVEL"], flush=True)
        raise SystemExit(3)
        """
    done = python_api(tmp_path, body)
    assert done.returncode == 3
    # (python's stderr is the real one, fd 2 goes through the filter: their order may differ)
    assert sorted(done.stderr.decode().splitlines()) == ["a line of the user's", "python's stderr"]
    assert done.stdout.decode().split() == ["2"]
    verbose = python_api(tmp_path, body, MTL_VERBOSE="1")
    assert verbose.stderr.startswith(NOTICE + ONEDNN + CUDA)
    assert b"a line of the user's" in verbose.stderr


def test_the_python_api_shows_a_traceback_and_a_data_tool_starts_no_filter(tmp_path):
    done = python_api(tmp_path, "raise ValueError('shown')\n")
    assert done.returncode == 1
    assert done.stderr.decode().splitlines()[-1] == "ValueError: shown"
    assert NOTICE not in done.stderr and ONEDNN not in done.stderr
    # without TensorFlow imported, no filter process runs (the data tools stay light)
    code = ("import mtl_framework, os; from mtl_framework import tf_log_filter as f; "
            "print(f.active is None, os.environ.get(f.FILTERED))")
    # (this pytest process may run a filter of its own, once an earlier test imported
    # TensorFlow: its variable must not reach the child)
    env = {k: v for k, v in os.environ.items() if k != "MTL_STDERR_FILTERED"}
    quiet = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60,
                           env={**env, "PYTHONPATH": str(REPO)})
    assert quiet.stdout.decode().split() == ["True", "None"]


def test_a_child_whose_stderr_is_elsewhere_filters_on_its_own(tmp_path):
    # A filtered process starting a child with stderr=PIPE: the child's fd 2 is not the
    # filter's pipe, so the parent's MTL_STDERR_FILTERED does not stop it filtering.
    done = python_api(tmp_path, "", MTL_STDERR_FILTERED="0:1")
    assert done.returncode == 0 and done.stderr == b""
