"""Re-price a program's expert all-to-alls as the framework's library moves them (DeepEP).

Layer: engine.deploy. Placement emits each expert dispatch and combine as one ``all_to_all`` step
(every token once per selected expert, at the activation dtype, on the slowest link the EP group
spans) and records its :class:`~engine.deploy.expert_comm.Routing`. :func:`transport` replaces
each such step, under a framework's :class:`~engine.deploy.expert_comm.A2APolicy`, by the link
traffic of :func:`engine.deploy.expert_comm.link_bytes`: one step per link that carries bytes. When
both links do (normal kernels across nodes), the step keeps its uid on the hop its consumers read
last (dispatch: NVLink fan-out after the RDMA hop; combine: the RDMA hop after the NVLink reduce)
and the other hop becomes a step of its own before it (uid ``<uid>~rdma`` or ``<uid>~nvlink``).
The two hops are summed in a phase like any two steps (DeepEP pipelines them; the NVLink hop is
the smaller by the links' ratio). Under the ``allgather`` kernel a step runs the collective of its
direction instead (:data:`~engine.deploy.expert_comm.ALLGATHER_COLLECTIVES`: the dispatch an
all-gather, the combine a reduce-scatter), so a measured table of that collective prices it; its
message (``written``, what the tables key) is the whole buffer, ``ranks x`` the sender's tokens
in the direction's dtype, for both: NCCL's size convention, which the imported tables follow
(H200 ``reduce_scatter-nccl``: 512 MiB at 1,083 us over 8 GPUs is 7/8 x 512 MiB / 1.083 ms =
433 GB/s of NVLink; read as one rank's shard it would be 3.5 TB/s, beyond the link). A program without routed all-to-alls, or a framework without a policy, is returned
unchanged.
"""
from __future__ import annotations

from dataclasses import replace

from engine.deploy.expert_comm import ALLGATHER_COLLECTIVES, A2APolicy, link_bytes
from engine.deploy.device_program import ZERO, Program, Step, step_with

#: (id(program.steps), policy) -> (steps, transported program)
_MEMO: dict[tuple, tuple] = {}

_HOP = {"scale_out": "rdma", "scale_up": "nvlink"}


def fp8_experts(program: Program) -> bool:
    """Whether the routed experts' matmuls run in FP8 (vLLM dispatches FP8 only to block-FP8 experts)."""
    return any(s.role == "experts" and s.compute_dtype == "fp8" and s.flops != 0 for s in program.steps)


def transport(program: Program, policy: A2APolicy | None) -> Program:
    """``program`` with every routed all-to-all priced per link under ``policy`` (see the module doc)."""
    if policy is None or not any(s.routing is not None for s in program.steps):
        return program
    key = (id(program.steps), policy)
    hit = _MEMO.get(key)
    if hit is not None and hit[0] is program.steps:
        return hit[1]
    fp8 = fp8_experts(program)
    steps, layouts = [], dict(program.layouts)
    for step in program.steps:
        if step.routing is None or step.kind != "comm":
            steps.append(step)
            continue
        hops = [(link, b) for link, b in link_bytes(step.routing, policy, program.phase, fp8).items() if b != 0]
        if step.routing.direction == "combine":
            hops.reverse()          # reduce inside the node first, then one copy per node
        if not hops:                # one GPU per node and every expert local: nothing moves
            steps.append(step_with(step, comm_bytes=ZERO))
            continue
        *first, (link, comm) = hops
        inputs = step.inputs
        for hop_link, hop_bytes in first:
            uid = f"{step.uid}~{_HOP[hop_link]}"
            steps.append(step_with(step, uid=uid, name=f"{step.name} {_HOP[hop_link]}", bytes=ZERO, written=ZERO,
                                   out_read=ZERO, comm_bytes=hop_bytes, link=hop_link, **_extent(step, hop_link)))
            layouts[uid] = layouts.get(step.uid, step.layout)
            inputs = (uid,)
        name = f"{step.name} {_HOP[link]}" if first else step.name
        steps.append(step_with(step, **{"name": name, "inputs": inputs, "comm_bytes": comm, "link": link,
                                        **_extent(step, link), **_gathered(step, policy, program.phase, fp8)}))
    out = replace(program, steps=tuple(steps), layouts=layouts)
    if len(_MEMO) > 1024:
        _MEMO.clear()
    _MEMO[key] = (program.steps, out)
    return out


def _gathered(step: Step, policy: A2APolicy, phase: str, fp8: bool) -> dict:
    """Under the ``allgather`` kernel, the collective the step runs and its message per call (the
    whole buffer: module doc); nothing to change under DeepEP's kernels."""
    if policy.kernel(phase) != "allgather":
        return {}
    r = step.routing
    op = ALLGATHER_COLLECTIVES[r.direction]
    return {"collective": op, "name": f"{op}({step.group})",
            "written": r.ranks * r.tokens * r.hidden * policy.bytes_per_element(r.direction, fp8)}


def _extent(step: Step, link: str) -> dict:
    """Ranks and scale-up domains one hop spans (its per-call latency): the RDMA hop the whole EP
    group over its nodes, the NVLink hop one node's GPUs."""
    r = step.routing
    if link == "scale_out":
        return {"ranks": r.ranks, "nodes": r.nodes}
    return {"ranks": max(1, r.ranks // max(r.nodes, 1)), "nodes": 1}
