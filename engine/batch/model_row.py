"""models.parquet's row of one evaluated model, and the labels the pages group models by.

Layer: engine.batch. Everything here reads one :class:`engine.language.api.Evaluation`; nothing is
evaluated again (the numbers are the walk's).
"""
from __future__ import annotations

from engine.batch import landscape
from engine.batch.export import KV_LENGTHS
from engine.language import kv
from engine.language.api import Evaluation

def slug(model_id: str) -> str:
    return model_id.replace("/", "--")


# -- one model (runs in a worker process) ----------------------------------------------------------

def attention_kinds(ev: Evaluation) -> list[str]:
    """The main stack's attention components, ``+window`` for sliding-window instances (one rule with
    :func:`attention_label`'s ``sliding``: engine.batch.landscape.all_windowed)."""
    return landscape.attention_kinds(ev)


def attention_label(ev: Evaluation) -> str:
    """The mixers of the main stack's layer plans, as one label ("gdn + gqa", "mla", "gqa + sliding").

    Each attention-role component instance (one per layer template) contributes its component's
    ``label`` (corpus YAML), or ``sliding`` when every cache it keeps is window-capped. Order:
    instances with a recurrent state first, then those whose cache grows with context, then the
    sliding ones, each by first layer; a label appears once."""
    model, num = ev.model, ev.numeric
    found: dict[str, tuple] = {}
    for uid, row in num.components.items():
        if row.role != "attention" or row.stack != "main":
            continue
        mine = [c for c in num.caches if c.node_uid.startswith(uid + "/")]
        if any(kv.is_recurrent(c, num) for c in mine):
            rank, label = 0, None
        elif landscape.all_windowed(ev, uid):
            rank, label = 2, "sliding"
        else:
            rank, label = 1, None
        if label is None:
            label = ev.corpus.component_for(model, row.component, model.where).label
        key = (rank, _first_layer(num, uid))
        found[label] = min(found.get(label, key), key)
    return " + ".join(sorted(found, key=lambda k: found[k]))


def _first_layer(num, uid: str) -> int:
    """The first layer index of the layer template a component instance sits in (0 outside one)."""
    while uid:
        row = num.components.get(uid)
        if row is not None and row.layers:
            return min(row.layers)
        uid = uid.rpartition("/")[0]
    return 0


def kv_split(ev: Evaluation, lengths) -> dict:
    """The two parts of a request's cache (BF16 KV): the flat state bytes, and the growing part at
    each length. Exact integers from the spec's formulas (:func:`engine.language.kv.bytes_per_request`)."""
    state = kv.bytes_per_request(ev.numeric, 1, part="state")      # a state holds no context term
    growing = [int(kv.bytes_per_request(ev.numeric, int(n), part="growing")) for n in lengths]
    return {"kv_state_bytes": int(state), "kv_context_lengths": [int(n) for n in lengths],
            "kv_growing_bytes_per_request": growing}


def model_row(ev: Evaluation, spec_hash: str = "", verification: dict | None = None) -> dict:
    """One models.parquet row, read from the same overview ``archledger show`` prints."""
    overview = ev.overview()
    value = {key: int(q.value) for key, q in overview.items() if not isinstance(q, dict)}
    extra = sum(value[f"params_{stack}"] for stack in ev.numeric.stacks if stack != "main")
    return {
        "model_id": ev.model.model_id, "family": ev.model.family, "model_type": ev.model.model_type,
        "spec_hash": spec_hash, "verified": bool(verification and verification["verified"]),
        "verified_against": (verification or {}).get("evidence", ""),
        "params_total": value["params_total"], "params_active": value["params_active"],
        "params_embedding": value["params_embedding"], "params_extra_stacks": extra,
        "checkpoint_bytes": value["checkpoint_bytes"], "checkpoint_tensors": value["checkpoint_tensors"],
        "kv_bytes_per_token": value["kv_bytes_per_token_growing"], "kv_fixed_bytes": value["kv_fixed_bytes"],
        "max_context": value["max_context"], "n_layers": value["n_layers"],
        "attention_kinds": attention_kinds(ev), "attention_label": attention_label(ev),
        **kv_split(ev, KV_LENGTHS),     # the lengths of the model page's curve (engine.batch.export)
        "traits": landscape.traits(ev),
        **weight_format_columns(ev),
        **landscape.lineage_columns(ev.model.model_id, ev.model.family, landscape.load_lineage(ev.corpus.root)),
    }


def _with_formats(row: dict) -> dict:
    """A models.parquet row as this build writes it: one written before the weight_format* columns
    (a subset build carries such rows, stale) had one published format, its own storage."""
    if "weight_formats" in row:
        return row
    return {**row, "weight_formats": ["checkpoint"], "weight_format_models": [row["model_id"]],
            "weight_format_bytes": [row["checkpoint_bytes"]], "weight_format_tensors": [row["checkpoint_tensors"]]}


def weight_format_columns(ev: Evaluation) -> dict:
    """models.parquet's weight_format* columns: each published format's name, id, bytes, tensors."""
    formats = ev.weight_formats()
    return {"weight_formats": [f["format"] for f in formats], "weight_format_models": [f["model_id"] for f in formats],
            "weight_format_bytes": [int(f["bytes"].value) for f in formats],
            "weight_format_tensors": [int(f["tensors"].value) for f in formats]}
