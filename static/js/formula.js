// Formula trees (engine/language/formula_tree.py) evaluated in the browser: the engine's own expressions,
// exported at build time, bound to the reader's inputs. Semantics mirror formula_tree.evaluate;
// tests/test_formula_tree.py checks this file against Python in Chromium.
(function () {
  "use strict";
  var REL = {
    "<": function (a, b) { return a < b; }, "<=": function (a, b) { return a <= b; },
    "==": function (a, b) { return a === b; }, ">": function (a, b) { return a > b; },
    ">=": function (a, b) { return a >= b; }, "!=": function (a, b) { return a !== b; }
  };
  // A measured table's time at point x (a "lookup" node; engine/deploy/measured.py interpolate_many, the
  // rule's one definition): multilinear in log time over log axis values inside the grid; outside an
  // axis's range, from the clamped point as the power law of the axis's edge span, its slope clipped
  // to [0, the roofline's slope there] (t.roof: a tree of the axes' names), and never below the
  // roofline's work over the table's highest measured rate (t.rate, else its own grid's). t: {axes, values, us (the
  // latencies in µs, flat, last axis fastest; seconds = us x 1e-6, as the table files are read), roof, rate}.
  function lower(v, x) {     // numpy searchsorted(v, x, "right") - 1, clipped to a span's lower end
    var i = 0; while (i < v.length && v[i] <= x) i++;
    return Math.max(Math.min(i - 1, v.length - 2), 0);
  }
  function inside(t, p) {    // log time at a point inside the grid: the cell's 2^axes corners
    var n = t.values.length, lo = [], frac = [], d, c, total = 0;
    for (d = 0; d < n; d++) {
      var v = t.values[d], i = lower(v, p[d]); lo.push(i);
      frac.push(v.length === 1 ? 0 : (Math.log(p[d]) - Math.log(v[i])) / (Math.log(v[i + 1]) - Math.log(v[i])));
    }
    for (c = 0; c < (1 << n); c++) {
      var w = 1, at = 0;
      for (d = 0; d < n; d++) {
        var bit = (c >> d) & 1;
        w *= bit ? frac[d] : 1 - frac[d];
        at = at * t.values[d].length + (t.values[d].length === 1 ? lo[d] : lo[d] + bit);
      }
      total += w * Math.log(t.us[at] * 1e-6);
    }
    return total;
  }
  function peakRate(t, roof) {   // the highest roofline work per second of any grid point (measured.peak_rate)
    var best = 0, i, d;
    for (i = 0; i < t.us.length; i++) {
      var p = [], rest = i;
      for (d = t.values.length - 1; d >= 0; d--) { p[d] = t.values[d][rest % t.values[d].length]; rest = Math.floor(rest / t.values[d].length); }
      best = Math.max(best, roof(p) / (t.us[i] * 1e-6));
    }
    return best;
  }
  function lookup(t, x) {
    var n = x.length, c = [], a;
    for (a = 0; a < n; a++) { var v = t.values[a]; c.push(Math.min(Math.max(x[a], v[0]), v[v.length - 1])); }
    function roof(p) { var e = {}; for (var k = 0; k < n; k++) e[t.axes[k]] = p[k]; return evaluate(t.roof, e); }
    var atC = inside(t, c), logT = atC, out = false;
    for (a = 0; a < n; a++) {
      var vals = t.values[a];
      if (x[a] !== c[a]) out = true;
      if (x[a] === c[a] || vals.length === 1) continue;
      var inner = c.slice(); inner[a] = c[a] === vals[vals.length - 1] ? vals[vals.length - 2] : vals[1];
      var span = Math.log(c[a]) - Math.log(inner[a]);
      var slope = (atC - inside(t, inner)) / span, roofSlope = (Math.log(roof(c)) - Math.log(roof(inner))) / span;
      logT += Math.min(Math.max(slope, 0), Math.max(roofSlope, 0)) * (Math.log(x[a]) - Math.log(c[a]));
    }
    // outside: never more efficient than the best the whole table measured (t.rate: its highest
    // roofline work per second)
    if (out) logT = Math.max(logT, Math.log(roof(x)) - Math.log(t.rate || peakRate(t, roof)));
    return Math.exp(logT);
  }
  // tables: what a "lookup" node's ref names (ref -> table); read: an optional array each lookup's
  // ref is pushed onto (which tables an evaluation read)
  function evaluate(tree, env, tables, read) {
    if (typeof tree === "number") return tree;
    if (typeof tree === "string") {
      if (!Object.prototype.hasOwnProperty.call(env, tree)) throw new Error("formula: symbol " + tree + " is not bound");
      return Number(env[tree]);
    }
    var op = tree[0], i, n = tree.length;
    if (op === "pw") {
      for (i = 1; i < n; i++) if (evaluate(tree[i][1], env, tables, read)) return evaluate(tree[i][0], env, tables, read);
      return NaN;
    }
    var v = [];
    if (op === "rank" || op === "rank_le" || op === "at") {   // the first argument names a list of env
      var list = env[tree[1]], x = evaluate(tree[2], env, tables, read), r = 0;
      if (op === "at") return list[x];
      // how many values of the ascending list are < x (rank: searchsorted left) or <= x (rank_le: right)
      if (op === "rank") while (r < list.length && list[r] < x) r++;
      else while (r < list.length && list[r] <= x) r++;
      return r;
    }
    if (op === "lookup") {
      if (!tables || !tables[tree[1]]) throw new Error("formula: lookup table " + tree[1] + " is not given");
      for (i = 2; i < n; i++) v.push(evaluate(tree[i], env, tables, read));
      if (read) read.push(tree[1]);
      return lookup(tables[tree[1]], v);
    }
    for (i = 1; i < n; i++) v.push(evaluate(tree[i], env, tables, read));
    switch (op) {
      case "+": return v.reduce(function (a, b) { return a + b; });      // left fold, as run_arrays
      case "*": return v.reduce(function (a, b) { return a * b; });
      case "-": return v[0] - v[1];
      case "/": return v[0] / v[1];
      case "cdiv": return Math.ceil(v[0] / v[1]);
      case "^": return Math.pow(v[0], v[1]);
      case "min": return Math.min.apply(null, v);
      case "max": return Math.max.apply(null, v);
      case "floor": return Math.floor(v[0]);
      case "ceil": return Math.ceil(v[0]);
      case "mod": return v[0] - v[1] * Math.floor(v[0] / v[1]);
      case "log": return Math.log(v[0]);
      case "not": return v[0] ? 0 : 1;
      case "and": return v.every(Boolean) ? 1 : 0;
      case "or": return v.some(Boolean) ? 1 : 0;
      default:
        if (REL[op]) return REL[op](v[0], v[1]) ? 1 : 0;
        throw new Error("formula: unknown op " + op);
    }
  }
  // compile once, evaluate many: a closure per node (the deploy page evaluates thousands of steps)
  function compile(tree) {
    if (typeof tree === "number") return function () { return tree; };
    if (typeof tree === "string") return function (env) {
      var x = env[tree]; if (x === undefined) throw new Error("formula: symbol " + tree + " is not bound"); return x;
    };
    return function (env, tables, read) { return evaluate(tree, env, tables, read); };
  }
  // a selection rule (formula_tree.select): the values whose "keep" holds ("each" bound to the value),
  // then each "add" value whose condition holds and is not kept yet; "else" when none is
  function select(rule, values, env) {
    var scope = Object.assign({}, env), kept = [];
    scope[rule.largest] = Math.max.apply(null, values);
    values.forEach(function (v) {
      var e = Object.assign({}, scope); e[rule.each] = v;
      if (evaluate(rule.keep, e)) kept.push(v);
    });
    rule.add.forEach(function (pair) {
      if (!evaluate(pair[1], scope)) return;
      var x = evaluate(pair[0], scope);
      if (kept.indexOf(x) < 0) kept.push(x);
    });
    return kept.length ? kept : rule["else"].slice();
  }
  // a rule program (formula_tree.run_arrays): [[name, tree], ...] bound in order over env's names and
  // the names bound before; returns env with every binding (env itself is left as it was)
  function run(program, env, tables, read) {
    var out = Object.assign({}, env);
    // a binding env gives already is the caller's (formula_tree.run_arrays: a later step alone)
    program.forEach(function (b) { if (!Object.prototype.hasOwnProperty.call(env, b[0])) out[b[0]] = evaluate(b[1], out, tables, read); });
    return out;
  }
  // op ("+", "max", "min", "*") over a list of numbers, as the tree [op, ...values] (the empty sum 0,
  // the empty max -Infinity): a total over a program's steps is the interpreter's arithmetic
  function fold(op, values) {
    if (!values.length) return op === "+" ? 0 : op === "*" ? 1 : op === "max" ? -Infinity : Infinity;
    return evaluate([op].concat(values), {});
  }
  window.archFormula = { evaluate: evaluate, compile: compile, select: select, run: run, fold: fold };
})();
