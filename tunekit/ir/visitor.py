"""Generic traversal of the loop IR: `Visitor` walks, `Mutator` rebuilds."""
from __future__ import annotations

from dataclasses import fields, replace

from .nodes import Buffer, Expr, Stmt, Var, Seq


def _is_node(x) -> bool:
    return isinstance(x, (Expr, Stmt))


_FIELDS: dict[type, tuple[str, ...]] = {}


def _field_names(node) -> tuple[str, ...]:
    # dataclasses.fields() is slow and lowering walks many nodes: cache per class
    names = _FIELDS.get(type(node))
    if names is None:
        names = _FIELDS[type(node)] = tuple(f.name for f in fields(node))
    return names


def children(node) -> list:
    """Return the direct Expr/Stmt children of `node`, in field order."""
    out = []
    for name in _field_names(node):
        v = getattr(node, name)
        if _is_node(v):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out.extend(x for x in v if _is_node(x))
    return out


def _method(obj, node):
    for cls in type(node).__mro__:
        m = getattr(obj, "visit_" + cls.__name__, None)
        if m is not None:
            return m
    return obj.generic_visit


class Visitor:
    """Walk a tree; define `visit_<ClassName>(node)` to act on a node type (a
    subclass without its own method uses its base's). Call
    `self.generic_visit(node)` inside it to keep descending."""

    def visit(self, node):
        return _method(self, node)(node)

    def generic_visit(self, node):
        for c in children(node):
            self.visit(c)


class Mutator:
    """Rebuild a tree; `visit_<ClassName>(node)` returns the replacement node.
    Unchanged subtrees are shared, not copied."""

    def visit(self, node):
        return _method(self, node)(node)

    def generic_visit(self, node):
        changes = {}
        for name in _field_names(node):
            v = getattr(node, name)
            if _is_node(v):
                nv = self.visit(v)
                if nv is not v:
                    changes[name] = nv
            elif isinstance(v, (list, tuple)) and any(_is_node(x) for x in v):
                nv = [self.visit(x) if _is_node(x) else x for x in v]
                if any(a is not b for a, b in zip(nv, v)):
                    changes[name] = type(v)(nv)
        if not changes:
            return node
        if isinstance(node, Seq):
            return Seq(changes["stmts"])
        return _rebuild(node, changes)


def _rebuild(node, changes):
    from . import nodes as n
    if isinstance(node, n.BinOp):
        return n.binop(node.op, changes.get("a", node.a), changes.get("b", node.b))
    if isinstance(node, n.Select):
        return n.select(changes.get("cond", node.cond), changes.get("t", node.t), changes.get("f", node.f))
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

    def visit_Store(self, node):
        node = self.generic_visit(node)
        b = self.mapping.get(node.buffer)
        return replace(node, buffer=b) if b is not None else node


def replace_buffers(node, mapping: dict[Buffer, Buffer]):
    """Point every Load/Store of a buffer in `mapping` at its replacement."""
    return _BufferSubst(mapping).visit(node)


def free_vars(node) -> set[Var]:
    """Return the variables an expression or statement reads."""
    out: set[Var] = set()

    class V(Visitor):
        def visit_Var(self, v):
            out.add(v)
    V().visit(node)
    return out
