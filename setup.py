import re
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent
# The version's one place is mtl_framework/__init__.py, read without importing the package.
VERSION = re.search(r'^__version__ = "([^"]+)"$',
                    (HERE / "mtl_framework" / "__init__.py").read_text(encoding="utf-8"),
                    re.MULTILINE).group(1)

# The task specs ship inside the package as mtl_framework/task_specs (package data);
# in a source checkout and the editable install they are read from ./task_specs.
SPECS = "mtl_framework.task_specs"

setup(
    name="mtl_framework",
    version=VERSION,
    description="Supervised multi-task pretraining of Chinese RoFormerV2 encoders (Keras 3)",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    license_files=["LICENSE"],
    classifiers=[
        "Development Status :: 3 - Alpha",
        "Intended Audience :: Science/Research",
        "Natural Language :: Chinese (Simplified)",
        "Operating System :: POSIX :: Linux",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
    python_requires=">=3.10",
    packages=find_packages(include=["mtl_framework*", "data_adapters*"])
    + [SPECS, f"{SPECS}.labels", f"{SPECS}.hub_clue"],
    package_dir={SPECS: "task_specs"},
    # py.typed: the public API (README, examples/) carries type hints (PEP 561).
    package_data={"mtl_framework": ["py.typed"], SPECS: ["*.yaml"], f"{SPECS}.labels": ["*.txt"],
                  f"{SPECS}.hub_clue": ["*.yaml"]},
    # `tensorflow`, not `tensorflow-cpu`: a GPU machine must get the GPU build.
    # `make install` pins tensorflow-cpu from requirements.txt and installs this with --no-deps.
    install_requires=[
        "tensorflow>=2.21,<2.22",
        "keras>=3.15,<4",
        "numpy",
        "PyYAML",
        "tokenizers",
        "safetensors",  # the roformer-pytorch export and reader (numpy API, no torch)
        "tqdm",
        "tensorboard>=2.21",  # its own writer: every run writes TensorBoard scalars to logs/
        "huggingface_hub>=0.21",  # ModelCard / ModelCardData: every export's README.md
    ],
    extras_require={
        "plots": ["matplotlib"],
        "jieba": ["jieba"],
        "wwm": ["jieba"],  # whole-word masking
        "parquet": ["pyarrow"],
        "embeddings": ["scikit-learn"],  # C-MTEB's classification score (scoring/embedding.py)
    },
    entry_points={"console_scripts": ["mtl=mtl_framework.cli:main"]},
)
