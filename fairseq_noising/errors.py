"""A user's mistake (a flag, a file): an exception a caller can catch, one line for a user.

In-process (a notebook, a sweep driver, a test) a :class:`NoisingError` is an ordinary
``ValueError``. Only at a program's boundary does it become ``fairseq-noising: error: <message>``
on stderr and exit status 1, without a traceback: in the console scripts through
:func:`exit_on_error`, in ``fairseq-train`` and fairseq's other commands through the hook that
:func:`install_excepthook` installs when the plugin is loaded in one of them (and nowhere else).
"""

import sys
from typing import Callable, Optional, TypeVar

PREFIX = "fairseq-noising: error: "
T = TypeVar("T")


class NoisingError(ValueError):
    """Bad input, refused before any training: ``err.message`` names the flag or file and what
    was expected; ``str(err)`` is the line a program prints, ``fairseq-noising: error: <message>``.
    """

    def __init__(self, message: str):
        super().__init__(message)  # args == (message,): pickles back to the same error
        self.message = message

    def __str__(self) -> str:
        return PREFIX + self.message


def error_line(exc: BaseException) -> Optional[str]:
    """The one line a program prints for ``exc``, or None when it is no NoisingError.

    An error raised in another process comes back carrying that process's formatted traceback,
    whose last line is ``fairseq_noising.errors.NoisingError: fairseq-noising: error: <message>``:
    torch.multiprocessing.spawn (fairseq's ``call_main`` with several GPUs) raises
    ``ProcessRaisedException`` with it, and torch raises a DataLoader worker's error again as
    ``NoisingError(<that traceback>)``. An exception of another type whose text does not end
    that way keeps its traceback.
    """
    try:
        text = exc.message if isinstance(exc, NoisingError) else str(exc)
    except Exception:  # an exception whose __str__ fails is not ours
        return None
    lines = text.rstrip().splitlines()
    head = f"{NoisingError.__module__}.{NoisingError.__qualname__}: {PREFIX}"
    if len(lines) > 1 and lines[-1].startswith(head):
        return lines[-1][len(head) - len(PREFIX) :]
    return str(exc) if isinstance(exc, NoisingError) else None


def exit_on_error(main: Callable[[], T]) -> T:
    """Runs a console script's ``main``; a NoisingError ends the program with its one line."""
    try:
        return main()
    except Exception as exc:
        line = error_line(exc)
        if line is None:
            raise
        raise SystemExit(line) from None  # Python prints the line and exits with status 1


def install_excepthook() -> None:
    """Makes an uncaught NoisingError print its one line on stderr (the interpreter then exits
    with status 1, as for any uncaught exception). Any other exception goes to the hook that was
    there before, traceback and all. Installing it twice changes nothing."""
    previous = sys.excepthook
    if getattr(previous, "noising_error_type", None) is NoisingError:
        return

    def excepthook(exc_type, exc, tb):
        line = error_line(exc)
        if line is None:
            previous(exc_type, exc, tb)
        else:
            print(line, file=sys.stderr, flush=True)

    excepthook.noising_error_type = NoisingError
    sys.excepthook = excepthook
