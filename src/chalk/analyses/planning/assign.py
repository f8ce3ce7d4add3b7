"""The cheapest choice of one option per model within shared limits: a small integer program, solved exactly.

Each model i picks one option j, which costs c[i][j] ($/hour) and uses u[i][j][k] of each limited resource k (GPUs
of a chip type, GPUs of a chip in a region, watts, dollars for the budget). Minimise sum c subject to
sum u[:, k] <= L[k] for every k.

Method: depth-first branch and bound. Models are taken in descending order of their cheapest option (the
expensive decisions first), each model's options cheapest first; a branch is cut when the cost so far plus every
remaining model's cheapest option reaches the best found, or when a resource's use so far plus every remaining
model's least use of it exceeds its limit. The first complete assignment is the greedy one (each model its
cheapest option that still fits); the search then proves it optimal or improves it. It stops after `node_limit`
nodes with the best found, said (`proven_optimal` False).
"""

from __future__ import annotations

import numpy as np

#: Slack on a limit (a fleet exactly at its budget fits).
_EPS = 1e-9


def solve(costs: list, uses: list, limits, node_limit: int = 2_000_000) -> dict:
    """{'choice': [option index per model] or None when no assignment fits, 'cost', 'proven_optimal', 'nodes'}.

    `costs[i]`: the options' costs of model i (1-D); `uses[i]`: their use of each resource (options x resources);
    `limits`: each resource's limit (inf where unlimited)."""
    n = len(costs)
    L = np.asarray(limits, dtype=float).reshape(-1)
    K = L.size
    cs = [np.asarray(c, dtype=float).reshape(-1) for c in costs]
    us = [np.asarray(u, dtype=float).reshape(len(c), K) for c, u in zip(cs, uses)]
    if any(c.size == 0 for c in cs):
        return {"choice": None, "cost": None, "proven_optimal": True, "nodes": 0}
    order = sorted(range(n), key=lambda i: (-float(cs[i].min()), i))
    cs = [cs[i] for i in order]
    us = [us[i] for i in order]
    ranks = [np.lexsort((np.arange(c.size), c)) for c in cs]  # cheapest first, ties by index: deterministic
    min_cost = np.array([c.min() for c in cs])
    tail_cost = np.concatenate([np.cumsum(min_cost[::-1])[::-1], [0.0]])
    min_use = np.array([u.min(axis=0) for u in us]).reshape(n, K)
    tail_use = np.vstack([np.cumsum(min_use[::-1], axis=0)[::-1], np.zeros((1, K))])
    best = {"cost": np.inf, "choice": None}
    nodes = [0]
    pick = [0] * n

    def dfs(i: int, cost: float, used: np.ndarray) -> bool:
        """False when the node limit is reached."""
        if i == n:
            if cost < best["cost"] - 1e-12:
                best["cost"], best["choice"] = cost, list(pick)
            return True
        for j in ranks[i]:
            c = cost + cs[i][j]
            if c + tail_cost[i + 1] >= best["cost"] - 1e-12:
                break  # options are cheapest first: every later one is cut too
            u = used + us[i][j]
            if np.any(u + tail_use[i + 1] > L * (1 + _EPS) + _EPS):
                continue
            nodes[0] += 1
            if nodes[0] > node_limit:
                return False
            pick[i] = int(j)
            if not dfs(i + 1, c, u):
                return False
        return True

    complete = dfs(0, 0.0, np.zeros(K))
    if best["choice"] is None:
        return {"choice": None, "cost": None, "proven_optimal": complete, "nodes": nodes[0]}
    choice = [0] * n
    for pos, i in enumerate(order):
        choice[i] = best["choice"][pos]
    return {"choice": choice, "cost": float(best["cost"]), "proven_optimal": complete, "nodes": nodes[0]}


def binding(costs: list, uses: list, limits, names: list, node_limit: int = 2_000_000) -> dict:
    """The optimum, and for each limited resource the optimum without that limit: {'base': solve(...),
    'without': {name: solve(...) with that one limit lifted}} (only limits that are finite)."""
    L = np.asarray(limits, dtype=float).reshape(-1)
    base = solve(costs, uses, L, node_limit)
    without = {}
    for k, name in enumerate(names):
        if not np.isfinite(L[k]):
            continue
        lifted = L.copy()
        lifted[k] = np.inf
        without[name] = solve(costs, uses, lifted, node_limit)
    return {"base": base, "without": without}
