"""Sequential judging: the rule (`rule`), what it costs before any call (`design`), and where a
run would have stopped (`replay`)."""
