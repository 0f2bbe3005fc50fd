//! Every JSON endpoint of the console, over HTTP, against a coordinator and
//! a worker in this process: logins and their cookie, the pages' data, the
//! live feed, actions with and without their CSRF token and privilege,
//! `/metrics`, and the security headers.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use reqwest::header::{CONTENT_SECURITY_POLICY, COOKIE, SET_COOKIE};
use reqwest::{Client, Response, StatusCode};
use serde_json::{Value, json};

use crate::pg::tests::{cluster_with, wait_until};
use skiff_console::CSRF_HEADER;
use skiff_coordinator::auth::{Role, Users};
use skiff_coordinator::config::Limits;

fn users() -> Users {
    let mut users = Users::default();
    users.add("root".into(), "rootpw".into(), Role::Admin);
    users.add("viewer".into(), "viewpw".into(), Role::User);
    users
}

/// A response's body as JSON (the client is built without its json
/// feature, as object_store builds it).
async fn json_of(response: Response) -> Value {
    serde_json::from_slice(&response.bytes().await.unwrap()).unwrap()
}

/// A client of one console.
struct Visitor {
    client: Client,
    base: String,
    cookie: Option<String>,
    csrf: Option<String>,
}

impl Visitor {
    fn new(http: SocketAddr) -> Self {
        Self {
            client: Client::new(),
            base: format!("http://{http}"),
            cookie: None,
            csrf: None,
        }
    }

    async fn get(&self, path: &str) -> Response {
        let mut request = self.client.get(format!("{}{path}", self.base));
        if let Some(cookie) = &self.cookie {
            request = request.header(COOKIE, cookie);
        }
        request.send().await.unwrap()
    }

    async fn post(&self, path: &str, body: &Value, csrf: Option<&str>) -> Response {
        let mut request = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(cookie) = &self.cookie {
            request = request.header(COOKIE, cookie);
        }
        if let Some(csrf) = csrf {
            request = request.header(CSRF_HEADER, csrf);
        }
        request.send().await.unwrap()
    }

    /// Log in; keeps the cookie and the CSRF token. Returns the session.
    async fn log_in(&mut self, user: &str, password: &str) -> Value {
        let response = self
            .post(
                "/api/login",
                &json!({"user": user, "password": password}),
                None,
            )
            .await;
        assert_eq!(response.status(), StatusCode::OK, "login of {user}");
        let cookie = response
            .headers()
            .get(SET_COOKIE)
            .expect("a login cookie")
            .to_str()
            .unwrap()
            .to_string();
        for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
            assert!(cookie.contains(attribute), "{cookie} lacks {attribute}");
        }
        self.cookie = Some(cookie.split(';').next().unwrap().to_string());
        let session: Value = json_of(response).await;
        self.csrf = session["csrf"].as_str().map(str::to_string);
        session
    }

    async fn json(&self, path: &str) -> Value {
        let response = self.get(path).await;
        assert_eq!(response.status(), StatusCode::OK, "GET {path}");
        json_of(response).await
    }

    async fn act(&self, action: &str, body: Value) -> (StatusCode, Value) {
        let response = self
            .post(
                &format!("/api/actions/{action}"),
                &body,
                self.csrf.as_deref(),
            )
            .await;
        let status = response.status();
        (
            status,
            serde_json::from_slice(&response.bytes().await.unwrap()).unwrap_or(Value::Null),
        )
    }
}

/// The first events of the live feed at `path`, by name, once `names`
/// have all come.
async fn first_events(visitor: &Visitor, path: &str, names: &[&str]) -> HashMap<String, Value> {
    let mut response = visitor.get(path).await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut text = String::new();
    let mut events = HashMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !names.iter().all(|n| events.contains_key(*n)) {
        let chunk = tokio::time::timeout_at(deadline, response.chunk())
            .await
            .expect("the events within 20 s")
            .unwrap()
            .expect("the stream stays open");
        text.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = text.find("\n\n") {
            let block: String = text.drain(..end + 2).collect();
            let field = |name: &str| {
                block
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(str::to_string)
            };
            if let (Some(event), Some(data)) = (field("event: "), field("data: ")) {
                events
                    .entry(event)
                    .or_insert_with(|| serde_json::from_str(&data).unwrap());
            }
        }
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_answers_its_json() {
    let mut cluster = cluster_with(users(), Limits::default(), Some(&[])).await;
    let http = cluster.http.expect("the console listens");
    let mut root = Visitor::new(http);

    // The page and its assets, with the security headers.
    let page = root.get("/").await;
    assert_eq!(page.status(), StatusCode::OK);
    let csp = page.headers()[CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert_eq!(page.headers()["x-frame-options"], "DENY");
    let html = page.text().await.unwrap();
    assert!(
        html.contains("/assets/app.js") && !html.contains("<script>"),
        "no inline script"
    );
    assert_eq!(root.get("/assets/app.js").await.status(), StatusCode::OK);
    assert_eq!(root.get("/assets/style.css").await.status(), StatusCode::OK);
    assert_eq!(
        root.get("/assets/nope.js").await.status(),
        StatusCode::NOT_FOUND
    );

    // Nothing but the page without a login; a wrong password is refused.
    for path in [
        "/api/session",
        "/api/cluster",
        "/api/queries",
        "/api/queries/1",
        "/api/events",
    ] {
        assert_eq!(
            root.get(path).await.status(),
            StatusCode::UNAUTHORIZED,
            "{path}"
        );
    }
    let wrong = root
        .post(
            "/api/login",
            &json!({"user": "root", "password": "nope"}),
            None,
        )
        .await;
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert!(wrong.headers().get(SET_COOKIE).is_none());
    let session = root.log_in("root", "rootpw").await;
    assert_eq!(session["user"], "root");
    assert_eq!(session["admin"], true);
    assert_eq!(root.json("/api/session").await, session);

    // A query, so that the query pages have something to show.
    let pg_session = cluster.coordinator.open_session("root", None).unwrap();
    let result = cluster
        .coordinator
        .execute(&pg_session, "SELECT count(*) FROM items")
        .await
        .unwrap();
    let id = result.query_id;
    let batches: Vec<_> = futures::TryStreamExt::try_collect(result.stream)
        .await
        .unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
    let coordinator = cluster.coordinator.clone();
    wait_until("the query finished", || {
        coordinator
            .queries()
            .live_or_recent(id)
            .is_some_and(|q| q.info().status.is_done())
    })
    .await;

    let cluster_json = root.json("/api/cluster").await;
    assert_eq!(cluster_json["coordinator"]["pg"], cluster.pg.to_string());
    let nodes = cluster_json["nodes"].as_array().unwrap();
    let worker = nodes
        .iter()
        .find(|n| n["role"] == "worker")
        .expect("the worker is listed");
    assert_eq!(worker["state"], "alive");
    for field in [
        "address",
        "cores",
        "memory",
        "memory_used",
        "cache_bytes",
        "running_queries",
    ] {
        assert!(!worker[field].is_null(), "{field} in {worker}");
    }
    assert!(cluster_json["partitions"].is_array());

    let queries = root.json("/api/queries").await;
    let row = queries
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["id"] == id)
        .expect("the query is listed");
    assert_eq!(row["state"], "finished");
    assert_eq!(row["user"], "root");
    assert_eq!(row["rows_sent"], 1);

    // The worker's last word on the query comes with its next heartbeat:
    // every pipeline finished, as the query ended.
    let mut detail = root.json(&format!("/api/queries/{id}")).await;
    for _ in 0..3000 {
        if detail["pipelines"]
            .as_array()
            .is_some_and(|p| !p.is_empty())
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        detail = root.json(&format!("/api/queries/{id}")).await;
    }
    let pipelines = detail["pipelines"].as_array().expect("pipelines");
    assert!(!pipelines.is_empty(), "{detail}");
    assert!(
        pipelines.iter().all(|p| p["status"] == "finished"),
        "{detail}"
    );
    assert_eq!(detail["pipelines_worker"], worker["id"]);
    assert_eq!(detail["query"]["id"], id);
    assert_eq!(detail["query"]["sql"], "SELECT count(*) FROM items");
    let timeline = detail["timeline"].as_array().unwrap();
    assert_eq!(timeline[0]["kind"], "runs", "{timeline:?}");
    assert_eq!(timeline[0]["worker"], worker["id"]);
    assert_eq!(
        detail["stages"],
        json!([]),
        "a query on one worker has no stages"
    );

    // A distributed query's page lists its stages, each task's worker
    // (one worker has nothing to split: a second one joins).
    cluster.add_worker().await;
    let set = cluster
        .coordinator
        .execute(&pg_session, "SET skiff.distribute = on")
        .await
        .unwrap();
    let _: Vec<_> = futures::TryStreamExt::try_collect(set.stream)
        .await
        .unwrap();
    let result = cluster
        .coordinator
        .execute(&pg_session, "SELECT count(*) FROM items")
        .await
        .unwrap();
    let distributed = result.query_id;
    let _: Vec<_> = futures::TryStreamExt::try_collect(result.stream)
        .await
        .unwrap();
    let page = root.json(&format!("/api/queries/{distributed}")).await;
    let stages = page["stages"].as_array().expect("stages");
    assert!(!stages.is_empty(), "{page}");
    for tasks in stages {
        let tasks = tasks.as_array().expect("a stage's tasks");
        assert!(!tasks.is_empty(), "{page}");
        for w in tasks {
            // Each task's worker is named, with its address.
            assert!(page["workers"][w.to_string()].is_string(), "{w} in {page}");
        }
    }
    assert!(
        page["query"]["tasks"]
            .as_str()
            .is_some_and(|t| t.contains("stage")),
        "{page}"
    );
    assert_eq!(
        root.get("/api/queries/999999").await.status(),
        StatusCode::NOT_FOUND
    );

    let events = first_events(
        &root,
        &format!("/api/events?query={id}"),
        &["cluster", "running", "ended", "query"],
    )
    .await;
    let live_nodes = events["cluster"]["nodes"].as_array().unwrap();
    assert!(
        live_nodes.iter().any(|n| n["id"] == worker["id"]),
        "{events:?}"
    );
    assert!(
        events["ended"]
            .as_array()
            .unwrap()
            .iter()
            .any(|q| q["id"] == id)
    );
    assert!(
        !events["running"]
            .as_array()
            .unwrap()
            .iter()
            .any(|q| q["id"] == id)
    );
    assert_eq!(events["query"]["query"]["id"], id);

    // Actions: the CSRF token is required; bad arguments are refused
    // before any SQL runs; a query that is not running is not canceled.
    let forged = root
        .post("/api/actions/cancel", &json!({"query": id}), None)
        .await;
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    let forged = root
        .post(
            "/api/actions/cancel",
            &json!({"query": id}),
            Some("not-the-token"),
        )
        .await;
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    let (status, body) = root.act("cancel", json!({"query": id})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({"sql": format!("SELECT skiff.cancel({id})"), "done": false})
    );
    let (status, _) = root.act("drain", json!({"worker": "x'; --"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, body) = root.act("drain", json!({"worker": "no-such-worker"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("no live worker"),
        "{body}"
    );
    let (status, _) = root.act("explode", json!({})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, body) = root.act("resume", json!({"query": 424242})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // A read-only user sees everything and may do nothing.
    let mut viewer = Visitor::new(http);
    let session = viewer.log_in("viewer", "viewpw").await;
    assert_eq!(session["admin"], false);
    assert_eq!(
        viewer.json("/api/queries").await,
        root.json("/api/queries").await
    );
    let (status, body) = viewer.act("cancel", json!({"query": id})).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("not an admin"),
        "{body}"
    );

    // Prometheus: the query above counted.
    let metrics = root.get("/metrics").await;
    assert_eq!(metrics.status(), StatusCode::OK);
    let text = metrics.text().await.unwrap();
    assert!(text.contains("skiff_queries_total"), "{text}");

    // Logging out ends the login: its cookie opens nothing any more.
    let out = root
        .post("/api/logout", &json!({}), root.csrf.as_deref())
        .await;
    assert_eq!(out.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        root.get("/api/session").await.status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        root.get("/api/cluster").await.status(),
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_users_a_loopback_visitor_is_a_trusted_admin() {
    let cluster = cluster_with(Users::default(), Limits::default(), Some(&[])).await;
    let mut visitor = Visitor::new(cluster.http.expect("the console listens"));
    let response = visitor.get("/api/session").await;
    assert_eq!(response.status(), StatusCode::OK);
    let cookie = response.headers()[SET_COOKIE].to_str().unwrap().to_string();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    visitor.cookie = Some(cookie.split(';').next().unwrap().to_string());
    let session: Value = json_of(response).await;
    assert_eq!(session["admin"], true);
    assert_eq!(session["users_required"], false);
    visitor.csrf = session["csrf"].as_str().map(str::to_string);
    let (status, body) = visitor.act("add_workers", json!({"count": 1})).await;
    // The coordinator runs without `skiff serve`: the function's own refusal.
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("skiff worker"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_pages_are_limited_and_a_closed_one_frees_its_place() {
    use skiff_console::limits::CONSOLE_FEEDS_MAX;
    let cluster = cluster_with(Users::default(), Limits::default(), Some(&[])).await;
    let mut visitor = Visitor::new(cluster.http.expect("the console listens"));
    let response = visitor.get("/api/session").await;
    let cookie = response.headers()[SET_COOKIE].to_str().unwrap().to_string();
    visitor.cookie = Some(cookie.split(';').next().unwrap().to_string());
    let mut open = Vec::new();
    for _ in 0..CONSOLE_FEEDS_MAX {
        let feed = visitor.get("/api/events").await;
        assert_eq!(feed.status(), StatusCode::OK);
        open.push(feed);
    }
    let refused = visitor.get("/api/events").await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    drop(open.pop());
    // The server notices the closed stream when it next writes to it.
    let mut status = StatusCode::SERVICE_UNAVAILABLE;
    for _ in 0..2000 {
        let feed = visitor.get("/api/events").await;
        status = feed.status();
        if status == StatusCode::OK {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(status, StatusCode::OK, "a closed live page freed its place");
}

/// A unique pod file in /dev/shm, removed with its partitions on drop.
struct PodFile(std::path::PathBuf);

impl Drop for PodFile {
    fn drop(&mut self) {
        let _ = skiff_pod::remove_pod(&self.0);
    }
}

/// `GET /api/pod` until `done` holds of it (or a minute passed).
async fn pod_until(visitor: &Visitor, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let page = visitor.json("/api/pod").await;
        if done(&page["pods"][0]) {
            return page["pods"][0].clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up waiting until {what}: {page}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pod_page_follows_a_pod_from_before_it_starts_to_after_it_is_gone() {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let pod = PodFile(dir.join(format!("skiff-console-pod-{}", std::process::id())));
    let _ = skiff_pod::remove_pod(&pod.0);
    let cluster = cluster_with(
        Users::default(),
        Limits::default(),
        Some(std::slice::from_ref(&pod.0)),
    )
    .await;
    let mut visitor = Visitor::new(cluster.http.expect("the console listens"));
    assert_eq!(
        visitor.get("/api/pod").await.status(),
        StatusCode::UNAUTHORIZED
    );
    let response = visitor.get("/api/session").await;
    let cookie = response.headers()[SET_COOKIE].to_str().unwrap().to_string();
    visitor.cookie = Some(cookie.split(';').next().unwrap().to_string());

    // Before the pod exists: the page says why there is nothing.
    let waiting = pod_until(&visitor, "the missing file is read", |p| {
        p["error"].is_string()
    })
    .await;
    assert_eq!(waiting["path"], pod.0.display().to_string());
    assert!(waiting["pod"].is_null(), "{waiting}");
    let events = first_events(&visitor, "/api/events", &["pod"]).await;
    assert_eq!(events["pod"]["pods"][0]["path"], waiting["path"]);

    // A two-host Pasha static run of the standard mix, as threads here.
    let mut cfg = skiff_pod::PodConfig::new(&pod.0, 2, 2);
    cfg.arch = skiff_pod::Arch::PashaStatic;
    cfg.mix = skiff_pod::Mix::Standard;
    cfg.multi_warehouse_pct = 60.0;
    cfg.duration = Duration::from_secs(5);
    let run = tokio::task::spawn_blocking(move || skiff_pod::run(&cfg));

    // While it runs: both hosts alive, committing, each with a rate and a
    // line on the chart.
    let running = pod_until(&visitor, "both hosts commit with a rate", |p| {
        p["pod"]["state"] == "running"
            && p["series"].as_array().is_some_and(|s| s.len() >= 2)
            && p["hosts"].as_array().is_some_and(|hosts| {
                hosts.len() == 2
                    && hosts
                        .iter()
                        .all(|h| h["commits_per_s"].as_f64().is_some_and(|r| r > 0.0))
            })
    })
    .await;
    for host in running["hosts"].as_array().unwrap() {
        assert_eq!(host["life"], "alive", "{running}");
        assert!(host["heartbeat_age_ms"].is_u64(), "{running}");
        let kinds: Vec<&str> = host["kinds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "new_order",
                "payment",
                "delivery",
                "order_status",
                "stock_level"
            ]
        );
    }
    assert_eq!(running["pod"]["arch"], "pasha-static");
    assert_eq!(running["pod"]["mix"], "standard");
    for (_, rates) in
        serde_json::from_value::<Vec<(f64, Vec<f64>)>>(running["series"].clone()).unwrap()
    {
        assert_eq!(rates.len(), 2);
    }

    // Once done: the totals are the run's report, and no rate is shown.
    let report = run.await.unwrap().unwrap_or_else(|e| panic!("{e}"));
    let done = pod_until(&visitor, "the pod is done", |p| p["pod"]["state"] == "done").await;
    let total = |name: &str, field: &str| -> u64 {
        done["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|h| h["kinds"].as_array().unwrap())
            .filter(|k| k["name"] == name)
            .map(|k| k[field].as_u64().unwrap())
            .sum()
    };
    assert_eq!(total("new_order", "committed"), report.new_order.committed);
    assert_eq!(total("payment", "committed"), report.payment.committed);
    assert_eq!(total("delivery", "aborted"), report.delivery.aborted);
    assert!(report.new_order.committed > 0, "{report}");
    for host in done["hosts"].as_array().unwrap() {
        assert!(host["commits_per_s"].is_null(), "{done}");
        assert!(host["heartbeat_age_ms"].is_null(), "{done}");
    }
    // Misses per commit: what the pod file says, over the run.
    let new_order = &done["hosts"][0]["kinds"][0];
    let expected = new_order["misses"].as_f64().unwrap() / new_order["committed"].as_f64().unwrap();
    // serde_json's float parsing may be one unit in the last place off
    // (it is not built with `float_roundtrip`): equal within 1e-12.
    let shown = new_order["misses_per_commit"].as_f64().unwrap();
    assert!(
        (shown - expected).abs() <= 1e-12 * expected.abs(),
        "{shown} != {expected}"
    );

    // Gone again: back to waiting, nothing of the old run kept.
    skiff_pod::remove_pod(&pod.0).unwrap();
    let gone = pod_until(&visitor, "the removed pod is noticed", |p| {
        p["pod"].is_null()
    })
    .await;
    assert!(
        gone["error"].is_string() && gone["series"] == json!([]),
        "{gone}"
    );
}
