#!/usr/bin/env python3
"""Text8 split as in the paper (90M, 5M, 5M characters): fairseq_noising.data_prep.text8.

python recipes/prepare_text8.py --input text8.zip --outdir runs/text8/text
"""

import sys

from fairseq_noising.data_prep.text8 import main

if __name__ == "__main__":
    sys.exit(main())
