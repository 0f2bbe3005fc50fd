# Read or write a Delta table with the Python `deltalake` library (the
# delta-rs bindings), independent of Skiff's writer:
#   delta_interop.py read DIR    prints the table's rows, one JSON list per line, sorted
#   delta_interop.py write DIR   writes a three-row table (k int64, name string)
import json
import os
import sys

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

mode, path = sys.argv[1], sys.argv[2]
if mode == "read":
    table = DeltaTable(path).to_pyarrow_table()
    rows = sorted(
        (list(row.values()) for row in table.to_pylist()),
        key=lambda r: json.dumps(r),
    )
    print("columns " + json.dumps(table.column_names))
    for row in rows:
        print("row " + json.dumps(row))
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
