"""The recipes' settings (environment variables) checked before anything runs: one line naming
the first setting whose value the recipe cannot use."""

import os
import re
import shlex
from typing import Dict, List, Optional, Sequence

from fairseq_noising.schemes import REGISTRY

_AT_LEAST = {
    "MAX_EPOCH": 1,
    "EPOCHS": 1,
    "HALVINGS": 0,
    "SEED": 0,
    "HIDDEN": 1,
    "LAYERS": 1,
    "BATCH_SIZE": 1,
    "BEAM": 1,
    "NWORDS": 1,
    "SPM_VOCAB": 1,
    "WORDS_PER_LINE": 1,
    "TRAIN_CHARS": 1,
    "VALID_CHARS": 1,
    "TEST_CHARS": 1,
    "MIN_COUNT": 0,
    "THREADS": 1,
    "JOBS": 1,
    "WARMUP": 0,
    "PATIENCE": 1,
}
_CHOICES = {
    "SIZE": ("small", "medium", "large"),
    "TOKENIZER": ("auto", "moses", "simple"),
    "SPM": ("0", "1"),
    "SPM_JOINT": ("0", "1"),
    "OPTIMIZER": ("sgd", "adam"),
    "ANALYZE": ("0", "1"),
    "MPS": ("0", "1"),
}
_DURATIONS = ("TIME_BUDGET", "EVAL_RESERVE")  # 90s, 25m, 1.5h
# empty: the architecture's / protocol's value, or the runner's default
_OPTIONAL = ("HIDDEN", "DROPOUT", "LAYERS", "LR", "JOBS", "THREADS", "TIME_BUDGET", "EVAL_RESERVE")
_LSTM_ONLY = {"HIDDEN": "--hidden-size", "LAYERS": "--num-layers"}  # options of our LSTM models


def duration_seconds(text: str) -> Optional[float]:
    """Seconds of a duration such as ``90s``, ``25m`` or ``1.5h`` (a bare number: seconds); None
    when the text is not one."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]*)?)([smh]?)", text.strip())
    if not m or float(m.group(1)) <= 0:
        return None
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def _number(text: str) -> Optional[float]:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value else None  # not NaN


def _schemes_of(settings: Dict[str, str]) -> List[str]:
    rows = settings.get("SCHEMES", "") + " " + settings.get("ROWS", "")
    return [row.partition(":")[0] for row in rows.split()]


def with_scheme_grids(settings: Dict[str, str], environ=os.environ) -> Dict[str, str]:
    """The settings plus ``GAMMAS_<scheme>`` of the environment for the recipe's schemes."""
    out = dict(settings)
    for scheme in _schemes_of(settings):
        name = f"GAMMAS_{scheme}"
        if name in environ and name not in out:
            out[name] = environ[name]
    return out


def settings_error(settings: Dict[str, str]) -> Optional[str]:
    """The first setting whose value the recipe cannot use, as one line; None when all are fine."""
    known = ", ".join(REGISTRY)
    for name, value in settings.items():
        if name in _OPTIONAL and value == "":
            continue
        if name in ("SCHEMES", "ROWS"):
            rows = value.split()
            if not rows:
                return f"{name} must name at least one scheme ({known}), got {value!r}"
            for row in rows:
                scheme, colon, side = row.partition(":")
                if scheme not in REGISTRY or (colon and name == "SCHEMES"):
                    return f"{name} must name registered schemes ({known}), got {row!r}"
                if colon and side not in ("source", "target"):
                    return f"{name}: a row is SCHEME, SCHEME:source or SCHEME:target, got {row!r}"
            if len(set(rows)) != len(rows):
                return f"{name} must name each row once, got {value!r}"
        elif name in ("GAMMAS", "GAMMA") or name.startswith("GAMMAS_"):
            values = value.split()
            numbers = [_number(v) for v in values]
            fine = bool(values) and all(x is not None and 0.0 <= x <= 1.0 for x in numbers)
            if name == "GAMMA" and not (fine and len(values) == 1):
                return f"{name} must be one gamma_0 value in [0, 1], got {value!r}"
            if not fine:
                return f"{name} must be gamma_0 values in [0, 1], got {value!r}"
        elif name in ("DROPOUT", "LABEL_SMOOTHING"):
            x = _number(value)
            if x is None or not 0.0 <= x < 1.0:
                return f"{name} must be a probability in [0, 1), got {value!r}"
        elif name == "LR":
            x = _number(value)
            if x is None or not x > 0.0:
                return f"{name} must be a learning rate > 0, got {value!r}"
        elif name in _DURATIONS:
            if duration_seconds(value) is None:
                return f"{name} must be a duration such as 90s, 25m or 2h, got {value!r}"
        elif name in _AT_LEAST:
            if not re.fullmatch(r"[0-9]+", value) or int(value) < _AT_LEAST[name]:
                return f"{name} must be a whole number >= {_AT_LEAST[name]}, got {value!r}"
        elif name in _CHOICES and value not in _CHOICES[name]:
            return f"{name} must be {' or '.join(_CHOICES[name])}, got {value!r}"
    arch = settings.get("ARCH", "noising_lstm")
    for name, flag in _LSTM_ONLY.items():
        if settings.get(name) and not arch.startswith("noising_lstm"):
            return (
                f"{name} sets {flag} of the noising_lstm architectures, which ARCH={arch} has "
                f"not: give its sizes in EXTRA_ARGS"
            )
    return None


def parse_settings(pairs: Sequence[str]) -> Dict[str, str]:
    out = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals:
            raise SystemExit(f"report.py: a setting is NAME=VALUE, got {pair!r}")
        out[name] = value
    return out


def settings_line(settings: Dict[str, str]) -> str:
    """The settings as environment assignments for the recipe (empty ones, the defaults, left out)."""
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in settings.items() if v != "")
