"""The backend step's contract as code: both backends' step classes derive from
step/backend.py's BackendStep and leave none of its methods abstract, with the signatures
it declares; and MultiTaskModel calls no backend method the contract does not hold."""
import ast
import inspect
import os
import re
import subprocess
from pathlib import Path

import pytest

from mtl_framework.step.backend import BackendStep

REPO = Path(__file__).resolve().parents[1]
JAX_PYTHON = REPO / ".venv-jax" / "bin" / "python"
CONTRACT = sorted(BackendStep.__abstractmethods__)


def signatures(cls):
    return {name: str(inspect.signature(getattr(cls, name))) for name in CONTRACT}


def test_tensorflow_step_keeps_the_contract():
    from mtl_framework.step.tensorflow import TensorFlowStep

    assert issubclass(TensorFlowStep, BackendStep)
    assert not TensorFlowStep.__abstractmethods__
    assert signatures(TensorFlowStep) == signatures(BackendStep)


@pytest.mark.skipif(not JAX_PYTHON.exists(), reason=".venv-jax is absent (make interop-jax)")
def test_jax_step_keeps_the_contract():
    code = ("import inspect; from mtl_framework.step.backend import BackendStep as B; "
            "from mtl_framework.step.jax import JaxStep as J; "
            "assert issubclass(J, B); print(sorted(J.__abstractmethods__)); "
            "print(all(str(inspect.signature(getattr(J, n))) == str(inspect.signature(getattr(B, n)))"
            " for n in B.__abstractmethods__))")
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu")
    out = subprocess.run([str(JAX_PYTHON), "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[:2] == ["[]", "True"]


def test_a_step_without_a_contract_method_cannot_be_built():
    class Partial(BackendStep):
        pass

    with pytest.raises(TypeError, match="abstract"):
        Partial()


def test_the_model_calls_only_contract_methods_of_the_backend():
    """Every `self.<name>(...)` in step/model.py is the model's own, Keras's, or the
    contract's: nothing backend-specific is called outside BackendStep."""
    import keras

    from mtl_framework.step.model import MultiTaskModel

    tree = ast.parse((REPO / "mtl_framework" / "step" / "model.py").read_text(encoding="utf-8"))
    own = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)} | {
        n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
        and isinstance(n.ctx, ast.Store)}  # layers the model holds (self.backbone = ...)
    called = {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call)
              and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
              and n.func.value.id == "self"}
    backend = called - own - set(dir(keras.Model))
    assert backend and backend <= set(CONTRACT), sorted(backend - set(CONTRACT))
    assert issubclass(MultiTaskModel, BackendStep)


# The switches by which the step runs a head's family its own way, each declared on
# TaskHead with the default every other head keeps (the contrastive head sets the first
# three, MLM's head read_count_varies)
SWITCHES = {"texts_alone": False, "cached_chunk": 0, "signs": (), "read_count_varies": False}


def head_reads(path):
    """Attributes read of a head in `path`: `head.X`, `template.X`, `<...>.heads[...].X` and
    `getattr(head or template, "X", ...)`."""
    def is_head(node):
        return (isinstance(node, ast.Name) and node.id in ("head", "template")) or (
            isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute)
            and node.value.attr == "heads")

    tree = ast.parse(path.read_text(encoding="utf-8"))
    read = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and is_head(n.value)}
    return read | {n.args[1].value for n in ast.walk(tree) if isinstance(n, ast.Call)
                   and isinstance(n.func, ast.Name) and n.func.id == "getattr" and is_head(n.args[0])
                   and isinstance(n.args[1], ast.Constant)}


def test_what_the_step_and_loop_read_of_a_head_is_declared_on_taskhead():
    """A switch the step (or the training loop) reads (the signs it logs: `signs`,
    `compute_task_loss_and_signs`) has its default on TaskHead, so every head answers it;
    nothing new hides in a getattr."""
    from mtl_framework.families.heads import TaskHead

    init = ast.parse(inspect.getsource(TaskHead.__init__).strip())
    declared = set(dir(TaskHead)) | {n.attr for n in ast.walk(init) if isinstance(n, ast.Attribute)
                                     and isinstance(n.ctx, ast.Store)}
    declared.add("name")  # every Keras layer's (a head's is its task's)
    package = REPO / "mtl_framework"
    read = set().union(*(head_reads(path) for path in [*(package / "step").glob("*.py"),
                                                       package / "loop" / "run.py",
                                                       package / "loop" / "callbacks.py"]))
    assert {"signs", "compute_task_loss_and_signs", "trace_key", "family", "text_encoder",
            *SWITCHES} <= read
    assert read <= declared, sorted(read - declared)


def test_the_step_reads_a_head_switch_directly_and_taskhead_gives_its_default():
    """Each switch is a class attribute of TaskHead (no head answers it by accident of a
    getattr default), the contrastive head sets it, and step/ reads none through getattr."""
    from mtl_framework.families.heads import TaskHead, build_head, head_classes

    contrastive = build_head("contrastive", None, 8, cached_chunk=4)
    plain = build_head("classification", 3, 8)
    for name, default in SWITCHES.items():
        assert name in vars(TaskHead) and getattr(TaskHead, name) == default, name
        assert getattr(plain, name) == default, name
    assert (contrastive.texts_alone, contrastive.cached_chunk) == (True, 4)
    assert head_classes()["mlm"].read_count_varies
    assert "accuracy" in contrastive.signs
    for path in (REPO / "mtl_framework" / "step").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        hidden = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call)
                  and isinstance(n.func, ast.Name) and n.func.id == "getattr"
                  and isinstance(n.args[0], ast.Name) and n.args[0].id in ("head", "template")]
        assert hidden == [], f"{path.name}: getattr of a head at lines {hidden}"


# --- backend checks live in step/ -----------------------------------------------------------

# Where code outside step/ may still ask which backend runs: {file: (checks, why)}. Each
# reason is why step/ cannot hold the check (the import order: step/ imports config/,
# families/ and, through them, layers.py and rundir/, so none of those may import step/).
BACKEND_CHECKS_OUTSIDE_STEP = {
    "mtl_framework/rundir/provenance.py": (
        1, "records the backend's name in provenance, read without importing Keras "
           "(`mtl --version` stays fast): a name, no behaviour"),
    "mtl_framework/config/precision.py": (
        1, "settles precision `auto` (float32 on JAX) at plan time, before Keras is "
           "imported, by that name (provenance.keras_backend)"),
    "mtl_framework/layers.py": (
        4, "the layers' numerics per backend, each measured where it is chosen (exact "
           "padding's float64, the rotary, attention's context, dropout); step/ builds on "
           "layers.py"),
}
# (not jax.default_backend(): the platform, cpu or gpu, inside a JAX branch)
BACKEND_CHECK = re.compile(r"keras\.backend\.backend\(\)|(?<!default_)backend\(\)\s*[!=]=|"
                           r"\bBACKEND\s*[!=]=")


def backend_checks_outside_step():
    """{file: how many lines ask which Keras backend runs}, for the package outside step/."""
    found = {}
    for path in sorted((REPO / "mtl_framework").rglob("*.py")):
        name = path.relative_to(REPO).as_posix()
        if name.startswith("mtl_framework/step/"):
            continue
        lines = [line for line in path.read_text(encoding="utf-8").splitlines()
                 if BACKEND_CHECK.search(line)]
        if lines:
            found[name] = len(lines)
    return found


def test_backend_checks_live_in_step():
    """A new `keras.backend.backend()` (or `backend() ==`, `BACKEND ==`) outside step/ fails
    here: the behaviour goes into step/ (a BackendStep method, step/distributed.py, ...)
    and the caller uses its backend-neutral face; an allowed file that stopped checking is
    named too, so the list only shrinks."""
    allowed = {name: count for name, (count, _) in BACKEND_CHECKS_OUTSIDE_STEP.items()}
    assert backend_checks_outside_step() == allowed


def test_the_backend_check_pattern_finds_each_spelling():
    for line in ('if keras.backend.backend() == "jax":', "    if keras_backend() != 'jax':",
                 'on_tf = BACKEND == "tensorflow"'):
        assert BACKEND_CHECK.search(line), line
    assert not BACKEND_CHECK.search("record['keras_backend'] = name")
    assert not BACKEND_CHECK.search('on_cpu = jax.default_backend() == "cpu"')


def test_balancing_asks_the_model_only_through_its_public_face():
    """mixing/balancing.py builds no backend's variables and reads nothing private of the
    model (pcgrad's buffers and Gram matrix come from BackendStep.gradient_buffer /
    gradient_gram)."""
    source = (REPO / "mtl_framework" / "mixing" / "balancing.py").read_text(encoding="utf-8")
    private = sorted({node.attr for node in ast.walk(ast.parse(source))
                      if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                      and node.value.id == "model" and node.attr.startswith("_")})
    assert private == []
    assert "tensorflow" not in source and "jax" not in source
