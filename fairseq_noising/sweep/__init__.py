"""Tables of the paper as Hydra sweeps of ``fairseq-hydra-train -m`` (configs in
``recipes/config``): each row records and evaluates itself (:mod:`.callback`), one page writer reads
the records (:mod:`.page`). Needs hydra-core (installed with fairseq).

Importing it registers two resolvers: ``${fairseq_noising.precision_tag:P}`` (a row folder's
suffix: nothing for fp32, ``-bf16`` for bf16) and ``${fairseq_noising.user_dir:}`` (the configs'
``common.user_dir``): the folder this package was imported from. Hydra imports the package with
the callback, in every process that runs a row, before fairseq reads the plugin's folder; a folder
named by hand (the repository's, say) while Python imports an installed copy makes fairseq refuse
the second ``fairseq_noising`` ("not globally unique")."""

import os

from omegaconf import OmegaConf

PLUGIN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

OmegaConf.register_new_resolver("fairseq_noising.user_dir", lambda: PLUGIN_DIR, replace=True)
OmegaConf.register_new_resolver(
    "fairseq_noising.precision_tag", lambda p: "" if p in (None, "fp32") else f"-{p}", replace=True
)
