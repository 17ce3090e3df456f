"""SQL is built only from parameters and psycopg.sql composition.

Every statement the package runs comes from a ``.sql`` file (the named-query
loader, ``awa_django.sql``) or from ``psycopg.sql`` objects, and values
travel as parameters.  This test reads every module of ``awa_django`` (with
:mod:`ast`, nothing is imported) and finds each place that hands a query to
the database or to ``sql.SQL``: ``execute``/``executemany``/``copy``/
``stream`` calls, ``Execute(...)``/``Copy(...)`` steps and ``sql.SQL(...)``.
Such a query must not be an f-string with placeholders, ``%``-formatting,
``str.format``, ``str.join`` or a concatenation of something that is not a
literal or a loaded statement.  A name is followed to what was assigned to
it in the same function or module.  The checker itself is tested on planted
examples, good and bad.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGE = ROOT / "awa_django"

#: Methods that send their first argument to PostgreSQL as a query.
SINKS = {"execute", "executemany", "copy", "stream"}
#: Constructors whose first (or ``sql=``) argument is a query.
STEPS = {"Execute", "Copy", "SQL"}
#: Functions that return trusted SQL text: the named-query and schema loaders.
LOADERS = {"query", "queries", "schema_file", "named"}
#: psycopg.sql composables: composing them is the safe way to build SQL.
COMPOSABLES = {"SQL", "Identifier", "Literal", "Placeholder", "Composed"}


def _callee(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


class _Checker:
    """Finds the unsafe queries of one module."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.problems: list[tuple[int, str]] = []
        self._bound: dict[str, list[tuple[ast.AST, ast.expr]]] | None = None
        self._parents: dict[ast.AST, ast.AST] = {}
        for parent in ast.walk(tree):
            for child in ast.iter_child_nodes(parent):
                self._parents[child] = parent

    def run(self) -> list[tuple[int, str]]:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call):
                query = self._query_argument(node)
                if query is not None:
                    why = self._unsafe(query, node, set())
                    if why:
                        self.problems.append((node.lineno, why))
        return sorted(self.problems)

    def _query_argument(self, call: ast.Call) -> ast.expr | None:
        name = _callee(call.func)
        is_sink = isinstance(call.func, ast.Attribute) and name in SINKS
        if not (is_sink or name in STEPS):
            return None
        if call.args:
            return call.args[0]
        for keyword in call.keywords:
            if keyword.arg in ("query", "sql", "statement"):
                return keyword.value
        return None

    def _scope(self, node: ast.AST) -> ast.AST:
        while node in self._parents:
            node = self._parents[node]
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                return node
        return self.tree

    def _bindings(self) -> dict[str, list[tuple[ast.AST, ast.expr]]]:
        """name -> (scope, value) of every assignment of the module, once."""
        if self._bound is None:
            self._bound = {}
            for node in ast.walk(self.tree):
                targets: list[ast.expr] = []
                if isinstance(node, ast.Assign):
                    targets, value = node.targets, node.value
                elif isinstance(node, ast.AnnAssign) and node.value is not None:
                    targets, value = [node.target], node.value
                elif isinstance(node, ast.AugAssign):
                    targets, value = [node.target], ast.BinOp(node.target, node.op, node.value)
                elif isinstance(node, ast.NamedExpr):
                    targets, value = [node.target], node.value
                for target in targets:
                    if isinstance(target, ast.Name):
                        self._bound.setdefault(target.id, []).append((self._scope(node), value))
        return self._bound

    def _assigned(self, name: str, at: ast.AST) -> list[ast.expr]:
        """What ``name`` is bound to in the scope of ``at`` or at module level."""
        scopes = {self._scope(at), self.tree}
        return [value for scope, value in self._bindings().get(name, []) if scope in scopes]

    def _composable(self, node: ast.expr) -> bool:
        """A psycopg.sql object (or a composition of them)."""
        if isinstance(node, ast.Call):
            name = _callee(node.func)
            if name in COMPOSABLES:
                return True
            if isinstance(node.func, ast.Attribute) and node.func.attr in ("format", "join"):
                return self._composable(node.func.value)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self._composable(node.left) and self._composable(node.right)
        return False

    def _trusted_text(self, node: ast.expr, at: ast.AST, seen: set[str]) -> bool:
        """A literal, or a statement from the loaders (possibly concatenated)."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return True
        if isinstance(node, ast.JoinedStr):
            return all(isinstance(part, ast.Constant) for part in node.values)
        if isinstance(node, ast.Call) and _callee(node.func) in LOADERS:
            return True
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self._trusted_text(node.left, at, seen) and self._trusted_text(
                node.right, at, seen
            )
        if isinstance(node, ast.Name) and node.id not in seen:
            values = self._assigned(node.id, at)
            return bool(values) and all(
                self._trusted_text(value, at, seen | {node.id}) for value in values
            )
        return False

    def _unsafe(self, node: ast.expr, at: ast.AST, seen: set[str]) -> str | None:
        """Why ``node`` is a query built by formatting, or None."""
        if isinstance(node, ast.JoinedStr):
            if any(isinstance(part, ast.FormattedValue) for part in node.values):
                return "f-string"
            return None
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, ast.Mod):
                return "%-formatting"
            if isinstance(node.op, ast.Add):
                if self._composable(node) or self._trusted_text(node, at, seen):
                    return None
                return "concatenation with a non-literal part"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("format", "format_map", "join"):
                if self._composable(node):
                    return None
                return f"str.{node.func.attr}"
            if node.func.attr in ("replace", "strip", "rstrip", "lstrip"):
                return self._unsafe(node.func.value, at, seen)
        if isinstance(node, ast.Call) and _callee(node.func) in STEPS:
            # sql.SQL(...) or Execute(...) handed on: its own argument is checked there.
            return None
        if isinstance(node, ast.Name) and node.id not in seen:
            for value in self._assigned(node.id, at):
                why = self._unsafe(value, at, seen | {node.id})
                if why:
                    return f"{why} (through {node.id!r})"
        return None


def unsafe_queries(source: str) -> list[tuple[int, str]]:
    """(line, why) of every query in ``source`` that is built by formatting."""
    return _Checker(ast.parse(source)).run()


def test_the_package_builds_sql_only_from_parameters_and_composition():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, why in unsafe_queries(path.read_text(encoding="utf-8")):
            found.append(f"{path.relative_to(ROOT)}:{line}: {why}")
    assert found == []


def test_the_scan_reaches_the_places_that_run_sql():
    """The checker is not vacuous: it sees the package's query call sites."""
    seen = 0
    for path in PACKAGE.rglob("*.py"):
        checker = _Checker(ast.parse(path.read_text(encoding="utf-8")))
        seen += sum(
            1
            for node in ast.walk(checker.tree)
            if isinstance(node, ast.Call) and checker._query_argument(node) is not None
        )
    assert seen >= 10


BAD = {
    "f-string": """
        def f(cursor, queue):
            cursor.execute(f"SELECT * FROM awa.jobs WHERE queue = '{queue}'")
    """,
    "percent": """
        def f(cursor, job_id):
            cursor.execute("SELECT * FROM awa.jobs WHERE id = %s" % job_id)
    """,
    "format": """
        def f(conn, name):
            conn.execute("DROP TABLE awa.{}".format(name))
    """,
    "concatenation": """
        def f(cursor, name):
            cursor.execute("GRANT USAGE ON SCHEMA awa TO " + name)
    """,
    "through a variable": """
        def f(cursor, name):
            statement = f"CREATE ROLE {name}"
            cursor.execute(statement)
    """,
    "augmented": """
        def f(cursor, role):
            statement = "GRANT awa_web TO "
            statement += role
            cursor.execute(statement)
    """,
    "sql.SQL of an f-string": """
        from psycopg import sql
        def f(cursor, role):
            cursor.execute(sql.SQL(f"CREATE ROLE {role}"))
    """,
    "a step": """
        def f(queue):
            yield Execute(f"SELECT count(*) FROM awa.jobs WHERE queue = '{queue}'")
    """,
    "join": """
        def f(cursor, names):
            cursor.execute(", ".join(names))
    """,
    "a loaded query, formatted": """
        def f(cursor, table):
            cursor.execute(query("maintenance", "x").format(table=table))
    """,
}

GOOD = {
    "parameters": """
        def f(cursor, job_id):
            cursor.execute("SELECT * FROM awa.jobs WHERE id = %s", [job_id])
    """,
    "named query": """
        def f(queue):
            yield Execute.named("jobs", "get_job", [queue])
    """,
    "loader": """
        def f(cursor, queue):
            cursor.execute(query("jobs", "list"), {"queue": queue})
    """,
    "composition": """
        from psycopg import sql
        def f(conn, channel, role):
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier("g"), sql.Literal(role)))
    """,
    "composed loaded statement": """
        from psycopg import sql
        def f(conn, channel):
            conn.execute(sql.SQL(query("doctor", "listen")).format(channel=sql.Identifier(channel)))
    """,
    "a step from a variable": """
        def f(statements):
            for statement in statements:
                yield Execute(statement.replace("%", "%%"))
    """,
    "literal pieces": """
        QUERY = "SELECT 1" + " FROM awa.jobs"
        def f(cursor):
            cursor.execute(QUERY)
            cursor.execute(f"SELECT 2")
    """,
}


@pytest.mark.parametrize("snippet", BAD.values(), ids=BAD.keys())
def test_the_checker_finds_planted_formatting(snippet: str):
    assert unsafe_queries(textwrap.dedent(snippet)) != []


@pytest.mark.parametrize("snippet", GOOD.values(), ids=GOOD.keys())
def test_the_checker_accepts_parameters_and_composition(snippet: str):
    assert unsafe_queries(textwrap.dedent(snippet)) == []


def test_a_planted_module_in_a_package_copy_fails_the_scan(tmp_path: Path):
    planted = tmp_path / "planted.py"
    planted.write_text(textwrap.dedent(BAD["through a variable"]))
    problems = unsafe_queries(planted.read_text())
    assert problems and problems[0][1] == "f-string (through 'statement')"
