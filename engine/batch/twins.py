"""Exact twins: a model whose evaluation inputs equal an earlier model's, up to its identity, is not
evaluated again; its files are the earlier model's with the identity replaced.

Layer: engine.batch. Three pairs of corpus models evaluate to the same numbers (DeepSeek-R1 of
DeepSeek-V3, MiniMax-M2.7 of M2.5, Kimi-K2.7-Code-NVFP4 of K2.6-NVFP4: fine-tunes or re-releases
of one architecture). A family's models run one after the other in one worker
(:mod:`engine.batch.families`), so when the first of a pair (the *leader*) has written its files
into the staging tree, the second (the *follower*) can be written from them.

What decides it, :func:`spec_key` plus the leader's config reads (:func:`matches`). A model's files
are a function of the build's shared inputs (the corpus's tables and components, the GPUs, the
grid, the engine: the same for every model of one build) and of its spec (:class:`ModelSpec`).
The spec's fields split three ways:

* identity (:data:`IDENTITY`: the Hugging Face id, the display name, the notes, and where its file
  is): read by the evaluation only to be copied into the files (the id as ``model_id``; an audit
  of every read of them in engine.deploy, engine.serving, engine.playground and the grid, and
  :func:`_relabelled` refuses a leader whose files hold its display name, notes or slug anywhere, or
  its id anywhere but the ``model_id`` field), except that the sizing block may list models by id
  (:func:`engine.serving.fronts.covers`: in the key);
* the dims' binding texts and the config snapshot, which the walk reads only through
  :meth:`engine.language.evaluate.Walker.config` and ``_config``: the dims stand in the key as the
  values they bind to (under the spec's snapshot and each checkpoint's), and every other field read
  during the leader's whole work was recorded (:mod:`engine.language.config_reads`) and must read
  the same for the follower: the follower's work then reads the same values at every step, so it
  takes the same path and computes the same numbers (the evaluation is deterministic: memos hold
  pure functions of their keys);
* every other field, present or future, known or not: in the key by value (:func:`canon`), file
  positions included; a value of a type :func:`canon` does not know makes the model unshareable
  (it is evaluated), so a new spec field never shares by default.

Invariants: a follower's files are byte-identical to evaluating it alone (tests/test_ident_twelfth_pass.py);
only a whole model (``part="all"``) leads or follows; the memo holds keys, reads and file paths,
never frames, and is bounded (:func:`engine.language.memo.remembered`).
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Hashable

import sympy

from engine.language.errors import Where
from engine.language.memo import remembered

#: The spec fields that name the model and nothing else (:class:`engine.language.ir.ModelSpec`).
IDENTITY = frozenset({"model_id", "display_name", "notes"})
#: The spec fields compared by what they give: the dims by their values, the snapshot by the
#: fields the leader's work read (:func:`matches`).
BY_EFFECT = frozenset({"dims", "snapshot"})
#: The documents a follower takes from its leader, beside its Parquet partitions
#: (engine.batch.parquet_writer.MODEL_PARTITIONS); ``models/`` names the model throughout: evaluated.
DOCUMENTS = ("formulas", "playground")
#: Leaders remembered per process (a chain's models in order: the last few suffice).
LIMIT = 8

_LEADERS: dict = {}      # key -> [Leader, ...]


class Unshareable(Exception):
    """The spec holds a value :func:`canon` cannot compare exactly: the model is evaluated."""


@dataclass(frozen=True)
class Leader:
    """A model evaluated whole in this process: its identity, the config fields its work read
    (path -> outcome), its counts, and the staging tree holding its files."""

    model_id: str
    display_name: str
    notes: str
    reads: dict
    counts: dict
    staging: tuple


def canon(value: Any) -> Hashable:
    """``value`` as a hashable tree that is equal exactly when the values are (types included:
    ``1``, ``1.0`` and ``True`` differ; mappings in their order, with their keys' line numbers).
    A :class:`Where` keeps its line and field, not its file (the spec's own name) or its YAML node.
    Raises :class:`Unshareable` on any other type."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return (type(value).__name__, repr(value))
    if isinstance(value, (tuple, list, frozenset, set)):
        items = [canon(v) for v in value]
        return (type(value).__name__, tuple(sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items))
    if isinstance(value, Where):
        return ("Where", value.line, value.field)
    if isinstance(value, Mapping):
        lines = getattr(value, "line_of", None)
        return (type(value).__name__, getattr(value, "line", None),
                tuple((canon(k), canon(v), lines(k) if lines else None) for k, v in value.items()))
    if isinstance(value, sympy.Basic):
        return ("sympy", sympy.srepr(value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__qualname__,
                tuple((f.name, canon(getattr(value, f.name))) for f in dataclasses.fields(value)))
    raise Unshareable(f"{type(value).__qualname__} is not compared exactly")


def spec_key(corpus, model, grid_path, gpu_root) -> Hashable | None:
    """Everything of ``model`` its work reads but its identity and its config reads (module
    docstring), with what the build reads of it beside (the grid, the GPUs, whether the sizing
    block covers it); None when the spec holds a value not compared exactly."""
    from engine.serving import fronts
    try:
        fields = tuple((f.name, canon(getattr(model, f.name))) for f in dataclasses.fields(model)
                       if f.name not in IDENTITY | BY_EFFECT)
        return (fields, _dims(corpus, model), str(grid_path), str(gpu_root),
                fronts.covers(fronts.load_sizing(grid_path), model.model_id))
    except Exception:       # Unshareable, or dims that do not bind (the evaluation then says why, as ever)
        return None


def _dims(corpus, model) -> Hashable:
    """The dims' names, their lines and the values they bind to under the spec's snapshot and each
    checkpoint's (a checkpoint walks the spec's dims over its own config)."""
    from engine.language import checkpoints
    from engine.language.evaluate import Binding, Walker
    specs = [model] + [checkpoints.variant(model, c) for c in getattr(model, "checkpoints", ())]
    values = tuple(canon(Walker(corpus, spec, Binding("numeric")).model_dims()) for spec in specs)
    return canon(tuple(model.dims)), tuple(model.dims.line_of(n) for n in model.dims), values


def remember(key: Hashable, model, reads: dict, counts: dict, staging: str) -> None:
    """Keep ``model`` as a leader for later models of this process (bounded: :data:`LIMIT` keys)."""
    if key is None:
        return
    leader = Leader(model.model_id, model.display_name, model.notes or "", reads, dict(counts), _build(staging))
    remembered(_LEADERS, key, list, LIMIT).append(leader)


def matches(key: Hashable, corpus, model, staging: str) -> Leader | None:
    """The leader ``model`` follows: one with the same key, in the same staging tree, whose every
    recorded config read reads the same in ``model``'s snapshot (:func:`engine.language.config_reads.outcome`)."""
    from engine.language import config_reads
    from engine.language.evaluate import Binding, Walker
    if key is None or not Path(staging).is_dir():      # (no tree yet: nothing written to follow)
        return None
    reader = Walker(corpus, model, Binding("numeric"))._config
    for leader in _LEADERS.get(key, ()):
        if leader.staging == _build(staging) and leader.model_id != model.model_id and all(
                canon(config_reads.outcome(reader, path)) == canon(found) for path, found in leader.reads.items()):
            return leader
    return None


def _build(staging) -> tuple:
    """Which build a staging tree is: its path and the folder itself (device, inode). A build stages
    into a folder of its own (engine.batch.publish.stage), so a leader of an earlier build in this
    process (other inputs, its files published or gone) is never followed."""
    stat = Path(staging).stat()
    return str(staging), stat.st_dev, stat.st_ino


def follow(leader: Leader, model_id: str, staging: str) -> dict | None:
    """Write ``model_id``'s tables and documents as ``leader``'s with the id replaced; its counts
    (the leader's rows; ``follows``: the leader; ``sizing_seconds`` 0: no sizing step ran). None,
    and nothing written, when a leader's file names it elsewhere than its id field (:func:`_relabelled`)."""
    from engine.batch.parquet_writer import write_parquet
    from engine.language.names import slug
    files = _relabelled(leader, model_id, Path(staging), slug(leader.model_id), slug(model_id))
    if files is None:
        return None
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, str):
            path.write_text(data)
        else:
            frame, options = data
            write_parquet(frame, path, **options)
    return {**leader.counts, "model_id": model_id, "follows": leader.model_id, "sizing_seconds": 0.0}


def _relabelled(leader: Leader, model_id: str, staging: Path, old: str, new: str) -> dict | None:
    """The follower's files (path -> text, or (frame, write options)), or None when any of the
    leader's names its slug, display name or notes, or its id outside the id field."""
    import polars as pl
    from engine.batch.parquet_writer import MODEL_PARTITIONS
    marks = [m for m in (old, leader.display_name, leader.notes) if m]
    out: dict = {}
    for table, options in MODEL_PARTITIONS.items():
        frame = pl.read_parquet(staging / table / f"model={old}" / "part.parquet")
        if not _clean_frame(frame, leader.model_id, marks):
            return None
        out[staging / table / f"model={new}" / "part.parquet"] = (
            frame.with_columns(pl.lit(model_id, dtype=pl.String).alias("model_id")), options)
    for folder in DOCUMENTS:
        text = (staging / folder / f"{old}.json").read_text()
        field, replaced = f'"model_id":{json.dumps(leader.model_id)}', f'"model_id":{json.dumps(model_id)}'
        rest = text.replace(field, "", 1)
        if text.count(field) != 1 or any(m in rest for m in [leader.model_id, *marks]):
            return None
        out[staging / folder / f"{new}.json"] = text.replace(field, replaced)
    return out


def _clean_frame(frame, model_id: str, marks: list[str]) -> bool:
    """Whether ``frame`` names the model only in its ``model_id`` column (every row the id) and
    holds no column of a type this check cannot read."""
    import polars as pl
    if frame.height and not (frame["model_id"] == model_id).all():
        return False
    for name, dtype in frame.schema.items():
        if name == "model_id" or dtype.is_numeric() or dtype == pl.Boolean:
            continue
        if dtype == pl.List(pl.String):
            column = frame[name].explode().drop_nulls()
        elif dtype == pl.String:
            column = frame[name].drop_nulls()
        else:
            return False
        if any(column.str.contains(m, literal=True).any() for m in [model_id, *marks]):
            return False
    return True
