"""Small inputs of the real data's shape for the data-preparation tests (Text8, IWSLT'15
tarballs)."""

import io
import random
import tarfile
from pathlib import Path


def synthetic_text8(n_chars, seed=0, vocab=400):
    """A text8-shaped stream: lower-case words, single spaces, one line, no final newline,
    a leading space (as text8 has), Zipf-distributed words so that many are rare."""
    rng = random.Random(seed)
    words = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 9)))
        for _ in range(vocab)
    ]
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
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<mteval>\n<srcset setid="iwslt2015-{setname}" '
        f'srclang="{lang}">\n<doc docid="1" genre="lectures">\n<url>http://www.ted.com/talks/x</url>\n'
        f"<description>TED Talk Subtitles and Transcript: a talk</description>\n"
        f"<talkid>1</talkid>\n<title>A title</title>\n{body}\n</doc>\n</srcset>\n</mteval>\n"
    )


TRAIN_EN = ["Thank you so much, Chris.", "It's truly a great honor.", "And I say that sincerely."]
TRAIN_DE = ["Vielen Dank, Chris.", "Es ist mir wirklich eine Ehre.", "Und das sage ich ernsthaft."]
META = [
    "<url>http://www.ted.com/talks/al_gore</url>",
    "<keywords>talks, climate</keywords>",
    "<speaker>Al Gore</speaker>",
    "<talkid>1</talkid>",
    "<title>Al Gore: Averting</title>",
    "<description>TED Talk Subtitles and Transcript: blah</description>",
]


def tiny_iwslt_tarball(path: Path, pair="de-en"):
    dev = {
        "en": ["Hello &amp; welcome.", "Two &quot;quoted&quot; words."],
        "de": ["Hallo &amp; willkommen.", "Zwei &quot;zitierte&quot; Wörter."],
    }
    tst13 = {"en": ["Wrong set."], "de": ["Falscher Satz."]}
    tst14 = {
        "en": ["Last one.", "Really <i>last</i>?", "Yes."],
        "de": ["Der letzte.", "Wirklich zuletzt?", "Ja."],
    }
    with tarfile.open(path, "w:gz") as tar:
        for lang, lines in (("en", TRAIN_EN), ("de", TRAIN_DE)):
            body = META + lines[:2] + [META[0].replace("al_gore", "next")] + lines[2:] + [""]
            add_file(tar, f"{pair}/train.tags.{pair}.{lang}", "\n".join(body) + "\n")
            for setname, segs in (("tst2012", dev), ("tst2013", tst13), ("tst2014", tst14)):
                add_file(
                    tar,
                    f"{pair}/IWSLT15.TED.{setname}.{pair}.{lang}.xml",
                    xml_doc(lang, segs[lang], setname),
                )
        add_file(tar, f"{pair}/README", "IWSLT 2015\n")
    return path
