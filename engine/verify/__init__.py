"""Verification: the evidence a spec is checked against and the guards that check it.

Layer: engine.verify (imports engine.language; never engine.deploy or engine.batch). evidence and
manifest read the recorded snapshots, checkpoint_headers and modeling_code record them (snapshot),
guards/ compare spec and evidence, validate runs every guard.
"""
