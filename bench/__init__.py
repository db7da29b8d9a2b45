"""The benchmarks behind the README's figures: ``python -m bench.<name>`` (bench/README.md)."""
