from setuptools import find_packages, setup

setup(
    name="fairseq-noising",
    version="0.1.0",
    description="Data noising as smoothing (Xie et al., ICLR 2017) as a fairseq --user-dir plugin",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["fairseq_noising", "fairseq_noising.*"]),
    python_requires=">=3.8",
    install_requires=[
        # the official fairseq 0.12.2 fails at import on Python >= 3.11
        've-fairseq==0.12.3; python_version >= "3.11"',
        'fairseq==0.12.2; python_version < "3.11"',
        "torch>=2.0",
        "numpy",
        "sacrebleu>=2.0",
        "sentencepiece",
        "sacremoses",  # tokenizer of the translation recipes
        "matplotlib",
    ],
    extras_require={"test": ["pytest", "ruff==0.17.6"]},  # ruff: lint and format (ruff.toml)
    entry_points={
        "console_scripts": [
            "fairseq-noise-preview = fairseq_noising.cli.preview:cli_main",
            "fairseq-noise-analyze = fairseq_noising.cli.analyze:cli_main",
        ]
    },
)
