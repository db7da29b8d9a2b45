"""The rows' labels and order on a results page.

Row labels come from the scheme registry (:data:`fairseq_noising.schemes.REGISTRY`), a translation
row ``kn:source`` being the scheme's label with ", source only". The tables' titles and the
paper's figures beside ours live with the tables' configs (``recipes/config/table/``,
:mod:`.tables`).
"""

from ...schemes import REGISTRY

SIDES = {"both": "", "source": ", source only", "target": ", target only"}


def row_label(key: str) -> str:
    """The label of a row key: the scheme's registry label (plus the side for ``kn:source``, and
    the subword sampling for ``none+sw0.1/64``, the precision for ``kn@bf16``); a scheme or side
    the plugin does not know (a failed row's) as it was given."""
    key, _, precision = key.partition("@")
    key, _, sampling = key.partition("+sw")
    scheme, _, side = key.partition(":")
    label = REGISTRY[scheme].label if scheme in REGISTRY else scheme
    label += SIDES.get(side or "both", f", {side}")
    if sampling:
        sampling, _, on = sampling.partition(":")
        alpha, _, nbest = sampling.partition("/")
        label += f", subword sampling alpha {alpha}" + (f" ({nbest}-best)" if nbest else "")
        label += f" on the {on} only" if on else ""
    return label + (f", {precision}" if precision else "")


def paper_key(key: str) -> str:
    """The key of the paper's figures for a row key: the same row in fp32 (``kn@bf16``: ``kn``)."""
    return key.partition("@")[0]


def row_order(key: str) -> tuple:
    """Rows as the paper orders them: by scheme in registry order (none first), then side; a
    row with subword sampling after the same row without, a row in bf16 after the same in fp32."""
    key, _, precision = key.partition("@")
    key, _, sampling = key.partition("+sw")
    scheme, _, side = key.partition(":")
    schemes, sides = list(REGISTRY), list(SIDES)
    return (
        schemes.index(scheme) if scheme in schemes else len(schemes),
        sides.index(side or "both") if (side or "both") in sides else len(sides),
        sampling,
        precision,
    )
