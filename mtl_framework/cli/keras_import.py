"""Keras imported without the optional packages the `mtl` program never uses through it.

Keras imports scikit-learn (for its scikit-learn wrappers) and matplotlib.pyplot (for its
image gallery) whenever they are installed; this project installs both, for the
embedding suite's scorers and `mtl report`. In the `mtl` program that was 1.2 s of every
command that loads Keras (importing Keras: 3.9 s, 2.7 s without them; three runs each on
a 2-core Xeon). `without_unused_extras()` makes the first `import keras` see both as
absent, which Keras handles (those two features then say the package is missing); once
Keras is imported they import as usual. Only the program does this: a caller's process
(`import mtl_framework`, `main([...])`) imports Keras as it would anyway.
"""
import importlib.abc
import importlib.machinery
import sys

UNUSED = ("sklearn", "matplotlib", "matplotlib.pyplot")


class _HidingLoader(importlib.abc.Loader):
    """Keras's own loader, run with UNUSED absent from sys.modules's point of view."""

    def __init__(self, loader):
        self.loader = loader

    def __getattr__(self, name):  # get_resource_reader, is_package, ...: the real loader's
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        hidden = [name for name in UNUSED if name not in sys.modules]
        for name in hidden:
            sys.modules[name] = None  # `import name` raises ImportError
        try:
            self.loader.exec_module(module)
        finally:
            for name in hidden:
                if sys.modules.get(name, False) is None:
                    del sys.modules[name]


class _KerasFinder(importlib.abc.MetaPathFinder):
    """Finds `keras` as the path finder does, with its loader wrapped. (It stays in
    sys.meta_path, finding nothing afterwards: removing it while an import walks the list
    would skip the next finder.)"""

    def find_spec(self, name, path=None, target=None):
        if name != "keras" or "keras" in sys.modules:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _HidingLoader(spec.loader)
        return spec


def without_unused_extras():
    if "keras" not in sys.modules and not any(isinstance(f, _KerasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _KerasFinder())
