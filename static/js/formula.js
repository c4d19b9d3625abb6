// Formula trees (engine/spec/formula_tree.py) evaluated in the browser: the engine's own expressions,
// exported at build time, bound to the reader's inputs. Semantics mirror formula_tree.evaluate;
// tests/test_formula_tree.py checks this file against Python in Chromium.
(function () {
  "use strict";
  var REL = {
    "<": function (a, b) { return a < b; }, "<=": function (a, b) { return a <= b; },
    "==": function (a, b) { return a === b; }, ">": function (a, b) { return a > b; },
    ">=": function (a, b) { return a >= b; }, "!=": function (a, b) { return a !== b; }
  };
  function evaluate(tree, env) {
    if (typeof tree === "number") return tree;
    if (typeof tree === "string") {
      if (!Object.prototype.hasOwnProperty.call(env, tree)) throw new Error("formula: symbol " + tree + " is not bound");
      return Number(env[tree]);
    }
    var op = tree[0], i, n = tree.length;
    if (op === "pw") {
      for (i = 1; i < n; i++) if (evaluate(tree[i][1], env)) return evaluate(tree[i][0], env);
      return NaN;
    }
    var v = [];
    for (i = 1; i < n; i++) v.push(evaluate(tree[i], env));
    switch (op) {
      case "+": return v.reduce(function (a, b) { return a + b; }, 0);
      case "*": return v.reduce(function (a, b) { return a * b; }, 1);
      case "/": return v[0] / v[1];
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
    return function (env) { return evaluate(tree, env); };
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
  window.archFormula = { evaluate: evaluate, compile: compile, select: select };
})();
