"""The precedence graph of the black-box checker (`sim.history.checker.blackbox`)
and the search for its cycles.

Nodes 0..n-1 are a history's operations; nodes added later are virtual (a
"time" or "version" node) and exist only to keep the graph linear in the
history's size. A cycle's length counts operations only, so the shortest cycle
found is the one with the fewest operations, which is what a reader must follow.
"""

from __future__ import annotations

from collections import deque
from typing import Final, final

__all__ = ["OP", "TIME", "VERSION", "Graph", "find_cycles"]

#: Node types: an operation, a point in real time, a version of a table.
OP: Final = 0
TIME: Final = 1
VERSION: Final = 2
#: At most this many cycles are reported (one per strongly connected component).
_MAX_CYCLES: Final = 20


@final
class Graph:
    """Adjacency lists; nodes 0..n-1 are the history's rows, later ones virtual
    (`node`)."""

    def __init__(self, n: int) -> None:
        self.succ: list[list[int]] = [[] for _ in range(n)]
        self.typ = bytearray(n)
        self.label: dict[tuple[int, int], str] = {}  # op->op edges that need words

    def node(self, typ: int) -> int:
        self.succ.append([])
        self.typ.append(typ)
        return len(self.succ) - 1


def find_cycles(g: Graph) -> list[list[int]]:
    """Kahn's algorithm; if some nodes remain, their strongly connected
    components each yield one shortest cycle (fewest operations)."""
    succ = g.succ
    n = len(succ)
    indeg = [0] * n
    for s in succ:
        for v in s:
            indeg[v] += 1
    stack = [u for u in range(n) if indeg[u] == 0]
    done = 0
    while stack:
        u = stack.pop()
        done += 1
        for v in succ[u]:
            d = indeg[v] - 1
            indeg[v] = d
            if d == 0:
                stack.append(v)
    if done == n:
        return []
    rest = [u for u in range(n) if indeg[u] > 0]
    out = []
    for comp in _sccs(succ, rest):
        if len(comp) > 1:
            out.append(_shortest_cycle(g, comp))
        if len(out) >= _MAX_CYCLES:
            break
    return out


def _sccs(succ: list[list[int]], nodes: list[int]) -> list[list[int]]:
    """Tarjan's algorithm, iterative, over the subgraph induced by `nodes`."""
    inside = set(nodes)
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on: set[int] = set()
    stack: list[int] = []
    comps: list[list[int]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            u, pos = work[-1]
            if pos == 0:
                index[u] = low[u] = counter
                counter += 1
                stack.append(u)
                on.add(u)
            edges = succ[u]
            while pos < len(edges):
                v = edges[pos]
                pos += 1
                if v not in inside:
                    continue
                if v not in index:
                    work[-1] = (u, pos)
                    work.append((v, 0))
                    break
                if v in on:
                    low[u] = min(low[u], index[v])
            else:
                work.pop()
                if work:
                    p = work[-1][0]
                    low[p] = min(low[p], low[u])
                if low[u] == index[u]:
                    comp = []
                    while True:
                        x = stack.pop()
                        on.discard(x)
                        comp.append(x)
                        if x == u:
                            break
                    comps.append(sorted(comp))
                continue
    comps.sort(key=lambda c: c[0])
    return comps


def _shortest_cycle(g: Graph, comp: list[int], tries: int = 8) -> list[int]:
    """A cycle within `comp` with the fewest operation nodes (0-1 BFS, virtual
    nodes cost nothing), from a few deterministic start operations."""
    inside = set(comp)
    succ, typ = g.succ, g.typ
    starts = [u for u in comp if typ[u] == OP][:tries] or comp[:1]
    best: list[int] | None = None
    for s in starts:
        dist = {s: 0}
        parent: dict[int, int] = {}
        dq: deque[int] = deque([s])
        found = -1
        while dq:
            u = dq.popleft()
            for v in succ[u]:
                if v not in inside:
                    continue
                if v == s:
                    found = u
                    break
                w = 0 if typ[v] != OP else 1
                nd = dist[u] + w
                if v not in dist or nd < dist[v]:
                    dist[v] = nd
                    parent[v] = u
                    if w == 0:
                        dq.appendleft(v)
                    else:
                        dq.append(v)
            if found >= 0:
                break
        if found < 0:
            continue
        cyc = [found]
        while cyc[-1] != s:
            cyc.append(parent[cyc[-1]])
        cyc.reverse()
        if best is None or _ops_in(g, cyc) < _ops_in(g, best):
            best = cyc
    return best or comp[:1]


def _ops_in(g: Graph, cyc: list[int]) -> int:
    return sum(1 for u in cyc if g.typ[u] == OP)
