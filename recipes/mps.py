#!/usr/bin/env python3
"""CMD under a CUDA MPS daemon of its own: fairseq_noising.sweep.mps.

python recipes/mps.py --folder DIR [--prog NAME] [--flag MPS=1] -- CMD...
python recipes/mps.py --check [--prog NAME] [--flag MPS=1]      # refuse or accept only
"""

import sys

from fairseq_noising.sweep.mps import main

if __name__ == "__main__":
    sys.exit(main())
