"""A user's mistake ends the program with one clear line, not a traceback."""


class NoisingError(SystemExit):
    """Raised for bad input (a flag, a file); Python prints the message alone and exits with 1.

    It derives from ``SystemExit`` so that ``fairseq-train`` and the plugin's console scripts stop
    before any training with ``fairseq-noising: error: <message>`` and no traceback.
    """

    def __init__(self, message: str):
        super().__init__(f"fairseq-noising: error: {message}")
        self.message = message
