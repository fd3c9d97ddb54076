"""The registered repairs (:class:`~headprune_bench.methods.repair.Repair`), one file each: ``none`` (zeroing, as
prune-only), ``bias`` (FLAP's bias compensation), ``scales`` (Kwon et al.'s head scales), ``weights`` (K-prune's
output-weight tuning), ``finetune`` (the shared recovery fine-tune); third-party repairs through the entry-point
group ``headprune_bench.repairs``. The registry is :data:`headprune_bench.methods.registry.REPAIRS`
(``register_repair``, ``available_repairs``, ``get_repair_class``, ``create_repair``); the conformance check is
:func:`headprune_bench.methods.repairs.conformance.check_repair`. See docs/heads.md ("Repairs")."""
