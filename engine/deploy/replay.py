"""Placing a phase by replaying another's rows: the placers of one stage placement
(:func:`engine.deploy.planner._placed_stage`) whose decode run repeats what the prefill run did for
every row that places alike in both phases (:class:`_PhasePlacer`), replays a recorded library of
rows across stage configs (:class:`_ReplayPlacer`), and notes what placing one row wrote
(:class:`_Log`, :data:`_WRITES`).

Layer: engine.deploy (on placement; the planner builds these placers, nothing else does).
Invariant: a replayed row leaves the placer exactly as placing it afresh would
(tests/test_struct_speed2.py, tests/test_placement_speed2.py).
"""
from __future__ import annotations

from engine.deploy.parallel import Group, Mesh
from engine.deploy.placement import Placer
from engine.deploy.device_program import Layout, Step


#: Records kept per row uid in a library (engine.deploy.planner._library), the latest first.
_KEPT = 4


class _Log(dict):
    """A dict noting the keys assigned to it (what placing one row wrote)."""

    def __init__(self, *args):
        super().__init__(*args)
        self.log: list = []

    def __setitem__(self, key, value):
        self.log.append(key)
        super().__setitem__(key, value)


#: The placer's state a row's placement writes (besides the steps it appends).
_WRITES = ("out", "layouts", "redist", "stored", "routing_tokens")


def _log_writes(placer: Placer) -> None:
    """Make ``placer``'s :data:`_WRITES` dicts note the keys assigned to them (:class:`_Log`)."""
    for name in _WRITES:
        setattr(placer, name, _Log(getattr(placer, name)))


def _start_row(placer: Placer) -> None:
    """Empty the logs: what follows is one row's placement."""
    for name in _WRITES:
        getattr(placer, name).log = []


def _row_writes(placer: Placer) -> list:
    """What the row placed since :func:`_start_row` wrote: per state dict, its (key, value) pairs."""
    return [(name, [(k, getattr(placer, name)[k]) for k in dict.fromkeys(getattr(placer, name).log)])
            for name in _WRITES]


def _repeat_row(placer: Placer, steps: list, writes: list) -> None:
    """Place a recorded row again: append its steps and make its writes (not logged)."""
    placer.steps.extend(steps)
    for name, items in writes:
        target = getattr(placer, name)
        for key, value in items:
            dict.__setitem__(target, key, value)


def _same_input(a: Step, b: Step) -> bool:
    """Whether a row reading step ``a`` places as it did reading ``b``: every field a placement rule
    reads of an input (its uid names the collectives after it; role and component label them)."""
    return a is b or (a.uid == b.uid and a.layout == b.layout and a.out == b.out and a.out_read == b.out_read
                      and a.kind == b.kind and a.role == b.role and a.component == b.component
                      and a.component_uid == b.component_uid and a.repeat == b.repeat and a.last_token == b.last_token)


class _ReplayPlacer(Placer):
    """A :class:`Placer` that records what placing each row did (``record``: uid -> (row, its input
    steps, the steps it appended, what it wrote, its inputs' consumer counts)) and repeats a recorded
    row where the row is equal (the same object, or another walk's equal row), its inputs place alike
    (:func:`_same_input`) and have as
    many consumers (place_axis_map reads that): a row's placement is a function of those, the mesh
    and the decisions."""

    record: dict | None = None
    reuse: dict | None = None

    def __init__(self, *args):
        super().__init__(*args)
        _log_writes(self)

    def place(self, row) -> None:
        inputs = [self.producer(row, i) for i in range(len(row.inputs))]
        counts = tuple(self.consumers.get(s.uid) for s in inputs)      # what a rule reads of them
        hit = self.reuse.get(row.uid) if self.reuse is not None else None
        if hit is not None and (hit[0] is row or hit[0] == row) and hit[4] == counts and len(inputs) == len(hit[1]) \
                and all(_same_input(a, b) for a, b in zip(inputs, hit[1])):
            _repeat_row(self, hit[2], hit[3])
            if self.record is not None:
                self.record[row.uid] = hit
            return
        start = len(self.steps)
        _start_row(self)
        super().place(row)
        if self.record is not None:
            self.record[row.uid] = (row, inputs, self.steps[start:], _row_writes(self), counts)


class _PhasePlacer(Placer):
    """A :class:`Placer` of one stage placement (:func:`_placed_stage`) whose decode run repeats
    what the prefill run (``prefill``, the same analysis, mesh and decisions) did for every row
    that places alike in both phases: most rows are the same objects in both (decode variants are
    rows of their own) and, where nothing upstream differs, read equal inputs.

    Placing a row reads the phase in three places only: the stack inputs (decode does not split
    ``seq``: they are inputs, compared), a recurrent state's traffic and the logits' ``last_token``
    (:meth:`_phase_free` keeps those rows out). Besides its inputs and their consumer counts (as
    :class:`_ReplayPlacer` compares) it reads two pieces of the placer's state: the reshards earlier
    rows made (``redist``: a row reuses one instead of inserting its collective) and the routing
    tokens of the dispatches before it (``instances``). The prefill run records, per row, the
    steps it appended, what it wrote and those reads; the decode run repeats a row only where its
    inputs place alike, every reshard it reused is the same object here, none it made exists yet,
    and the routing tokens are equal. The repeated steps are the prefill's objects (steps are
    immutable; their compiled functions are then shared too).

    Across stage configs (``library``, :func:`_library`: other configs' records of the same phase,
    binding, options and stack): a row not repeated so is repeated from another config's record
    where that row places alike here (:meth:`_repeats` with ``across``: the same checks, the inputs strictly
    equal, and the same answers from this mesh to the questions the row asked that one, which a
    :class:`_LoggedMesh` records). Configs of one TP degree place most rows alike (tp8 and tp8-ep8
    differ in the routed experts and what follows them, tp8 and tp8-dp_attn8 in attention)."""

    def __init__(self, *args, prefill: "_PhasePlacer | None" = None, library: dict | None = None):
        super().__init__(*args)
        self.reuse = prefill.record if prefill is not None else None
        self.record: dict | None = {} if self.phase == "prefill" else None
        self.library = library if isinstance(self.mesh, _LoggedMesh) else None
        if self.record is not None or self.library is not None:
            _log_writes(self)
        self._reads: list | None = None       # (redist key, step) reused by the row being recorded
        self._routing: dict | None = None     # the routing tokens it read

    def _phase_free(self, row) -> bool:
        """Whether placing ``row`` never reads the phase (beyond its inputs)."""
        return row.role != "lm_head" and self.state_caches().get(row.uid.removesuffix("@decode")) is None

    def reshard(self, source: Step, target: Layout, consumer) -> Step:
        if self._reads is not None and source.layout != target:
            key = (source.uid, target)
            found = self.redist.get(key)
            if found is not None and key not in self.redist.log:     # made by an earlier row
                self._reads.append((key, found))
        return super().reshard(source, target, consumer)

    def instances(self, row):
        if self._reads is not None:
            self._routing = dict(self.routing_tokens)
        return super().instances(row)

    def place(self, row) -> None:
        inputs = None
        if self.reuse is not None:
            hit = self.reuse.get(row.uid)
            if hit is not None and hit[0] is row:
                inputs = [self.producer(row, i) for i in range(len(row.inputs))]
                if self._repeats(hit, inputs):
                    _repeat_row(self, hit[3], hit[4])
                    return
        if self.library is None and (self.record is None or not self._phase_free(row)):
            super().place(row)
            return
        if inputs is None:
            inputs = [self.producer(row, i) for i in range(len(row.inputs))]
        counts = tuple(self.consumers.get(s.uid) for s in inputs)
        if self.library is not None:
            for hit in self.library.get(row.uid, ()):
                if hit[0] is row and self._repeats(hit, inputs, across=True):
                    _repeat_row(self, hit[3], hit[4])
                    if self.record is not None and self._phase_free(row):
                        self.record[row.uid] = hit
                    return
        start = len(self.steps)
        _start_row(self)
        self._reads, self._routing = [], None
        asked = None
        if self.library is not None:
            asked = self.mesh.log = []
        super().place(row)
        if asked is not None:
            self.mesh.log = None
        writes = _row_writes(self)
        # row uid -> (row, input steps, their consumer counts, steps appended, writes, reshards made,
        # reshards reused, routing tokens read or None, the mesh's answers (method, arguments, answer))
        hit = (row, inputs, counts, self.steps[start:], writes, tuple(self.redist.log), self._reads, self._routing,
               asked)
        self._reads = self._routing = None
        if self.record is not None and self._phase_free(row):
            self.record[row.uid] = hit
        if self.library is not None:
            kept = self.library.setdefault(row.uid, [])
            kept.insert(0, hit)          # the latest first: the configs nearest this one come in a row
            del kept[_KEPT:]

    def _repeats(self, hit: tuple, inputs: list[Step], across: bool = False) -> bool:
        """Whether the recorded prefill row ``hit`` places here as it did there (class doc): the
        inputs' consumer counts equal, the inputs placed alike, every reshard it reused the same
        object here, none it made existing yet, and the routing tokens equal. ``across``: ``hit``
        is another stage config's (the same model, binding, options, TP degree and CP kind:
        :func:`_library`), so the inputs must also be equal down to their groups' names and
        expressions (:func:`_strict`: groups of equal ranks compare equal whatever their names, and
        another mesh names them otherwise), and every question the row asked of that mesh must get
        the same answer from this one. A row's placement is a function of those (besides what the
        library's key holds the same), so it places as there: its steps and writes are that placement's."""
        _, recorded, counts, _, _, made, reused, routing, asked = hit
        same = (lambda a, b: a is b or (_same_input(a, b) and _strict(a.layout, b.layout))) if across else _same_input
        return counts == tuple(self.consumers.get(s.uid) for s in inputs) and len(recorded) == len(inputs) and \
            all(same(a, b) for a, b in zip(inputs, recorded)) and \
            all(self.redist.get(key) is step for key, step in reused) and \
            not any(key in self.redist for key in made) and \
            (routing is None or routing == self.routing_tokens) and \
            (not across or all(_strict(method(self.mesh, *args), answer) for method, args, answer in asked))


class _LoggedMesh(Mesh):
    """A :class:`Mesh` that, while ``log`` is a list, appends to it every question a placement rule
    asks of it (method, arguments, answer): what :meth:`_PhasePlacer._repeats` asks another
    mesh again. Nested questions (``extent`` asks ``canonical``) are not logged separately."""

    log: list | None = None

    def _asked(self, method, *args):
        log, self.log = self.log, None
        try:
            answer = method(self, *args)
        finally:
            self.log = log
        if log is not None:
            log.append((method, args, answer))
        return answer

    def world_group(self, world: str, region: str):
        return self._asked(Mesh.world_group, world, region)

    def canonical(self, groups):
        return self._asked(Mesh.canonical, tuple(groups))

    def span(self, groups) -> int:
        return self._asked(Mesh.span, tuple(groups))

    def extent(self, groups) -> dict[str, int]:
        return self._asked(Mesh.extent, tuple(groups))

    def link(self, groups) -> str:
        return self._asked(Mesh.link, tuple(groups))


def _strict(a, b) -> bool:
    """``a == b``, with every :class:`~engine.deploy.parallel.Group` inside (in tuples and layouts)
    also of the same name and expression: Group equality compares ranks only (``ep`` and ``tp``
    over the same GPUs are equal), but a step names its groups, and formulas hold their degrees."""
    if a is b:
        return True
    if isinstance(a, Group):
        return isinstance(b, Group) and a == b and a.name == b.name and a.expr == b.expr
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(_strict(x, y) for x, y in zip(a, b))
    if isinstance(a, Layout):
        return isinstance(b, Layout) and _strict(a.shards, b.shards) and _strict(a.partial, b.partial)
    return type(a) is type(b) and a == b
