"""Generic traversal of the loop IR: `Visitor` walks, `Mutator` rebuilds."""
from __future__ import annotations

import functools
from dataclasses import fields, replace

from .nodes import BinOp, Buffer, Const, Expr, Select, Stmt, Var, binop, select

_NODE = (Expr, Stmt)


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    # dataclasses.fields() is slow and lowering walks many nodes: cache per class
    return tuple(f.name for f in fields(cls))


def children(node) -> list:
    """Return the direct Expr/Stmt children of `node`, in field order."""
    out = []
    for name in _field_names(type(node)):
        v = getattr(node, name)
        if isinstance(v, _NODE):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out.extend(x for x in v if isinstance(x, _NODE))
    return out


def _method(cls, node_type):
    # lowering visits ~10^5 nodes per program: look each (visitor class, node class)
    # pair up once, in a table kept on the visitor class itself
    if "_dispatch" not in cls.__dict__:
        cls._dispatch = {}
    table = cls._dispatch
    fn = table.get(node_type)
    if fn is None:
        fn = next((getattr(cls, f"visit_{c.__name__}") for c in node_type.__mro__
                   if hasattr(cls, f"visit_{c.__name__}")), cls.generic_visit)
        table[node_type] = fn
    return fn


class Visitor:
    """Walk a tree; define `visit_<ClassName>(node)` to act on a node type (a
    subclass without its own method uses its base's). Call
    `self.generic_visit(node)` inside it to keep descending."""

    def visit(self, node):
        return _method(type(self), type(node))(self, node)

    def generic_visit(self, node):
        t = type(node)
        if t is BinOp:   # most nodes are these three: skip the field walk
            self.visit(node.a)
            self.visit(node.b)
            return
        if t is Var or t is Const:
            return
        for c in children(node):
            self.visit(c)


class Mutator:
    """Rebuild a tree; `visit_<ClassName>(node)` returns the replacement node.
    Unchanged subtrees are shared, not copied."""

    def visit(self, node):
        return _method(type(self), type(node))(self, node)

    def generic_visit(self, node):
        t = type(node)
        if t is BinOp:   # most nodes are these three: skip the field walk
            a, b = self.visit(node.a), self.visit(node.b)
            return node if a is node.a and b is node.b else binop(node.op, a, b)
        if t is Var or t is Const:
            return node
        changes = {}
        for name in _field_names(type(node)):
            v = getattr(node, name)
            if isinstance(v, _NODE):
                nv = self.visit(v)
                if nv is not v:
                    changes[name] = nv
            elif isinstance(v, (list, tuple)) and any(isinstance(x, _NODE) for x in v):
                nv = [self.visit(x) if isinstance(x, _NODE) else x for x in v]
                if any(a is not b for a, b in zip(nv, v)):
                    changes[name] = type(v)(nv)
        return _rebuild(node, changes) if changes else node


def _rebuild(node, changes):
    if isinstance(node, BinOp):
        return binop(node.op, changes.get("a", node.a), changes.get("b", node.b))
    if isinstance(node, Select):
        return select(changes.get("cond", node.cond), changes.get("t", node.t), changes.get("f", node.f))
    return replace(node, **changes)


class _Subst(Mutator):
    def __init__(self, mapping):
        self.mapping = mapping

    def visit_Var(self, v):
        return self.mapping.get(v, v)


def substitute(node, mapping: dict) -> Expr | Stmt:
    """Replace variables by expressions (`mapping`: Var -> Expr)."""
    return _Subst(mapping).visit(node) if mapping else node


class _BufferSubst(Mutator):
    def __init__(self, mapping):
        self.mapping = mapping

    def visit_Load(self, node):
        node = self.generic_visit(node)
        b = self.mapping.get(node.buffer)
        return replace(node, buffer=b) if b is not None else node

    visit_Store = visit_Load


def replace_buffers(node, mapping: dict[Buffer, Buffer]):
    """Point every Load/Store of a buffer in `mapping` at its replacement."""
    return _BufferSubst(mapping).visit(node)


class _FreeVars(Visitor):
    def __init__(self):
        self.out: set[Var] = set()

    def visit_Var(self, v):
        self.out.add(v)


def free_vars(node) -> set[Var]:
    """Return the variables an expression or statement reads."""
    if isinstance(node, Var):
        return {node}
    v = _FreeVars()
    v.visit(node)
    return v.out
