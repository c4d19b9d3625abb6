"""Structure graphs from a model document: one drawing per level (stack, block, component).

Layer: site_builder. A level's nodes are its direct children — sub-components (drillable) and
primitive ops — and an edge joins two children when an op inside one reads an op inside the other.
Edges carry the producer's output axes. Nothing is computed beyond this regrouping of the walk's
own rows and components.

A layer stack is drawn as the sequence it is: the stack's inputs -> its layer groups in layer order
-> what reads the stack's output (the final norm, the head), following the document's
``layer_plan`` (engine/batch/layer_plan.py): one box per run of a template ("x3" when the run is
longer than a layer; a template that recurs later gets a box per recurrence, id ``<group>#<n>``)
and, for a repeated period, a ``kind: repeat`` edge from its last box back to its first, labelled
with the repeat count and the layers it spans. The walk's own edges into and out of the groups
(each group read the stack's input; only the last walked fed the output) are replaced by that chain.
"""
from __future__ import annotations

from typing import Any

def child_of(uid: str, parent: str) -> str | None:
    """The direct child of ``parent`` that contains ``uid`` (the uid itself for a direct op)."""
    if not uid.startswith(parent + "/"):
        return None
    rest = uid[len(parent) + 1:]
    return parent + "/" + rest.split("/", 1)[0]


def level_graph(doc: dict[str, Any], parent: str, phase: str = "prefill") -> dict[str, Any]:
    """The graph of ``parent``'s children in ``phase`` (uids of components/ops as node ids)."""
    comps = {c["uid"]: c for c in doc["components"]}
    caches = {c["node"]: c for c in doc["caches"]}
    ops = [o for o in doc["ops"] if phase in o["phases"]]
    nodes: dict[str, dict] = {}
    for op in ops:
        child = child_of(op["uid"], parent)
        if child is None or child in nodes:
            continue
        if child in comps:
            c = comps[child]
            badge = f"x{c['repeat']['value']}" if c["repeat"]["value"] != 1 else ""
            if c["instances"]["value"] != 1:
                badge = f"{c['instances']['value']} experts, {c['active']['value']} active"
            nodes[child] = {"id": child, "label": child.rsplit("/", 1)[-1], "kind": "component",
                            "detail": c["component"] + (f" [{c['template']}]" if c["template"] else ""),
                            "badge": badge, "data": {"uid": child}}
        else:
            kind = "cache" if op["op"] == "kv_cache" else "op"
            badge = ""
            if child in caches:   # what the cache writes per token (and every later step reads back)
                c = caches[child]
                if c["growth"] == "state":   # a recurrent state: fixed per request, rewritten each step
                    badge = (f"keeps {c['layer_bytes_per_token']['value']} B per request ({c['dtype']} state), "
                             "read and written each step")
                else:
                    badge = f"writes {c['layer_bytes_per_token']['value']} B/token ({c['growth']}), read back each step"
            nodes[child] = {"id": child, "label": op["name"], "kind": kind,
                            "detail": f"{op['op']}  [{', '.join(op['out_shape'])}]", "badge": badge,
                            "data": {"uid": child}}
    edges, seen = [], set()
    by_uid = {o["uid"]: o for o in doc["ops"]}
    for op in ops:
        dst = child_of(op["uid"], parent)
        if dst is None:
            continue
        for src_uid in ([] if op["op"] == "stream_read" else op["inputs"]):   # streams: drawn below
            src = child_of(src_uid, parent)
            if src is None:        # from outside this level: an input of the component
                src = "in:" + src_uid.rsplit("/", 1)[-1] if ":" not in src_uid else "in:" + src_uid.split(":")[-1]
                if src not in nodes:
                    nodes[src] = {"id": src, "label": src[3:], "kind": "input", "detail": "", "badge": "",
                                  "data": {}}
            if src == dst or (src, dst) in seen:
                continue
            seen.add((src, dst))
            producer = by_uid.get(src_uid)
            label = f"[{', '.join(producer['out_shape'])}]" if producer else ""
            edges.append({"src": src, "dst": dst, "label": label})
    for stream in doc.get("streams", []):   # cross-layer edges: producing group -> reading group
        for e in stream["edges"]:
            src, dst = child_of(e["src"], parent), child_of(e["dst"], parent)
            if src is None and ":" in e["src"] and "in:" + e["src"].split(":")[-1] in nodes:
                src = "in:" + e["src"].split(":")[-1]   # a stack input (DeepSeek-V4's token ids)
            if src in nodes and dst in nodes and src != dst:
                edges.append({"src": src, "dst": dst, "kind": "stream",
                              "label": f"stream {stream['name']} (layer{'s' if e['count'] > 1 else ''} {e['layers']})"})
            elif src in nodes and src == dst:   # a group that feeds its own later layers
                nodes[src]["badge"] = (nodes[src]["badge"] + " " if nodes[src]["badge"] else "") + \
                    f"stream {stream['name']} to later layers"
    for plan in doc.get("layer_plan", []):
        nodes, edges = _chain(plan, nodes, edges)
    return {"nodes": list(nodes.values()), "edges": edges}


def _chain(plan: dict, nodes: dict[str, dict], edges: list[dict]) -> tuple[dict[str, dict], list[dict]]:
    """``nodes`` and ``edges`` with the layer groups of ``plan`` drawn as one chain in layer order
    (see the module doc); unchanged when the groups are not drawn at this level."""
    groups = {r["group"] for seg in plan["segments"] for r in seg["runs"]}
    if not groups <= nodes.keys():
        return nodes, edges
    boxes, repeats, seen = [], [], {}
    for seg in plan["segments"]:
        first = len(boxes)
        for run in seg["runs"]:
            group = run["group"]
            seen[group] = seen.get(group, 0) + 1
            box = group if seen[group] == 1 else f"{group}#{seen[group]}"
            node = nodes[group]
            detail = node["detail"] + (f", {seg['span']}" if seg["times"] == 1 else "")
            boxes.append({**node, "id": box, "badge": f"x{run['count']}" if run["count"] > 1 else "",
                          "detail": detail})      # its data keeps the group's uid: every box links there
        if seg["times"] > 1:
            repeats.append({"src": boxes[-1]["id"], "dst": boxes[first]["id"], "kind": "repeat",
                            "label": f"x{seg['times']}, {seg['span']}"})
    into = [e for e in edges if e["dst"] in groups and e["src"] not in groups and e.get("kind") != "stream"]
    out_of = [e for e in edges if e["src"] in groups and e["dst"] not in groups and e.get("kind") != "stream"]
    carried = (out_of or into or [{"label": ""}])[0]["label"]
    chained, pairs = [], set()
    for e in edges:
        if e.get("kind") != "stream" and (e["src"] in groups or e["dst"] in groups):
            if e in into:
                e = {**e, "dst": boxes[0]["id"]}
            elif e in out_of:
                e = {**e, "src": boxes[-1]["id"]}
            else:
                continue                  # group to group: the chain below stands for it
            if (e["src"], e["dst"]) in pairs:
                continue
            pairs.add((e["src"], e["dst"]))
        chained.append(e)
    chained += [{"src": a["id"], "dst": b["id"], "label": carried} for a, b in zip(boxes, boxes[1:])]
    out: dict[str, dict] = {}
    for nid, node in nodes.items():       # the boxes where the first group was
        if nid not in groups:
            out[nid] = node
        elif boxes[0]["id"] not in out:
            out.update((b["id"], b) for b in boxes)
    return out, chained + repeats


def levels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every drawable level, outermost first: stacks, then components that have children."""
    comps = doc["components"]
    stacks = [c for c in comps if c["parent"] == ""]
    out = []
    for stack in stacks:
        out.append({"uid": stack["uid"], "title": f"stack {stack['uid']}", "component": stack["component"],
                    "depth": 0})
    for c in comps:
        if c["parent"]:
            out.append({"uid": c["uid"], "title": c["uid"], "component": c["component"],
                        "depth": c["uid"].count("/")})
    return out
