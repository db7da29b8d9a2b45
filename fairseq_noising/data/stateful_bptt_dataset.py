"""Contiguous-row batching for stateful truncated backpropagation through time (Zaremba et al.).

The token stream (every line followed by ``</s>``) is cut into ``num_rows`` contiguous rows of
equal length; item i of the dataset is block i of every row this process owns: context
``row[i*T:(i+1)*T]`` and target ``row[i*T+1:(i+1)*T+1]`` (the last block may be shorter).
Items are whole batches, read in order, so row r of batch i+1 continues row r of batch i in
the stream, and a model may carry its hidden state from one batch to the next.

Under data-parallel training each rank owns its own rows (``row_ids``), so a rank's state
only ever continues its own rows. The tokens left over after cutting ``num_rows`` equal rows
(fewer than ``num_rows``) are dropped, as in Zaremba et al.'s reader; for evaluation (``pad``
given) the end of the stream is padded instead, so that every token but the first is a target
exactly once (the padding ends the last rows, and pad targets are not scored).
"""

import numpy as np
import torch
from fairseq.data import FairseqDataset


class StatefulBPTTDataset(FairseqDataset):
    """Args:
    tokens: the whole split as one int64 stream.
    num_rows: rows over all ranks (batch size x data-parallel world size).
    row_ids: the rows of this process (a contiguous range for rank k).
    block_size: time steps per batch (``--tokens-per-sample``).
    pad: evaluation: pad the stream's end with this index instead of dropping its last
        tokens (``ntokens`` then counts the non-pad targets).
    """

    def __init__(self, tokens, num_rows, row_ids, block_size, pad=None):
        tokens = np.asarray(tokens, dtype=np.int64)
        if num_rows < 1 or block_size < 1:
            raise ValueError("num_rows and block_size must be positive")
        self.num_rows = int(num_rows)
        self.row_ids = np.asarray(row_ids, dtype=np.int64)
        self.block_size = int(block_size)
        self.pad = pad
        if pad is None:
            self.row_length = (tokens.size - 1) // self.num_rows
        else:
            self.row_length = -(-(tokens.size - 1) // self.num_rows)
            padding = self.row_length * self.num_rows + 1 - tokens.size
            tokens = np.append(tokens, np.full(padding, pad, dtype=np.int64))
        if self.row_length < 1:
            raise ValueError(f"a stream of {tokens.size} tokens cannot fill {num_rows} rows")
        used = self.row_length * self.num_rows
        contexts = tokens[:used].reshape(self.num_rows, self.row_length)
        targets = tokens[1 : used + 1].reshape(self.num_rows, self.row_length)
        self.contexts = torch.from_numpy(contexts[self.row_ids].copy())
        self.targets = torch.from_numpy(targets[self.row_ids].copy())
        self.num_blocks = -(-self.row_length // self.block_size)
        lengths = np.full(self.num_blocks, self.block_size, dtype=np.int64)
        lengths[-1] = self.row_length - (self.num_blocks - 1) * self.block_size
        self.sizes = lengths * len(self.row_ids)

    def __len__(self):
        return self.num_blocks

    def __getitem__(self, index):
        columns = slice(index * self.block_size, (index + 1) * self.block_size)
        return {
            "index": index,
            "source": self.contexts[:, columns].contiguous(),
            "target": self.targets[:, columns].contiguous(),
        }

    def example_ids(self, index):
        """Ids of the (block, row) examples of item ``index``: unique across ranks and blocks."""
        return torch.as_tensor(index * self.num_rows + self.row_ids)

    def collater(self, samples):
        if len(samples) == 0:
            return {}
        if len(samples) != 1:
            raise ValueError("each item of a StatefulBPTTDataset is a whole batch")
        item = samples[0]
        source, target = item["source"], item["target"]
        rows, length = source.shape
        return {
            "id": self.example_ids(item["index"]),
            "nsentences": rows,
            "ntokens": rows * length if self.pad is None else int(target.ne(self.pad).sum()),
            "net_input": {
                "src_tokens": source,
                "src_lengths": torch.full((rows,), length, dtype=torch.long),
            },
            "target": target,
        }

    def num_tokens(self, index):
        return int(self.sizes[index])

    def size(self, index):
        return int(self.sizes[index])

    def ordered_indices(self):
        return np.arange(len(self), dtype=np.int64)

    @property
    def supports_prefetch(self):
        return False
