"""``fairseq-noise-analyze``: the analyses of Xie et al. (2017), Section 5, for this plugin's runs.

Usage::

    fairseq-noise-analyze kl CKPT [CKPT ...] [--data DATA] [--split valid] [--output kl.png]
    fairseq-noise-analyze unseen CKPT [CKPT ...] [--data DATA] [--split valid] [--output unseen.png]
    fairseq-noise-analyze sweep RUN [RUN ...] [--output sweep.png]
    fairseq-noise-analyze curves LOG [LOG ...] [--output curves.png]
    fairseq-noise-analyze pseudocounts DATA --noise-scheme S --noise-gamma G [--draws N]
        [--min-expected M] [--output pseudocounts.png] [fairseq task options]
    fairseq-noise-analyze mc-eval CKPT [--samples K] [--data DATA] [--split test]
        [--noise-scheme S --noise-gamma G]

Model subcommands also take ``--eval-mode auto|stateless|stateful``, ``--batch-size``,
``--max-tokens``, ``--cpu``, ``--num-threads``, ``--seed`` and ``--log-format``.
Every subcommand prints a table on stdout and can write its numbers as JSON (``--json FILE``);
``kl``, ``unseen``, ``sweep``, ``curves`` and ``pseudocounts`` draw a PNG (``--output``). A
checkpoint argument may be written ``LABEL=PATH`` to name it in the table and the figure.
The math lives in :mod:`fairseq_noising.analysis`; see docs/analysis.md.
"""

import argparse
import glob
import json
import logging
import math
import os
import re
import sys
import time
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

logging.getLogger("matplotlib").setLevel(logging.WARNING)  # its import-time debug chatter

from ..analysis import divergence, logs, ngrams, plots, pseudocounts
from ..errors import NoisingError

logger = logging.getLogger("fairseq_noising.analyze")


# --------------------------------------------------------------------------------------------
# small helpers


def split_label(arg: str) -> Tuple[Optional[str], str]:
    """``LABEL=PATH`` -> (LABEL, PATH); a plain PATH -> (None, PATH)."""
    if "=" in arg and not os.path.exists(arg):
        label, path = arg.split("=", 1)
        return label, path
    return None, arg


def default_label(path: str, loaded=None) -> str:
    name = os.path.basename(os.path.dirname(os.path.abspath(path))) or path
    if loaded is not None:
        return f"{name} ({loaded.scheme} {loaded.gamma:g})"
    return name


def fmt(x, digits=2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def print_table(headers: List[str], rows: List[List], out=None) -> None:
    out = out or sys.stdout
    cells = [[str(h) for h in headers]] + [[fmt(c) if not isinstance(c, str) else c for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for k, r in enumerate(cells):
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))), file=out)
        if k == 0:
            print("  ".join("-" * w for w in widths), file=out)
    out.flush()


def _jsonable(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def write_json(path: Optional[str], result: Dict) -> None:
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2, default=_jsonable)


def add_model_args(p, split_default="valid"):
    p.add_argument("checkpoints", nargs="+", metavar="CKPT", help="checkpoint files ([LABEL=]PATH)")
    p.add_argument("--data", default=None, help="binarized data directory (default: the checkpoint's)")
    p.add_argument("--split", default=split_default, help=f"split to evaluate (default: {split_default})")
    p.add_argument("--eval-mode", choices=("auto", "stateless", "stateful"), default="auto",
                   help="stateless blocks, or carry the LSTM state across blocks (auto: as trained)")
    p.add_argument("--batch-size", type=int, default=None,
                   help="sequences per batch (stateful: the number of contiguous rows)")
    p.add_argument("--max-tokens", type=int, default=None, help="tokens per batch (stateless mode)")
    p.add_argument("--cpu", action="store_true", help="run on the CPU even when CUDA is available")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--num-threads", type=int, default=None,
                   help="torch intra-op CPU threads (default: torch's choice)")
    p.add_argument("--log-format", default=None, choices=("none", "simple", "tqdm", "json"),
                   help="progress display (default: tqdm on a terminal, simple otherwise)")


def load_models(args):
    from ._analysis_io import LoadedModel, pick_device

    device = pick_device(args.cpu)
    if args.num_threads:
        torch.set_num_threads(args.num_threads)
    for arg in args.checkpoints:
        label, path = split_label(arg)
        loaded = LoadedModel(path, data=args.data, eval_mode=args.eval_mode, batch_size=args.batch_size,
                             max_tokens=args.max_tokens, device=device, seed=args.seed,
                             log_format=args.log_format)
        yield label or default_label(path, loaded), loaded


# --------------------------------------------------------------------------------------------
# kl


def run_kl(args) -> Dict:
    from ._analysis_io import target_log_probs

    results = []
    for label, m in load_models(args):
        stats = m.train_stats()
        support = divergence.real_vocabulary(stats.unigram)
        log_u, log_q = divergence.reference_log_probs(stats.unigram, support)
        sup = torch.from_numpy(np.flatnonzero(support)).to(m.device)
        log_u_t, log_q_t = torch.from_numpy(log_u).to(m.device), torch.from_numpy(log_q).to(m.device)
        n, nll, kl_u, kl_q, outside = 0, 0.0, 0.0, 0.0, 0.0
        state = None
        for b in m.batches(args.split, desc=f"kl {label}"):
            net = b.sample["net_input"]
            lprobs, state = m.log_probs(net["src_tokens"], net["src_lengths"], state)
            rows = lprobs[b.mask]
            ku, out_mass = divergence.kl_on_support(rows, sup, log_u_t)
            kq, _ = divergence.kl_on_support(rows, sup, log_q_t)
            n += int(b.mask.sum())
            nll -= float(target_log_probs(lprobs, b.sample["target"])[b.mask].double().sum())
            kl_u += float(ku.sum())
            kl_q += float(kq.sum())
            outside += float(out_mass.sum())
        results.append({
            "label": label, "checkpoint": m.path, "scheme": m.scheme, "gamma": m.gamma,
            "stateful": m.stateful, "positions": n, "ppl": divergence.perplexity(nll, n),
            "kl_uniform": kl_u / n, "kl_unigram": kl_q / n, "mass_outside_vocab": outside / n,
            "vocab_size": int(support.sum()),
        })
    print(f"mean KL divergence D(p_R || q) in nats over the {args.split} split; R = the "
          f"{results[0]['vocab_size']} types seen in training, p renormalised on R")
    print_table(["model", "positions", "ppl", "KL uniform", "KL unigram", "mass outside R"],
                [[r["label"], r["positions"], r["ppl"], f"{r['kl_uniform']:.4f}",
                  f"{r['kl_unigram']:.4f}", f"{r['mass_outside_vocab']:.2e}"] for r in results])
    if args.output:
        plots.kl_bars([r["label"] for r in results], [r["kl_uniform"] for r in results],
                      [r["kl_unigram"] for r in results], args.output)
        print(f"wrote {args.output}")
    return {"split": args.split, "models": results}


# --------------------------------------------------------------------------------------------
# unseen


def run_unseen(args) -> Dict:
    from ._analysis_io import target_log_probs

    results = []
    for label, m in load_models(args):
        index = ngrams.NgramIndex(m.stream(os.path.basename(m.train_prefix)), len(m.dictionary),
                                  m.dictionary.eos())
        unseen_bi, unseen_tri, tri_defined = index.unseen(m.stream(args.split))
        acc = {k: [0, 0.0] for k in ("all", "bigram", "trigram")}
        state = None
        for b in m.batches(args.split, desc=f"unseen {label}"):
            net = b.sample["net_input"]
            lprobs, state = m.log_probs(net["src_tokens"], net["src_lengths"], state)
            nll = -target_log_probs(lprobs, b.sample["target"]).double().cpu().numpy()
            real = b.positions >= 0
            pos = b.positions[real]
            nll = nll[real]
            for key, sel in (("all", np.ones(pos.shape, dtype=bool)), ("bigram", unseen_bi[pos]),
                             ("trigram", unseen_tri[pos] & tri_defined[pos])):
                acc[key][0] += int(sel.sum())
                acc[key][1] += float(nll[sel].sum())
        r = {"label": label, "checkpoint": m.path, "scheme": m.scheme, "gamma": m.gamma,
             "stateful": m.stateful}
        for key, (count, total) in acc.items():
            r[f"{key}_positions"] = count
            r[f"{key}_ppl"] = divergence.perplexity(total, count)
        results.append(r)
    print(f"perplexity of the last token at positions of the {args.split} split whose bigram / "
          "trigram never occurs in the training data")
    print_table(["model", "ppl (all)", "positions", "unseen bigrams", "positions", "unseen trigrams", "positions"],
                [[r["label"], r["all_ppl"], r["all_positions"], r["bigram_ppl"], r["bigram_positions"],
                  r["trigram_ppl"], r["trigram_positions"]] for r in results])
    if args.output:
        plots.unseen_bars([r["label"] for r in results], [r["bigram_ppl"] for r in results],
                          [r["trigram_ppl"] for r in results], args.output)
        print(f"wrote {args.output}")
    return {"split": args.split, "models": results}


# --------------------------------------------------------------------------------------------
# mc-eval


def run_mc_eval(args) -> Dict:
    from ._analysis_io import sync, target_log_probs

    if args.samples < 1:
        raise NoisingError(f"--samples must be at least 1, got {args.samples}")
    results = []
    for label, m in load_models(args):
        noiser = m.noiser(args.noise_scheme, args.noise_gamma)
        scheme = noiser.scheme

        # plain evaluation; the cost counts the model's work (noising, forward passes, scoring)
        # per batch, not the data loading, and starts after one warm-up forward pass
        m.log_probs(torch.full((1, 2), m.dictionary.eos(), device=m.device),
                    torch.full((1,), 2, device=m.device))
        n, nll, state, plain_s = 0, 0.0, None, 0.0
        for b in m.batches(args.split, desc=f"plain {label}"):
            sync(m.device)
            start = time.perf_counter()
            net = b.sample["net_input"]
            lprobs, state = m.log_probs(net["src_tokens"], net["src_lengths"], state)
            nll -= float(target_log_probs(lprobs, b.sample["target"])[b.mask].double().sum())
            n += int(b.mask.sum())
            sync(m.device)
            plain_s += time.perf_counter() - start

        # Monte Carlo: K noised copies of every context (K independent noised streams when
        # the state is carried), targets clean; average the probabilities
        from ..noiser import positions_in_example

        mc_n, mc_nll, states, mc_s = 0, 0.0, [None] * args.samples, 0.0
        for b in m.batches(args.split, desc=f"mc K={args.samples} {label}"):
            sync(m.device)
            start = time.perf_counter()
            net = b.sample["net_input"]
            src = net["src_tokens"].cpu().numpy()
            ids = b.sample["id"].cpu().numpy()
            where = positions_in_example(src, m.pad)
            per_sample = []
            for k in range(args.samples):
                noised = noiser(src, None, ids, where, epoch=k + 1).context
                tokens = torch.from_numpy(noised).to(m.device)
                lprobs, states[k] = m.log_probs(tokens, net["src_lengths"], states[k])
                per_sample.append(target_log_probs(lprobs, b.sample["target"]).double())
            averaged = divergence.log_mean_exp(torch.stack(per_sample), dim=0)
            mc_nll -= float(averaged[b.mask].sum())
            mc_n += int(b.mask.sum())
            sync(m.device)
            mc_s += time.perf_counter() - start
        results.append({
            "label": label, "checkpoint": m.path, "trained_scheme": m.scheme, "trained_gamma": m.gamma,
            "test_scheme": str(scheme.name), "test_gamma": scheme.gamma0, "samples": args.samples,
            "stateful": m.stateful, "positions": n, "ppl": divergence.perplexity(nll, n),
            "mc_ppl": divergence.perplexity(mc_nll, mc_n), "plain_seconds": plain_s,
            "mc_seconds": mc_s, "cost_ratio": mc_s / plain_s if plain_s > 0 else float("nan"),
        })
    print(f"test-time Monte Carlo over noised contexts ({args.split} split, targets not noised)")
    print_table(["model", "noise", "K", "positions", "ppl", "MC ppl", "plain s", "MC s", "cost x"],
                [[r["label"], f"{r['test_scheme']} {r['test_gamma']:g}", r["samples"], r["positions"],
                  r["ppl"], r["mc_ppl"], r["plain_seconds"], r["mc_seconds"], r["cost_ratio"]]
                 for r in results])
    return {"split": args.split, "models": results}


# --------------------------------------------------------------------------------------------
# sweep and curves (logs and checkpoints, no model)

_SCHEME_GAMMA = re.compile(r"^([A-Za-z_]+):([0-9.eE+-]+)$")


def _find_logs(directory: str) -> List[str]:
    found = sorted(glob.glob(os.path.join(directory, "*.log")) + glob.glob(os.path.join(directory, "*.txt")))
    return [f for f in found if os.path.isfile(f)]


def sweep_point(arg: str) -> Dict:
    """(scheme, gamma, best valid ppl) of one run: a log, a checkpoint or a run directory."""
    label, path = split_label(arg)
    scheme = gamma = None
    if label and _SCHEME_GAMMA.match(label):
        scheme, gamma = _SCHEME_GAMMA.match(label).group(1), float(_SCHEME_GAMMA.match(label).group(2))
    if os.path.isdir(path):
        found = _find_logs(path)
        best_ckpt = os.path.join(path, "checkpoint_best.pt")
        if found:
            path = found[0]
        elif os.path.isfile(best_ckpt):
            path = best_ckpt
        else:
            raise NoisingError(f"{path} holds no *.log file nor checkpoint_best.pt")
    if not os.path.isfile(path):
        raise NoisingError(f"{path} does not exist")
    if path.endswith(".pt"):
        from fairseq import checkpoint_utils

        import fairseq_noising  # noqa: F401  (allow-lists fairseq checkpoints for torch.load)

        state = checkpoint_utils.load_checkpoint_to_cpu(path)
        cfg, extra = state["cfg"], state.get("extra_state") or {}
        best = extra.get("best", extra.get("val_loss"))
        if best is None:
            raise NoisingError(f"{path} records no validation score")
        ppl = logs.ppl_from_best(float(best), cfg.checkpoint.best_checkpoint_metric)
        scheme = scheme or str(cfg.task.noise_scheme)
        gamma = gamma if gamma is not None else float(cfg.task.noise_gamma)
        source = "checkpoint"
    else:
        run = logs.read_log(path)
        ppl = run.best_valid_ppl
        if ppl is None:
            raise NoisingError(f"{path} holds no \"valid on 'valid' subset\" line")
        scheme = scheme or run.noise_scheme
        gamma = gamma if gamma is not None else run.noise_gamma
        source = "log"
        if scheme is None or gamma is None:
            raise NoisingError(f"{path} does not say its noising scheme; pass it as SCHEME:GAMMA={path}")
    return {"path": path, "scheme": scheme, "gamma": gamma, "best_valid_ppl": ppl, "source": source}


def run_sweep(args) -> Dict:
    points = [sweep_point(a) for a in args.runs]
    points.sort(key=lambda p: (p["scheme"], p["gamma"]))
    print_table(["scheme", "gamma_0", "best valid ppl", "from", "run"],
                [[p["scheme"], f"{p['gamma']:g}", p["best_valid_ppl"], p["source"], p["path"]] for p in points])
    series: Dict[str, List] = {}
    for p in points:
        series.setdefault(p["scheme"], []).append((p["gamma"], p["best_valid_ppl"]))
    if args.output:
        plots.sweep_lines(series, args.output)
        print(f"wrote {args.output}")
    return {"points": points}


def run_curves(args) -> Dict:
    runs = {}
    for arg in args.logs:
        label, path = split_label(arg)
        name = None
        if os.path.isdir(path):
            found = _find_logs(path)
            if not found:
                raise NoisingError(f"{path} holds no *.log file")
            name = os.path.basename(os.path.normpath(path))
            path = found[0]
        if not os.path.isfile(path):
            raise NoisingError(f"{path} does not exist")
        run = logs.read_log(path, subset=args.valid_subset)
        if not run.train_ppl and not run.valid_ppl:
            raise NoisingError(f"{path} holds no end-of-epoch perplexity")
        if label is None:
            label = name or os.path.splitext(os.path.basename(path))[0]
            if run.noise_scheme:
                label += f" ({run.noise_scheme} {run.noise_gamma:g})"
        runs[label] = run
    rows = []
    for label, run in runs.items():
        for e in sorted(set(run.train_ppl) | set(run.valid_ppl)):
            rows.append([label, e, run.train_ppl.get(e), run.valid_ppl.get(e)])
    print_table(["run", "epoch", "train ppl", "valid ppl"], rows)
    if args.output:
        plots.curves({k: (r.train_ppl, r.valid_ppl) for k, r in runs.items()}, args.output)
        print(f"wrote {args.output}")
    return {"runs": {k: {"path": r.path, "scheme": r.noise_scheme, "gamma": r.noise_gamma,
                         "train_ppl": r.train_ppl, "valid_ppl": r.valid_ppl,
                         "best_valid_ppl": r.best_valid_ppl} for k, r in runs.items()}}


# --------------------------------------------------------------------------------------------
# pseudocounts


def run_pseudocounts(args, task_argv: List[str]) -> Dict:
    from ..cli import preview
    from ..data.noised_dataset import NoisedDataset
    from ..data.stateful_bptt_dataset import StatefulBPTTDataset

    pargs = preview.parse_args([args.data] + task_argv)
    if pargs.task != "noised_language_modeling":
        raise NoisingError("pseudocounts supports --task noised_language_modeling only")
    if pargs.noise_scheme == "none":
        raise NoisingError("pseudocounts needs a noising scheme (--noise-scheme)")
    if args.draws < 1:
        raise NoisingError(f"--draws must be at least 1, got {args.draws}")
    task, wrapper = preview.load_task(pargs)
    if not isinstance(wrapper, NoisedDataset):
        raise NoisingError(f"split {pargs.split} is not noised")
    clean_ds, noiser = wrapper.dataset, wrapper.noiser
    scheme = noiser.scheme
    pad, v = task.dictionary.pad(), len(task.dictionary)
    per = 1 if isinstance(clean_ds, StatefulBPTTDataset) else 64
    clean_batches = [clean_ds.collater([clean_ds[i] for i in range(s, min(s + per, len(clean_ds)))])
                     for s in range(0, len(clean_ds), per)]
    clean_batches = [b for b in clean_batches if b]

    def keys_of(context, target, real):
        return pseudocounts.pair_counts(np.asarray(context)[real], np.asarray(target)[real], v)

    clean_parts = []
    for b in clean_batches:
        real = (b["target"] != pad).numpy()
        clean_parts.append(keys_of(b["net_input"]["src_tokens"].numpy(), b["target"].numpy(), real))
    clean_keys, clean_counts = pseudocounts.merge_counts(clean_parts)
    noised_parts = []
    start = time.perf_counter()
    for epoch in range(1, args.draws + 1):
        epoch_parts = []
        for b in clean_batches:
            noised, _ = wrapper.noise_batch(b, epoch=epoch)
            real = (b["target"] != pad).numpy()
            epoch_parts.append(keys_of(noised["net_input"]["src_tokens"].numpy(), noised["target"].numpy(), real))
        noised_parts.append(pseudocounts.merge_counts(epoch_parts))
    noised_keys, noised_counts = pseudocounts.merge_counts(noised_parts)
    seconds = time.perf_counter() - start

    proposal = scheme.proposal
    if proposal is None:  # blank
        proposal = np.zeros(v)
        proposal[scheme.blank_index] = 1.0
    ordinary = np.ones(v, dtype=bool)
    ordinary[list(scheme.special_ids)] = False
    expected_fn = pseudocounts.ExpectedCounts(clean_keys, clean_counts, scheme.gamma, proposal,
                                              ordinary, scheme.noise_target)
    cells = np.union1d(clean_keys, noised_keys)
    expected = expected_fn(cells)
    observed = pseudocounts.lookup(noised_keys, noised_counts, cells) / args.draws
    keep, rel, z = pseudocounts.compare(expected, observed, args.draws, args.min_expected)
    if not keep.any():
        raise NoisingError(f"no bigram has an expected pseudocount >= --min-expected {args.min_expected}")
    worst = np.flatnonzero(keep)[np.argsort(-rel[keep])[: args.top]]
    sym = task.dictionary.symbols
    result = {
        "scheme": str(scheme.name), "gamma": scheme.gamma0, "draws": args.draws, "positions": int(clean_counts.sum()),
        "cells_compared": int(keep.sum()), "min_expected": args.min_expected,
        "max_relative_deviation": float(rel[keep].max()), "max_abs_z": float(np.abs(z[keep]).max()),
        "mean_relative_deviation": float(rel[keep].mean()),
        "noised_positions_total": int(noised_counts.sum()), "seconds": seconds,
        "worst": [{"context": sym[c // v], "target": sym[c % v], "clean": float(pseudocounts.lookup(clean_keys, clean_counts, np.array([c]))[0]),
                   "expected": float(expected[i]), "observed": float(observed[i]), "relative_deviation": float(rel[i]),
                   "z": float(z[i])} for i, c in ((i, cells[i]) for i in worst)],
    }
    if scheme.name == "unigram":
        interp = expected_fn.interpolation(cells, scheme.gamma0)
        k_rel = np.abs(observed - interp) / np.where(interp > 0, interp, 1.0)
        result["interpolation_max_relative_deviation"] = float(k_rel[interp >= args.min_expected].max())
        result["interpolation_vs_exact_max_abs"] = float(np.abs(interp - expected).max())
    print(f"bigram pseudocounts of {pargs.split} noised with {scheme.name}, gamma_0={scheme.gamma0:g}: "
          f"{args.draws} independent draws (epochs 1..{args.draws}) of {result['positions']} positions")
    print(f"cells with expected count >= {args.min_expected:g}: {result['cells_compared']}; "
          f"largest relative deviation {result['max_relative_deviation']:.4f} (mean "
          f"{result['mean_relative_deviation']:.4f}); largest |z| {result['max_abs_z']:.2f}")
    if "interpolation_max_relative_deviation" in result:
        print(f"Section 3.3 formula (1-g) c(a,b) + g p(a) c'(b): largest relative deviation "
              f"{result['interpolation_max_relative_deviation']:.4f}")
    print_table(["context", "target", "clean", "expected", "observed", "rel. dev.", "z"],
                [[w["context"], w["target"], w["clean"], w["expected"], w["observed"],
                  f"{w['relative_deviation']:.4f}", w["z"]] for w in result["worst"]])
    if args.output:
        plots.pseudocount_scatter(expected[keep], observed[keep], args.output,
                                  f"{scheme.name} gamma_0={scheme.gamma0:g}, {args.draws} draws")
        print(f"wrote {args.output}")
    return result


# --------------------------------------------------------------------------------------------
# command line


def get_parser():
    parser = argparse.ArgumentParser(
        prog="fairseq-noise-analyze",
        description="Analyses of noised language models (Xie et al., 2017, Section 5).",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p, png=True):
        p.add_argument("--json", default=None, metavar="FILE", help="also write the numbers as JSON")
        if png:
            p.add_argument("--output", default=None, metavar="PNG", help="draw the figure into PNG")

    p = sub.add_parser("kl", help="mean KL to the uniform and unigram distributions (Figure 3)")
    add_model_args(p)
    common(p)
    p = sub.add_parser("unseen", help="perplexity on unseen bigrams and trigrams (Table 6)")
    add_model_args(p)
    common(p)
    p = sub.add_parser("mc-eval", help="test-time Monte Carlo over noised contexts")
    add_model_args(p, split_default="test")
    p.add_argument("--samples", "-K", type=int, default=10, help="noised copies per context (K)")
    p.add_argument("--noise-scheme", default=None, help="scheme (default: the checkpoint's)")
    p.add_argument("--noise-gamma", type=float, default=None, help="gamma_0 (default: the checkpoint's)")
    common(p, png=False)
    p = sub.add_parser("sweep", help="best validation perplexity against gamma_0 (Figure 2)")
    p.add_argument("runs", nargs="+", metavar="RUN",
                   help="fairseq log, checkpoint_best.pt or run directory; [SCHEME:GAMMA=]PATH")
    common(p)
    p = sub.add_parser("curves", help="training and validation perplexity per epoch (Figure 1)")
    p.add_argument("logs", nargs="+", metavar="LOG", help="fairseq training logs ([LABEL=]PATH)")
    p.add_argument("--valid-subset", default="valid")
    common(p)
    p = sub.add_parser("pseudocounts", help="empirical noised bigram counts against Section 3.3")
    p.add_argument("data", metavar="DATA")
    p.add_argument("--draws", type=int, default=20, help="independent noisings (epochs 1..N)")
    p.add_argument("--min-expected", type=float, default=20.0,
                   help="compare the cells whose expected count is at least this")
    p.add_argument("--top", type=int, default=5, help="show the N largest deviations")
    common(p)
    return parser


def main(argv=None) -> Dict:
    parser = get_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and args.command != "pseudocounts":
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "pseudocounts":
        result = run_pseudocounts(args, rest)
    else:
        result = {"kl": run_kl, "unseen": run_unseen, "mc-eval": run_mc_eval,
                  "sweep": run_sweep, "curves": run_curves}[args.command](args)
    result["command"] = args.command
    write_json(args.json, result)
    return result


def cli_main():
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s",
                        level=logging.INFO, stream=sys.stderr, force=True)
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    try:
        main()
    except NoisingError as e:
        print(f"fairseq-noise-analyze: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    cli_main()
