"""Importers: evidence other tools already collected, read into the same Trial records."""
