"""Data preparation (no fairseq import until binarizing): PTB, Text8 and the translation corpora,
with the tokenizers that BLEU undoes. The recipes' ``prepare_*.py`` are their command lines."""
