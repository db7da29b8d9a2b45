"""Every place where the plugin relies on a fairseq detail that is not public API.

Each helper names the fairseq behaviour it depends on; if a fairseq release changes one, this is
the package to fix. One module a subject:

- :mod:`.checkpoints`: fairseq-train's checkpoint files, where in training one was saved, the
  optimizer's tensors in one, reads on the first data-parallel rank, a hook after
  ``Trainer.load_checkpoint``, the running bests;
- :mod:`.data`: a binarized split's tokens, one-batch-per-item epoch iterators, evaluation
  batches that drop no example, epoch workers;
- :mod:`.models`: the LSTM state a decoder's output carries;
- :mod:`.process`: whether this process is a fairseq command, its ``common`` settings, the gloo
  group at exit;
- :mod:`.training`: a sweep row's record while fairseq-train runs (its progress bars, its epochs);
- :mod:`.batching`: batches of lengths other than the binarized (subword sampling).

Checkpoints under torch >= 2.6 (``weights_only``): :mod:`fairseq_noising.checkpoint_safety`.
The helpers of the first four are importable from the package itself.
"""

from .checkpoints import (  # noqa: F401
    checkpoint_files,
    checkpoint_position,
    end_load_checkpoint_with,
    forget_best_validation_value,
    from_first_rank,
    optimizer_values,
    sync_fp16_model,
)
from .data import (  # noqa: F401
    every_example,
    indexed_tokens,
    ordered_batch_iterator,
    workers_end_with_their_epoch,
)
from .models import final_state, takes_initial_state  # noqa: F401
from .process import (  # noqa: F401
    command_common_config,
    leave_gloo_group_at_exit,
    running_fairseq_command,
)
