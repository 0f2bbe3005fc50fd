#!/usr/bin/env python3
"""Regenerate golden answers for the TPC-H / TPC-DS queries with DuckDB.

DuckDB is the independent oracle: it reads the very same Parquet files Skiff
reads and runs the query texts in tests/queries/<bench>/. The answers are
written as CSV plus a meta.json per scale factor; the Rust tests only read
those files and never need Python.

    python3 tests/golden/regen.py --bench tpcds --sf 1 --data /work/data/tpcds-sf1
    python3 tests/golden/regen.py --bench tpch --sf 0.01 --data DIR --queries q01,q15

See tests/golden/README.md for the file formats and for every way this script
makes DuckDB follow DataFusion's semantics.
"""

from __future__ import annotations

import argparse
import datetime
import decimal
import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import duckdb

REPO = Path(__file__).resolve().parents[2]
QUERIES = REPO / "tests" / "queries"
GOLDEN = REPO / "tests" / "golden"

# Settings that make DuckDB evaluate the DataFusion dialect the way DataFusion
# does, so the answers are DataFusion's answers and not DuckDB's.
SESSION_SETTINGS = [
    # DataFusion (like PostgreSQL) divides two integers with truncation;
    # DuckDB's `/` would return a DOUBLE (TPC-DS q21, q34, q73, q83).
    "SET integer_division = true",
    # DataFusion sorts NULLs as the largest value: last ascending, first
    # descending. DuckDB's default is NULLS LAST for both directions.
    "SET default_null_order = 'nulls_last_on_asc_first_on_desc'",
]

# Per-query textual rewrites, applied before DuckDB sees the text. Each entry
# is (old, new, why); `old` must occur exactly once, so a rewrite can never
# silently stop applying when a query file changes. Rewrites keep the meaning
# the query has in DataFusion; they never change what is asked.
REWRITES: dict[tuple[str, str], list[tuple[str, str, str]]] = {
    ("tpcds", "q90"): [
        (
            "5200) at,",
            '5200) "at",',
            "`at` is a reserved word in DuckDB (AT TIME ZONE), so the derived "
            "table alias must be quoted; DataFusion accepts it bare.",
        ),
    ],
    ("tpcds", "q66"): [
        (
            f"sum({month}_sales/w_warehouse_sq_ft)",
            f"sum(trunc({month}_sales/w_warehouse_sq_ft, 6))",
            "DataFusion divides the DECIMAL(38,2) monthly sum by the INT "
            "square footage into a DECIMAL(38,6), truncating each quotient "
            "to 6 decimals before the outer sum adds them up; DuckDB divides "
            "in DOUBLE. With several truncated quotients per group the sums "
            "differ by more than 1e-6.",
        )
        for month in ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
    ],
    ("tpcds", "q54"): [
        (
            "cast((revenue/50) as int)",
            "cast(trunc(revenue/50) as int)",
            "DataFusion's CAST of a decimal to an integer truncates toward "
            "zero; DuckDB's rounds to nearest, which would move customers "
            "between segments.",
        ),
    ],
}

# Runtime errors that are the right answer: DataFusion fails the same way, so
# the test expects an error instead of rows. Keyed by (bench, sf label, query).
EXPECTED_ERRORS: dict[tuple[str, str, str], tuple[str, str]] = {
    ("tpcds", "sf0.01", "q12"): (
        "Division by zero",
        "division by zero: at SF 0.01 the only web sale of class 'mystery' "
        "(category Books) in the 30-day window has ws_ext_sales_price 0, so "
        "that class's window total is 0 and the DECIMAL revenue ratio "
        "divides by it (in DataFusion too)",
    ),
    ("tpcds", "sf0.01", "q90"): (
        "Division by zero",
        "division by zero: at SF 0.01 no web page has 5000-5200 characters, "
        "so both counts are 0 and 0/0 on DECIMAL fails (in DataFusion too)",
    ),
}


# --- SQL text analysis -------------------------------------------------------

TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<comment>--[^\n]*|/\*.*?\*/)
  | (?P<str>'(?:[^']|'')*')
  | (?P<qid>"(?:[^"]|"")*")
  | (?P<num>\d+(?:\.\d*)?|\.\d+)
  | (?P<word>[A-Za-z_][A-Za-z_0-9$]*)
  | (?P<punct>.)
    """,
    re.VERBOSE | re.DOTALL,
)


@dataclass
class Tok:
    kind: str
    text: str
    start: int
    end: int

    @property
    def low(self) -> str:
        return self.text.lower()


def tokenize(sql: str) -> list[Tok]:
    """Tokens without whitespace and comments, so keywords inside string
    literals, quoted identifiers and comments are never mistaken for SQL."""
    toks = []
    for m in TOKEN.finditer(sql):
        kind = m.lastgroup or "punct"
        if kind in ("ws", "comment"):
            continue
        toks.append(Tok(kind, m.group(), m.start(), m.end()))
    return toks


def split_statements(sql: str) -> list[str]:
    """Splits on top-level `;`, keeping statements that contain any token."""
    statements, start = [], 0
    for tok in tokenize(sql):
        if tok.kind == "punct" and tok.text == ";":
            statements.append(sql[start : tok.start])
            start = tok.end
    statements.append(sql[start:])
    return [s for s in statements if tokenize(s)]


def returns_rows(statement: str) -> bool:
    toks = tokenize(statement)
    return bool(toks) and toks[0].low in ("select", "with", "values", "(", "from", "table")


@dataclass
class OrderInfo:
    items: list[str]  # ORDER BY items as written
    limit: int | None
    limit_tok: Tok | None


def top_level_order(statement: str) -> OrderInfo:
    """The outermost ORDER BY (paren depth 0) and LIMIT of a statement.

    Subqueries, CTE bodies and window specifications are all inside
    parentheses, so only the final ORDER BY that sorts the result is at depth
    0; if several exist (not valid SQL) the last one wins.
    """
    toks = tokenize(statement)
    depth, order_at, limit_tok = 0, None, None
    limit = None
    for i, tok in enumerate(toks):
        if tok.text == "(":
            depth += 1
        elif tok.text == ")":
            depth -= 1
        elif depth == 0 and tok.low == "order" and i + 1 < len(toks) and toks[i + 1].low == "by":
            order_at = i + 2
        elif depth == 0 and tok.low == "limit" and i + 1 < len(toks) and toks[i + 1].kind == "num":
            limit_tok = toks[i + 1]
            limit = int(limit_tok.text)
    items: list[str] = []
    if order_at is not None:
        depth, item_start = 0, order_at
        end = len(toks)
        for j in range(order_at, len(toks)):
            tok = toks[j]
            if tok.text == "(":
                depth += 1
            elif tok.text == ")":
                depth -= 1
            elif depth == 0 and tok.low in ("limit", "offset", "fetch"):
                end = j
                break
            elif depth == 0 and tok.text == ",":
                items.append(statement[toks[item_start].start : toks[j - 1].end])
                item_start = j + 1
        if item_start < end:
            items.append(statement[toks[item_start].start : toks[end - 1].end])
    items = [" ".join(item.split()) for item in items]
    return OrderInfo(items, limit, limit_tok)


# Words that end an expression rather than name an alias after it
# (`case ... end`, `x is null`, ...).
NOT_ALIAS = {
    "end", "null", "true", "false", "and", "or", "not", "is", "in", "like",
    "between", "then", "else", "when", "case", "distinct", "all", "from",
}


@dataclass
class SelectItem:
    expr: str  # the expression, normalized by `normalize`
    alias: str | None  # lowercased alias (`expr AS alias` or `expr alias`)


def normalize(toks: list[Tok]) -> str:
    """Token texts, words lowercased, joined by single spaces: a key for
    comparing two spellings of one expression (`Sum( x )` vs `sum(x)`)."""
    return " ".join(t.low if t.kind == "word" else t.text for t in toks)


def top_level_select_list(statement: str) -> list[SelectItem] | None:
    """The items of the SELECT list that names the result's columns: the
    first SELECT at paren depth 0 (CTE bodies and subqueries are nested;
    after a top-level UNION the first branch names the columns). None if
    there is no such list or it holds a `*`, since then items and columns
    are not one to one."""
    toks = tokenize(statement)
    depth, start = 0, None
    for i, tok in enumerate(toks):
        if tok.text == "(":
            depth += 1
        elif tok.text == ")":
            depth -= 1
        elif depth == 0 and tok.low == "select":
            start = i + 1
            break
    if start is None:
        return None
    while start < len(toks) and toks[start].low in ("distinct", "all"):
        start += 1
    items: list[list[Tok]] = [[]]
    depth = 0
    for tok in toks[start:]:
        if tok.text == "(":
            depth += 1
        elif tok.text == ")":
            depth -= 1
        if depth == 0 and tok.low in ("from", "where", "group", "order", "limit", "union", "intersect", "except"):
            break
        if depth == 0 and tok.text == ",":
            items.append([])
        else:
            items[-1].append(tok)
    result = []
    for item in items:
        if not item or any(t.text == "*" and (i == len(item) - 1) for i, t in enumerate(item)):
            return None
        alias = None
        last = item[-1]
        if len(item) >= 3 and item[-2].low == "as" and last.kind in ("word", "qid", "str"):
            # DataFusion also takes a string literal as the alias (`AS 'x'`).
            alias, item = last, item[:-2]
        elif (
            len(item) >= 2
            and last.kind in ("word", "qid")
            and last.low not in NOT_ALIAS
            and item[-2].text != "."
            and not (item[-2].kind == "word" and item[-2].low in NOT_ALIAS)
        ):
            alias, item = last, item[:-1]
        name = None
        if alias is not None:
            if alias.kind == "qid":
                name = alias.text[1:-1].replace('""', '"').lower()
            elif alias.kind == "str":
                name = alias.text[1:-1].replace("''", "'").lower()
            else:
                name = alias.low
        result.append(SelectItem(normalize(item), name))
    return result


def order_keys(items: list[str], columns: list[str], statement: str = "") -> list[list] | None:
    """Maps ORDER BY items to output columns: `[[index, "asc"|"desc"], ...]`.

    Resolves, in this order: an ordinal; an output name; an expression of
    the top-level SELECT list, spelled the same (`order by sum(x)` against
    an unaliased `sum(x)`, `order by i_brand_id` against `i_brand_id AS
    brand_id` or `i_brand_id brand_id`, `order by t.c` against `t.c c2`);
    `qualifier.name` when `name` is a unique output name; a column name
    against a SELECT item naming the same column with or without a
    qualifier (`c` against `t.c AS c2`, `t.c` against `c AS c2`). Anything
    else, or an item matching several columns, gives None: the order cannot
    be checked key by key. The SELECT list is only used when it has one item
    per output column (no `*`).
    """
    lowered = [c.lower() for c in columns]
    select = top_level_select_list(statement) if statement else None
    if select is not None and len(select) != len(columns):
        select = None
    column_ref = re.compile(r"[a-z_][a-z_0-9]*( \. [a-z_][a-z_0-9]*)?")

    def unique(hits: list[int]) -> int | None:
        return hits[0] if len(hits) == 1 else None

    def same_expression(key: str) -> list[int]:
        return [i for i, item in enumerate(select or []) if item.expr == key]

    def same_column(key: str) -> list[int]:
        # Column references that differ only in that one side carries a
        # qualifier; two different qualifiers are two different columns.
        if not column_ref.fullmatch(key):
            return []
        hits = []
        for i, item in enumerate(select or []):
            if column_ref.fullmatch(item.expr) and (" . " in key) != (" . " in item.expr):
                if key.rsplit(" . ", 1)[-1] == item.expr.rsplit(" . ", 1)[-1]:
                    hits.append(i)
        return hits

    keys = []
    for item in items:
        words = item.split()
        direction = "asc"
        # Drop NULLS FIRST/LAST, then ASC/DESC.
        if len(words) >= 2 and words[-2].lower() == "nulls":
            return None  # explicit null order: leave it to a strict compare
        if words and words[-1].lower() in ("asc", "desc"):
            direction = words[-1].lower()
            words = words[:-1]
        expr = " ".join(words)
        name = expr.lower()
        key = normalize(tokenize(expr))
        index = None
        if re.fullmatch(r"\d+", expr):
            index = int(expr) - 1
            if not 0 <= index < len(columns):
                return None
        elif re.fullmatch(r"[a-z_][a-z_0-9]*", name) and lowered.count(name) == 1:
            index = lowered.index(name)
        elif same_expression(key):
            index = unique(same_expression(key))
        elif re.fullmatch(r"[a-z_][a-z_0-9]*\.[a-z_][a-z_0-9]*", name) and lowered.count(name.split(".", 1)[1]) == 1:
            index = lowered.index(name.split(".", 1)[1])
        else:
            index = unique(same_column(key))
        if index is None:
            return None
        keys.append([index, direction])
    return keys


# --- Value encoding ----------------------------------------------------------

NEEDS_QUOTES = re.compile(r'[",\r\n]|^\s|\s$')


def encode(value) -> str:
    """One CSV field; see README.md for the rules a reader relies on."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, decimal.Decimal):
        # 'f' never uses exponent notation, unlike str(Decimal('0E-10')).
        return format(value, "f")
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, datetime.date):
        return value.isoformat()
    text = str(value)
    if text == "" or text == "NULL" or NEEDS_QUOTES.search(text):
        return '"' + text.replace('"', '""') + '"'
    return text


def csv_line(fields: list[str]) -> str:
    return ",".join(fields) + "\n"


def header(columns: list[str]) -> str:
    return csv_line([encode(c) for c in columns])


# --- Running -----------------------------------------------------------------


def connect(data: Path, threads: int) -> tuple[duckdb.DuckDBPyConnection, list[str]]:
    con = duckdb.connect()
    # One thread keeps floating-point aggregation order, and so the last
    # digits of DOUBLE results, identical from run to run.
    con.execute(f"SET threads = {threads}")
    for setting in SESSION_SETTINGS:
        con.execute(setting)
    tables = []
    for table_dir in sorted(p for p in data.iterdir() if p.is_dir() and not p.name.startswith(".")):
        files = list(table_dir.glob("*.parquet"))
        if not files:
            continue
        pattern = str(table_dir / "*.parquet").replace("'", "''")
        con.execute(f'CREATE VIEW "{table_dir.name}" AS SELECT * FROM read_parquet(\'{pattern}\')')
        tables.append(table_dir.name)
    return con, tables


def table_rows(con, tables: list[str]) -> dict[str, int]:
    return {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchall()[0][0] for t in tables}


def apply_rewrites(bench: str, query: str, sql: str) -> str:
    for old, new, _why in REWRITES.get((bench, query), []):
        count = sql.count(old)
        if count != 1:
            raise SystemExit(f"rewrite for {bench} {query} expects 1 occurrence of {old!r}, found {count}")
        sql = sql.replace(old, new)
    return sql


def run_statement(con, statement: str) -> dict:
    rel = con.sql(statement)
    columns = list(rel.columns)
    types = [str(t) for t in rel.types]
    rows = rel.fetchall()
    order = top_level_order(statement)
    ordered = bool(order.items)
    keys = order_keys(order.items, columns, statement) if ordered else None
    result = {
        "rows": len(rows),
        "columns": columns,
        "types": types,
        "ordered": ordered,
        "order_by": order.items,
        "order_keys": keys,
        "ties": None,
        "limit": order.limit,
        "limit_ties": None,
    }
    if keys is not None:
        key_of = lambda row: tuple(row[i] for i, _ in keys)  # noqa: E731
        result["ties"] = any(key_of(a) == key_of(b) for a, b in zip(rows, rows[1:]))
        if order.limit is not None and len(rows) == order.limit and order.limit > 0:
            # Rerun with one more row: if it ties with the last kept row, which
            # of the tied rows made the cut is arbitrary.
            tok = order.limit_tok
            wider = statement[: tok.start] + str(order.limit + 1) + statement[tok.end :]
            more = con.sql(wider).fetchall()
            result["limit_ties"] = len(more) > order.limit and key_of(more[order.limit]) == key_of(
                more[order.limit - 1]
            )
        elif order.limit is not None:
            result["limit_ties"] = False
    encoded = [[encode(v) for v in row] for row in rows]
    if not ordered:
        # No order is promised, so store a canonical one: stable diffs when
        # the goldens are regenerated.
        encoded.sort()
    result["_csv"] = header(columns) + "".join(csv_line(r) for r in encoded)
    return result


def run_query(args, query_file: Path, out_dir: Path) -> dict:
    query = query_file.stem
    sql = apply_rewrites(args.bench, query, query_file.read_text())
    statements = split_statements(sql)
    con, _ = connect(args.data, args.threads)
    results = []
    try:
        for index, statement in enumerate(statements, start=1):
            if returns_rows(statement):
                result = run_statement(con, statement)
                result["statement"] = index
                results.append(result)
            else:
                con.execute(statement)
    except duckdb.Error as error:
        return {"error": f"{type(error).__name__}: {error}".splitlines()[0]}
    finally:
        con.close()
    if not results:
        return {"error": "no statement returns rows"}
    # The last result is the answer (TPC-H q15: the SELECT between CREATE and
    # DROP VIEW); earlier ones (TPC-DS q14, q23, q24, q39 have two) are kept
    # as extra answers next to it.
    main = results[-1]
    extras = []
    for extra in results[:-1]:
        name = f"{query}.stmt{extra['statement']}.csv"
        (out_dir / name).write_text(extra.pop("_csv"))
        extras.append({"file": name, **extra})
    (out_dir / f"{query}.csv").write_text(main.pop("_csv"))
    entry = {"file": f"{query}.csv", **main, "error": None}
    if extras:
        entry["extra_results"] = extras
    return entry


def sf_label(sf: str) -> str:
    return "sf" + ("%g" % float(sf))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", required=True, choices=["tpch", "tpcds"])
    parser.add_argument("--sf", required=True, help="scale factor of the data, e.g. 0.01 or 1")
    parser.add_argument("--data", required=True, type=Path, help="directory with one subdirectory of Parquet files per table")
    parser.add_argument("--queries", help="comma-separated subset, e.g. q01,q05 (default: all)")
    parser.add_argument("--threads", type=int, default=1, help="DuckDB threads (default 1, for reproducible DOUBLE digits)")
    args = parser.parse_args()

    query_files = sorted((QUERIES / args.bench).glob("q*.sql"))
    if args.queries:
        wanted = {q.strip() for q in args.queries.split(",") if q.strip()}
        unknown = wanted - {f.stem for f in query_files}
        if unknown:
            parser.error(f"unknown queries: {', '.join(sorted(unknown))}")
        query_files = [f for f in query_files if f.stem in wanted]

    out_dir = GOLDEN / args.bench / sf_label(args.sf)
    out_dir.mkdir(parents=True, exist_ok=True)
    meta_path = out_dir / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() and args.queries else {}

    con, tables = connect(args.data, args.threads)
    meta.update(
        {
            "bench": args.bench,
            "sf": float(args.sf),
            "generator": "skiff-gen",
            "duckdb_version": duckdb.__version__,
            "settings": SESSION_SETTINGS,
            "rewrites": {
                q: [{"old": o, "new": n, "why": w} for o, n, w in rw]
                for (b, q), rw in sorted(REWRITES.items())
                if b == args.bench
            },
            "tables": table_rows(con, tables),
        }
    )
    con.close()
    queries = meta.setdefault("queries", {})

    failures = 0
    for query_file in query_files:
        started = time.monotonic()
        for stale in out_dir.glob(f"{query_file.stem}.*csv"):
            stale.unlink()
        entry = run_query(args, query_file, out_dir)
        expected = EXPECTED_ERRORS.get((args.bench, sf_label(args.sf), query_file.stem))
        if entry.get("error"):
            entry["error_expected"] = bool(expected and expected[0] in entry["error"])
            if entry["error_expected"]:
                entry["error_reason"] = expected[1]
        queries[query_file.stem] = entry
        elapsed = time.monotonic() - started
        if entry.get("error") and entry["error_expected"]:
            print(f"{query_file.stem}: expected error ({entry['error_reason']})")
        elif entry.get("error"):
            failures += 1
            print(f"{query_file.stem}: ERROR {entry['error']}", file=sys.stderr)
        elif expected:
            failures += 1
            print(f"{query_file.stem}: expected an error, got {entry['rows']} rows", file=sys.stderr)
        else:
            print(f"{query_file.stem}: {entry['rows']} rows ({elapsed:.1f}s)")
    meta["queries"] = dict(sorted(queries.items()))
    meta_path.write_text(json.dumps(meta, indent=1) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
