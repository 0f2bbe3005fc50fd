"""Drive a Skiff server with the PostgreSQL client libraries users bring:
SQLAlchemy (connect, inspect tables and columns), pandas (read_sql) and
psycopg (automatic server-side preparation). Prints one JSON object with
what each saw; the Rust test that runs this script judges it.

Usage: python pg_clients.py HOST PORT
"""

import json
import sys

import pandas
import psycopg
import sqlalchemy


def main() -> None:
    host, port = sys.argv[1], sys.argv[2]
    url = f"postgresql+psycopg://skiff@{host}:{port}/skiff"
    seen = {}

    engine = sqlalchemy.create_engine(url)
    with engine.connect() as conn:
        seen["server_version_info"] = list(conn.dialect.server_version_info)
        seen["select"] = conn.execute(sqlalchemy.text("SELECT 41 + 1")).scalar()
    inspector = sqlalchemy.inspect(engine)
    seen["tables"] = sorted(inspector.get_table_names())
    seen["nation_columns"] = [
        {"name": c["name"], "type": str(c["type"]), "nullable": c["nullable"]}
        for c in inspector.get_columns("nation")
    ]

    frame = pandas.read_sql(
        "SELECT n_nationkey, n_name FROM nation ORDER BY n_nationkey", engine
    )
    seen["pandas_rows"] = len(frame)
    seen["pandas_first"] = [int(frame.iloc[0, 0]), str(frame.iloc[0, 1])]
    engine.dispose()

    # psycopg prepares a statement on the server from its fifth execution
    # on (prepare_threshold); every execution must see current data.
    with psycopg.connect(f"host={host} port={port} user=skiff dbname=skiff") as conn:
        counts = []
        for _ in range(10):
            row = conn.execute(
                "SELECT count(*) FROM skiff.queries WHERE state = %s", ("finished",)
            ).fetchone()
            counts.append(row[0])
        seen["prepared_counts"] = counts

    # psycopg's COPY: rows written one by one stream to the server as
    # COPY FROM STDIN (NULLs as \N) and land in one commit.
    with psycopg.connect(
        f"host={host} port={port} user=skiff dbname=skiff", autocommit=True
    ) as conn:
        cur = conn.cursor()
        cur.execute("CREATE TABLE copied (a int NOT NULL, b varchar)")
        with cur.copy("COPY copied (a, b) FROM STDIN") as copy:
            for i in range(3000):
                copy.write_row((i, None if i % 3 == 0 else f"row {i}"))
        seen["copy_rowcount"] = cur.rowcount
        row = conn.execute("SELECT count(*), count(b), sum(a) FROM copied").fetchone()
        seen["copied"] = [int(v) for v in row]
        # And back out: COPY ... TO STDOUT, rows typed by psycopg.
        with cur.copy("COPY (SELECT a, b FROM copied ORDER BY a LIMIT 3) TO STDOUT") as copy:
            copy.set_types(["int4", "text"])
            seen["copied_out"] = [list(r) for r in copy.rows()]

    print(json.dumps(seen))


if __name__ == "__main__":
    main()
