"""The assertion tiers: invariants, the semantic tier, judges and metamorphic relations.

Internal: the public API is what `verdictgate` exports. Its modules may be imported (the tests
do), but they can change between releases.
"""
