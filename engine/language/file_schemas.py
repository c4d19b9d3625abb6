"""The schema of every corpus and GPU file kind (engine.language.schema's nodes), one constant per kind.

Layer: engine.language. The loaders pass these to :func:`engine.language.yamlio.load_yaml` (through
:class:`engine.language.reader.Reader`), so every file is checked here for the kind of each value, and
each hardware, link, collective and contract figure for a physical range, before a loader reads it.
What a schema cannot say (a name that must exist elsewhere, a rule between fields) stays in the
loader that knows it.

The ranges are what a real part or deployment can be, with room to spare, so a typo of orders of
magnitude (an HBM bandwidth of 1e-300 TB/s, a collective latency of 1e30 µs) stops the build
instead of being published: every GPU of gpus/ and of tests/reference/gpus.md (A100 to Rubin and
MI355X) lies well inside them (tests/test_schema.py checks the reference table against them).
"""
from __future__ import annotations

from engine.language.schema import (Anything, Bool, Expr, Int, Lazy, ListOf, Mapping, MapOf, Node, Null, Number, OneOf,
                                Str, req)
from engine.language.symbols import LENGTH, SCENARIO_DIMS

# -- shared pieces ----------------------------------------------------------------------------------

NAMES = OneOf("write `name` or `[name, name]`", options=(Str(), ListOf(item=Str())))
TEXT = Str("write text (quote it when it holds `: `, `#` or starts with a symbol)")
SOURCE = Str("where the figure comes from (code, log, datasheet or page)", nonempty=True)
#: A size of the model: fixed by the spec and its config, never by the scenario (a dim bound to
#: ``seq`` would be a formula where every consumer expects a number).
SIZE = Expr("write e.g. 4096 or 'config.hidden_size // config.num_attention_heads'",
            forbid=SCENARIO_DIMS + (LENGTH,))
#: Most tokens of one prompt or context anywhere (engine.deploy.MAX_TOKENS: 2^24).
MAX_TOKENS = 1 << 24
#: Most requests of one batch anywhere (engine.deploy.MAX_BATCH: 2^20).
MAX_BATCH = 1 << 20

# -- model specs (corpus/models/*.yaml, contract variants) --------------------------------------------

FILL: Node = OneOf(
    "write a component name, or `{component: <name>, with: {...}, dims: {...}, slots: {...}}`",
    options=(Str(), Mapping(fields={
        "component": req(Str("the library component that fills the slot")),
        "with": MapOf("the component's options, `option: value`"),
        "dims": MapOf("dims the component reads, `dim: size`", value=SIZE),
        "modules": MapOf("checkpoint module renames, `node: module`", value=Str()),
        "slots": MapOf("the fills of the component's own slots, `slot: fill`", value=Lazy(get=lambda: FILL)),
        "module": Str("the checkpoint module path segment of the component"),
    })))

#: A condition on ``layer`` (or an option's value), or a plain true/false.
CONDITION = OneOf('write a condition on the options or on `layer`, e.g. `when: qk_norm` or when: "layer % 2 == 0"',
                  options=(Str(), Bool()), says="a condition (text) or true or false")
#: A count of a node (experts, layers): fixed by the model, like a size.
COUNT = Expr("write a count, e.g. `n_layers` or `n_experts`", forbid=SCENARIO_DIMS + (LENGTH,))
EXCERPT = Str('quote a line of the forward source, e.g. src: "hidden_states = residual + hidden_states"',
              nonempty=True)

STREAM = Mapping('write `{carries: true, src: "<the forward line>"}` or `{from: <stream>, src: ...}`', fields={
    "carries": Bool("whether this is the residual line the layers carry"),
    "from": Str("the carried stream or stack node it archives"),
    "after": Str("a condition on `layer`"), "before": Str("a condition on `layer`"),
    "count": COUNT, "src": req(EXCERPT), "doc": TEXT})

NODE = Mapping("a graph node, e.g. `q_proj: {op: linear, in: x, dims: {in: hidden, out: d_q}}`", fields={
    "op": Str("a primitive op (engine/language/ops/)"),
    "component": Str("a library component"),
    "slot": Str("a slot the model fills"),
    "repeat": COUNT,
    "reads": Str("a stream declared under the layer stack's streams:"),
    "in": NAMES,
    "dims": MapOf("the node's dims, `dim: expression`"),
    "attrs": MapOf("the op's attributes, `attr: value`"),
    "with": MapOf("the component's options, `option: value`"),
    "when": CONDITION,
    "instances": COUNT,
    "active": COUNT,
    "stacked": OneOf("write true, false or an option (`$stacked`)", options=(Bool(), Str())),
    "role": Str("a role of corpus/roles.yaml"),
    "module": Str("the checkpoint module path segment (\"\" for none)"),
    "modules": MapOf("checkpoint module renames, `node: module`", value=Str()),
    "weight_axes": MapOf("the parallel world of each weight axis, `axis: tp`", value=Str()),
    "schedule": OneOf("write a list of `{template, when}` rules or `{by: config.<field>, map: {value: template}}`",
                      options=(ListOf(item=Mapping("write `{template: <name>, when: \"<condition>\"}`", fields={
                          "template": req(Str("a layer template")), "when": CONDITION})),
                               Mapping("write `{by: config.<field>, map: {value: template}}`", fields={
                                   "by": req(Str("a config list, e.g. config.layer_types")),
                                   "map": req(MapOf("each value's template, `value: template`", value=Str()))}))),
    "template": Str("a layer template"),
    "index_from": Str(),
    "shares": Str("the node whose weights it shares"),
    "doc": TEXT,
    "src": EXCERPT,
    "stream_out": Str("a stream declared under the layer stack's streams:"),
    "take": Str("value, each, all or concat"),
    "streams": MapOf("the streams a layer stack carries, `hidden: {carries: true, src: ...}`", value=STREAM),
})
GRAPH = MapOf("nodes by name: `name: {op: ..., in: ...}`", value=NODE)

STACK = Mapping("a stack: `{inputs: {tokens: [batch, seq]}, graph: {...}}`", fields={
    "inputs": req(MapOf("the stack's inputs and their axes, e.g. `{tokens: [batch, seq]}`",
                        value=ListOf("the input's axes, e.g. `[batch, seq]`", item=OneOf(options=(Str(), Int()))))),
    "graph": req(GRAPH),
    "doc": TEXT,
})

QUANT_CONTEXT = Mapping("the storage of the weights: `{default: bf16, overrides: {experts: mxfp4}}`", fields={
    "default": req(Str("a quant scheme of corpus/quant/")),
    "overrides": MapOf("a scheme per role (or role.node), `role: scheme`",
                       value=Str("a quant scheme of corpus/quant/")),
})

#: One more published checkpoint of the same model (docs/spec-language.md, "Checkpoints").
CHECKPOINT = Mapping("a published checkpoint: `{model: org/name, format: fp8, quant_context: {default: ...}}`", fields={
    "model": req(Str("the checkpoint's Hugging Face id, `org/name`")),
    "format": req(Str("its weight-format name, lower case, e.g. `fp8` or `nvfp4`")),
    "quant_context": req(QUANT_CONTEXT),
    "notes": TEXT,
})

_DEFAULT_HINT = ('write `{value: <the default: an integer, text or true/false>, '
                 'src: "<modeling file>: <the line that sets it>"}`')
MODEL = Mapping("a model spec", fields={
    "model": req(Str("the Hugging Face id, `org/name`")),
    "model_type": req(Str("the config's model_type")),
    "family": req(Str("the model family, e.g. `family: Qwen3` (corpus/lineage.yaml orders families)")),
    "name": Str("the display name, e.g. `name: Qwen3 8B`"),
    "notes": TEXT,
    "unverified": Str("why no evidence can verify this spec, e.g. `unverified: transformers 5.25.0 has no "
                      "mimo model (remote code)`; the build lists it instead of publishing it"),
    "snapshot": Str("the snapshot's base name under corpus/snapshots/"),
    "dims": req(MapOf("the model's dims, `dim: size`", value=SIZE)),
    "max_context": req(SIZE),
    "slots": MapOf("the model-wide slot fills, `slot: component` or `slot: {component: ...}`", value=FILL),
    "templates": MapOf("the layer templates, `name: {component: prenorm_block, slots: {...}}`", value=FILL),
    "stacks": req(MapOf("the stacks, `main: {inputs: ..., graph: ...}`", value=STACK)),
    "quant_context": QUANT_CONTEXT,
    "drafts": NAMES,
    "checkpoints": ListOf("write a list of `{model: org/name, format: fp8, quant_context: {...}}`", item=CHECKPOINT),
    "config_defaults": MapOf("config fields the modeling code defaults, `field: {value: ..., src: \"...\"}`",
                             value=Mapping(_DEFAULT_HINT, fields={
                                 "value": req(OneOf(_DEFAULT_HINT, options=(Bool(), Int(), Str()))),
                                 "src": req(SOURCE)})),
})

# -- components, tables, schemes, snapshots ------------------------------------------------------------

COMPONENT = Mapping("a component", fields={
    "component": req(Str("the component's name (its file name)")),
    "role": req(Str("a role of corpus/roles.yaml")),
    "doc": req(TEXT),
    "label": Str("the short name shown in the gallery"),
    "options": MapOf("options and their defaults, `option: default`"),
    "inputs": NAMES,
    "dims": MapOf("dims the component derives, `dim: expression`", value=SIZE),
    "graph": req(GRAPH),
    "outputs": OneOf("write `outputs: node` or `outputs: {name: node}`", options=(Str(), MapOf(value=Str()))),
    "cache": ListOf("the caches, `- {name, node, kind, growth}`", item=Mapping(
        "write `{name: key, node: k_cache, kind: kv, growth: every_token}`", fields={
            "name": req(Str()), "node": req(Str("a node of the graph")), "kind": req(Str()),
            "growth": req(Str("every_token, window, compressed or state")),
            "window": Expr("the window in tokens: a number or an expression"),
            "every": Expr("tokens per entry: a number or an expression"), "dtype": Str("a dtype"),
            "scale": Mapping("write `{dtype: f32, block: 128}`: one scale per block elements", fields={
                "dtype": req(Str("the scale's dtype")), "block": req(Int("elements per scale", lo=1, hi=1 << 16, why="the elements one scale covers, e.g. 128"))}),
            "src": Str("the serving code that stores the entry this way")})),
    "decode_variant": Mapping("write `{remove: [...], graph: {...}}`", fields={
        "remove": NAMES, "graph": req(GRAPH), "doc": TEXT}),
})

DIMS = MapOf("the dims table, `name: {kind, shard, doc}`", value=Mapping(
    "write `{kind: hidden, shard: none, doc: \"...\"}`", fields={
        "kind": req(Str()), "shard": req(Str("the parallel world: none, tp, ep, cp or dp")),
        "doc": req(TEXT), "replicate": Bool("whether the dim's heads replicate past its TP size")}))

ROLES = MapOf("the roles, `name: \"what it is\"`", value=Str())

QUANT_SCHEME = Mapping("a quant scheme", fields={
    "scheme": req(Str("the scheme's name (its file name)")),
    "doc": req(TEXT),
    "matrix": req(OneOf("the stored tensors of a matrix", options=(
        ListOf(item=Mapping("write `{key: \"{weight}\", dtype: bf16, shape: [rows, cols]}`", fields={
            "key": req(Str()), "dtype": req(Str()),
            "shape": req(ListOf("write shape: [rows, cols]", item=OneOf(options=(Str(), Int()))))})),
        Null()))),
    "vector_dtype": req(Str()),
    "compute": req(Str("fp4, fp8 or bf16")),
    "activations": Str("fp4, fp8 or bf16"),
    "src": TEXT,
    "hf": MapOf("the Hugging Face quantization_config fields it matches"),
    "hf_layer": MapOf("the entry of ModelOpt's per-module `quantized_layers` map it matches"),
})

SNAPSHOT = Mapping("a config snapshot (regenerate with `archledger snapshot MODEL`)", fields={
    "source": req(Str()), "retrieved": Anything(), "fields": req(MapOf("the config fields"))})

SLOTS = MapOf("the slot contracts, `name: {roles: [...], inputs: 1, doc: \"...\"}`", value=Mapping(
    "write `{roles: [attention], inputs: 1, doc: \"...\"}`", fields={
        "roles": req(NAMES),
        "inputs": req(Int("the inputs a filler takes", lo=1, hi=64)),
        "doc": req(TEXT)}))

VARIANT = Mapping("a what-if variant", fields={
    "variant": req(Str("the variant's name (its file name)")),
    "base": req(Str("the base model's id")),
    "name": Str("the display name"),
    "notes": TEXT,
    "swaps": req(ListOf("write swaps: [{slot: attention, templates: [block], component: <library component>}]",
                        min_items=1, item=Mapping("write `{slot: attention, component: <library component>}`", fields={
                            "slot": req(Str("a slot of corpus/slots.yaml")),
                            "templates": NAMES,
                            "when": Str('a condition on `layer`, e.g. when: "layer % 4 != 3"'),
                            "component": req(Str("a library component")),
                            "with": MapOf("the component's options, `option: value`"),
                            "dims": MapOf("dims the component reads, `dim: size`", value=SIZE),
                            "modules": MapOf("checkpoint module renames", value=Str()),
                            "module": Str()}))),
    "bind": MapOf("dims the base does not bind, `dim: {value: N, src: \"...\"}`", value=Mapping(
        "write `{value: <number or expression>, src: \"<where the value comes from>\"}`", fields={
            "value": req(SIZE), "src": req(SOURCE)})),
})

LINEAGE = Mapping("the release lineages", fields={
    "lineages": req(ListOf("write lineages: [{lineage: DeepSeek, families: [DeepSeek-V3, DeepSeek-V4]}]",
                           item=Mapping("write {lineage: Qwen, families: [Qwen3, Qwen3.5]}", fields={
                               "lineage": req(Str("the lab's name")),
                               "families": req(ListOf(
                                   "the families in release order", item=OneOf(
                                       "a family is a name, or `Name: [org/model, ...]` (its models in release order)",
                                       options=(Str(), MapOf(value=ListOf(item=Str()))))))}))),
})

# -- fusion tables (corpus/fusion/*.yaml) -------------------------------------------------------------

_WHEN = Mapping("the conditions of a rule", fields={
    "arch": ListOf("GPU archs, e.g. [sm_90, sm_100]", item=Str()),
    "phases": ListOf("phases, e.g. [decode]", item=Str()),
    "min_degree": MapOf("least parallel degrees, e.g. {tp: 2}", value=Int(lo=1, hi=4096)),
    # a token bound of a fused kernel: real limits are tens to thousands of tokens
    "max_tokens": Int("the most tokens the fused kernel takes", lo=1, hi=MAX_TOKENS),
    "dims": MapOf("dims and the values they must take, e.g. {d_head: [64, 128]}", value=ListOf(item=Int())),
    "weight_dtype": ListOf("weight dtypes, e.g. [fp8]", item=Str()),
})

FUSION_RULE = Mapping("write `{name, doc, src, chain: [...]}` (or siblings: / component:)", fields={
    "name": req(Str("the rule's name")),
    "doc": req(TEXT),
    "src": req(SOURCE),
    "chain": ListOf("ops in order, e.g. [add, rmsnorm]", item=Str()),
    "names": ListOf("one node name (or null) per chain member", item=OneOf(options=(Str(), Null()))),
    "siblings": Mapping("write `{op: linear, names: [q_proj, k_proj]}`", fields={
        "op": req(Str()), "names": ListOf(item=Str())}),
    "component": Mapping("write `{role: attention}`", fields={"role": req(Str())}),
    "extra": ListOf("ops the fused kernel also covers", item=Str()),
    "when": _WHEN,
    "enabled": Bool(),
    "compute": Str("fp4, fp8 or bf16"),
})

#: A framework's memory outside weights and KV, per GPU: measured figures are 0 to a few GiB.
RESERVE = Mapping("write `{name: ..., gib: <size>, src: \"...\"}`", fields={
    "name": req(Str("the entry's name")),
    "doc": TEXT,
    "src": req(SOURCE),
    "mib": Number("a size in MiB", lo=0, hi=1 << 20, unit="MiB", why="a runtime reserve is at most a GPU's memory"),
    "gib": Number("a size in GiB", lo=0, hi=1 << 10, unit="GiB", why="a runtime reserve is at most a GPU's memory"),
    "per": Str("leave out (per GPU) or `tp_pp`"),
    "when": Mapping("write `when: {min_replica_gpus: <int>}`", fields={
        "min_replica_gpus": Int("the least GPUs of a replica", lo=1, hi=4096)}),
})

#: How the framework runs the expert all-to-all (engine.deploy.expert_comm): DeepEP's kernels per
#: phase and the payload dtypes of dispatch and combine.
EXPERT_A2A = Mapping("write `{library: deepep, doc, src: [...], kernels: {prefill: normal, decode: low_latency}, "
                     "dispatch: {dtype: fp8, scale_block: 128, scale_bytes: 4}, combine: {dtype: bf16}}`", fields={
    "library": req(Str("the all-to-all library, e.g. deepep")),
    "doc": req(TEXT),
    "src": req(ListOf("where each choice was read", item=SOURCE)),
    "kernels": Mapping("write `{prefill: normal, decode: low_latency}`", fields={
        "prefill": Str("normal, low_latency or allgather"), "decode": Str("normal, low_latency or allgather")}),
    "dispatch": req(Mapping("write `{dtype: fp8, scale_block: 128, scale_bytes: 4}`", fields={
        "dtype": req(Str("fp8 or bf16")),
        "scale_block": Int("elements per scale", lo=1, hi=1 << 16),
        "scale_bytes": Int("bytes per scale (0: one scale per tensor, nothing per token)", lo=0, hi=8),
        "needs_block_fp8_experts": Bool("FP8 dispatch only when the routed experts run FP8")})),
    "combine": req(Mapping("write `{dtype: bf16}`", fields={"dtype": req(Str("fp8 or bf16"))})),
})

#: A schedule overlap the framework can run (engine.deploy.sol: ``none`` needs no entry).
OVERLAP = Mapping("write `{policy: two_batch, enabled: false, doc: ..., src: \"...\"}`", fields={
    "policy": req(Str("two_batch")),
    "doc": req(TEXT),
    "src": req(SOURCE),
    "enabled": Bool(),
})

#: A framework's KV paging and admission policy (engine.deploy.admission): steady-state capacity.
KV_ADMISSION = Mapping("write `kv_admission: {page_tokens: <int>, src: \"...\"}`", fields={
    "doc": TEXT,
    "src": req(SOURCE),
    "page_tokens": req(Int("tokens per KV page (block)", lo=1, hi=4096)),
    "free_fraction": Number("the fraction of KV pages the scheduler keeps free", lo=0, hi=0.5, unit="",
                            why="a scheduler keeping more than half its cache free is not one we know"),
    "reserve_ratio": Number("the share of each running request's remaining output reserved at admission", lo=0,
                            hi=1, unit="", why="a share of the remaining output"),
    "reserve_clip_tokens": Int("the most remaining-output tokens one request's reservation counts", lo=0,
                               hi=1 << 20),
})

#: The expert routing an expert-parallel MoE's measured table is read at (engine.deploy.measured).
MOE_ROUTING = Mapping("write `moe_routing: {distribution: power_law_1.2, doc: ..., src: \"...\"}`", fields={
    "distribution": req(Str("the routing of the measured MoE tables read under expert parallelism: balanced or "
                            "the suffix of their variant, e.g. power_law_1.2 (moe-fp8_power_law_1.2)")),
    "doc": req(TEXT),
    "src": req(SOURCE),
})

FUSION = Mapping("a fusion table", fields={
    "framework": req(Str("the framework's name, e.g. vllm")),
    "version": req(Str('the version read, quoted, e.g. "0.18.2"')),
    "doc": req(TEXT),
    "rules": req(OneOf("a list of rules", options=(ListOf(item=FUSION_RULE), Null()))),
    "runtime_reserve": ListOf("write runtime_reserve: [{name: ..., mib: ..., src: ...}, ...]", item=RESERVE),
    "expert_all_to_all": EXPERT_A2A,
    "overlap": ListOf("write overlap: [{policy: two_batch, enabled: false, doc: ..., src: ...}]", item=OVERLAP),
    "kv_admission": KV_ADMISSION,
    "moe_routing": MOE_ROUTING,
})

# -- GPUs (gpus/*.yaml) and collectives (gpus/collectives/*.yaml) -------------------------------------


def figure(doc: str, lo: float, hi: float, unit: str, why: str) -> Node:
    """A hardware figure: a number in ``(lo, hi]``, or ``{value, alt, note, estimate}`` whose value
    and alt both are."""
    number = Number(doc, lo=lo, hi=hi, unit=unit, why=why, above=True)
    hint = f"write the {doc} as a number, or `{{value: <{unit}>, alt: <{unit}>, note: \"...\"}}` ({why})"
    return OneOf(hint, options=(number, Mapping(hint, fields={
        "value": req(number), "alt": number, "note": TEXT, "estimate": Bool("whether the figure is an estimate")})))


#: Dense peak per dtype: the slowest accelerator of interest (about 100 TFLOP/s) to 100 times the
#: fastest announced (Rubin FP4, 35,000 TFLOP/s).
PEAK = figure("dense peak TFLOP/s", 1, 100_000, "TFLOP/s", "a dense peak between 1 TFLOP/s and 100 PFLOP/s")
#: HBM: 1 GiB to 4 TiB per GPU (today's parts hold 80 to 288 GB).
HBM_GB = figure("HBM capacity in decimal GB", 1, 4400, "GB", "HBM between 1 GB and 4 TiB per GPU")
_HBM_MIB_NUMBER = Number("HBM total the driver reports, in MiB", lo=1024, hi=1 << 22, unit="MiB", above=True,
                         why="the driver's total between 1 GiB and 4 TiB (an 80 GB part reports about 81,559 MiB)")
#: The capacity deployments use, always with where it was read: the total nvidia-smi / rocm-smi
#: reports, or (``estimate: true``) a figure the note says how it was estimated (a part with no
#: published driver total). A bare number is refused: the datasheet's GB is not what the runtime sees.
HBM_MIB = Mapping('write `hbm_mib: {value: 81559, note: "nvidia-smi total of ... (<source>)"}`, or for a part with '
                  'no published driver total `{value: <MiB>, estimate: true, note: "estimate: <how>"}`', fields={
                      "value": req(_HBM_MIB_NUMBER), "note": req(TEXT),
                      "estimate": Bool("true: no driver-reported total is published; the note says how it was estimated")})
#: HBM bandwidth: 0.1 to 100 TB/s (A100 2.0, Rubin 22).
HBM_TB_S = figure("HBM bandwidth in TB/s", 0.1, 100, "TB/s", "HBM bandwidth between 0.1 and 100 TB/s")
#: A link per GPU: 1 GB/s (a slow NIC) to 100 TB/s (NVLink6 is 3.6 TB/s).
LINK_GB_S = figure("link bandwidth in GB/s", 1, 100_000, "GB/s", "a link between 1 GB/s and 100 TB/s")
#: A collective's per-call or per-hop latency: above 0 and at most 10 ms (NCCL's are 0.6 to 7 µs).
LATENCY_US = figure("latency in µs", 0, 10_000, "µs", "a latency above 0 and at most 10 ms (10,000 µs)")
#: One GPU's on-demand price: cents to a thousand dollars an hour.
PRICE = figure("USD per GPU-hour", 0.01, 1000, "USD/h", "a price between $0.01 and $1,000 per GPU-hour")

LINK_CLASS = Str("a link class of gpus/collectives/nccl.yaml (nvlink, pci, net, xgmi)")

GPU = Mapping("a GPU file", fields={
    "gpu": req(Str("the GPU's short name, e.g. `gpu: H200`")),
    "name": req(TEXT), "vendor": req(TEXT), "arch": req(Str("the arch, e.g. sm_90")), "doc": req(TEXT),
    "peak_tflops": req(MapOf("dense peak per dtype, e.g. `{bf16: 989, fp8: 1979}`", value=PEAK)),
    "hbm_gb": req(HBM_GB),
    "hbm_mib": req(HBM_MIB),
    "hbm_tb_s": req(HBM_TB_S),
    "scale_up": req(Mapping("write `{link: NVLink4, gb_s: 900, domain: 8, hw: nvlink}`", fields={
        "link": req(TEXT), "gb_s": req(LINK_GB_S),
        "domain": req(Int("GPUs one scale-up link connects", lo=1)), "hw": LINK_CLASS, "note": TEXT})),
    "scale_out": req(Mapping("write `{link: NDR 400 Gb/s, gb_s: 50, hw: net}`", fields={
        "link": req(TEXT), "gb_s": req(LINK_GB_S), "hw": LINK_CLASS, "note": TEXT})),
    "sources": ListOf("the datasheets read", item=TEXT),
    "price": Mapping('write `{usd_per_hour: 3.99, src: "<provider> on-demand <instance>, <date>, <URL>"}`', fields={
        "usd_per_hour": req(PRICE), "src": req(SOURCE)}),
})

_LATENCIES = Mapping("write `{ring: <µs>, tree: <µs>}`", fields={"ring": req(LATENCY_US), "tree": req(LATENCY_US)})
COLLECTIVES = Mapping("a collective latency table", fields={
    "model": req(Str("the model's name, e.g. nccl")),
    "src": req(SOURCE),
    "base_us": req(_LATENCIES),
    "hop_us": req(MapOf("per link class, `nvlink: {ring: 0.6, tree: 0.6}`", value=Mapping(
        "write `{ring: <µs>, tree: <µs>}`", fields={
            "ring": req(LATENCY_US), "tree": req(LATENCY_US), "estimate": Bool(), "note": TEXT}))),
})

# -- contracts (corpus/contracts/<slot>/contract.yaml) -------------------------------------------------

CONTRACT = Mapping("a component contract", fields={
    "doc": req(TEXT),
    "gpu": req(Str("a `gpu:` name of gpus/*.yaml")),
    "batch": req(Int("requests per step", lo=1, hi=MAX_BATCH, why="a batch of 1 to 2^20 requests")),
    "lengths": req(ListOf("context lengths, e.g. [1024, 4096]", min_items=1, max_items=64,
                          item=Int(lo=1, hi=MAX_TOKENS, unit="tokens", why="a context of 1 to 2^24 tokens"))),
    "prefill_at": req(Int("one of the lengths", lo=1, hi=MAX_TOKENS, unit="tokens")),
    "decode_at": ListOf("some of the lengths", max_items=64, item=Int(lo=1, hi=MAX_TOKENS, unit="tokens")),
    "order": ListOf("variant file names (without .yaml)", item=Str()),
})

# -- evidence (corpus/verification.yaml, corpus/snapshots/*.tensors.yaml and *.source.yaml) ----------------

_REGENERATE = "regenerate the file with `archledger snapshot MODEL`"

VERIFICATION = Mapping("the verification registry (docs/verification.md)", fields={
    "oracle": Mapping("write `oracle: {transformers: \"5.25.0\"}`", fields={
        "transformers": req(Str("the transformers release modeling-code evidence is recorded with"))}),
    "canonical": Mapping("write `canonical: {prefixes: [{from: ..., to: ...}], other_modalities: [...]}`", fields={
        "prefixes": ListOf(item=Mapping("write `{from: \"model.language_model.\", to: \"model.\"}`", fields={
            "from": req(Str()), "to": req(Str())})),
        "other_modalities": ListOf("module prefixes of other modalities", item=Str())}),
    "layer_plans": ListOf(item=Mapping("write `{field: layer_types, feature: window, expect: \"...\"}`", fields={
        "field": req(Str("a config path")), "feature": req(Str("a per-layer feature")),
        "kind": req(Str("what the field holds: per_layer, layer_set or scalar")),
        "reads": MapOf("other config fields `expect` reads, with their kinds", value=Str()),
        "expect": req(Str("an expression over `entry`")), "defaults": MapOf("config defaults the plan reads"),
        "values": ListOf("the values an entry may take"), "whole": Bool(),
        "fill": Str("the component a layer this entry marks takes in its attention slot (archledger new)")})),
    "structural": ListOf(item=Mapping("write `{field: <config path>, op: <op>, dim: <dim>}`", fields={
        "field": req(Str("a config path")), "op": req(Str("an op")), "dim": req(Str("a dim")), "doc": TEXT,
        "unless": MapOf("config fields that waive the check"), "compare": Bool(), "cache": Anything(),
        "same_as": Str("the config path of the same setting in another layout (a dim reading it counts)")})),
    "switches": ListOf(item=Mapping("write `{field: <config path>, component: <component>, option: <option>}`", fields={
        "field": req(Str("a config path")), "component": req(Str("a component")), "option": req(Str("its option")),
        "doc": TEXT})),
})

TENSOR_MANIFEST = Mapping(_REGENERATE, fields={
    "source": req(Str()), "provenance": req(MapOf(_REGENERATE)), "scope": ListOf(_REGENERATE, item=Str()),
    "tensor_count": Int(lo=0), "total_bytes": req(Int(lo=0)),
    "tensors": req(ListOf(_REGENERATE, item=Str("write `name DTYPE [d0, d1, ...]`")))})

SOURCE_SNAPSHOT = Mapping(_REGENERATE, fields={
    "source": req(Str()), "provenance": MapOf(_REGENERATE), "excerpts": req(MapOf(_REGENERATE, value=Str()))})

# -- the grid (corpus/grid.yaml) --------------------------------------------------------------------
# Its fields and sections are declared here; each value's kind and bounds are engine.batch.grid's
# (and the sizing block's engine.serving.fronts'), whose messages list the allowed values.

_VALUE = Anything()
GRID = Mapping("a grid", fields={
    **dict.fromkeys(("doc", "gpus", "gpu_counts", "beyond_fit", "frameworks", "kv_dtypes"), _VALUE),
    "parallel": Mapping("the parallel configs", fields=dict.fromkeys(
        ("max_pp", "cp", "ep", "dp_attn", "tp_in_domain", "pp_after_tp"), _VALUE)),
    "scenarios": Mapping("the scenarios", fields=dict.fromkeys(
        ("input_lengths", "beyond_max_context", "output_lengths", "batches"), _VALUE)),
    "ops": Mapping("the per-op table's points", fields=dict.fromkeys(("kv_dtypes", "points"), _VALUE)),
    "sizing": Mapping("the sizing answers", fields=dict.fromkeys(
        ("scenarios", "gpus", "frameworks", "kv_dtypes", "max_gpus", "models", "disagg_frameworks"), _VALUE)),
    "checkpoints": Mapping("where published checkpoints get rows", fields=dict.fromkeys(
        ("doc", "gpus", "frameworks", "kv_dtypes"), _VALUE)),
})

# -- measured kernel tables (gpus/measured/<gpu>/<framework>-<version>/<kernel>-<variant>.yaml) ---------

#: A measured kernel time: above 0 and at most 10 s (the source's slowest GEMM, 32768 x 65536 x
#: 16384 in BF16 on an A100, is about 0.2 s; a latency of 0 or below is a broken table).
MEASURED_US = Number("a kernel time in µs", lo=0, hi=1e7, unit="µs", above=True,
                     why="a measured kernel time above 0 and at most 10 s (written by benchmarks/import_kernels.py)")
#: The most values one axis holds and the most rows of latencies a table holds (the bounded
#: reader caps the file at 1 MB too): the imported tables have at most 23 values and 144 rows.
MAX_AXIS_VALUES = 64
MAX_MEASURED_ROWS = 4096

MEASURED = Mapping("a measured kernel table (re-run benchmarks/import_kernels.py or archledger kernelbench)", fields={
    "kernel": req(Str("the kernel class: gemm, decode_attention, prefill_attention, decode_mla, prefill_mla, "
                      "mla_bmm, moe, all_reduce, all_gather, reduce_scatter or all_to_all")),
    "variant": req(Str("the dtype (bf16, fp8, fp8_block; attention: <kv dtype>_d<head size>; MLA: <kv dtype>_r<latent "
                       "rank>, its BMMs <pre|post>_<dtype>_r<rank>) or the backend (nccl, custom_graph, custom_eager, "
                       "custom)")),
    "gpu": req(Str("a `gpu:` name of gpus/*.yaml")),
    "framework": req(Str("the framework measured (sglang, vllm, trtllm) or nccl")),
    "framework_version": req(Str('its version, quoted, e.g. "0.5.14"')),
    "source": req(Mapping("where the table comes from", fields={
        "package": req(Str("the package read, e.g. aiconfigurator-core")),
        "version": req(Str("its version")),
        "path": req(SOURCE),
        "licence": req(Str("the package's licence, e.g. Apache-2.0", nonempty=True)),
        "licence_src": req(SOURCE),
        "device": TEXT,
        "selection": TEXT,
        # a table measured on the user's machine (archledger kernelbench) says how and when
        "tool": TEXT,
        "date": TEXT,
        "command": TEXT})),
    "axes": req(ListOf("write axes: [{name: m, unit: tokens, values: [1, 2, 4]}, ...]", min_items=1, max_items=4,
                       item=Mapping("write `{name: m, unit: tokens, values: [1, 2, 4]}`", fields={
                           "name": req(Str("the axis name (engine.deploy.measured.KERNELS: gemm m, n, k; a "
                                           "collective gpus, bytes; ...)")),
                           "unit": TEXT,
                           "values": req(ListOf("the measured values, ascending", min_items=2,
                                                max_items=MAX_AXIS_VALUES,
                                                item=Number("an axis value", lo=0, hi=1 << 40, above=True,
                                                            why="a size above 0")))}))),
    "keys": Mapping("exact-match keys of the rows (an MoE table: one curve per expert shape and split)", fields={
        "names": req(ListOf("the key names, e.g. [hidden, inter, topk, experts, moe_tp, moe_ep]", min_items=1,
                            max_items=8, item=Str())),
        "values": req(ListOf("one list of key values per curve", min_items=1, max_items=MAX_MEASURED_ROWS,
                             item=ListOf("the curve's key values, one per name", max_items=8,
                                         item=Int("a key value", lo=1, hi=1 << 24))))}),
    "latency_us": req(ListOf("one row per combination of the axes but the last, each over the last axis",
                             min_items=1, max_items=MAX_MEASURED_ROWS,
                             item=ListOf("the row's latencies in µs", min_items=2, max_items=MAX_AXIS_VALUES,
                                         item=MEASURED_US))),
})
