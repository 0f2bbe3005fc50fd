"""Bulk ingest into Skiff over Flight: ADBC's adbc_ingest (Flight SQL's
CommandStatementIngest) in each mode, and a plain Flight DoPut naming the
table by path. Prints what it saw as JSON.

Usage: adbc_ingest.py FLIGHT_HOST FLIGHT_PORT
"""

import json
import sys

import adbc_driver_flightsql.dbapi as flight
import pyarrow as pa
import pyarrow.flight as paflight


def main() -> None:
    host, port = sys.argv[1], sys.argv[2]
    seen = {}
    rows = pa.table({"id": pa.array(range(5000), pa.int64()),
                     "name": pa.array([None if i % 7 == 0 else f"n{i}" for i in range(5000)])})
    with flight.connect(f"grpc://{host}:{port}") as conn, conn.cursor() as cur:
        seen["create"] = cur.adbc_ingest("ingested", rows, mode="create")
        try:
            cur.adbc_ingest("ingested", rows, mode="create")
            seen["create_again"] = "accepted"
        except Exception as e:  # the table exists
            seen["create_again"] = str(e)
        seen["append"] = cur.adbc_ingest("ingested", rows.slice(0, 10), mode="append")
        seen["create_append"] = cur.adbc_ingest("ingested", rows.slice(0, 5), mode="create_append")
        cur.execute("SELECT count(*), count(name), sum(id) FROM ingested")
        seen["counted"] = [int(v) for v in cur.fetchone()]
        replacement = pa.table({"k": pa.array(["a", "b"]), "v": pa.array([1.5, 2.5])})
        seen["replace"] = cur.adbc_ingest("ingested", replacement, mode="replace")
        cur.execute("SELECT k, v FROM ingested ORDER BY k")
        seen["replaced"] = [list(r) for r in cur.fetchall()]
        try:
            cur.adbc_ingest("missing", rows, mode="append")
            seen["append_missing"] = "accepted"
        except Exception as e:
            seen["append_missing"] = str(e)

    # A plain Flight DoPut: the descriptor's path names the table.
    client = paflight.FlightClient(f"grpc://{host}:{port}")
    writer, reader = client.do_put(paflight.FlightDescriptor.for_path("putted"), rows.schema)
    writer.write_table(rows, max_chunksize=1000)
    writer.done_writing()
    reader.read()
    writer.close()
    with flight.connect(f"grpc://{host}:{port}") as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM putted")
        seen["put"] = int(cur.fetchone()[0])

    print(json.dumps(seen))


if __name__ == "__main__":
    main()
