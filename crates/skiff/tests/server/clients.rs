//! The tools users bring read the catalog: psql's `\d` commands,
//! SQLAlchemy, pandas and psycopg (in a Python environment the testkit
//! makes on first use), JDBC's `DatabaseMetaData` and DBeaver's statements
//! (the driver fetched on first use), against a real `skiff serve`.

use std::process::Command;

use skiff_gen::Benchmark;
use skiff_testkit::dataset;

use crate::support::{Options, Server, psql};

/// Run a client program with the server's host and port as its last two
/// arguments; its standard output, or a panic with what it and the server
/// said.
fn run_client(server: &Server, command: &mut Command) -> String {
    let output = command
        .arg(server.pg.ip().to_string())
        .arg(server.pg.port().to_string())
        .output()
        .unwrap_or_else(|e| panic!("run {command:?}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "{command:?} failed:\n{stdout}{}\nserver log:\n{}",
        String::from_utf8_lossy(&output.stderr),
        server.log_text()
    );
    stdout
}

#[test]
fn psql_meta_commands_describe_the_catalog() {
    let data = dataset(Benchmark::Tpch, 0.01);
    let server = Server::start(&data, Options::default());
    let tables = psql(&server, "\\dt");
    for table in ["nation", "lineitem", "orders"] {
        assert!(tables.contains(table), "\\dt lacks {table}:\n{tables}");
    }
    let nation = psql(&server, "\\d nation");
    for column in ["n_nationkey", "n_name", "n_regionkey", "n_comment"] {
        assert!(
            nation.contains(column),
            "\\d nation lacks {column}:\n{nation}"
        );
    }
    let schemas = psql(&server, "\\dn");
    assert!(schemas.contains("public"), "\\dn:\n{schemas}");
    assert!(schemas.contains("skiff"), "\\dn:\n{schemas}");
    let databases = psql(&server, "\\l");
    assert!(databases.contains(" skiff "), "\\l:\n{databases}");
    psql(&server, "\\df");
    // A table created later shows at once.
    psql(
        &server,
        "CREATE VIEW cheap_parts AS SELECT p_partkey FROM part WHERE p_retailprice < 1000",
    );
    let tables = psql(&server, "\\dv");
    assert!(tables.contains("cheap_parts"), "\\dv:\n{tables}");
    let version = psql(&server, "SELECT version()");
    assert!(version.contains("PostgreSQL 16"), "{version}");
}

#[test]
fn sqlalchemy_pandas_and_psycopg_read_the_server() {
    let python = skiff_testkit::clients::python();
    let data = dataset(Benchmark::Tpch, 0.01);
    let server = Server::start(&data, Options::default());
    let script = skiff_testkit::repo_root().join("tests/clients/pg_clients.py");
    let stdout = run_client(&server, Command::new(&python).arg(&script));
    let seen: serde_json::Value = serde_json::from_str(&stdout).expect("the script prints JSON");
    assert_eq!(seen["server_version_info"][0], 16, "{seen}");
    assert_eq!(seen["select"], 42, "{seen}");
    let tables: Vec<&str> = seen["tables"]
        .as_array()
        .expect("tables")
        .iter()
        .filter_map(|t| t.as_str())
        .collect();
    for table in ["customer", "lineitem", "nation", "orders", "part", "region"] {
        assert!(tables.contains(&table), "get_table_names: {tables:?}");
    }
    let columns: Vec<&str> = seen["nation_columns"]
        .as_array()
        .expect("columns")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(
        columns,
        ["n_nationkey", "n_name", "n_regionkey", "n_comment"],
        "{seen}"
    );
    assert_eq!(seen["pandas_rows"], 25, "{seen}");
    assert_eq!(seen["copy_rowcount"], 3000, "{seen}");
    assert_eq!(
        seen["copied"],
        serde_json::json!([3000, 2000, 4_498_500]),
        "{seen}"
    );
    assert_eq!(
        seen["copied_out"],
        serde_json::json!([[0, null], [1, "row 1"], [2, "row 2"]]),
        "{seen}"
    );
    assert_eq!(seen["pandas_first"][0], 0, "{seen}");
    let counts: Vec<i64> = seen["prepared_counts"]
        .as_array()
        .expect("counts")
        .iter()
        .filter_map(|c| c.as_i64())
        .collect();
    assert_eq!(counts.len(), 10, "{seen}");
    assert!(
        counts.windows(2).all(|w| w[1] > w[0]),
        "a prepared statement returned a stale count: {counts:?}"
    );
}

/// Run `tests/clients/NAME.java` with PostgreSQL's JDBC driver against a
/// server over TPC-H SF 0.01; its standard output.
fn run_jdbc_program(name: &str) -> String {
    let jar = skiff_testkit::clients::jdbc_driver();
    let data = dataset(Benchmark::Tpch, 0.01);
    let server = Server::start(&data, Options::default());
    let program = skiff_testkit::repo_root().join(format!("tests/clients/{name}.java"));
    run_client(
        &server,
        Command::new("java").arg("-cp").arg(&jar).arg(&program),
    )
}

#[test]
fn jdbc_metadata_lists_tables_and_columns() {
    let stdout = run_jdbc_program("JdbcMetadata");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines.contains(&"product PostgreSQL 16"), "{stdout}");
    for table in ["customer", "lineitem", "nation", "orders", "region"] {
        let line = format!("table public.{table}");
        assert!(
            lines.contains(&line.as_str()),
            "getTables lacks {table}:\n{stdout}"
        );
    }
    let columns: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("column "))
        .collect();
    assert_eq!(
        columns,
        [
            "n_nationkey int8",
            "n_name text",
            "n_regionkey int8",
            "n_comment text"
        ],
        "{stdout}"
    );
    assert!(lines.contains(&"row GERMANY"), "{stdout}");
}

/// DBeaver's connect and navigator statements, replayed as its PostgreSQL
/// plugin sends them (tests/clients/DbeaverConnect.java says from where).
#[test]
fn dbeaver_connects_and_browses_a_table() {
    let stdout = run_jdbc_program("DbeaverConnect");
    let lines: Vec<&str> = stdout.lines().collect();
    for expected in [
        "database skiff",
        "current_database skiff",
        "version PostgreSQL",
        "types true",
        "defaults public skiff",
        "schema pg_catalog",
        "schema public",
        "table nation r",
        "table lineitem r",
        "row GERMANY",
        "done",
    ] {
        assert!(lines.contains(&expected), "no '{expected}' in:\n{stdout}");
    }
    let columns: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("column "))
        .collect();
    assert_eq!(
        columns,
        ["1 n_nationkey", "2 n_name", "3 n_regionkey", "4 n_comment"],
        "{stdout}"
    );
}
