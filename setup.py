from setuptools import find_packages, setup

# The task specs ship inside the package as mtl_framework/task_specs (package data);
# in a source checkout and the editable install they are read from ./task_specs.
SPECS = "mtl_framework.task_specs"

setup(
    name="mtl_framework",
    version="0.1.0",
    description="Supervised multi-task pretraining of Chinese RoFormerV2 encoders (Keras 3)",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["mtl_framework*", "data_adapters*"])
    + [SPECS, f"{SPECS}.labels", f"{SPECS}.hub_clue"],
    package_dir={SPECS: "task_specs"},
    package_data={SPECS: ["*.yaml"], f"{SPECS}.labels": ["*.txt"], f"{SPECS}.hub_clue": ["*.yaml"]},
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
    ],
    extras_require={
        "plots": ["matplotlib"],
        "jieba": ["jieba"],
        "wwm": ["jieba"],  # whole-word masking
        "parquet": ["pyarrow"],
    },
    entry_points={"console_scripts": ["mtl=mtl_framework.cli:main"]},
)
