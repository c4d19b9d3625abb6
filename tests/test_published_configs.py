"""The published config.json files kept in the corpus: pinned by hash, and the snapshots agree.

Every corpus model has its published ``config.json`` beside its snapshot (the external fact the
oracle and model tests read); ``corpus/snapshots/README.md`` names its source and sha256. The
snapshot YAML is a subset recorded by ``archledger snapshot``; a field there that disagrees with
the published file means one of the two was edited by hand.
"""
from __future__ import annotations

import hashlib
import json
import re

import pytest
import yaml

from tests.conftest import MODEL_IDS, SNAPSHOTS

#: Keys transformers adds when it normalises a rope mapping (rope_theta folded in, ``type``
#: renamed ``rope_type``); the snapshot records the normalised form.
ROPE_ADDED = {"rope_theta", "rope_type"}


def _readme_rows() -> dict[str, tuple[str, str]]:
    rows = {}
    for line in (SNAPSHOTS / "README.md").read_text().splitlines():
        match = re.fullmatch(r"\| `([^`]+\.config\.json)` \| (\S+) \| `([0-9a-f]{64})` \|", line)
        if match:
            rows[match[1]] = (match[2], match[3])
    return rows


def test_every_model_has_its_published_config_with_source_and_hash():
    rows = _readme_rows()
    names = {mid.replace("/", "--") + ".config.json" for mid in MODEL_IDS}
    assert names <= set(rows), sorted(names - set(rows))
    assert set(rows) == {p.name for p in SNAPSHOTS.glob("*.config.json")}


@pytest.mark.parametrize("name", sorted(_readme_rows()))
def test_published_config_is_byte_identical_to_its_recorded_hash(name):
    source, digest = _readme_rows()[name]
    model_id = name[: -len(".config.json")].replace("--", "/", 1)
    assert source == f"https://huggingface.co/{model_id}/blob/main/config.json"
    assert hashlib.sha256((SNAPSHOTS / name).read_bytes()).hexdigest() == digest


def _agrees(recorded, published, config: dict) -> bool:
    if isinstance(recorded, dict) and isinstance(published, dict):
        extra = set(recorded) - set(published)
        if not extra <= ROPE_ADDED:
            return False
        if "rope_theta" in extra and recorded["rope_theta"] != config.get("rope_theta"):
            return False
        if "rope_type" in extra and recorded["rope_type"] != published.get("type"):
            return False
        return all(_agrees(recorded[k], published[k], config) for k in published)
    return recorded == published


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_snapshot_fields_equal_the_published_config(model_id):
    name = model_id.replace("/", "--")
    config = json.loads((SNAPSHOTS / f"{name}.config.json").read_text())
    snapshot = yaml.safe_load((SNAPSHOTS / f"{name}.yaml").read_text())
    assert snapshot["source"] == f"hf:{model_id} config.json"
    wrong = {k: (v, config.get(k, "<absent>")) for k, v in snapshot["fields"].items()
             if not _agrees(v, config.get(k, "<absent>"), {**config.get("text_config", {}), **config})}
    assert not wrong, wrong
