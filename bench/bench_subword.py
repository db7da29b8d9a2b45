"""Subword sampling's cost on the CPU, on Multi30k En-De, 8k sentencepiece pieces per language."""

import os
import statistics
import time
from pathlib import Path

import numpy as np
import sentencepiece as spm

from fairseq_noising.data_prep import ptb
from fairseq_noising.data_prep.subwords import spm_dir, train_model
from fairseq_noising.data_prep.translation import copy_plain
from fairseq_noising.subword import SubwordModel, SubwordSampler

from . import _common

SAMPLERS = {"unigram, every segmentation": -1, "unigram, 64 best": 64, "BPE-dropout": -1}  # nbest


def prepared(multi30k: Path, cache: Path) -> Path:
    """SPM=1's data-bin (8k unigram pieces per language), and a BPE model of train.de."""
    work = cache / "multi30k-spm8k"
    if not (work / "data-bin" / "spm.de.model").exists():
        splits = [("train", "train"), ("valid", "val"), ("test", "test")]
        copy_plain(str(multi30k), str(work / "raw"), "en", "de", splits)
        spm_dir(str(work / "raw"), str(work / "spm"), "en", "de", 8000, False)
        flags = ["--source-lang", "en", "--target-lang", "de", "--trainpref", work / "spm/train"]
        flags += ["--validpref", work / "spm/valid", "--testpref", work / "spm/test"]
        flags += ["--srcdict", work / "spm/dict.en.txt", "--tgtdict", work / "spm/dict.de.txt"]
        ptb.preprocess(*flags, "--destdir", work / "data-bin")
        for lang in ("en", "de"):
            os.replace(work / f"spm/spm.{lang}.model", work / f"data-bin/spm.{lang}.model")
    if not (work / "bpe.de.model").exists():
        train_model([str(work / "raw/train.de")], str(work / "bpe.de"), 8000, "bpe")
    return work


def per_sentence(work: Path, rounds: int, batches: int):
    lines = (work / "raw/train.de").read_text(encoding="utf-8").splitlines()[: 128 * batches]
    methods = {}
    for name, nbest in SAMPLERS.items():
        path = "bpe.de.model" if name == "BPE-dropout" else "data-bin/spm.de.model"
        model = SubwordModel(str(work / path))
        symbols = ["<s>", "<pad>", "</s>", "<unk>"] + model.dictionary_symbols() + ["<blank>"]
        to_piece, to_dict = model.map_dictionary(symbols, [0, 1, 2, 3, len(symbols) - 1], 3, "")
        index = {s: i for i, s in enumerate(symbols)}
        sp = spm.SentencePieceProcessor(model_file=str(work / path))
        data = [np.array([index[p] for p in s] + [2]) for s in sp.encode(lines, out_type=str)]
        sampler = SubwordSampler(model, to_piece, to_dict, alpha=0.1, nbest=nbest)
        start = time.perf_counter()
        sampler.prepare(np.concatenate(data), np.array([len(d) for d in data]))
        methods[name] = (sampler, data, time.perf_counter() - start, [], [0, 0])
    for r in range(rounds):
        for b in range(batches):
            for sampler, data, _, times, pieces in methods.values():
                batch, ids = data[128 * b : 128 * (b + 1)], np.arange(128 * b, 128 * (b + 1))
                t = time.perf_counter()
                out = sampler(batch, ids, epoch=r + 1)
                times.append((time.perf_counter() - t) / len(batch))
                pieces[0] += sum(map(len, out))
                pieces[1] += sum(map(len, batch))
    print(f"per sentence, {rounds} x {batches} batches of 128 German sentences, alpha 0.1:")
    for name, (_, _, prep, times, pieces) in methods.items():
        print(
            f"  {name:28s} {statistics.median(times) * 1e6:7.1f} us/sentence (median batch), "
            f"pieces x{pieces[0] / pieces[1]:.3f}, word types prepared in {prep:.1f} s"
        )


def per_epoch(work: Path, args):
    """The 256-unit model's updates without and with sampling, alternating in one process."""
    import torch

    argv = [str(work / "data-bin"), "--user-dir", str(_common.PLUGIN_DIR)] + (
        "--cpu --task noised_translation -s en -t de --seed 1 --arch noising_lstm_iwslt_en_de "
        "--hidden-size 256 --num-workers 0 --criterion cross_entropy --sentence-avg --batch-size "
        "128 --required-batch-size-multiple 1 --optimizer sgd --lr 1.0 --clip-norm 5 "
        f"--subword-sampling-alpha {args.alpha} --subword-sampling-nbest {args.nbest}"
    ).split()
    epoch_cells(argv)
    times, pieces, cost, updates = _common.paired_updates(argv, args.updates, 1, 128, 2560)
    wrapped, clean = pieces["wrapped"][1:], pieces["clean"][1:]  # after the warm-up
    grown = {k: sum(u[k] for u in wrapped) / sum(u[k] for u in clean) for k in pieces["clean"][0]}
    med = {c: statistics.median(times[k]) for c, k in (("with", "wrapped"), ("without", "clean"))}
    print(
        f"per epoch ({updates} updates of batch 128; 256 units; torch threads "
        f"{torch.get_num_threads()}; {args.updates} updates each, alternating), alpha "
        f"{args.alpha}, nbest {args.nbest}:"
    )
    for c in ("without", "with"):
        print(f"  {c:7s} sampling: {med[c]:.3f} s/update -> epoch {med[c] * updates / 60:.1f} min")
    pairs = sorted(a / b for a, b in zip(times["wrapped"], times["clean"]))
    ratio = f"{med['with'] / med['without']:.3f} (medians); per pair {statistics.median(pairs):.3f}"
    quartiles = f"quartiles {pairs[len(pairs) // 4]:.3f}-{pairs[3 * len(pairs) // 4]:.3f}"
    print(f"  ratio with / without: {ratio}, {quartiles}")
    print("  with / without: " + ", ".join(f"{k} x{v:.3f}" for k, v in grown.items()))
    print(f"  sampling alone: {cost * 1e3:.1f} ms/batch = {cost / med['without']:.1%} of an update")


def epoch_cells(argv, epochs=3):
    """Pieces and padded cells of whole epochs, with / without sampling (bench/README.md, 7)."""
    task = _common.fairseq_task(argv)[1]
    task.load_dataset("train")
    wrapper, clean = task.dataset("train"), task.dataset("train").dataset
    src0, tgt0 = clean.src_sizes, clean.tgt_sizes

    def batches(dataset, epoch):
        kwargs = dict(max_sentences=128, seed=1, epoch=epoch, disable_iterator_cache=True)
        return task.get_batch_iterator(dataset, **kwargs).frozen_batches

    def cells(batch_list, src, tgt):
        return sum(len(b) * (int(src[b].max()) + int(tgt[b].max())) for b in batch_list)

    print(f"whole epochs ({len(batches(clean, 1))} batches of 128), with / without sampling:")
    for epoch in range(1, epochs + 1):
        by_sampled = batches(wrapper, epoch)  # sets the epoch: its lengths drawn
        src, tgt = wrapper.lengths["source"], wrapper.lengths["target"]
        by_binarized = batches(clean, epoch)
        base = cells(by_binarized, src0, tgt0)
        print(
            f"  epoch {epoch}: pieces x{(src.sum() + tgt.sum()) / (src0.sum() + tgt0.sum()):.3f}, "
            f"padded cells x{cells(by_sampled, src, tgt) / base:.3f} (batches by sampled "
            f"lengths), x{cells(by_binarized, src, tgt) / base:.3f} (by binarized lengths)"
        )


def main(argv=None):
    p = _common.parser("bench_subword", __doc__)  # the Multi30k folder is beside PTB's
    p.add_argument("--multi30k-dir", type=Path, help="default: the --ptb-dir's ../multi30k")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batches", type=int, default=20, help="batches of 128 per round")
    p.add_argument("--updates", type=int, default=12, help="timed updates per condition")
    p.add_argument("--alpha", type=float, default=0.1)
    p.add_argument("--nbest", type=int, default=64)
    p.add_argument("--part", choices=["sentence", "epoch", "both"], default="both")
    args = p.parse_args(argv)
    print(_common.machine_line(), flush=True)
    work = prepared(args.multi30k_dir or args.ptb_dir.parent / "multi30k", args.cache_dir)
    if args.part in ("sentence", "both"):
        per_sentence(work, args.rounds, args.batches)
    if args.part in ("epoch", "both"):
        per_epoch(work, args)
    print(_common.machine_line())


if __name__ == "__main__":
    main()
