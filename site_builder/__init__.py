"""ArchLedger site builder: renders build/site/ from build/results/ (layer above engine).

Empty until the site issue lands; it may import engine, never the reverse.
"""
