"""The assertion tiers: invariants, the semantic tier, judges and metamorphic relations."""
