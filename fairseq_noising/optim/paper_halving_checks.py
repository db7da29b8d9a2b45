"""The command lines that ``--lr-scheduler paper_halving`` refuses, each with the flag to change.

See docs/paper_halving.md ("Flags").
"""

from fairseq_noising.errors import NoisingError

_PPL_METRICS = ("loss", "nll_loss", "ppl")


def check_config(cfg):
    """Refuses, naming the flag, a command line on which the protocol cannot work as intended."""

    def fail(msg):
        raise NoisingError(f"--lr-scheduler paper_halving: {msg}")

    if len(cfg.lr) != 1:
        fail(f"give a single --lr (got {list(cfg.lr)}); the schedule is made by halving it")
    if cfg.halvings < 1:
        fail(f"--halvings must be >= 1 (got {cfg.halvings})")
    if not 0.0 < cfg.lr_shrink < 1.0:
        fail(f"--lr-shrink must be in (0, 1) (got {cfg.lr_shrink})")
    if cfg.stop_min_lr < 0:
        fail(
            "pass --stop-min-lr 0: after the last halving the scheduler sets the learning rate "
            "to 0 and fairseq-train stops only when it is <= --stop-min-lr "
            f"(got --stop-min-lr {cfg.stop_min_lr})"
        )
    last_lr = cfg.lr[0] * cfg.lr_shrink**cfg.halvings
    if cfg.stop_min_lr >= last_lr:
        fail(
            f"--stop-min-lr {cfg.stop_min_lr} would stop training before the last halved rate "
            f"(learning rate {last_lr:g} after {cfg.halvings}) is trained; pass --stop-min-lr 0"
        )
    if cfg.disable_validation:
        fail("needs the validation loss after every epoch; drop --disable-validation")
    if cfg.maximize_best_checkpoint_metric:
        fail(
            "halves when a loss stops decreasing; drop --maximize-best-checkpoint-metric "
            f"(--best-checkpoint-metric {cfg.best_checkpoint_metric})"
        )
    if cfg.halving_threshold is None:
        return
    if not 0.0 < cfg.halving_threshold < 1.0:
        fail(f"--halving-threshold must be in (0, 1) (got {cfg.halving_threshold})")
    if cfg.best_checkpoint_metric not in _PPL_METRICS:
        fail(
            "--halving-threshold compares validation perplexities, which needs "
            f"--best-checkpoint-metric nll_loss, loss or ppl (got {cfg.best_checkpoint_metric})"
        )
    if cfg.best_checkpoint_metric == "loss" and cfg.sentence_avg:
        fail(
            "with --sentence-avg the validation 'loss' is per sentence, not the per-token "
            "log2 perplexity that --halving-threshold needs; add --best-checkpoint-metric nll_loss"
        )
