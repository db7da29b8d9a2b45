#!/usr/bin/env python3
"""Install fairseq-noising on a machine without internet: build a wheelhouse, install from it.

    python tools/wheelhouse.py build DIR [--python-version 3.12] [--platform PLAT]
                                           [--with-torch torch==2.13.0 | --with-torch FILE.whl]
                                           [--target-has FILE]
    python tools/wheelhouse.py install DIR [--python PY | --venv DIR [--over PY]]

``recipes/setup.sh --build-wheelhouse`` and ``--from-wheelhouse`` run it; how it works (the torch
placeholders, --target-has, the manifest, the checks before installing) is in docs/wheelhouse.md.
"""

import argparse
import sys

from wheelhouse_build import DEFAULT_PLATFORM, build
from wheelhouse_common import REPO, Error
from wheelhouse_install import install


def main(argv=None):
    parser = argparse.ArgumentParser(prog="wheelhouse", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="download and build the wheels into DIR (needs an index)")
    b.add_argument("dir")
    here = "%d.%d" % sys.version_info[:2]
    b.add_argument("--python-version", default=here, help="target Python (default: %(default)s)")
    b.add_argument("--platform", default=DEFAULT_PLATFORM, help="manylinux tag (%(default)s)")
    b.add_argument("--with-torch", metavar="SPEC", help="add torch: torch==VERSION or a wheel file")
    b.add_argument(
        "--target-has", metavar="FILE", help="the target's pip list --format=freeze: left out"
    )
    i = sub.add_parser("install", help="install from DIR with no index")
    i.add_argument("dir")
    i.add_argument("--python", help="the target environment's interpreter (path or command)")
    i.add_argument("--venv", default=str(REPO / ".venv"), help="else this venv, made if missing")
    i.add_argument(
        "--over", metavar="PY", help="make the venv over PY's environment: it sees PY's packages"
    )
    args = parser.parse_args(argv)
    try:
        (build if args.command == "build" else install)(args)
    except Error as e:
        print(f"wheelhouse: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
