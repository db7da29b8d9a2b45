"""Tables of the paper as Hydra sweeps of ``fairseq-hydra-train -m`` (configs in
``recipes/config``): each row records and evaluates itself (:mod:`.callback`), one page writer reads
the records (:mod:`.page`). Needs hydra-core (installed with fairseq)."""
