"""The benchmarks behind the README's figures; run each from the repository root as
``python -m bench.<name>`` (bench/README.md)."""
