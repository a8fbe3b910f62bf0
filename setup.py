from setuptools import find_packages, setup

setup(
    name="mtl_framework",
    version="0.1.0",
    description="Supervised multi-task pretraining of Chinese RoFormerV2 encoders (Keras 3)",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["mtl_framework*", "data_adapters*"]),
    install_requires=[
        "tensorflow-cpu>=2.21,<2.22",
        "keras>=3.15,<4",
        "numpy",
        "PyYAML",
        "tokenizers",
        "tqdm",
    ],
    extras_require={"plots": ["matplotlib"], "wwm": ["jieba"]},
    entry_points={"console_scripts": ["mtl=mtl_framework.cli:main"]},
)
