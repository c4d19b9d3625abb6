"""The disaggregated pairing and join rules, written once as rule programs (engine.language.formula_tree).

Layer: engine.serving (formula trees only). The engine evaluates each program over numpy arrays
(:func:`engine.language.formula_tree.run_arrays`: the floats of the numpy expression in the written
order): :mod:`engine.serving.disagg` (links, the link time, replicas, join) and
:mod:`engine.serving.pairing` (each prefill config's choice for a decode point). The sizing page
(static/js/sizing.js, page glue) runs :func:`exported` with the one interpreter (static/js/formula.js
``run``) on the build's points and each prefill config's staircase (:func:`engine.serving.staircase.staircase`,
shipped as data by site_builder/sizing.py); tests/test_site_sizing_disagg.py checks the page against
``archledger plan --json``'s disaggregated answer.

Programs (docs/deployment.md "Disaggregated serving" derives the rules):

* :data:`LINKS` (each side's scale-out alpha and bandwidth): the KV path between two GPU types, the
  larger alpha and the smaller bandwidth (the slower NIC);
* :data:`LINK_TIME` (alpha, bw, nbytes): one send, alpha + bytes / bandwidth; :data:`TRANSFER`: of
  the larger of the two pools' KV shares per GPU (share_p, share_d);
* :data:`X_D` / :data:`X_P`: a decode point's and a prefill point's requests/s;
* :data:`DECODE` (x_d, batch_d, the load: users or rate, each with a has_ flag): the decode
  replicas and the demand they put on the prefill pool;
* :data:`REPLICAS` (x_p, x_d, demand, decode_replicas): prefill replicas, pool ratio, requests/s;
* :data:`JOIN` (the above, the pools' GPUs, KV shares, links, domain and prices): GPUs, the link the
  KV takes and its time, TTFT, throughput and price;
* :data:`LAST` (a prefill config's TTFTs ``t`` ascending, the bound, the transfer ``seconds``): the
  last point within the bound;
* :data:`CHOICE` (the staircase ``t``, ``b``, ``best`` (the running max of b / t), ``arg`` (where it
  was reached), a decode point's ``demand``, ``j`` = LAST's, ``half`` = 2 x the bound, ``n_p``):
  the fewest replicas, the shortest TTFT needing no more, and the key configs are compared by.
"""
from __future__ import annotations

from engine.language.formula_tree import Rule, call, program

_ = Rule

#: A tolerance for ceilings of ratios that are whole numbers up to rounding (0.9999999 x 3 -> 3).
ROUND = 1 - 1e-12

LINKS = program(("out_alpha", call("max", _("p_out_alpha"), _("d_out_alpha"))),
                ("out_bw", call("min", _("p_out_bw"), _("d_out_bw"))))
LINK_TIME = program(("seconds", _("alpha") + _("nbytes") / _("bw")))
#: the KV of one request between a prefill GPU and a decode GPU: the larger of the two pools' shares
TRANSFER = program(("nbytes", call("max", _("share_p"), _("share_d")))) + LINK_TIME

X_D = program(("x_d", _("batch_d") / (_("output") * _("tpot_d"))))
X_P = program(("x_p", _("batch_p") / _("ttft_p")))
DECODE = program(
    # users: enough replicas to hold them; a rate: enough to carry it; no load: one replica
    ("decode_replicas", call("pw", (call("cdiv", _("users"), _("batch_d")), _("has_users")),
                             (call("max", 1, call("ceil", _("rate") / _("x_d") * ROUND)), _("has_rate")), (1, 1))),
    ("demand", call("pw", (_("rate"), _("has_rate")), (_("decode_replicas") * _("x_d"), 1))),
)
REPLICAS = program(
    ("prefill_replicas", call("max", 1, call("ceil", _("demand") / _("x_p") * ROUND))),
    ("pool_ratio", _("x_d") / _("x_p")),
    ("requests_per_s", call("min", _("prefill_replicas") * _("x_p"), _("decode_replicas") * _("x_d"))),
)
JOIN = program(
    ("total_gpus", _("prefill_replicas") * _("n_p") + _("decode_replicas") * _("n_d")),
    ("kv_link_bytes", call("max", _("share_p"), _("share_d"))),
    # scale-up only within one GPU type's domain (has_up: the two pools are one GPU type)
    ("on_up", call("and", _("has_up"), _("total_gpus") <= _("domain"))),
    ("kv_transfer_s", call("pw", (_("up_alpha") + _("kv_link_bytes") / _("up_bw"), _("on_up")),
                           (_("out_alpha") + _("kv_link_bytes") / _("out_bw"), 1))),
    ("tokens", _("requests_per_s") * _("output")),
    ("ttft_s", _("ttft_p") + _("kv_transfer_s")),
    ("tokens_per_s_per_gpu", _("tokens") / _("total_gpus")),
    ("tokens_per_s_per_user", 1.0 / _("tpot_d")),
    ("usd_per_hour", _("prefill_replicas") * _("n_p") * _("price_p") + _("decode_replicas") * _("n_d") * _("price_d")),
    ("usd_per_m_tokens", _("usd_per_hour") / (_("tokens") * 3600.0) * 1e6),
)

LAST = program(("last", call("rank_le", "t", _("bound") - _("seconds")) - 1))
CHOICE = program(
    ("reps", call("max", 1, call("ceil", _("demand") / call("at", "best", _("j")) * ROUND))),
    ("pick", call("at", "arg", call("min", call("rank", "best", _("demand") / _("reps") * ROUND), _("j")))),
    ("gpus", _("reps") * _("n_p")),
    ("ttft", call("at", "t", _("pick"))),
    ("batch", call("at", "b", _("pick"))),
    # of the configs, the fewest GPUs, then the shortest TTFT (ttft / 2 bound < 0.5 GPU)
    ("key", _("gpus") + _("ttft") / _("half")),
)
HALF = program(("half", 2 * _("bound")))

#: the decode side and the whole join, as the page runs them (one program each)
DEMAND = X_D + DECODE
JOINED = X_D + DECODE + X_P + REPLICAS + JOIN


def exported() -> dict:
    """The programs the sizing page evaluates (JSON)."""
    return {"links": LINKS, "transfer": TRANSFER, "demand": DEMAND, "join": JOINED, "last": LAST, "choice": CHOICE, "half": HALF}
