"""The analyses section of a language-model results page: Figure 3 (``fairseq-noise-analyze kl``)
and Table 6 (``fairseq-noise-analyze unseen``) of the chosen runs, from the JSON and PNG files the
recipe's analysis step wrote into one folder (``kl.json``, ``kl.png``, ``unseen.json``,
``unseen.png``; the commands in ``kl.log.done`` and ``unseen.log.done``)."""

import json
import os
import shutil
from typing import Dict, List, Optional

from page_format import fmt, md_table, paper_value
from paper_tables import UNSEEN_COUNTS, UNSEEN_TABLE_6
from steps import fail, shown


def _models(directory: str, what: str, prog: str, missing_ok: bool) -> Optional[List[Dict]]:
    path = os.path.join(directory, f"{what}.json")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)["models"]
    except (OSError, ValueError, KeyError):
        if missing_ok:
            return None
        fail(prog, f"no {what} analysis in {shown(path)}: did the analysis step run?")


def section(directory: str, out_dir: str, prog: str, missing_ok: bool = False) -> List[str]:
    """Copies the figures into ``out_dir`` (the page's ``PAGE-analysis/``) and returns the page's
    lines for them; with ``missing_ok`` (a page written while runs train, or whose time budget
    ended before the analyses), a line saying they are not there when they are not."""
    kl = _models(directory, "kl", prog, missing_ok)
    unseen = _models(directory, "unseen", prog, missing_ok)
    if kl is None or unseen is None:
        return [
            "## Section 5: noised against unnoised models",
            "",
            "Not run yet, or not within the time budget (`fairseq-noise-analyze kl` and `unseen` "
            "run once every chosen run is evaluated).",
            "",
        ]
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    for name in ("kl.png", "unseen.png", "kl.json", "unseen.json"):
        if os.path.isfile(os.path.join(directory, name)):
            shutil.copyfile(os.path.join(directory, name), os.path.join(out_dir, name))
    folder = os.path.basename(out_dir)
    positions = unseen[0]["all_positions"] if unseen else 0
    paper_bi, paper_tri = UNSEEN_COUNTS
    return [
        "## Section 5: noised against unnoised models",
        "",
        "Each scheme's chosen run on the validation split, read as the table above reads it (one",
        f"stream, state carried, {positions} positions). Numbers and figures: [`{folder}/`]({folder}/).",
        "",
        "Figure 3 of the paper: mean KL divergence (nats) of the predicted distribution from the",
        "uniform and the training unigram distribution (`fairseq-noise-analyze kl`; the paper",
        "expects noised models closer to both).",
        "",
        *md_table(
            ["scheme", "gamma_0", "KL uniform", "KL unigram", "perplexity"],
            [
                [
                    m["label"],
                    f"{m['gamma']:g}",
                    f"{m['kl_uniform']:.4f}",
                    f"{m['kl_unigram']:.4f}",
                    fmt(m["ppl"]),
                ]
                for m in kl
            ],
        ),
        "",
        f"![KL divergences]({folder}/kl.png)",
        "",
        "Table 6 of the paper: perplexity of the last token where the bigram / trigram never",
        "occurs in the training data (`fairseq-noise-analyze unseen`); the paper's columns (its",
        f"medium models, {paper_bi} / {paper_tri} occurrences) beside ours.",
        "",
        *md_table(
            [
                "scheme",
                "gamma_0",
                "all",
                "unseen bigrams",
                "positions",
                "unseen trigrams",
                "positions",
                "paper bigrams",
                "paper trigrams",
            ],
            [
                [
                    m["label"],
                    f"{m['gamma']:g}",
                    fmt(m["all_ppl"]),
                    fmt(m["bigram_ppl"]),
                    m["bigram_positions"],
                    fmt(m["trigram_ppl"]),
                    m["trigram_positions"],
                ]
                + [paper_value(p) for p in UNSEEN_TABLE_6.get(m["label"], (None, None))]
                for m in unseen
            ],
        ),
        "",
        f"![unseen n-grams]({folder}/unseen.png)",
        "",
    ]
