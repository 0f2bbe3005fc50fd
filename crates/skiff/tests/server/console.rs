//! The web console in a real browser: the distribution's headless Chromium,
//! driven through chromedriver (WebDriver), against `skiff serve`. Logging
//! in (a wrong password refused), a running query appearing with its
//! progress, a migration asked for from the page showing on the query's
//! timeline (and the query still answering as DuckDB does), a drain and
//! undrain, a cancel from the page ending the query, and a read-only user
//! who gets no buttons and whose forged requests are refused. A failure
//! saves a screenshot under `target/console-screenshots/`.
//!
//! Skipped, with a message, when Chromium or chromedriver is not
//! installed, unless `SKIFF_REQUIRE_BROWSER` is set (`.ci/run` installs
//! them and sets it).

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use futures::FutureExt;
use serde_json::{Value, json};
use skiff_gen::Benchmark;
use skiff_testkit::{dataset, queries};

use crate::golden::{check, run_pg};
use crate::support::{Options, Server, connect, sqlstate};

const USERS: &str = "root:admin:rootpw\nviewer:user:viewpw\n";

/// How long the page may take to show what the cluster did (a guard
/// against hanging, not a timing assertion).
const PAGE_WAIT: Duration = Duration::from_secs(60);

/// Runs for minutes at SF 0.01, so it surely runs when it is canceled. Its
/// leading comment is not what the queries list shows of it.
const LONG_QUERY: &str = "-- the query the page cancels\n\
                          SELECT count(*) FROM lineitem a, lineitem b \
                          WHERE a.l_partkey + b.l_partkey = 7";

fn which(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    })
}

/// chromedriver and the Chromium it drives; both die with the test.
struct Browser {
    client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Browser {
    /// `None` (and why) when the browser is not installed.
    async fn start() -> Result<Browser, String> {
        let chromium = which(&["chromium", "chromium-browser", "google-chrome"])
            .ok_or("Chromium is not installed (Debian: apt-get install chromium)")?;
        let chromedriver = which(&["chromedriver"])
            .ok_or("chromedriver is not installed (Debian: apt-get install chromium-driver)")?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        let driver = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", chromedriver.display()))?;
        let profile = tempfile::tempdir().map_err(|e| e.to_string())?;
        let url = format!("http://127.0.0.1:{port}");
        // The flags keep Chromium off the network it cannot reach here.
        let args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1400,1000",
            &format!("--user-data-dir={}", profile.path().display()),
        ];
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": { "binary": chromium, "args": args },
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!("an object");
        };
        let mut browser = None;
        let start = Instant::now();
        while browser.is_none() {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(capabilities.clone())
                .connect(&url)
                .await
            {
                Ok(client) => browser = Some(client),
                Err(e) if start.elapsed() > Duration::from_secs(30) => {
                    return Err(format!("chromedriver did not start Chromium: {e}"));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
        Ok(Browser {
            client: browser.expect("connected"),
            driver,
            _profile: profile,
        })
    }
}

/// Poll `probe` until it gives a value, for at most `PAGE_WAIT`.
async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = probe().await {
            return Ok(value);
        }
        if start.elapsed() > PAGE_WAIT {
            return Err(format!("the page never showed {what}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Run `script` in the page; its value as JSON.
async fn js(client: &Client, script: &str) -> Result<Value, String> {
    client
        .execute(script, Vec::new())
        .await
        .map_err(|e| format!("{script}: {e}"))
}

/// Click the element `css` finds, again if the page redrew it meanwhile.
async fn click(client: &Client, css: &str) -> Result<(), String> {
    eventually(&format!("a clickable {css}"), || async {
        let element = client.find(Locator::Css(css)).await.ok()?;
        element.click().await.ok()
    })
    .await
}

/// Confirm the dialog an action opened; the result line it leaves.
async fn confirm(client: &Client) -> Result<String, String> {
    click(client, "#confirm-yes").await?;
    eventually("the action's result", || async {
        let text = js(
            client,
            "const r = document.getElementById('result'); \
                               return r.hidden ? null : r.textContent;",
        )
        .await
        .ok()?;
        text.as_str().map(str::to_string)
    })
    .await
}

async fn log_in(client: &Client, base: &str, user: &str, password: &str) -> Result<(), String> {
    let e = |e: fantoccini::error::CmdError| e.to_string();
    client.goto(base).await.map_err(e)?;
    let field = client
        .wait()
        .at_most(PAGE_WAIT)
        .for_element(Locator::Css("#login-user"))
        .await
        .map_err(e)?;
    eventually("the login form", || async {
        field.is_displayed().await.ok()?.then_some(())
    })
    .await?;
    field.clear().await.map_err(e)?;
    field.send_keys(user).await.map_err(e)?;
    let password_field = client
        .find(Locator::Css("#login-password"))
        .await
        .map_err(e)?;
    password_field.clear().await.map_err(e)?;
    password_field.send_keys(password).await.map_err(e)?;
    client
        .find(Locator::Css("#login-submit"))
        .await
        .map_err(e)?
        .click()
        .await
        .map_err(e)
}

/// The row of query `id` on the queries page: state and progress.
async fn query_row(client: &Client, id: &str) -> Option<(String, f64)> {
    let script = format!(
        "const row = document.querySelector('#queries tr[data-query=\"{id}\"]'); \
         if (!row) return null; \
         return [row.querySelector('.state').textContent, \
                 Number(row.querySelector('[role=progressbar]').getAttribute('aria-valuenow'))];"
    );
    let value = js(client, &script).await.ok()?;
    let cells = value.as_array()?;
    Some((cells[0].as_str()?.to_string(), cells[1].as_f64()?))
}

/// Wait until the element `css` finds says `text`.
async fn shown(client: &Client, css: &str, text: &str) -> Result<(), String> {
    eventually(&format!("{css} saying {text}"), || async {
        let element = client.find(Locator::Css(css)).await.ok()?;
        (element.text().await.ok()? == text).then_some(())
    })
    .await
}

/// The state the cluster page shows for node `id`.
async fn node_state(client: &Client, id: &str) -> Option<String> {
    let script = format!(
        "const r = document.querySelector('#nodes tr[data-node=\"{id}\"] .state'); \
         return r ? r.textContent : null;"
    );
    js(client, &script).await.ok()?.as_str().map(str::to_string)
}

/// The id of the query running on a worker whose text has `marker`, from
/// the page.
async fn running_on_page(client: &Client, marker: &str) -> Result<String, String> {
    let script = format!(
        "const rows = [...document.querySelectorAll('#queries tr[data-query]')]; \
         const row = rows.find(r => r.querySelector('.sql').textContent.includes({}) \
           && r.querySelector('.state').textContent === 'running' \
           && r.children[3].textContent !== ''); \
         return row ? row.dataset.query : null;",
        json!(marker)
    );
    eventually(&format!("a query with {marker} running"), || async {
        js(client, &script).await.ok()?.as_str().map(str::to_string)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_the_cluster_live_and_acts_for_admins_only() {
    let browser = match Browser::start().await {
        Ok(browser) => browser,
        Err(why) if std::env::var_os("SKIFF_REQUIRE_BROWSER").is_none() => {
            println!("skipped: {why}");
            return;
        }
        Err(why) => panic!("SKIFF_REQUIRE_BROWSER is set, and {why}"),
    };
    let data = dataset(Benchmark::Tpch, 0.01);
    let users = tempfile::tempdir().expect("users dir");
    let file = users.path().join("users");
    std::fs::write(&file, USERS).expect("users file");
    // The pod page watches a pod file the walk-through runs a pod on.
    let shm = std::path::Path::new("/dev/shm");
    let pod_dir = if shm.is_dir() { shm } else { users.path() };
    let pod = PodFiles(pod_dir.join(format!("skiff-console-it-{}", std::process::id())));
    let pod = &pod.0;
    let server = Server::start(
        &data,
        Options {
            extra: vec![
                "--users".into(),
                file.display().to_string(),
                "--pod".into(),
                pod.display().to_string(),
            ],
            ..Options::default()
        },
    );
    let console = server.console.expect("the console listens");
    let client = browser.client.clone();
    let steps = std::panic::AssertUnwindSafe(walk_through(&client, &server, console, pod));
    let outcome = match steps.catch_unwind().await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e),
        Err(panic) => Err(panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic".into())),
    };
    if let Err(e) = outcome {
        let shot = screenshot(&client, "console-failure").await;
        panic!(
            "{e}\nscreenshot: {shot}\nserver log:\n{}",
            server.log_text()
        );
    }
    let _ = browser.client.clone().close().await;
}

/// A pod's files, removed on drop.
struct PodFiles(PathBuf);

impl Drop for PodFiles {
    fn drop(&mut self) {
        let _ = skiff_pod::remove_pod(&self.0);
    }
}

/// Save the page as a PNG under `target/console-screenshots/`.
async fn screenshot(client: &Client, name: &str) -> String {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/console-screenshots");
    let path = dir.join(format!("{name}.png"));
    match client.screenshot().await {
        Ok(png) => match std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, png)) {
            Ok(()) => path.display().to_string(),
            Err(e) => format!("not saved: {e}"),
        },
        Err(e) => format!("not taken: {e}"),
    }
}

async fn walk_through(
    client: &Client,
    server: &Server,
    console: SocketAddr,
    pod: &std::path::Path,
) -> Result<(), String> {
    let base = format!("http://{console}/");
    let e = |e: fantoccini::error::CmdError| e.to_string();

    // A wrong password is refused on the page; the right one logs in.
    log_in(client, &base, "root", "wrong").await?;
    let refusal = eventually("the refusal", || async {
        let text = client
            .find(Locator::Css("#login-error"))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        (!text.is_empty()).then_some(text)
    })
    .await?;
    assert!(
        refusal.contains("password authentication failed"),
        "{refusal}"
    );
    log_in(client, &base, "root", "rootpw").await?;
    shown(client, "#whoami", "root (admin)").await?;
    eventually("the workers on the cluster page", || async {
        let n = js(
            client,
            "return document.querySelectorAll('#nodes .state.alive').length;",
        )
        .await
        .ok()?;
        (n.as_u64()? >= 3).then_some(())
    })
    .await?;
    let _ = screenshot(client, "cluster").await;

    // A query held on its worker after its first pipeline shows up,
    // running, with the progress its worker reported.
    let mut config = server.pg_config("root");
    config.password("rootpw");
    let admin = connect(config.clone()).await.map_err(|e| e.to_string())?;
    let held = connect(config.clone()).await.map_err(|e| e.to_string())?;
    held.simple_query("SET skiff.test_hold_after_pipelines = 1")
        .await
        .map_err(|e| e.to_string())?;
    let (name, sql) = queries("tpch")
        .into_iter()
        .find(|(name, _)| name == "q03")
        .expect("TPC-H q03");
    let task = tokio::runtime::Handle::current().spawn({
        let sql = sql.clone();
        async move { run_pg(&held, &sql).await }
    });
    client.goto(&format!("{base}#/queries")).await.map_err(e)?;
    let id = running_on_page(client, "c_mktsegment").await?;
    eventually("the held query's progress", || async {
        let (state, progress) = query_row(client, &id).await?;
        (state == "running" && progress > 0.0).then_some(())
    })
    .await?;
    let _ = screenshot(client, "queries").await;

    // Its page: the pipeline graph and a timeline that starts on one
    // worker; migrate from the page, and the timeline shows the hand-off
    // and the run on another worker, live.
    click(client, &format!("#queries tr[data-query=\"{id}\"] td.sql")).await?;
    eventually("the pipeline graph", || async {
        let n = js(
            client,
            "return document.querySelectorAll('#pipeline-graph .node').length;",
        )
        .await
        .ok()?;
        (n.as_u64()? > 1).then_some(())
    })
    .await?;
    let _ = screenshot(client, "query-before-migration").await;
    click(client, "#query-detail button[data-action=migrate]").await?;
    let result = confirm(client).await?;
    assert!(result.contains(&format!("skiff.migrate({id})")), "{result}");
    let kinds = eventually("the migration on the timeline", || async {
        let kinds = js(
            client,
            "return [...document.querySelectorAll('#timeline-steps tr[data-kind]')]\
               .map(r => r.dataset.kind + ':' + r.children[2].textContent);",
        )
        .await
        .ok()?;
        let kinds: Vec<String> = kinds
            .as_array()?
            .iter()
            .filter_map(|k| k.as_str().map(str::to_string))
            .collect();
        let migrated = kinds.iter().position(|k| k.starts_with("migrated:"))?;
        kinds[migrated..]
            .iter()
            .any(|k| k.starts_with("runs:"))
            .then_some(kinds)
    })
    .await?;
    let workers: Vec<&str> = kinds
        .iter()
        .filter_map(|k| k.strip_prefix("runs:"))
        .collect();
    assert!(workers.len() >= 2 && workers[0] != workers[1], "{kinds:?}");
    let _ = screenshot(client, "query-after-migration").await;
    check(&name, task.await.map_err(|e| e.to_string())?)?;

    // A distributed query's page draws its stages: a box per task, on the
    // workers.
    let spread = connect(config.clone()).await.map_err(|e| e.to_string())?;
    spread
        .simple_query("SET skiff.distribute = on")
        .await
        .map_err(|e| e.to_string())?;
    check(&name, run_pg(&spread, &sql).await)?;
    let rows = admin
        .simple_query(
            "SELECT id FROM skiff.queries WHERE tasks IS NOT NULL ORDER BY id DESC LIMIT 1",
        )
        .await
        .map_err(|e| e.to_string())?;
    let spread_id = rows
        .iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_string),
            _ => None,
        })
        .ok_or("no distributed query listed")?;
    client
        .goto(&format!("{base}#/query/{spread_id}"))
        .await
        .map_err(e)?;
    let task_workers = eventually("the stages' tasks", || async {
        let workers = js(
            client,
            "return [...document.querySelectorAll('#stages .task')].map(t => t.dataset.worker);",
        )
        .await
        .ok()?;
        let workers: std::collections::BTreeSet<String> = workers
            .as_array()?
            .iter()
            .filter_map(|w| w.as_str().map(str::to_string))
            .collect();
        (!workers.is_empty()).then_some(workers)
    })
    .await?;
    assert!(task_workers.len() >= 2, "tasks on {task_workers:?}");
    let _ = screenshot(client, "query-distributed").await;

    // Drain a worker from the cluster page, then undrain it.
    client.goto(&format!("{base}#/cluster")).await.map_err(e)?;
    let worker = eventually("a worker to drain", || async {
        js(
            client,
            "const b = document.querySelector('#nodes button[data-action=drain]'); \
                    return b ? b.dataset.worker : null;",
        )
        .await
        .ok()?
        .as_str()
        .map(str::to_string)
    })
    .await?;
    for (action, state) in [("drain", "draining"), ("undrain", "alive")] {
        let button = format!("#nodes button[data-action={action}][data-worker=\"{worker}\"]");
        click(client, &button).await?;
        confirm(client).await?;
        eventually(&format!("worker {worker} {state}"), || async {
            (node_state(client, &worker).await? == state).then_some(())
        })
        .await?;
    }

    // Cancel from the page: the client's statement ends, canceled.
    let long = connect(config.clone()).await.map_err(|e| e.to_string())?;
    let canceled =
        tokio::runtime::Handle::current().spawn(async move { long.simple_query(LONG_QUERY).await });
    client.goto(&format!("{base}#/queries")).await.map_err(e)?;
    let long_id = running_on_page(client, "a.l_partkey + b.l_partkey").await?;
    let listed = js(
        client,
        &format!(
            "return document.querySelector('#queries tr[data-query=\"{long_id}\"] .sql')\
               .textContent;"
        ),
    )
    .await?;
    assert!(
        listed
            .as_str()
            .is_some_and(|s| s.starts_with("SELECT count(*)")),
        "the list shows the statement, not its comment: {listed}"
    );
    click(
        client,
        &format!("#queries button[data-action=cancel][data-query=\"{long_id}\"]"),
    )
    .await?;
    confirm(client).await?;
    let outcome = tokio::time::timeout(PAGE_WAIT, canceled)
        .await
        .map_err(|_| "the canceled query did not end".to_string())?
        .map_err(|e| e.to_string())?;
    match outcome {
        Ok(_) => return Err("the canceled query answered".into()),
        Err(error) => assert_eq!(sqlstate(&error), "57014", "{error}"),
    }
    eventually("the query canceled on the page", || async {
        let (state, _) = query_row(client, &long_id).await?;
        (state == "canceled").then_some(())
    })
    .await?;
    drop(admin);

    // The pod page: a two-host pod run from the command line appears with
    // its hosts' throughput, a line per host, and ends done.
    client.goto(&format!("{base}#/pod")).await.map_err(e)?;
    eventually("the pod page waiting for its pod", || async {
        let waiting = js(
            client,
            "return document.querySelector('.pod-waiting') !== null;",
        )
        .await
        .ok()?;
        waiting.as_bool()?.then_some(())
    })
    .await?;
    let pod_run = std::process::Command::new(env!("CARGO_BIN_EXE_skiff"))
        .args([
            "pod",
            "run",
            "--hosts",
            "2",
            "--warehouses",
            "2",
            "--arch",
            "d",
        ])
        .args([
            "--multi-warehouse-pct",
            "60",
            "--duration",
            "6",
            "--keep",
            "--shm",
        ])
        .arg(pod)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("skiff pod run: {e}"))?;
    eventually("both hosts' throughput on the pod page", || async {
        let rates = js(
            client,
            "return [0, 1].map((h) => { \
               const cell = document.querySelector( \
                 `tr[data-host=\"${h}\"][data-kind=new_order] .commits-per-s`); \
               return cell ? Number(cell.textContent) : null; });",
        )
        .await
        .ok()?;
        let lines = js(
            client,
            "return document.querySelectorAll('polyline.series').length;",
        )
        .await
        .ok()?;
        let rates: Vec<f64> = rates
            .as_array()?
            .iter()
            .map(|r| r.as_f64())
            .collect::<Option<_>>()?;
        (lines == json!(2) && rates.iter().all(|r| *r > 0.0)).then_some(())
    })
    .await?;
    let _ = screenshot(client, "pod").await;
    let ran = tokio::task::spawn_blocking(move || pod_run.wait_with_output())
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    if !ran.status.success() {
        return Err(format!(
            "skiff pod run failed: {}",
            String::from_utf8_lossy(&ran.stderr)
        ));
    }
    shown(client, ".pod .state", "done").await?;

    // A read-only user sees the pages without a single action button, and
    // requests sent anyway (without the CSRF token, or with it) are refused.
    click(client, "#logout").await?;
    log_in(client, &base, "viewer", "viewpw").await?;
    shown(client, "#whoami", "viewer (read-only)").await?;
    for page in ["#/cluster", "#/queries", &format!("#/query/{id}"), "#/pod"] {
        client.goto(&format!("{base}{page}")).await.map_err(e)?;
        eventually(&format!("{page} drawn"), || async {
            let drawn = js(
                client,
                "return document.querySelector('#view h1') !== null;",
            )
            .await
            .ok()?;
            drawn.as_bool()?.then_some(())
        })
        .await?;
        let buttons = js(
            client,
            "return document.querySelectorAll('button[data-action], #add-workers').length;",
        )
        .await?;
        assert_eq!(
            buttons,
            json!(0),
            "action buttons for a read-only user on {page}"
        );
    }
    // An address that names no query, or a query nobody knows, says so.
    client
        .goto(&format!("{base}#/query/abc"))
        .await
        .map_err(e)?;
    shown(client, "#no-query h1", "No such query").await?;
    client
        .goto(&format!("{base}#/query/987654321"))
        .await
        .map_err(e)?;
    shown(client, "#no-query h1", "No query 987654321").await?;
    let forged = js(
        client,
        &format!(
            "return (async () => {{ \
               const forged = await fetch('/api/actions/cancel', {{method: 'POST', \
                 headers: {{'Content-Type': 'application/json'}}, body: '{{\"query\": {id}}}'}}); \
               const signed = await fetch('/api/actions/cancel', {{method: 'POST', \
                 headers: {{'Content-Type': 'application/json', 'X-Skiff-CSRF': session.csrf}}, \
                 body: '{{\"query\": {id}}}'}}); \
               return [forged.status, signed.status]; }})();"
        ),
    )
    .await?;
    assert_eq!(forged, json!([403, 403]), "forged and read-only requests");
    let _ = screenshot(client, "read-only").await;
    Ok(())
}
