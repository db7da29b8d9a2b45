"""Where the tests' real data comes from (``tests/data_cache.py``), and that the fast tier needs none.

The downloads are served by a local HTTP server from a temporary folder; the expected bytes and
checksums are computed here with hashlib and gzip, or read from the shared folder's SHA256SUMS.
"""

import gzip
import hashlib
import http.server
import shutil
import socket
import threading
from types import SimpleNamespace

import data_cache
import pytest
from conftest import require_shared, shared_or_exit
from data_cache import Dataset, DataUnavailable

A_TEXT = "the first file\nwith two lines\n"
B_TEXT = "ein zweiter Satz über Größe\n\n"  # the .gz one, decompressed
B_GZ = gzip.compress(B_TEXT.encode("utf-8"))


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def server(tmp_path):
    """A local HTTP server of tmp_path (files go into tmp_path/files), recording the paths asked
    for."""
    root = tmp_path / "files"
    root.mkdir()
    asked = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(tmp_path), **kwargs)

        def do_GET(self):
            asked.append(self.path)
            super().do_GET()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True).start()
    yield SimpleNamespace(root=root, url=f"http://127.0.0.1:{httpd.server_port}/files", asked=asked)
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def toy(tmp_path, monkeypatch, server):
    """A dataset "toy" (a.txt, and b.txt published as b.txt.gz) served by server; the shared and
    cache folders are empty temporary ones."""
    monkeypatch.setitem(
        data_cache.DATASETS,
        "toy",
        Dataset(
            "FAIRSEQ_NOISING_TOY_URL",
            "http://127.0.0.1:9/never-asked",
            {
                "a.txt": ("a.txt", sha256(A_TEXT.encode("utf-8"))),
                "b.txt": ("b.txt.gz", sha256(B_GZ)),
            },
        ),
    )
    monkeypatch.setenv("FAIRSEQ_NOISING_TOY_URL", server.url)
    monkeypatch.setenv("FAIRSEQ_NOISING_SHARED", str(tmp_path / "shared"))
    monkeypatch.setenv("FAIRSEQ_NOISING_DATA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("FAIRSEQ_NOISING_DOWNLOAD", raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    (server.root / "a.txt").write_text(A_TEXT, encoding="utf-8")
    (server.root / "b.txt.gz").write_bytes(B_GZ)
    said = []
    return SimpleNamespace(
        server=server,
        shared=tmp_path / "shared" / "toy",
        cache=tmp_path / "cache" / "toy",
        said=said,
        locate=lambda: data_cache.locate("toy", said.append),
    )


def test_the_shared_folder_beside_the_repository_is_read_and_nothing_downloaded(
    toy, tmp_path, monkeypatch
):
    monkeypatch.delenv("FAIRSEQ_NOISING_SHARED")
    monkeypatch.setattr(data_cache, "REPO", tmp_path / "clone")
    shared = tmp_path / "shared" / "data" / "toy"
    shared.mkdir(parents=True)
    (shared / "a.txt").write_text("mine\n")
    (shared / "b.txt").write_text("mine too\n")
    assert toy.locate() == shared
    assert toy.server.asked == [] and toy.said == []


def test_a_download_is_checked_announced_kept_and_done_once(toy):
    assert toy.locate() == toy.cache
    assert toy.said == [f"downloading toy from {toy.server.url} to {toy.cache}"]
    assert toy.server.asked == ["/files/a.txt", "/files/b.txt.gz"]
    assert sorted(p.name for p in toy.cache.iterdir()) == ["a.txt", "b.txt"]
    assert (toy.cache / "a.txt").read_text(encoding="utf-8") == A_TEXT
    assert (toy.cache / "b.txt").read_text(encoding="utf-8") == B_TEXT
    assert toy.locate() == toy.cache
    assert len(toy.said) == 1 and len(toy.server.asked) == 2


def test_a_file_with_the_wrong_checksum_is_not_kept(toy):
    bad = gzip.compress(b"not the published text\n")
    (toy.server.root / "b.txt.gz").write_bytes(bad)
    with pytest.raises(DataUnavailable) as e:
        toy.locate()
    assert str(e.value) == (
        f"real test data toy is missing: put a.txt, b.txt into {toy.shared} or {toy.cache}; "
        f"downloading them from {toy.server.url} failed: {toy.server.url}/b.txt.gz has SHA-256 "
        f"{sha256(bad)}, expected {sha256(B_GZ)}"
    )
    assert [p.name for p in toy.cache.iterdir()] == ["a.txt"]  # checked, so kept
    (toy.server.root / "b.txt.gz").write_bytes(B_GZ)
    assert toy.locate() == toy.cache
    assert toy.server.asked == ["/files/a.txt", "/files/b.txt.gz", "/files/b.txt.gz"]
    assert (toy.cache / "b.txt").read_text(encoding="utf-8") == B_TEXT


def test_without_a_network_one_line_says_what_is_needed_and_where(toy, monkeypatch):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/data"
    monkeypatch.setenv("FAIRSEQ_NOISING_TOY_URL", url)
    with pytest.raises(DataUnavailable) as e:
        toy.locate()
    message = str(e.value)
    assert message.startswith(
        f"real test data toy is missing: put a.txt, b.txt into {toy.shared} or {toy.cache}; "
        f"downloading them from {url} failed: "
    )
    assert "\n" not in message and "refused" in message
    assert toy.said == [f"downloading toy from {url} to {toy.cache}"]
    assert not toy.cache.exists() or list(toy.cache.iterdir()) == []


def test_downloading_can_be_turned_off(toy, monkeypatch):
    monkeypatch.setenv("FAIRSEQ_NOISING_DOWNLOAD", "0")
    with pytest.raises(DataUnavailable) as e:
        toy.locate()
    assert str(e.value) == (
        f"real test data toy is missing: put a.txt, b.txt into {toy.shared} or {toy.cache} "
        "(downloading them is off: FAIRSEQ_NOISING_DOWNLOAD=0)"
    )
    assert toy.server.asked == [] and toy.said == []


def test_the_cache_folder_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("FAIRSEQ_NOISING_DATA_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert data_cache.cache_dir() == tmp_path / "xdg" / "fairseq-noising" / "data"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert data_cache.cache_dir() == tmp_path / "home" / ".cache" / "fairseq-noising" / "data"


# ---------------------------------------------------------------- slow tier


@pytest.mark.slow
def test_ptb_downloads_as_the_shared_copy(server, tmp_path, monkeypatch):
    """The real files pass the committed checksums and are kept as they are."""
    ptb = require_shared("ptb")
    for name in ("ptb.train.txt", "ptb.valid.txt", "ptb.test.txt"):
        shutil.copy(ptb / name, server.root / name)
    monkeypatch.setenv("FAIRSEQ_NOISING_PTB_URL", server.url)
    monkeypatch.setenv("FAIRSEQ_NOISING_SHARED", str(tmp_path / "nothing"))
    monkeypatch.setenv("FAIRSEQ_NOISING_DATA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("FAIRSEQ_NOISING_DOWNLOAD", raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    got = data_cache.locate("ptb", lambda line: None)
    assert got == tmp_path / "cache" / "ptb"
    for name in ("ptb.train.txt", "ptb.valid.txt", "ptb.test.txt"):
        assert (got / name).read_bytes() == (ptb / name).read_bytes()


# ---------------------------------------------------------------- the tiers


def test_a_fast_test_that_reads_the_data_fails(request):
    """The fast tier needs no data: require_shared fails a test that is not marked slow (the
    suite's own run is the check, for every test and fixture)."""
    assert request.node.get_closest_marker("slow") is None
    with pytest.raises(pytest.fail.Exception) as failed:
        require_shared("ptb")
    assert str(failed.value) == (
        f"{request.node.nodeid} reads the real data (ptb) but is not marked slow: the fast tier "
        "(-m 'not slow') needs no data files"
    )


def test_without_the_data_the_run_ends_with_one_line(tmp_path, monkeypatch):
    """Where the data can be had from nowhere, the first test that needs it ends the whole run
    (pytest.exit) with one line naming the files and the folders to put them in."""
    monkeypatch.setenv("FAIRSEQ_NOISING_SHARED", str(tmp_path / "no-data"))
    monkeypatch.setenv("FAIRSEQ_NOISING_DATA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("FAIRSEQ_NOISING_DOWNLOAD", "0")
    with pytest.raises(pytest.exit.Exception) as ended:
        shared_or_exit("ptb")
    assert ended.value.returncode == pytest.ExitCode.TESTS_FAILED
    assert ended.value.msg == (
        "real test data ptb is missing: put ptb.train.txt, ptb.valid.txt, ptb.test.txt into "
        f"{tmp_path / 'no-data' / 'ptb'} or {tmp_path / 'cache' / 'ptb'} "
        "(downloading them is off: FAIRSEQ_NOISING_DOWNLOAD=0) "
        "(pytest -m 'not slow' runs the tests that need none)"
    )
