from setuptools import find_packages, setup

setup(
    name="fairseq-noising",
    version="0.1.0",
    description="Data noising as smoothing (Xie et al., ICLR 2017) as a fairseq --user-dir plugin",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    author="the fairseq-noising authors",
    license="MIT",
    license_files=["LICENSE"],
    # url="https://...", project_urls={"Source": "https://...", "Issues": "https://..."}:
    # for the maintainers to fill in with the public repository's addresses
    keywords=[
        "fairseq",
        "data noising",
        "smoothing",
        "language modeling",
        "machine translation",
        "kneser-ney",
        "pytorch",
    ],
    classifiers=[
        "Intended Audience :: Science/Research",
        "License :: OSI Approved :: MIT License",
        "Operating System :: POSIX :: Linux",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3 :: Only",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
        "Topic :: Text Processing :: Linguistic",
    ],
    packages=find_packages(include=["fairseq_noising", "fairseq_noising.*"]),
    # ve-fairseq (fairseq's main branch as wheels, importing as `fairseq`) exists for 3.11 and
    # 3.12; the official fairseq 0.12.2 fails at import on Python >= 3.11
    python_requires=">=3.11",
    install_requires=[
        "ve-fairseq==0.12.3",
        "torch>=2.0",
        "numpy",
        "sacrebleu>=2.0",
        "sentencepiece",
        "sacremoses",  # tokenizer of the translation recipes
        "matplotlib",
        # the tables are Hydra sweeps: rows side by side (joblib) or on a SLURM cluster (submitit);
        # the launchers accept hydra-core pre-releases, which pip would then pick (1.4.0rc3)
        "hydra-core>=1.3.2,<1.4",
        "hydra-joblib-launcher==1.2.0",
        "hydra-submitit-launcher==1.2.0",
    ],
    # ruff: lint and format (ruff.toml); pytest-xdist: the suite on every core (README)
    # pytest below 9.2: its structured node ids undo pytest-xdist 3.8's --dist loadgroup, silently
    # (https://github.com/pytest-dev/pytest-xdist/issues/1386; tests/test_xdist_groups.py)
    extras_require={"test": ["pytest>=8,<9.2", "pytest-xdist==3.8.0", "ruff==0.17.6"]},
    entry_points={
        "console_scripts": [
            "fairseq-noise-preview = fairseq_noising.cli.preview:cli_main",
            "fairseq-noise-analyze = fairseq_noising.cli.analyze:cli_main",
            "fairseq-noise-page = fairseq_noising.sweep.page:main",
            "fairseq-noise-eval = fairseq_noising.sweep.evaluate:main",
        ]
    },
)
