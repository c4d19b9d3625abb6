"""Config snapshots: record exactly the config fields a spec binds, with their source.

Layer: engine. A snapshot (``corpus/snapshots/<org>--<name>.yaml``) keeps builds and tests
offline. :func:`config_snapshot` walks the spec against a full config.json and keeps the fields
the walk read (plus ``model_type``), so the corpus never carries unused copies of config files.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from engine.corpus import Corpus
from engine.evaluate import Binding, _Walker
from engine.ir import ModelSpec, Snapshot


def fields_read(corpus: Corpus, model: ModelSpec, config: dict[str, Any]) -> dict[str, Any]:
    """The top-level config fields a numeric walk of ``model`` reads from ``config``."""
    probe = replace(model, snapshot=Snapshot(model.snapshot.source, config, model.snapshot.where))
    walker = _Walker(corpus, probe, Binding("numeric"))
    walker.walk()
    keys = {path[0] for path in walker.config_reads}
    keys.add("model_type")
    return {key: config[key] for key in sorted(keys) if key in config}


def config_snapshot(corpus: Corpus, model: ModelSpec, config_path: Path, source: str) -> str:
    """YAML text of the snapshot for ``model`` from a config.json file."""
    config = json.loads(Path(config_path).read_text())
    fields = fields_read(corpus, model, config)
    header = ("# Config fields this spec binds, recorded from the published config.json.\n"
              "# Refresh with: archledger snapshot MODEL --config <config.json>\n")
    return header + yaml.safe_dump({"source": source, "fields": fields}, sort_keys=False,
                                   default_flow_style=None, width=100)
