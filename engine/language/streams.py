"""Streams: the values that cross layers of a layer stack, resolved from the walk's records.

Layer: engine.language. The walk (engine.language.evaluate) records, per layer group of a stack, which nodes publish
an internal stream (``stream_out``) and which ``reads`` nodes take a stream. This module holds the
rules that turn those records into the :class:`StreamRow` table:

* internal stream: a reader at layer i takes the value of the latest layer j < i that publishes
  it (one publishing node per template; no earlier publisher is an error);
* append stream: elements are archived from the carried stream after/before the layers a
  condition selects, or come ``count`` at once from a stack node; a reader at layer i sees the
  elements archived before it. ``each`` hands the k-th reading layer element k; ``all`` and
  ``concat`` give the whole visible history, so layers are grouped by its length;
* carried stream: every layer's input and output (the residual line).

Invariant: a :class:`StreamRow` lists every (producer layer, reader layer) pair, so pipeline
accounting (:func:`stage_hops`) and the model page never re-derive the dataflow.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from engine.language.errors import SpecError, Where
from engine.language.ir import StreamSpec


@dataclass(frozen=True, slots=True)
class StreamRow:
    """One declared stream of a layer stack, with its resolved dataflow.

    ``producers``: (layer, node uid) per publication (internal), per archived element (append:
    the carried stream's layer boundary, or the stack node), or per layer (carried).
    ``pairs``: (producer layer, reader layer, reader node uid); a producer layer of -1 means the
    value comes from before the stack (the stack's input or a stack node).
    """

    uid: str
    name: str
    kind: str
    stack: str
    src: str
    where: Where
    take: tuple[str, ...] = ()
    producers: tuple[tuple[int, str], ...] = ()
    readers: tuple[tuple[int, str], ...] = ()
    pairs: tuple[tuple[int, int, str], ...] = ()
    #: the reads nodes' value uid per reader node (the tensor a pipeline boundary sends)
    value_uids: tuple[str, ...] = field(default=())


def archive_points(spec: StreamSpec, n_layers: int, hit) -> list[float]:
    """Positions of an append stream's elements on the layer axis: an element archived after
    layer j sits at j + 0.5, before layer j at j - 0.5, a stack node's elements at -1."""
    if spec.after is None and spec.before is None:   # a stack node's elements (count, default 1)
        return [-1.0] * (int(hit(spec.count, None)) if spec.count is not None else 1)
    key = "after" if spec.after is not None else "before"
    condition = spec.after if spec.after is not None else spec.before
    offset = 0.5 if key == "after" else -0.5
    return [j + offset for j in range(n_layers) if hit(condition, j)]


def visible(points: list[float], layer: int) -> int:
    """Elements a reader at ``layer`` sees: those archived before it runs."""
    return sum(1 for p in points if p < layer)


def latest_producer(publications: list[tuple[int, str]], layer: int) -> tuple[int, str] | None:
    """The publication an internal-stream reader at ``layer`` takes: the latest one before it."""
    before = [p for p in publications if p[0] < layer]
    return max(before) if before else None


def resolve_internal(spec: StreamSpec, uid: str, stack: str, publications: list[tuple[int, str]],
                     readers: list[tuple[list[int], str, str, Where]], template_of) -> StreamRow:
    """Pair every reading layer with its producer; a reader with none is a :class:`SpecError`."""
    pairs = []
    for layers, node_uid, _take, where in readers:
        for layer in layers:
            found = latest_producer(publications, layer)
            if found is None:
                raise SpecError(where, f"layer {layer} ({template_of(layer)}) reads stream {spec.name!r} "
                                "but no earlier layer publishes it",
                                f"publish it with `stream_out: {spec.name}` on a node of an earlier layer, "
                                "or switch this reader off for that layer (`when:` on an option)")
            pairs.append((found[0], layer, node_uid))
    return StreamRow(uid, spec.name, spec.kind, stack, spec.src, spec.where, ("value",) if readers else (),
                     tuple(sorted(publications)), tuple(sorted((l, u) for ls, u, _, _ in readers for l in ls)),
                     tuple(sorted(pairs)), tuple(dict.fromkeys(u for _, u, _, _ in readers)))


def stage_of(layer: int, pp: int, n_layers: int) -> int:
    """The pipeline stage holding ``layer`` (layers go to stages in order, evenly)."""
    return min(pp - 1, max(0, layer) * pp // n_layers)


def stage_hops(row: StreamRow, pp: int, n_layers: int) -> int:
    """Stage boundaries the stream's values cross: each (value, boundary) once, however many later
    layers read that value beyond it. A value made before the stack starts on stage 0."""
    crossed = set()
    for producer, reader, _ in row.pairs:
        a = 0 if producer < 0 else stage_of(int(producer), pp, n_layers)
        crossed.update((producer, b) for b in range(a, stage_of(reader, pp, n_layers)))
    return len(crossed)
