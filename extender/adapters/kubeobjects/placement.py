"""Where a pod asks to run: ``spec.nodeSelector``, node affinity and tolerations, as the core's
``Eligibility`` (with the pod's non-GPU requests).

Sizes are bounded: a selector larger than railyard evaluates is a problem of the pod (its gang
gets that reason), never an unbounded loop per node.
"""

from __future__ import annotations

from typing import Any, Mapping

from extender.adapters.echo import shown
from extender.adapters.kubeobjects.fields import dict_at, list_at, str_at
from extender.core.model import Eligibility, Requirement, Resources, SelectorTerm, Toleration

MAX_TERMS = 32
MAX_REQUIREMENTS = 64
MAX_VALUES = 256
OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
FIELD_OPERATORS = frozenset({"In", "NotIn"})


def tolerations(pod: Mapping[str, Any]) -> tuple[Toleration, ...]:
    return tuple(
        Toleration(
            key=str_at(t, "key"),
            operator=str_at(t, "operator") or "Equal",
            value=str_at(t, "value"),
            effect=str_at(t, "effect"),
        )
        for t in list_at(dict_at(pod, "spec"), "tolerations")[:MAX_REQUIREMENTS]
        if isinstance(t, dict)
    )


def eligibility(pod: Mapping[str, Any], requests: Resources) -> tuple[Eligibility, tuple[str, ...]]:
    spec = dict_at(pod, "spec")
    problems: list[str] = []
    selector = dict_at(spec, "nodeSelector")
    pairs = tuple(sorted((k, v) for k, v in selector.items() if isinstance(k, str) and isinstance(v, str)))
    if len(pairs) != len(selector):
        problems.append("spec.nodeSelector must map strings to strings")
    if len(pairs) > MAX_REQUIREMENTS:
        problems.append(f"spec.nodeSelector has {len(pairs)} entries; railyard evaluates at most {MAX_REQUIREMENTS}")
        pairs = pairs[:MAX_REQUIREMENTS]
    affinity = dict_at(dict_at(spec, "affinity"), "nodeAffinity")
    required = None
    hard = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if hard is not None:
        where = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
        required = tuple(_term(t, f"{where}[{i}]", problems)
                         for i, t in enumerate(_bounded(list_at(hard, "nodeSelectorTerms"), MAX_TERMS, where, problems)))
    preferred = []
    where = "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
    for i, p in enumerate(_bounded(list_at(affinity, where.rsplit(".", 1)[1]), MAX_TERMS, where, problems)):
        weight = p.get("weight") if isinstance(p, dict) else None
        if isinstance(weight, int) and not isinstance(weight, bool) and 1 <= weight <= 100:
            preferred.append((weight, _term(dict_at(p, "preference"), f"{where}[{i}].preference", problems)))
        else:
            problems.append(f"{where}[{i}].weight must be an integer from 1 to 100, got {shown(weight)}")
    return Eligibility(pairs, required, tuple(preferred), tolerations(pod), requests), tuple(problems)


def _term(term: Any, where: str, problems: list[str]) -> SelectorTerm:
    exprs = tuple(_requirement(r, f"{where}.matchExpressions[{i}]", OPERATORS, problems) for i, r in
                  enumerate(_bounded(list_at(term, "matchExpressions"), MAX_REQUIREMENTS, where, problems)))
    fields = tuple(_requirement(r, f"{where}.matchFields[{i}]", FIELD_OPERATORS, problems) for i, r in
                   enumerate(_bounded(list_at(term, "matchFields"), MAX_REQUIREMENTS, where, problems)))
    return SelectorTerm(exprs, fields)


def _requirement(r: Any, where: str, operators: frozenset[str], problems: list[str]) -> Requirement:
    key, op = str_at(r, "key"), str_at(r, "operator")
    values = [v for v in list_at(r, "values") if isinstance(v, str)]
    if op not in operators:
        problems.append(f"{where}.operator must be one of {', '.join(sorted(operators))}, got {shown(op)}")
    if len(values) > MAX_VALUES:
        problems.append(f"{where} has {len(values)} values; railyard evaluates at most {MAX_VALUES}")
        values = values[:MAX_VALUES]
    return Requirement(key, op, tuple(values))


def _bounded(items: list[Any], limit: int, where: str, problems: list[str]) -> list[Any]:
    if len(items) > limit:
        problems.append(f"{where} has {len(items)} entries; railyard evaluates at most {limit}")
        return items[:limit]
    return items
