"""``validate(model)``: run every guard against the model's evidence; verified = no errors.

Layer: engine.verify. The build publishes only verified specs; ``archledger validate`` prints the same
report (text, or ``--json`` with guard, severity, node, message and hint per finding).

A spec that fails to evaluate (a shape error, an unbound dim) cannot be checked further: the
shape guard reports the engine's error and the other guards are marked "not run".
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Any

from engine.language import checkpoints, storage
from engine.language.names import slug as corpus_slug
from engine.language.corpus import Corpus
from engine.language.dtypes import stored_bytes
from engine.language.errors import SpecError
from engine.language.evaluate import Analysis, Binding, walk_model
from engine.verify.evidence import load_evidence, registry
from engine.verify.guards import (CheckpointTable, Context, Finding, SpecFamily, axiom, canonical_names, packing,
                                  schedule, shape, source, structural, weight)
from engine.language.ir import ModelSpec
from engine.verify.manifest import KINDS

#: Guards in the order they run and appear in the guard table.
ORDER = (weight, packing, shape, schedule, structural, axiom, source)


@dataclass(frozen=True, slots=True)
class GuardResult:
    guard: str
    evidence: str
    status: str                      # pass | fail | warn | not run
    findings: tuple[Finding, ...]


@dataclass(frozen=True, slots=True)
class Report:
    model_id: str
    evidence_kind: str               # checkpoint-headers | modeling-code | "" (no manifest)
    evidence_label: str              # "checkpoint headers" / "modeling code" / "config only"
    results: tuple[GuardResult, ...]

    @property
    def findings(self) -> list[Finding]:
        return [f for r in self.results for f in r.findings]

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def verified(self) -> bool:
        return not self.errors

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.model_id, "verified": self.verified, "evidence": self.evidence_label,
                "guards": [{"guard": r.guard, "evidence": r.evidence, "status": r.status,
                            "findings": [f.as_dict() for f in r.findings]} for r in self.results]}


def spec_families(ctx: Context, analysis: Analysis) -> list[SpecFamily]:
    """Every tensor the spec stores, with ``{layer}`` and ``{expert}`` filled in and canonical names,
    one family per stored leaf tensor (names layer-major, then expert)."""
    templates = [(uid, c) for uid, c in analysis.components.items() if c.template]
    out = []
    for t in storage.checkpoint_tensors(analysis, ctx.model, ctx.corpus):
        row = analysis.rows[t.uid]
        layers: list[Any] = [None]
        if "{layer}" in t.key:
            owner = max((c for u, c in templates if t.uid.startswith(u + "/")),
                        key=lambda c: len(c.uid), default=None)
            layers = list(owner.layers) if owner else []
        names = []
        if "{expert}" in t.key:
            experts = [str(e) for e in range(int(row.instances))]
            for layer in layers:
                parts = t.key.replace("{layer}", str(layer)).split("{expert}")
                names += [e.join(parts) for e in experts]
        else:
            names = [t.key.replace("{layer}", str(layer)) for layer in layers]
        names = canonical_names(names, t.key.partition("{")[0], ctx.registry.prefixes)
        shape_ = tuple(int(d) for d in t.shape)
        numel = prod(shape_)
        out.append(SpecFamily(names, t.dtype, shape_, t.uid, t.stack, t.role, t.leaf, t.scheme,
                              numel, stored_bytes(t.dtype, numel)))
    return out


def validate(corpus: Corpus, model: ModelSpec, evaluation=None) -> Report:
    """Run every guard of :data:`ORDER` on ``model`` against its evidence snapshots.

    ``evaluation`` (an :class:`engine.language.api.Evaluation` of this model) saves walking it again."""
    reg = registry(corpus.root)
    evidence = load_evidence(corpus, model)
    kind = evidence.manifest.kind if evidence.manifest else ""
    label = KINDS.get(kind, "config only")
    try:
        if evaluation is not None:
            numeric, symbolic = evaluation.numeric, evaluation.symbolic
        else:
            numeric = walk_model(corpus, model, Binding("numeric"))
            symbolic = walk_model(corpus, model, Binding("symbolic"))
    except SpecError as exc:
        failed = Finding("shape", "error", str(exc.where), exc.problem, exc.hint)
        results = [GuardResult(g.NAME, g.EVIDENCE, "fail" if g is shape else "not run",
                               (failed,) if g is shape else ()) for g in ORDER]
        return Report(model.model_id, kind, label, tuple(results))
    results = [GuardResult(g.NAME, g.evidence(ctx), _status(f), f)
               for g, f, ctx in _run(corpus, model, evidence, reg, numeric, symbolic, ORDER)]
    results += [_checkpoint(corpus, model, c, reg, numeric, symbolic) for c in model.checkpoints]
    return Report(model.model_id, kind, label, tuple(results))


#: The guards a published checkpoint of the spec runs against its own evidence: what its storage
#: changes (the others read the walk and the config fields, equal to the spec's by the
#: architecture check that runs first).
CHECKPOINT_GUARDS = (weight, packing, source)


def _status(findings) -> str:
    severities = {f.severity for f in findings}
    return "fail" if "error" in severities else "warn" if "warning" in severities else "pass"


def _run(corpus, model, evidence, reg, numeric, symbolic, guards):
    """(guard, its findings, the context) for each of ``guards`` on ``model`` and ``evidence``."""
    ctx = Context(corpus, model, evidence, reg, numeric, symbolic)
    ctx.families = spec_families(ctx, numeric)
    m = evidence.manifest
    if m is not None:
        ctx.checkpoint = CheckpointTable(m, reg.prefixes)
        lookup = ctx.checkpoint.index.get
        ctx.hits = [list(map(lookup, f.names)) if m.covers(f.stack) else None for f in ctx.families]
    return [(guard, tuple(guard.check(ctx)), ctx) for guard in guards]


def _checkpoint(corpus, model, ckpt, reg, numeric, symbolic) -> GuardResult:
    """One published checkpoint of ``model`` (``checkpoints:``): its config must be the spec's
    architecture (:func:`engine.language.checkpoints.differences` empty: only storage fields differ),
    its evidence must hold a tensor manifest, and :data:`CHECKPOINT_GUARDS` must pass on the spec
    stored as its quant context says (so the quant context matches the ``quantization_config`` the
    manifest was recorded from, tensor by tensor)."""
    name = f"checkpoint {ckpt.format}"
    where = str(ckpt.where)
    if not ckpt.snapshot.fields:
        found = Finding(name, "error", where, f"{ckpt.model_id}: no config snapshot",
                        f"record it: archledger new {ckpt.model_id} --config PATH --like {model.model_id} --checkpoint")
        return GuardResult(name, f"{ckpt.model_id}: config", "fail", (found,))
    from engine.verify.config_keys import UNSHAPING_KEYS   # fields that say how a file was written, never the architecture
    diffs = checkpoints.differences(model.snapshot.fields, ckpt.snapshot.fields,
                                    ignore=UNSHAPING_KEYS | {"vision_config", "audio_config"})
    if diffs:
        found = Finding(name, "error", where, f"{ckpt.model_id} is not this architecture: {len(diffs)} config "
                        f"field(s) differ, e.g. {diffs[0]}",
                        "only storage fields (quantization_config, dtype) may differ: make it a spec of its own "
                        "(archledger new without --checkpoint)")
        return GuardResult(name, f"{ckpt.model_id}: config", "fail", (found,))
    sub = checkpoints.variant(model, ckpt)
    evidence = load_evidence(corpus, sub)
    if evidence.manifest is None:
        found = Finding(name, "error", where, f"{ckpt.model_id}: no tensor manifest (corpus/snapshots/"
                        f"{corpus_slug(ckpt.model_id)}.tensors.yaml)",
                        f"record it: archledger snapshot {ckpt.model_id} --config PATH --meta, or archledger new --checkpoint")
        return GuardResult(name, f"{ckpt.model_id}: config", "fail", (found,))
    findings = []
    for guard, found, _ in _run(corpus, sub, evidence, reg, numeric, symbolic, CHECKPOINT_GUARDS):
        findings += [Finding(f"{ckpt.format}/{f.guard}", f.severity, f.node, f.message, f.hint) for f in found]
    label = KINDS.get(evidence.manifest.kind, "config only")
    return GuardResult(name, f"{ckpt.model_id}: {label}", _status(findings), tuple(findings))


def render_text(report: Report) -> str:
    """The human-readable report: a guard table, then one line per finding."""
    state = "verified" if report.verified else f"NOT verified ({len(report.errors)} errors)"
    lines = [f"{report.model_id}: {state} against {report.evidence_label}"]
    width = max(len(r.guard) for r in report.results)
    for r in report.results:
        lines.append(f"  {r.guard:<{width}}  {r.status:<7}  {r.evidence}")
    for f in report.findings:
        lines.append("  " + f.one_line())
    return "\n".join(lines)
