//! A data directory in an S3-compatible object store (`--data
//! s3://bucket/prefix`), against a real S3 API server (s3s-fs) the test
//! starts: managed tables are created, written, loaded, queried on workers,
//! kept across a SIGKILL, and dropped, with every object where Delta Lake
//! puts it; misconfigurations fail fast with a message that says what to
//! fix.

use std::path::Path;
use std::process::Command;

use skiff_testkit::s3::S3Server;

use crate::support::{Options, Server, psql, simple_rows};

fn options(s3: &S3Server, state: &Path) -> Options {
    Options {
        env: s3.env(),
        extra: vec!["--state-dir".into(), state.display().to_string()],
        ..Options::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_in_an_s3_bucket_keep_their_rows_across_a_kill() {
    let s3 = S3Server::start();
    let url = s3.url("warehouse");
    let state = tempfile::tempdir().expect("state dir");
    let files = tempfile::tempdir().expect("load files");
    let csv = files.path().join("more.csv");
    std::fs::write(&csv, "a,b\n7,loaded\n8,\n").expect("csv");
    {
        let server = Server::start_in(Path::new(&url), options(&s3, state.path()));
        let tags: Vec<String> = [
            "CREATE TABLE t (a int NOT NULL, b varchar)".to_string(),
            "INSERT INTO t VALUES (1,'x'),(2,'y'),(3,'z')".into(),
            "UPDATE t SET b = 'w' WHERE a >= 2".into(),
            "DELETE FROM t WHERE a = 1".into(),
            "CREATE TABLE tens AS SELECT a, a * 10 AS ten FROM t".into(),
            "ALTER TABLE t ADD COLUMN c int".into(),
            format!(
                "COPY t (a, b) FROM '{}' WITH (FORMAT csv, HEADER true)",
                csv.display()
            ),
            format!("\\copy t (a, b) from '{}' csv header", csv.display()),
        ]
        .iter()
        .map(|sql| psql(&server, sql).trim().to_string())
        .collect();
        assert_eq!(
            tags,
            [
                "CREATE TABLE",
                "INSERT 0 3",
                "UPDATE 2",
                "DELETE 1",
                "CREATE TABLE",
                "ALTER TABLE",
                "COPY 2",
                "COPY 2"
            ]
        );
        let client = server.pg().await;
        let joined = simple_rows(
            &client,
            "SELECT t.a, b, ten FROM t JOIN tens ON t.a = tens.a ORDER BY t.a",
        )
        .await
        .expect("join");
        assert_eq!(
            joined,
            [
                [Some("2".into()), Some("w".into()), Some("20".into())],
                [Some("3".into()), Some("w".into()), Some("30".into())]
            ]
        );
        // Workers read the bucket themselves: the plan names s3:// files.
        let ran_on = simple_rows(
            &client,
            "SELECT worker FROM skiff.queries WHERE sql LIKE 'SELECT t.a, b, ten%'",
        )
        .await
        .expect("queries");
        assert!(ran_on[0][0].is_some(), "ran on the coordinator: {ran_on:?}");
        // A relative COPY path has no directory to be relative to.
        let relative = client
            .simple_query("COPY t FROM 'more.csv'")
            .await
            .expect_err("relative path under an s3:// data directory");
        let message = relative.as_db_error().map(|e| e.message().to_string());
        assert!(
            message
                .as_deref()
                .is_some_and(|m| m.contains("absolute path")),
            "{relative:?}"
        );
        // Dropping `server` SIGKILLs the coordinator and its children.
    }
    let log = s3.bucket_dir().join("warehouse/t/_delta_log");
    assert!(
        log.join("00000000000000000000.json").is_file(),
        "no Delta log in the bucket"
    );
    let server = Server::start_in(Path::new(&url), options(&s3, state.path()));
    let client = server.pg().await;
    let rows = simple_rows(&client, "SELECT a, b, c FROM t ORDER BY a, b")
        .await
        .expect("rows after restart");
    let expected: Vec<Vec<Option<String>>> = [
        ("2", Some("w")),
        ("3", Some("w")),
        ("7", Some("loaded")),
        ("7", Some("loaded")),
        ("8", None),
        ("8", None),
    ]
    .iter()
    .map(|(a, b)| vec![Some(a.to_string()), b.map(str::to_string), None])
    .collect();
    assert_eq!(rows, expected);
    // Another Delta implementation reads the table from the bucket.
    let read = crate::tables::delta_py_in("read", &format!("{url}/t"), &s3.env());
    assert_eq!(
        read,
        [
            r#"columns ["a", "b", "c"]"#,
            r#"row [2, "w", null]"#,
            r#"row [3, "w", null]"#,
            r#"row [7, "loaded", null]"#,
            r#"row [7, "loaded", null]"#,
            r#"row [8, null, null]"#,
            r#"row [8, null, null]"#,
        ]
    );
    assert_eq!(psql(&server, "DROP TABLE tens").trim(), "DROP TABLE");
    assert!(
        objects_under(&s3.bucket_dir().join("warehouse/tens")).is_empty(),
        "DROP TABLE left objects"
    );
    assert_eq!(
        psql(&server, "CREATE TABLE tens (x int)").trim(),
        "CREATE TABLE"
    );
    drop(client);
    drop(server);

    // A DROP cut off after its marker was written: the next start
    // finishes it, and the half-deleted table is never shown.
    std::fs::write(s3.bucket_dir().join("warehouse/t/_skiff_dropped"), b"").expect("marker");
    let server = Server::start_in(Path::new(&url), options(&s3, state.path()));
    let client = server.pg().await;
    let tables = simple_rows(
        &client,
        "SELECT table_name FROM information_schema.tables \
         WHERE table_schema = 'public' ORDER BY 1",
    )
    .await
    .expect("tables");
    assert_eq!(tables, [[Some("tens".to_string())]]);
    assert!(objects_under(&s3.bucket_dir().join("warehouse/t")).is_empty());
}

/// Files under `dir` (s3s-fs keeps each object as a file).
fn objects_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found
}

/// `skiff --data s3://... -c`: the embedded engine writes and reads the
/// same tables; a wrong key, a missing key, a plain-http endpoint that was
/// not allowed and an unreachable endpoint each stop it at once with a
/// message naming the cause.
#[test]
fn the_shell_uses_s3_and_misconfiguration_fails_fast() {
    let s3 = S3Server::start();
    let url = s3.url("shell");
    let skiff = |env: &[(String, String)], sql: &str| {
        let output = Command::new(env!("CARGO_BIN_EXE_skiff"))
            .args(["--data", &url, "--format", "csv", "-c", sql])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output()
            .expect("run skiff");
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).to_string(),
            String::from_utf8_lossy(&output.stderr).to_string(),
        )
    };
    let env = s3.env();
    let (ok, _, err) = skiff(
        &env,
        "CREATE TABLE s (a int); INSERT INTO s VALUES (4), (5)",
    );
    assert!(ok, "{err}");
    let (ok, out, err) = skiff(&env, "SELECT sum(a) AS total FROM s");
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "total\n9");
    // Another Delta table in a bucket, registered by its URL.
    let (ok, out, err) = skiff(
        &env,
        &format!(
            "CREATE EXTERNAL TABLE ext STORED AS DELTA LOCATION '{url}/s/'; \
             SELECT count(*) AS n FROM ext"
        ),
    );
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "n\n2");
    // A name with characters object paths escape: written, read and
    // dropped under the key Delta gives it, in the bucket and on disk.
    let odd = "\"odd #1%\"";
    let script = format!("CREATE TABLE {odd} (a int); INSERT INTO {odd} VALUES (7);");
    let (ok, _, err) = skiff(&env, &script);
    assert!(ok, "{err}");
    let (ok, out, err) = skiff(&env, &format!("SELECT a FROM {odd}"));
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "a\n7");
    let table = s3.bucket_dir().join("shell/odd #1%");
    assert!(table.join("_delta_log").is_dir(), "not under its own name");
    let (ok, _, err) = skiff(&env, &format!("DROP TABLE {odd}"));
    assert!(ok, "{err}");
    assert!(objects_under(&table).is_empty(), "DROP TABLE left objects");
    let local = tempfile::tempdir().expect("local data");
    let output = Command::new(env!("CARGO_BIN_EXE_skiff"))
        .arg("--data")
        .arg(local.path())
        .args(["--format", "csv", "-c"])
        .arg(format!("{script} SELECT a FROM {odd}"))
        .output()
        .expect("run skiff");
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(said.trim_end().ends_with("a\n7"), "{said}{output:?}");

    let with = |key: &str, value: &str| -> Vec<(String, String)> {
        env.iter()
            .filter(|(k, _)| k != key)
            .cloned()
            .chain((!value.is_empty()).then(|| (key.to_string(), value.to_string())))
            .collect()
    };
    let cases = [
        (with("AWS_SECRET_ACCESS_KEY", "wrong"), "403"),
        (with("AWS_ACCESS_KEY_ID", ""), "AWS_ACCESS_KEY_ID is not"),
        (with("AWS_ALLOW_HTTP", ""), "AWS_ALLOW_HTTP=true"),
        (
            with("AWS_ENDPOINT_URL", "http://127.0.0.1:9"),
            "cannot list s3://skiff/shell/",
        ),
    ];
    for (env, says) in cases {
        let (ok, _, err) = skiff(&env, "SELECT 1");
        assert!(!ok, "started without {says}");
        assert!(err.contains(says), "expected {says:?} in: {err}");
    }
}
