"""``fairseq-noise-preview``: its JSON Lines hold exactly the noise that training's
``NoisedDataset.collater`` gives for the same seed and epoch, its summary matches the scheme's
expected noising rate, and bad input ends with one line.

Fast tier: the counting, the marking and the option checks, in process. Slow tier (``slow``):
real data, in process (``preview.main``), and one run of the installed console script.
"""

import io
import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import PTB_SLICES, build_task, cli, lm_train_argv, mt_train_argv, one_line
from oracle import EOS, Oracle, read_ptb_words

from fairseq_noising.cli import preview
from fairseq_noising.cli.preview import collect, report
from fairseq_noising.errors import NoisingError
from fairseq_noising.noiser import NoisedTokens

# one pytest-xdist worker: the module's fixtures (binarized data and statistics) are built once
pytestmark = pytest.mark.xdist_group("preview")

LM_KEYS = {"id", "input", "input_noised", "target", "target_noised"}
MT_KEYS = {
    "id",
    "source",
    "source_noised",
    "prev_output",
    "prev_output_noised",
    "target",
    "target_noised",
}
SEED, EPOCH, GAMMA = 7, 3, 0.2


@pytest.fixture(scope="module")
def ptb(ptb_small_bin):
    """The first 2000 PTB training lines and 200 of valid and test, binarized (PTB_SLICES)."""
    return ptb_small_bin


@pytest.fixture(scope="module")
def multi30k(multi30k_small_bin):
    """The first 2000 Multi30k En-De training pairs and 200 of val (and test2016), binarized."""
    return multi30k_small_bin


def run_preview(argv, output=None):
    """Runs the preview in-process; returns (summary, printed text, JSONL records)."""
    argv = [str(a) for a in argv]
    if output is not None:
        argv += ["--output", str(output)]
    out = io.StringIO()
    summary = preview.main(argv, stdout=out)
    records = None
    if output is not None:
        with open(output, encoding="utf-8") as f:
            records = [json.loads(line) for line in f]
    return summary, out.getvalue(), records


def lm_argv(data, *extra, epoch=EPOCH):
    return [
        data,
        "--task",
        "noised_language_modeling",
        "--noise-scheme",
        "kn",
        "--noise-gamma",
        GAMMA,
        "--seed",
        SEED,
        "--epoch",
        epoch,
        "--tokens-per-sample",
        35,
        *extra,
    ]


def mt_argv(data, *extra):
    return [
        data,
        "--task",
        "noised_translation",
        "--noise-scheme",
        "kn",
        "--noise-gamma",
        0.3,
        "--seed",
        SEED,
        "--epoch",
        EPOCH,
        "-s",
        "en",
        "-t",
        "de",
        *extra,
    ]


@pytest.fixture(scope="module")
def lm_run(ptb, tmp_path_factory, script_run):
    # script_run: the console script starts first, its start-up overlapping this run
    path = tmp_path_factory.mktemp("preview_lm") / "kn.jsonl"
    summary, text, records = run_preview(lm_argv(ptb), output=path)
    return summary, text, records, path


@pytest.fixture(scope="module")
def lm_task(ptb):
    """The task as fairseq-train builds it, with the preview's seed; the training split loaded."""
    task, _ = build_task(lm_train_argv(ptb, "--seed", SEED, scheme="kn", gamma=GAMMA))
    task.load_dataset("train")
    task.dataset("train").set_epoch(EPOCH)
    return task


def ptb_text_of(task):
    """The folder of the raw PTB lines that ``task``'s data was binarized from."""
    return Path(task.args.data).parent / "raw"


def strings(dictionary, row):
    return [dictionary[int(i)] for i in row if int(i) != dictionary.pad()]


def sample_ids(n):
    return sorted({0, 1, 5, 17, 64, 65, n // 2, n - 2, n - 1})


# ------------------------------------------------------------------------- language modeling


@pytest.mark.slow
def test_lm_jsonl_has_one_object_per_example(lm_run, lm_task):
    _, _, records, _ = lm_run
    n = len(lm_task.dataset("train"))
    # the training text's words and one </s> per line, cut into blocks of 35 tokens
    lines = (ptb_text_of(lm_task) / "ptb.train.txt").read_text(encoding="utf-8").splitlines()
    assert len(lines) == PTB_SLICES["small"]["train"]
    assert n == math.ceil(sum(len(line.split()) + 1 for line in lines) / 35) > 1000
    assert [r["id"] for r in records] == list(range(n))
    for r in records:
        assert set(r) == LM_KEYS
        assert (
            len(r["input"]) == len(r["input_noised"]) == len(r["target"]) == len(r["target_noised"])
        )
        assert len(r["input"]) > 0 and "<pad>" not in r["input"] + r["input_noised"]
    # the clean columns are the data itself: the target is the input shifted by one
    assert records[0]["input"][1:] == records[0]["target"][:-1]


@pytest.mark.slow
def test_lm_noise_is_what_training_collates(lm_run, lm_task):
    _, _, records, _ = lm_run
    wrapper = lm_task.dataset("train")
    d = lm_task.dictionary
    ids = sample_ids(len(wrapper))
    batch = wrapper.collater([wrapper[i] for i in ids[::-1]])  # another batch, another order
    assert batch["id"].tolist() == ids[::-1]
    for row, i in enumerate(batch["id"].tolist()):
        assert records[i]["input_noised"] == strings(d, batch["net_input"]["src_tokens"][row])
        assert records[i]["target_noised"] == strings(d, batch["target"][row])
    clean = wrapper.dataset.collater([wrapper.dataset[i] for i in ids])
    for row, i in enumerate(ids):
        assert records[i]["input"] == strings(d, clean["net_input"]["src_tokens"][row])
        assert records[i]["target"] == strings(d, clean["target"][row])
    noised_anywhere = sum(records[i]["input"] != records[i]["input_noised"] for i in ids)
    assert noised_anywhere >= len(ids) // 2


@pytest.mark.slow
def test_lm_changes_only_at_fired_positions_and_kn_targets_follow(lm_run, lm_task):
    _, _, records, _ = lm_run
    wrapper = lm_task.dataset("train")
    ids = list(range(0, len(wrapper), 7))
    clean = wrapper.dataset.collater([wrapper.dataset[i] for i in ids])
    _, details = wrapper.noise_batch(clean, EPOCH)
    fired = details["target"].fired
    target_changes = input_changes = both = 0
    for row, i in enumerate(clean["id"].tolist()):
        r = records[i]
        n = len(r["input"])  # LM batches are right-padded: the example is the row's first n
        changed_in = np.array(r["input"]) != np.array(r["input_noised"])
        changed_tgt = np.array(r["target"]) != np.array(r["target_noised"])
        assert not (changed_in & ~fired[row, :n]).any(), f"input of {i} changed where nothing fired"
        # kn: a target is replaced only where its context token was noised (the context's draw
        # can return the same token, so "noised" is read from the noise details)
        assert not (changed_tgt & ~fired[row, :n]).any(), f"target of {i} changed, input not noised"
        input_changes += int(changed_in.sum())
        target_changes += int(changed_tgt.sum())
        both += int((changed_in & changed_tgt).sum())
    assert input_changes > 100 and target_changes > 100
    assert both >= 0.9 * target_changes  # almost always the input visibly changed as well


@pytest.mark.slow
def test_lm_summary_matches_expected_gamma(lm_run, lm_task):
    summary, text, records, _ = lm_run
    oracle = Oracle.from_stream(read_ptb_words(Path(ptb_text_of(lm_task)) / "ptb.train.txt"))
    words = [EOS if t == "</s>" else t for r in records for t in r["input"]]
    tokens = np.array(words, dtype=object)
    # mean gamma over the context positions
    expected = float(np.mean([oracle.gamma("kn", GAMMA, w) for w in words]))
    s = summary["target"]
    assert s["positions"] == tokens.size
    assert 0.05 < expected < GAMMA  # kn discounts gamma_0
    assert s["expected_fraction"] == pytest.approx(expected, rel=1e-9)
    sd = np.sqrt(expected * (1 - expected) / tokens.size)
    assert abs(s["noised_fraction"] - expected) < 5 * sd + 1e-3
    changed = sum(a != b for r in records for a, b in zip(r["input"], r["input_noised"]))
    assert s["changed_fraction"] == pytest.approx(changed / tokens.size)
    # kn with </s> an ordinary word: the authors' loop (oracle.noise) replaces the target at every
    # noised position, and no target of a real position is special
    assert s["targets"] == tokens.size and s["targets_replaced"] == s["noised"] > 0
    # the printed summary: the rates, the ten most frequent replacements, marked examples
    assert f"{s['noised_fraction']:.2%} of {tokens.size:,} positions noised" in text
    assert "targets (target):" in text
    top = [line for line in text.splitlines() if line.startswith("[lm] top replacements in input:")]
    assert len(top) == 1 and top[0].count("(") == 10
    assert "→" in text and "id 0" in text and "id 2" in text and "id 3" not in text


@pytest.mark.slow
def test_lm_preview_noises_eos_contexts_at_the_oracles_rate(ptb, lm_run):
    """kn on PTB: </s> is an ordinary word, its contexts change at the rate that the oracle (the
    authors' procedure on the same raw lines) predicts, gamma(</s>) (1 - q(</s>)), and it is
    drawn as a replacement and replaced as a target."""
    summary, text, records, _ = lm_run
    oracle = Oracle.from_stream(read_ptb_words(Path(ptb).parent / "raw" / "ptb.train.txt"))
    rate = oracle.gamma("kn", GAMMA, EOS) * (1 - oracle.proposal("kn")[EOS])
    pairs = [(a, b) for r in records for a, b in zip(r["input"], r["input_noised"]) if a == "</s>"]
    changed = sum(a != b for a, b in pairs)
    sd = np.sqrt(len(pairs) * rate * (1 - rate))
    # one </s> context per line: fairseq's stream starts with a </s>, the last line's is a target
    assert len(pairs) == PTB_SLICES["small"]["train"]
    assert abs(changed - len(pairs) * rate) < 4 * sd, (changed, len(pairs) * rate)
    drawn = sum(b == "</s>" != a for r in records for a, b in zip(r["input"], r["input_noised"]))
    replaced = sum(
        a == "</s>" != b for r in records for a, b in zip(r["target"], r["target_noised"])
    )
    assert drawn > 0 and replaced > 0
    assert (
        "special, never noised, drawn or replaced: <s> <pad> <blank> (</s> is an ordinary word)"
        in text
    )


@pytest.mark.slow
def test_same_epoch_and_seed_identical_other_epoch_differs(ptb, lm_run, tmp_path):
    _, _, records, path = lm_run
    k = 300
    same_path, other_path = tmp_path / "same.jsonl", tmp_path / "other.jsonl"
    run_preview(lm_argv(ptb, "--max-examples", k), output=same_path)
    run_preview(lm_argv(ptb, "--max-examples", k, epoch=EPOCH + 1), output=other_path)
    full = path.read_text(encoding="utf-8").splitlines()
    assert same_path.read_text(encoding="utf-8").splitlines() == full[:k]
    other = [json.loads(line) for line in other_path.read_text(encoding="utf-8").splitlines()]
    assert [r["input"] for r in other] == [r["input"] for r in records[:k]]
    differing = sum(a["input_noised"] != b["input_noised"] for a, b in zip(other, records))
    assert differing > k // 2


# ------------------------------------------------------------------------------- translation


@pytest.fixture(scope="module")
def mt_runs(multi30k, tmp_path_factory):
    folder = tmp_path_factory.mktemp("preview_mt")
    both = run_preview(mt_argv(multi30k), output=folder / "both.jsonl")
    source = run_preview(
        mt_argv(multi30k, "--noise-side", "source"), output=folder / "source.jsonl"
    )
    return both, source


@pytest.mark.slow
def test_translation_jsonl_is_what_training_collates(mt_runs, multi30k):
    (summary, text, records), _ = mt_runs
    task, _ = build_task(mt_train_argv(multi30k, "--seed", SEED, scheme="kn", gamma=0.3))
    task.load_dataset("train")
    wrapper = task.dataset("train")
    wrapper.set_epoch(EPOCH)
    assert [r["id"] for r in records] == list(range(len(wrapper)))
    assert all(set(r) == MT_KEYS for r in records)
    ids = sample_ids(len(wrapper))
    batch = wrapper.collater([wrapper[i] for i in ids])  # sorted by source length inside
    for row, i in enumerate(batch["id"].tolist()):
        r = records[i]
        assert r["source_noised"] == strings(task.src_dict, batch["net_input"]["src_tokens"][row])
        assert r["prev_output_noised"] == strings(
            task.tgt_dict, batch["net_input"]["prev_output_tokens"][row]
        )
        assert r["target_noised"] == strings(task.tgt_dict, batch["target"][row])
        assert r["target"][-1] == "</s>" and r["prev_output"][0] == "</s>"
    assert set(summary) == {"source", "target"}
    # the expected rate is the oracle's mean gamma over the context positions: the source tokens
    # on the source side, the decoder's inputs (prev_output) on the target side; </s> is special
    raw = Path(multi30k).parent / "raw"
    for side, lang, column in (("source", "en", "source"), ("target", "de", "prev_output")):
        lines = (raw / f"train.{lang}").read_text(encoding="utf-8").splitlines()
        oracle = Oracle.from_sentences([line.split() for line in lines])
        gammas = [oracle.gamma("kn", 0.3, w) for r in records for w in r[column]]
        expected = float(np.mean(gammas))
        s = summary[side]
        assert s["positions"] == len(gammas)
        assert s["expected_fraction"] == pytest.approx(expected, rel=1e-9), side
        sd = np.sqrt(expected * (1 - expected) / len(gammas))
        assert abs(s["noised_fraction"] - expected) < 5 * sd, (side, s["noised_fraction"], expected)
    assert "[source] context (source):" in text and "[target] targets (target):" in text


@pytest.mark.slow
def test_translation_preview_never_touches_eos(mt_runs):
    (_, text, records), _ = mt_runs
    for r in records:
        for clean, noised in (
            ("source", "source_noised"),
            ("prev_output", "prev_output_noised"),
            ("target", "target_noised"),
        ):
            for a, b in zip(r[clean], r[noised]):
                assert (a == "</s>") == (b == "</s>"), (r["id"], clean, a, b)
    assert sum(r["target"] != r["target_noised"] for r in records) > 100  # noise was applied
    assert text.count("special, never noised, drawn or replaced: <s> <pad> </s> <blank>\n") == 2


@pytest.mark.slow
def test_translation_source_side_leaves_the_target_alone(mt_runs):
    (_, _, both), (summary, text, records) = mt_runs
    assert set(summary) == {"source"} and "[target] not noised (--noise-side source)" in text
    assert all(set(r) == MT_KEYS for r in records)
    for r in records:
        assert r["prev_output_noised"] == r["prev_output"]
        assert r["target_noised"] == r["target"]
    assert sum(r["source_noised"] != r["source"] for r in records) > len(records) // 5
    # each side has its own random stream: the source noise is the same whether or not the
    # target side is noised too
    assert [r["source_noised"] for r in records] == [r["source_noised"] for r in both]
    assert sum(r["target_noised"] != r["target"] for r in both) > 0


# ------------------------------------------------------------------------------- bad input


@pytest.fixture(scope="module")
def script_run(tmp_path_factory):
    """The installed console script asked to overwrite an existing file without --force.

    Started by ``lm_run`` and collected by its test: starting Python and fairseq takes most of
    its time, which then overlaps the in-process runs. The mistake is caught before any data is
    read, so an empty folder serves as DATA."""
    folder = tmp_path_factory.mktemp("preview_script")
    existing = folder / "taken.jsonl"
    existing.write_text("precious\n", encoding="utf-8")
    before = existing.stat()
    argv = [cli("fairseq-noise-preview")] + [str(a) for a in lm_argv(folder)]
    proc = subprocess.Popen(
        argv + ["--output", str(existing)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    yield proc, existing, before
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


@pytest.mark.slow
def test_console_script_error_is_one_line_on_stderr(script_run):
    proc, existing, before = script_run
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 1, stdout
    assert "Traceback" not in stderr
    # fairseq's own import may log a line or two; ours is the one error, the last line
    errors = [line for line in stderr.splitlines() if "error" in line.lower()]
    assert errors == [stderr.splitlines()[-1]], stderr
    assert errors[0] == (
        f"fairseq-noising: error: output file {existing} already exists; pass "
        "--force to overwrite it"
    )
    assert existing.read_text(encoding="utf-8") == "precious\n"
    assert existing.stat().st_mtime_ns == before.st_mtime_ns


@pytest.mark.slow
def test_force_replaces_an_existing_output(ptb, tmp_path):
    existing = tmp_path / "taken.jsonl"
    existing.write_text("precious\n", encoding="utf-8")
    _, _, records = run_preview(lm_argv(ptb, "--max-examples", 5, "--force"), output=existing)
    assert [r["id"] for r in records] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["{tmp}/missing", "--noise-scheme", "kn", "--noise-gamma", 0.2], "missing does not exist"),
        (["{tmp}", "--noise-scheme", "kn", "--noise-gamma", 0.2, "--epoch", 0], "--epoch must be"),
        (["{tmp}", "--noise-scheme", "kn", "--max-examples", 0], "--max-examples must be"),
        (["{tmp}", "--noise-scheme", "kn", "--show-examples", -1], "--show-examples must not"),
        (["{tmp}", "--noise-scheme", "kn", "--top", -1], "--top must not be negative"),
        (["{tmp}", "--task", "translation"], "--task translation cannot be previewed"),
        (["{tmp}", "--task", "noised_translation"], "cannot infer the language pair"),
        (["{tmp}", "--noise-scheme", "bogus"], "invalid choice: 'bogus'"),
        (["{tmp}", "--noise-scheme", "kn", "--output", "{tmp}"], "is a directory, not a file"),
        (["{tmp}", "--noise-scheme", "kn", "--output", "{tmp}/no/x.jsonl"], "no does not exist"),
        (["{tmp}", "--noise-scheme", "kn", "--output", "{tmp}/taken"], "pass --force to overwrite"),
    ],
)
def test_bad_options_are_one_line(argv, message, tmp_path):
    (tmp_path / "taken").write_text("precious\n")
    with pytest.raises(NoisingError) as error:
        preview.parse_args([str(a).format(tmp=tmp_path) for a in argv])
    assert message in one_line(error)
    assert (tmp_path / "taken").read_text() == "precious\n"


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv, message",
    [
        (["{ptb}", "--noise-scheme", "kn", "--noise-gamma", 1.5], "--noise-gamma"),
        (["{ptb}", "--noise-scheme", "kn", "--noise-gamma", 0.2, "--split", "nosuch"], "nosuch"),
    ],
)
def test_bad_data_is_one_line(argv, message, ptb):
    with pytest.raises(NoisingError) as error:
        preview.main([str(a).format(ptb=ptb) for a in argv], stdout=io.StringIO())
    assert message in one_line(error)


# ------------------------------------------------------------------------------- units


def test_side_stats_count_real_positions_only():
    pad = 1
    gamma = np.array([0.0, 0.0, 0.0, 0.1, 0.2, 0.3, 0.4])
    clean = np.array([[3, 4, 5, 6], [6, 5, 9, pad]])  # 9: outside the statistics' vocabulary
    clean_target = np.array([[4, 5, 6, 2], [5, 9, 2, pad]])
    details = NoisedTokens(
        context=np.array([[3, 6, 5, 2], [4, 5, 3, 0]]),
        target=np.array([[4, 3, 6, 2], [6, 9, 4, 0]]),
        fired=np.array([[0, 1, 0, 1], [1, 1, 1, 1]], dtype=bool),  # fired at padding: ignored
        target_replaced=np.array([[0, 1, 0, 0], [1, 0, 1, 1]], dtype=bool),
    )
    stats = collect.SideStats("lm", "input", "target", gamma, noise_target=True)
    stats.add(pad, clean, details, clean_target)
    stats.add(pad, clean, details, clean_target)  # counts add up over batches
    # position by position
    real = [(r, c) for r in range(2) for c in range(4) if clean[r, c] != pad]
    fired = [(r, c) for r, c in real if details.fired[r, c]]
    replaced = [(r, c) for r, c in real if details.target_replaced[r, c]]
    expected = sum(gamma[clean[r, c]] if clean[r, c] < len(gamma) else 0.0 for r, c in real)
    context_counts = np.zeros(7, dtype=int)
    for r, c in fired:
        context_counts[details.context[r, c]] += 2
    target_counts = np.zeros(7, dtype=int)
    for r, c in replaced:
        target_counts[details.target[r, c]] += 2
    s = stats.summary()
    assert s["positions"] == 2 * len(real) == 14
    assert s["noised"] == 2 * len(fired) == 10
    assert s["changed_fraction"] == pytest.approx(8 / 14)  # 4 -> 6, 6 -> 2, 6 -> 4, 9 -> 3
    assert s["expected_fraction"] == pytest.approx(2 * expected / 14)
    assert (s["targets"], s["targets_replaced"]) == (14, 2 * len(replaced))
    np.testing.assert_array_equal(stats.context_counts, context_counts)
    np.testing.assert_array_equal(stats.target_counts, target_counts)


def test_marked_shows_changes_and_cuts_long_lines():
    assert report._marked(["a", "b", "c"], ["a", "x", "c"]) == "a [b→x] c"
    n = report.MAX_SHOWN_TOKENS
    clean = [str(i) for i in range(n + 1)]
    assert report._marked(clean[:n], clean[:n]) == " ".join(clean[:n])  # all of it: no cut
    noised = clean[:-2] + ["x", "y"]  # changes past the cut are not shown
    assert report._marked(clean, noised) == " ".join(clean[: n - 1]) + f" [{n - 1}→x] … (+1 tokens)"
