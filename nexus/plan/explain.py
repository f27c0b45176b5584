"""EXPLAIN (a nexus extension to KIP): the chosen plan as text and JSON, without running it.

`EXPLAIN FIND …` answers `{"text": "...", "plan": {...}}`: every operator in execution order
with the index it uses and the planner's estimated row count after it, nested blocks
(OPTIONAL / NOT / UNION) indented under their parent. Values are shown as written (a
`:param` stays a placeholder), so the plan is the same for every execution of the command.
"""
from __future__ import annotations

from typing import Any

from ..syntax import ast as A
from ..syntax.printer import expr_text
from . import physical as P


def _v(value: A.Value | None) -> str:
    return "" if value is None else expr_text(value)


def _preds(values: tuple[A.Value, ...]) -> str:
    return " | ".join(_v(v) for v in values)


def _range(lo: int, hi: int | None) -> str:
    return f"{{{lo},{'' if hi is None else hi}}}"


def describe_step(step: P.Step) -> dict[str, Any]:
    """One operator as {op, index, detail}."""
    if isinstance(step, P.ConstConcept):
        a = step.atom
        how = f"id {_v(a.id)}" if a.id is not None else f"type {_v(a.type)}, name {_v(a.name)}"
        index = "element by id" if a.id is not None else "type+name → id (unique)"
        op = "CheckConstant" if step.bound else "LookupConcept"
        return {"op": op, "index": index, "detail": f"?{step.var} = {how}"}
    if isinstance(step, P.ScanType):
        return {"op": "ScanType", "index": "type → ids",
                "detail": f"?{step.var} of type {_v(step.type)}"}
    if isinstance(step, P.ScanName):
        return {"op": "ScanName", "index": "name → ids",
                "detail": f"?{step.var} named {_v(step.name)}"}
    if isinstance(step, P.CheckConcept):
        parts = [p for p in (f"type {_v(step.type)}" if step.type else "",
                             f"name {_v(step.name)}" if step.name else "") if p]
        return {"op": "CheckConcept", "index": "element head",
                "detail": f"?{step.var} has {', '.join(parts)}"}
    if isinstance(step, P.Expand):
        arrow = (f"?{step.start} -[{_preds(step.predicates)}]-> ?{step.end}"
                 if step.direction == "out" else
                 f"?{step.end} -[{_preds(step.predicates)}]-> ?{step.start}")
        link = f" as ?{step.link}" if step.link else ""
        index = "subject-predicate-object" if step.direction == "out" else \
            "object-subject-predicate"
        return {"op": "ExpandOut" if step.direction == "out" else "ExpandIn", "index": index,
                "detail": arrow + link}
    if isinstance(step, P.LinkCheck):
        link = f" as ?{step.link}" if step.link else ""
        return {"op": "LinkLookup", "index": "subject-predicate-object (point)",
                "detail": f"?{step.subject} -[{_preds(step.predicates)}]-> ?{step.object}{link}"}
    if isinstance(step, P.ScanLinks):
        link = f" as ?{step.link}" if step.link else ""
        return {"op": "ScanLinks", "index": "predicate-object-subject",
                "detail": f"?{step.subject} -[{_preds(step.predicates)}]-> ?{step.object}{link}"}
    if isinstance(step, P.LinkFromVar):
        return {"op": "LinkEnds", "index": "element head",
                "detail": f"?{step.link} = (?{step.subject}, {_preds(step.predicates)}, "
                          f"?{step.object})"}
    if isinstance(step, P.LinkById):
        return {"op": "CheckLinkId" if step.bound else "LookupLink", "index": "element by id",
                "detail": f"?{step.var} = {_v(step.atom.id)}"}
    if isinstance(step, P.PathWalk):
        arrow = (f"?{step.start} -[{_v(step.predicate)}{_range(step.lo, step.hi)}]-> ?{step.end}"
                 if step.direction == "out" else
                 f"?{step.end} -[{_v(step.predicate)}{_range(step.lo, step.hi)}]-> ?{step.start}")
        index = "subject-predicate-object" if step.direction == "out" else \
            "object-subject-predicate"
        return {"op": "PathWalk" + (" (check end)" if step.end_bound else ""),
                "index": index + " (breadth-first)", "detail": arrow}
    if isinstance(step, P.PathScan):
        return {"op": "PathScan", "index": "predicate-object-subject + breadth-first",
                "detail": f"?{step.subject} -[{_v(step.predicate)}"
                          f"{_range(step.lo, step.hi)}]-> ?{step.object}"}
    if isinstance(step, (P.ExpandAny, P.ScanAnyLinks, P.AnyLinkFromVar)):
        return _describe_any(step)
    if isinstance(step, P.Filter):
        return {"op": "Filter", "index": None, "detail": expr_text(step.expr)}
    if isinstance(step, P.OptionalJoin):
        return {"op": "Optional", "index": None, "detail": "left join (nulls on no match)"}
    if isinstance(step, P.AntiJoin):
        return {"op": "Not", "index": None, "detail": "anti join (drop rows that match)"}
    raise TypeError(step)  # pragma: no cover


def _describe_any(step: P.ExpandAny | P.ScanAnyLinks | P.AnyLinkFromVar) -> dict[str, Any]:
    """A predicate-variable clause (RC11 §3.4.2): `?p` shown in the predicate position,
    with `(bound)` when an earlier step bound it."""
    pred = f"?{step.pred}" + ("" if isinstance(step, P.AnyLinkFromVar) or not step.pred_bound
                              else " (bound)")
    narrowed = not isinstance(step, P.AnyLinkFromVar) and step.narrow is not None
    if narrowed and not isinstance(step, P.AnyLinkFromVar) and step.narrow is not None:
        pred += f" in {_v(step.narrow)}"
    if isinstance(step, P.AnyLinkFromVar):
        return {"op": "LinkEnds", "index": "element head",
                "detail": f"?{step.link} = (?{step.subject}, ?{step.pred}, ?{step.object})"}
    link = f" as ?{step.link}" if step.link else ""
    if isinstance(step, P.ScanAnyLinks):
        index = ("predicate-subject-object (the bound predicate)" if step.pred_bound else
                 "predicate-subject-object (the FILTER's predicates)" if narrowed else
                 "predicate-subject-object (every predicate, capped by max_link_scan)")
        return {"op": "ScanLinks", "index": index,
                "detail": f"?{step.subject} -[{pred}]-> ?{step.object}{link}"}
    out = step.direction == "out"
    arrow = (f"?{step.start} -[{pred}]-> ?{step.end}" if out else
             f"?{step.end} -[{pred}]-> ?{step.start}")
    index = ("subject-predicate-object" if out else "object-predicate-subject") + \
        (" (point)" if step.pred_bound else " (the FILTER's predicates)" if narrowed
         else " (every predicate of the bound end)")
    op = ("ExpandOut" if out else "ExpandIn") + (" (check end)" if step.end_bound else "")
    return {"op": op, "index": index, "detail": arrow + link}


def plan_json(plan: P.GroupPlan) -> dict[str, Any]:
    steps = []
    for i, step in enumerate(plan.steps):
        d = describe_step(step)
        d["estimated_rows"] = round(plan.estimates[i], 1) if i < len(plan.estimates) else None
        if isinstance(step, (P.OptionalJoin, P.AntiJoin)):
            d["block"] = plan_json(step.plan)
        steps.append(d)
    out: dict[str, Any] = {"steps": steps,
                           "variables": [v for v in plan.out_layout if not v.startswith("#")]}
    if plan.unions:
        out["unions"] = [plan_json(u) for u in plan.unions]
    if plan.main_empty:
        out["main_branch"] = "empty (rows come from UNION only)"
    if plan.then is not None:
        out["after_unions"] = plan_json(plan.then)
    return out


def plan_text(plan: dict[str, Any], indent: int = 0) -> list[str]:
    pad = "  " * indent
    lines = []
    for i, step in enumerate(plan["steps"], 1):
        index = f"  [{step['index']}]" if step["index"] else ""
        lines.append(f"{pad}{i}. {step['op']} {step['detail']}{index}  ~{step['estimated_rows']}"
                     " rows")
        if "block" in step:
            lines.extend(plan_text(step["block"], indent + 1))
    for j, union in enumerate(plan.get("unions", ()), 1):
        lines.append(f"{pad}UNION branch {j}:")
        lines.extend(plan_text(union, indent + 1))
    if "after_unions" in plan:
        lines.append(f"{pad}then, on every row of the branches above:")
        lines.extend(plan_text(plan["after_unions"], indent + 1))
    return lines


def explain_plan(plan: P.GroupPlan, find: A.Find) -> dict[str, Any]:
    tree = plan_json(plan)
    tail = []
    if any(isinstance(i, A.Aggregate) for i in find.items):
        tail.append("Aggregate (implicit GROUP BY)")
    else:
        tail.append("Distinct on " + ", ".join(
            sorted({f"?{A.item_path(i).var}" for i in find.items})))
    if find.order_by:
        tail.append("Sort by " + ", ".join(
            expr_text(k.expr) + (" DESC" if k.descending else " ASC")
            for k in find.order_by))
    if find.limit is not None:
        tail.append(f"Limit {_v(find.limit)}")
    tree["then"] = tail
    text = plan_text(tree) + [f"then: {t}" for t in tail]
    return {"text": "\n".join(text), "plan": tree}
