# Read or write a Delta table with the Python `deltalake` library (the
# delta-rs bindings), independent of Skiff's writer:
#   delta_interop.py read DIR    prints the table's rows, one JSON list per line, sorted
#   delta_interop.py duckdb DIR  the same, read by DuckDB's delta extension (from PyPI's
#                                duckdb-extension-delta); "skip REASON" when it cannot load
#   delta_interop.py write DIR   writes a three-row table (k int64, name string)
import json
import os
import sys

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake


def show(columns, rows):
    print("columns " + json.dumps(columns))
    for row in sorted((list(r) for r in rows), key=lambda r: json.dumps(r)):
        print("row " + json.dumps(row))


mode, path = sys.argv[1], sys.argv[2]
if mode == "read":
    table = DeltaTable(path).to_pyarrow_table()
    show(table.column_names, (row.values() for row in table.to_pylist()))
elif mode == "duckdb":
    try:
        import duckdb
        import duckdb_extensions

        con = duckdb.connect()
        duckdb_extensions.import_extension("delta", con=con)
        con.execute("LOAD delta")
    except Exception as e:  # the extension is missing or does not fit this DuckDB
        print("skip " + " ".join(str(e).split()))
    else:
        cursor = con.execute("SELECT * FROM delta_scan(?)", [path])
        show([d[0] for d in cursor.description], cursor.fetchall())
elif mode == "write":
    data = pa.table({"k": pa.array([1, 2, 3], pa.int64()), "name": ["one", "two", None]})
    write_deltalake(path, data)
    print("written")
else:
    sys.exit("unknown mode " + mode)

# deltalake's native runtime can abort the interpreter's own shutdown
# ("terminate called without an active exception"); the work is done.
sys.stdout.flush()
os._exit(0)
