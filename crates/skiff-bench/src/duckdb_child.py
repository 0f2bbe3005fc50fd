# DuckDB side of `skiff bench`: one process per query, the counterpart of
# `skiff bench-child`. Reads its job as JSON on stdin:
#   {"tables": [{"name", "path", "format", "is_dir"}], "statements": [...],
#    "runs": N, "threads": T, "memory_limit": BYTES or null,
#    "database": FILE or null, "native": BOOL}
# With "native", the tables are copied into the database file (once: a
# later query finds them there) before the timed runs, instead of views.
# and prints one JSON line on stdout with the same fields as the Rust child's
# report: runs_ms, rows, baseline_rss_bytes, peak_rss_bytes, error.
import json
import sys
import time


def status_bytes(key):
    # Same source as the Rust child (/proc/self/status), so the figures compare.
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def quote_ident(name):
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text):
    return "'" + text.replace("'", "''") + "'"


def source(table):
    path = table["path"]
    if table["format"] == "delta":
        # DuckDB's delta extension reads the table's latest commit.
        return "delta_scan(" + quote_literal(path) + ")"
    if table["is_dir"]:
        path = path.rstrip("/") + ("/*.parquet" if table["format"] == "parquet" else "/*.csv")
    if table["format"] == "parquet":
        return "read_parquet(" + quote_literal(path) + ")"
    return "read_csv(" + quote_literal(path) + ", header = true)"


def row_counter():
    # DDL (CREATE/DROP VIEW) gives an empty result: it counts 0 rows, as in
    # the Rust engines. Rows are fetched and then dropped, as the Rust side
    # consumes and drops its batches; Arrow is the cheaper fetch when
    # pyarrow is installed. Chosen once, so no run pays for a failed import.
    try:
        import pyarrow  # noqa: F401

        # DuckDB 2 renamed fetch_arrow_table to to_arrow_table.
        return lambda cursor: (
            getattr(cursor, "fetch_arrow_table", None) or cursor.to_arrow_table
        )().num_rows
    except ImportError:
        return lambda cursor: len(cursor.fetchall())


def duckdb_dialect(statement):
    # `at` is reserved in DuckDB (AT TIME ZONE); TPC-DS q90 uses it as a bare
    # derived-table alias. regen.py quotes it the same way.
    return statement.replace(") at,", ') "at",')


def run(job, report):
    import duckdb

    con = duckdb.connect(job.get("database") or ":memory:")
    con.execute("SET threads = " + str(int(job["threads"])))
    # Evaluate the DataFusion dialect as DataFusion does, as the golden
    # answers do (tests/golden/regen.py, SESSION_SETTINGS): truncating
    # integer division, NULLs ordered as the largest value.
    con.execute("SET integer_division = true")
    con.execute("SET default_null_order = 'nulls_last_on_asc_first_on_desc'")
    if job.get("memory_limit"):
        con.execute("SET memory_limit = '" + str(int(job["memory_limit"]) // 1024) + "KiB'")
    for table in job["tables"]:
        name = quote_ident(table["name"])
        if job.get("native"):
            con.execute("CREATE TABLE IF NOT EXISTS " + name + " AS SELECT * FROM " + source(table))
        else:
            con.execute("CREATE VIEW " + name + " AS SELECT * FROM " + source(table))
    count_rows = row_counter()
    report["baseline_rss_bytes"] = status_bytes("VmRSS")
    for _ in range(int(job["runs"])):
        started = time.perf_counter()
        rows = 0
        for statement in job["statements"]:
            rows += count_rows(con.execute(duckdb_dialect(statement)))
        report["runs_ms"].append((time.perf_counter() - started) * 1e3)
        if report["rows"] is not None and report["rows"] != rows:
            raise RuntimeError(
                "row count changed between runs: %d then %d" % (report["rows"], rows)
            )
        report["rows"] = rows


def main():
    report = {
        "runs_ms": [],
        "rows": None,
        "baseline_rss_bytes": None,
        "peak_rss_bytes": None,
        "error": None,
    }
    try:
        run(json.loads(sys.stdin.read()), report)
    except Exception as e:  # every failure is reported, never raised
        report["error"] = " ".join((type(e).__name__ + ": " + str(e)).split())
    report["peak_rss_bytes"] = status_bytes("VmHWM")
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()


main()
