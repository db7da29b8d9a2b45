#!/usr/bin/env python3
"""Parallel text for the translation recipes: fairseq_noising.data_prep.translation.

python recipes/prepare_translation.py {iwslt,plain,tokenize-dir,spm-dir} --help
"""

import sys

from fairseq_noising.data_prep.translation import main

if __name__ == "__main__":
    sys.exit(main())
