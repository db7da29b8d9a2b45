"""The recipes' data preparation and the sweeps' scoring on small inputs of the real data's shape:
fairseq_noising/data_prep/text8.py (split, <unk>, lines) against a brute-force reading,
data_prep/translation.py (IWSLT tarballs, plain parallel files, sentencepiece), data_prep/
tokenizers.py (tokenizers, detokenizers) and fairseq_noising/sweep/bleu.py (BLEU against sacrebleu
called directly)."""

import collections
import json
import tarfile

import pytest
from conftest import head_lines, require_shared
from prep_kit import TRAIN_DE, TRAIN_EN, add_file, synthetic_text8, tiny_iwslt_tarball

from fairseq_noising.data_prep import subwords, tokenizers
from fairseq_noising.data_prep import text8 as prepare_text8
from fairseq_noising.data_prep import translation as prepare_translation
from fairseq_noising.errors import NoisingError
from fairseq_noising.sweep import bleu


def test_text8_preparation_matches_brute_force(tmp_path):
    text = synthetic_text8(30000, seed=3)
    path = tmp_path / "text8"
    path.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    rc = prepare_text8.main(
        [
            "--input",
            str(path),
            "--outdir",
            str(out),
            "--train-chars",
            "24000",
            "--valid-chars",
            "3000",
            "--test-chars",
            "3000",
            "--words-per-line",
            "7",
        ]
    )
    assert rc == 0
    parts = {"train": text[:24000], "valid": text[24000:27000], "test": text[27000:30000]}
    counts = collections.Counter(parts["train"].split())
    assert any(c <= 10 for c in counts.values()) and any(c > 10 for c in counts.values())
    for name, raw in parts.items():
        lines = (out / f"{name}.txt").read_text(encoding="utf-8").split("\n")
        assert lines[-1] == ""
        lines = lines[:-1]
        # line breaking: 7 words per line, only the last line shorter
        assert (
            all(len(line.split()) == 7 for line in lines[:-1]) and 1 <= len(lines[-1].split()) <= 7
        )
        words = [w for line in lines for w in line.split()]
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

    def prepare(test_chars):
        argv = f"--train-chars 4000 --valid-chars 500 --test-chars {test_chars}".split()
        return prepare_text8.main(
            ["--input", str(tmp_path / "text8.zip"), "--outdir", str(out), *argv]
        )

    assert prepare(500) == 0
    assert (out / "test.txt").read_text().split() == [
        w if collections.Counter(text[:4000].split())[w] > 10 else "<unk>"
        for w in text[4500:].split()
    ]
    assert prepare(600) == 1  # 4000 + 500 + 600 characters ask for more than the 5000 there are


def test_iwslt_preparation_on_a_tiny_tarball(tmp_path):
    tgz = tiny_iwslt_tarball(tmp_path / "de-en.tgz")
    out = tmp_path / "raw"
    counts = prepare_translation.extract_iwslt(str(tgz), str(out), "en", "de", "tst2012", "tst2014")
    assert counts == {"train": 3, "valid": 2, "test": 3}
    assert (out / "train.en").read_text(encoding="utf-8").splitlines() == TRAIN_EN
    assert (out / "train.de").read_text(encoding="utf-8").splitlines() == TRAIN_DE
    assert (out / "valid.en").read_text(encoding="utf-8").splitlines() == [
        "Hello & welcome.",
        'Two "quoted" words.',
    ]
    assert (out / "valid.de").read_text(encoding="utf-8").splitlines()[
        1
    ] == 'Zwei "zitierte" Wörter.'
    assert (out / "test.de").read_text(encoding="utf-8").splitlines() == [
        "Der letzte.",
        "Wirklich zuletzt?",
        "Ja.",
    ]
    assert not list(out.glob("*.part"))
    # the other direction's tarball (en-de) has the same layout
    out2 = tmp_path / "raw2"
    prepare_translation.extract_iwslt(
        str(tiny_iwslt_tarball(tmp_path / "en-de.tgz", "en-de")),
        str(out2),
        "en",
        "de",
        "tst2012",
        "tst2014",
    )
    assert (out2 / "train.en").read_text(encoding="utf-8") == (out / "train.en").read_text(
        encoding="utf-8"
    )


def test_iwslt_preparation_refuses_misaligned_train_tags(tmp_path):
    path = tmp_path / "bad.tgz"
    with tarfile.open(path, "w:gz") as tar:
        add_file(tar, "de-en/train.tags.de-en.en", "<url>x</url>\nA.\nB.\n")
        add_file(tar, "de-en/train.tags.de-en.de", "<url>x</url>\nA.\n")
    with pytest.raises(SystemExit, match="differ in length"):
        prepare_translation.extract_iwslt(
            str(path), str(tmp_path / "o"), "en", "de", "tst2012", "tst2014"
        )


@pytest.mark.parametrize(
    "line",
    [
        'He said: "Hello, world!" (twice).',
        "Don't stop-believing, it's 5% off.",
        "Ein Mann in einem blauen Hemd.",
        "Zwei Hunde (braun & weiß) rennen.",
    ],
)
def test_simple_tokenizer_round_trip(line):
    tok = tokenizers.simple_tokenize(line)
    assert tok.endswith(" .") and all(
        len(t) == 1 or t.replace("'", "").isalnum() for t in tok.split()
    )
    assert tokenizers.simple_detokenize(tok) == line


def test_plain_copy_drops_only_the_final_empty_line_and_reads_gzip(tmp_path):
    import gzip

    src = tmp_path / "in"
    src.mkdir()
    (src / "train.en").write_text("A dog .\nA cat .\n\n")
    with gzip.open(src / "train.de.gz", "wt") as f:  # as downloaded
        f.write("Ein Hund .\nEine Katze .\n\n")
    prepare_translation.copy_plain(
        str(src), str(tmp_path / "out"), "en", "de", [("train", "train")]
    )
    assert (tmp_path / "out" / "train.de").read_text() == "Ein Hund .\nEine Katze .\n"
    (src / "train.de").write_text("Ein Hund .\n\nEine Katze .\n")
    with pytest.raises(SystemExit):
        prepare_translation.copy_plain(
            str(src), str(tmp_path / "out"), "en", "de", [("train", "train")]
        )


def test_score_writes_the_detokenized_hypotheses_and_both_bleus(tmp_path):
    import sacrebleu

    a, b = "Ein Mann , in einem blauen Hemd .", "Zwei Hunde rennen ."
    ref = tmp_path / "test.de"
    ref.write_text("Ein Mann, in einem roten Hemd.\nZwei Hunde rennen.\n")
    tok_ref = tmp_path / "tok.de"
    tok_ref.write_text("Ein Mann , in einem roten Hemd .\nZwei Hunde rennen .\n")
    detok = tmp_path / "test.detok"
    scores = bleu.score([a, b], str(ref), "de", "simple", str(detok), str(tok_ref))
    assert detok.read_text() == "Ein Mann, in einem blauen Hemd.\nZwei Hunde rennen.\n"
    refs = ref.read_text().splitlines()
    expected = sacrebleu.corpus_bleu(
        ["Ein Mann, in einem blauen Hemd.", "Zwei Hunde rennen."], [refs]
    )
    expected_tok = sacrebleu.corpus_bleu(
        [a, b], [tok_ref.read_text().splitlines()], tokenize="none"
    )
    version = sacrebleu.__version__
    assert scores["bleu"] == {
        "score": expected.score,
        "signature": f"nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:{version}",
    }
    assert scores["tok_bleu"] == {
        "score": expected_tok.score,
        "signature": f"nrefs:1|case:mixed|eff:no|tok:none|smooth:exp|version:{version}",
    }
    # sentencepiece output is detokenized already: no tokenized BLEU, the hypotheses as they are
    assert set(bleu.score([a, b], str(ref), "de", "none", str(detok))) == {"bleu"}
    assert detok.read_text() == f"{a}\n{b}\n"


@pytest.mark.parametrize("tokenizer", ["simple", "auto"])
def test_tokenize_dir_and_detokenize(tokenizer, tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    lines = {
        "en": ['A man, in a "blue" shirt.', "Two dogs (brown) run."],
        "de": ['Ein Mann, in einem "blauen" Hemd.', "Zwei Hunde (braun) rennen."],
    }
    for split in ("train", "valid", "test"):
        for lang in ("en", "de"):
            (raw / f"{split}.{lang}").write_text("\n".join(lines[lang]) + "\n", encoding="utf-8")
    out = tmp_path / "tok"
    prepare_translation.tokenize_dir(str(raw), str(out), "en", "de", tokenizer)
    kind = (out / "tokenizer").read_text().strip()
    assert kind == ("simple" if tokenizer == "simple" else tokenizers.resolve_tokenizer("auto"))
    tok = (out / "test.de").read_text(encoding="utf-8").splitlines()
    assert tok[1].split() == ["Zwei", "Hunde", "(", "braun", ")", "rennen", "."]
    assert tokenizers.detokenize(tok, "de", kind) == lines["de"]


@pytest.mark.slow
def test_sentencepiece_and_scoring_helpers(tmp_path):
    m30k = require_shared("multi30k")
    raw = tmp_path / "raw"
    raw.mkdir()
    for split, src, n in (("train", "train", 300), ("valid", "val", 20), ("test", "test", 20)):
        for lang in ("en", "de"):
            head_lines(m30k / f"{src}.{lang}", raw / f"{split}.{lang}", n)
    for joint in (False, True):
        out = tmp_path / f"spm{joint}"
        subwords.spm_dir(str(raw), str(out), "en", "de", 200, joint)
        assert (out / ("spm.joint.model" if joint else "spm.de.model")).exists()
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(
            model_file=str(out / ("spm.joint.model" if joint else "spm.de.model"))
        )
        enc = (out / "test.de").read_text(encoding="utf-8").splitlines()
        dec = [sp.decode(line.split()) for line in enc]
        assert dec == (raw / "test.de").read_text(encoding="utf-8").splitlines()
    a, b = "ein Hund läuft über die grüne Wiese .", "zwei Hunde spielen mit einem roten Ball ."
    assert bleu.corpus_bleu([a, b], [a, b])["score"] == pytest.approx(100.0)
    with pytest.raises(NoisingError, match="2 hypotheses for 1 references"):
        bleu.corpus_bleu([a, b], [a])


@pytest.mark.slow
def test_a_model_with_fewer_pieces_than_asked_is_said_in_one_line(tmp_path, capsys):
    import sentencepiece as spm

    m30k = require_shared("multi30k")
    head_lines(m30k / "train.en", tmp_path / "train.en", 300)
    for asked in (8000, 200):
        model = subwords.train_model(
            [str(tmp_path / "train.en")], str(tmp_path / f"m{asked}"), asked
        )
        pieces = spm.SentencePieceProcessor(model_file=model).get_piece_size()
        err = capsys.readouterr().err.strip().splitlines()
        if asked == 8000:
            assert pieces < 8000
            assert err == [
                f"{tmp_path}/m8000.model has {pieces:,} pieces, fewer than the 8,000 asked "
                "(--vocab-size): its training text holds no more"
            ]
        else:
            assert pieces == 200 and err == []
