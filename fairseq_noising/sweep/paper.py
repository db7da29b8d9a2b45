"""The rows' labels and order on a results page.

Row labels come from the scheme registry (:data:`fairseq_noising.schemes.REGISTRY`), a translation
row ``kn:source`` being the scheme's label with ", source only". The tables' titles and the
paper's figures beside ours live with the tables' configs (``recipes/config/table/``,
:mod:`.tables`).
"""

from ..schemes import REGISTRY

SIDES = {"both": "", "source": ", source only", "target": ", target only"}


def row_label(key: str) -> str:
    """The label of a row key: the scheme's registry label (plus the side for ``kn:source``);
    a scheme or side the plugin does not know (a failed row's) as it was given."""
    scheme, _, side = key.partition(":")
    label = REGISTRY[scheme].label if scheme in REGISTRY else scheme
    return label + SIDES.get(side or "both", f", {side}")


def row_order(key: str) -> tuple:
    """Rows as the paper orders them: by scheme in registry order (none first), then side."""
    scheme, _, side = key.partition(":")
    schemes = list(REGISTRY)
    return (
        schemes.index(scheme) if scheme in schemes else len(schemes),
        list(SIDES).index(side or "both"),
    )
