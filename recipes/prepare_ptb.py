#!/usr/bin/env python3
"""PTB downloaded (or read from --ptb-dir), checked and binarized: fairseq_noising.data_prep.ptb.

python recipes/prepare_ptb.py --destdir WORK/data-bin --download WORK/ptb
"""

import sys

from fairseq_noising.data_prep.ptb import main

if __name__ == "__main__":
    sys.exit(main())
