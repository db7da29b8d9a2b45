"""The fairseq details a sweep row's record relies on while fairseq-train runs: its progress bars,
and its training loop's epochs (the package's ``__init__`` lists the other modules).
"""

from contextlib import contextmanager
from numbers import Number
from typing import Callable, Dict, Iterator

import torch
from fairseq.logging import progress_bar


class _Recording(progress_bar.BaseProgressBar):
    """A progress bar that hands what it logs and prints to ``write`` before its own bar does."""

    def __init__(self, bar, write: Callable[[Dict], None]):
        super().__init__(bar, epoch=bar.epoch)
        self.bar, self.write, self.i, self.size = bar, write, None, None

    def __iter__(self):
        self.size = len(self.bar)
        for i, item in enumerate(self.bar, start=self.n):
            self.i = i
            yield item

    def log(self, stats, tag=None, step=None):
        if self.epoch is not None and self.size:
            position = round(self.epoch - 1 + (self.i + 1) / self.size, 4)
            self.write({"tag": tag, "epoch": self.epoch, "position": position, **_numbers(stats)})
        self.bar.log(stats, tag=tag, step=step)

    def print(self, stats, tag=None, step=None):
        self.write({"tag": tag, "epoch": self.epoch, **_numbers(stats)})
        self.bar.print(stats, tag=tag, step=step)

    def update_config(self, config):
        self.bar.update_config(config)

    def __exit__(self, *exc):
        return self.bar.__exit__(*exc)


def _numbers(stats: Dict) -> Dict:
    out = {}
    for key, value in stats.items():
        if torch.is_tensor(value) and value.numel() == 1:
            value = value.item()
        if isinstance(value, Number):
            out[key] = value
    return out


@contextmanager
def recorded_progress(write: Callable[[Dict], None]) -> Iterator[None]:
    """Hands every statistic that fairseq's progress bars log or print in this process to
    ``write``, whatever ``--log-format``: ``{"tag", "epoch", ...the statistics}``, with
    ``position`` (epochs done) for the ``train_inner`` records.

    Depends on fairseq_cli.train making its bars with ``progress_bar.progress_bar`` looked up on
    the module at each call (replaced here by one that wraps each bar) and on a bar's ``log``
    (``train_inner``, every ``--log-interval`` updates) and ``print`` (an epoch's ``train``, each
    validation under its subset's name) receiving the statistics as numbers. Only the first rank
    of a distributed training writes; ranks in spawned processes do not see the wrapper.
    """
    make = progress_bar.progress_bar

    def recorded(*args, **kwargs):
        bar = make(*args, **kwargs)
        first = not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0
        return _Recording(bar, write) if first else bar

    progress_bar.progress_bar = recorded
    try:
        yield
    finally:
        progress_bar.progress_bar = make


@contextmanager
def no_training() -> Iterator[None]:
    """fairseq-train loads its checkpoint and ends without training a step, saving or validating.

    For a row whose training has ended: fairseq's stop tests (``--max-update``,
    ``--stop-time-hours``) run after an update, so a rerun would train one more. Depends on
    fairseq_cli.train's ``main`` calling its module's ``train`` once per epoch and ending its
    loop when that returns ``should_stop``.
    """
    import fairseq_cli.train as train

    epoch = train.train
    train.train = lambda *args, **kwargs: ([None], True)
    try:
        yield
    finally:
        train.train = epoch
