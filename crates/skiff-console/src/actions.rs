//! What an admin does from the console: each action is the SQL function
//! of the same name (`skiff.cancel`, `skiff.migrate`, ...), run as a
//! statement in a session of the logged-in user, so the privilege checks,
//! the errors and `skiff.queries` are the database's own.

use std::sync::Arc;

use arrow::array::{Array, BooleanArray};
use axum::Json;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::TryStreamExt;
use serde::Deserialize;

use crate::limits::CONSOLE_ACTION_TIMEOUT;
use crate::login;
use crate::state::{Console, refuse};
use skiff_coordinator::config::ADD_WORKERS_MAX;
use skiff_node::error::SqlState;

/// An action's arguments; which it needs depends on the action.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Arguments {
    query: Option<u64>,
    /// A worker's id or address.
    worker: Option<String>,
    /// `finish` (the default) or `abort`: whether running pipelines are
    /// aborted.
    mode: Option<String>,
    /// Workers to add.
    count: Option<u64>,
}

/// A quoted SQL string of a worker's name: an id or a `host:port` address.
fn worker_literal(worker: Option<&str>) -> Result<String, String> {
    let worker = worker.ok_or("name a worker (its id or address)")?;
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '-' | '[' | ']');
    if worker.is_empty() || worker.len() > 255 || !worker.chars().all(allowed) {
        return Err(format!("'{worker}' is not a worker id or address"));
    }
    Ok(format!("'{worker}'"))
}

fn mode_literal(mode: Option<&str>) -> Result<&'static str, String> {
    match mode {
        None | Some("finish") => Ok("'finish'"),
        Some("abort") => Ok("'abort'"),
        Some(other) => Err(format!("unknown mode '{other}': finish or abort")),
    }
}

/// The statement that carries out `action` with `args`.
fn statement(action: &str, args: &Arguments) -> Result<String, String> {
    let query = || args.query.ok_or("name a query (its id)");
    let worker = || worker_literal(args.worker.as_deref());
    let mode = || mode_literal(args.mode.as_deref());
    Ok(match action {
        "cancel" => format!("SELECT skiff.cancel({})", query()?),
        "migrate" => match &args.worker {
            Some(_) => format!(
                "SELECT skiff.migrate({}, {}, {})",
                query()?,
                worker()?,
                mode()?
            ),
            None => format!("SELECT skiff.migrate({})", query()?),
        },
        "suspend" => format!("SELECT skiff.suspend({}, {})", query()?, mode()?),
        "resume" => format!("SELECT skiff.resume({})", query()?),
        "drain" => format!("SELECT skiff.drain({}, {})", worker()?, mode()?),
        "undrain" => format!("SELECT skiff.undrain({})", worker()?),
        "add_workers" => {
            let count = args.count.ok_or("say how many workers to add")?;
            if count == 0 || count > ADD_WORKERS_MAX as u64 {
                return Err(format!("add 1 to {ADD_WORKERS_MAX} workers at a time"));
            }
            format!("SELECT skiff.add_workers({count})")
        }
        "remove_worker" => format!("SELECT skiff.remove_worker({})", worker()?),
        other => return Err(format!("no action '{other}'")),
    })
}

/// `POST /api/actions/{action}` with the arguments as JSON and the login's
/// CSRF header. Admins only: a read-only user's page has no buttons, and a
/// request sent anyway is refused here, before any SQL runs.
pub(crate) async fn act(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    headers: HeaderMap,
    Path(action): Path<String>,
    Json(args): Json<Arguments>,
) -> Response {
    let login = match login::actor(&console, &headers) {
        Ok(login) => login,
        Err(refused) => return refused.into_response(),
    };
    if !login.is_admin() {
        return refuse(
            StatusCode::FORBIDDEN,
            format!(
                "permission denied: {} is not an admin, and the console's actions are for admins",
                login.user
            ),
        );
    }
    let sql = match statement(&action, &args) {
        Ok(sql) => sql,
        Err(e) => return refuse(StatusCode::BAD_REQUEST, e),
    };
    tracing::info!(user = %login.user, %sql, "console action");
    let coordinator = &console.coordinator;
    let run = async {
        let session = coordinator.open_session(&login.user, Some(peer))?;
        let result = coordinator.execute(&session, &sql).await?;
        let batches: Vec<_> = result.stream.try_collect().await?;
        Ok::<_, skiff_node::error::ServerError>(batches)
    };
    let outcome = tokio::time::timeout(CONSOLE_ACTION_TIMEOUT, run).await;
    let batches = match outcome {
        Ok(Ok(batches)) => batches,
        Ok(Err(e)) => {
            let status = match e.state {
                SqlState::InsufficientPrivilege => StatusCode::FORBIDDEN,
                SqlState::InvalidParameterValue => StatusCode::BAD_REQUEST,
                _ => StatusCode::CONFLICT,
            };
            return refuse(status, e.message);
        }
        Err(_) => {
            return refuse(
                StatusCode::GATEWAY_TIMEOUT,
                format!("{sql} did not answer within {CONSOLE_ACTION_TIMEOUT:?}"),
            );
        }
    };
    let done = batches
        .iter()
        .find(|b| b.num_rows() > 0)
        .and_then(|b| b.column(0).as_any().downcast_ref::<BooleanArray>())
        .is_some_and(|a| a.is_valid(0) && a.value(0));
    Json(serde_json::json!({ "sql": sql, "done": done })).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_become_the_sql_functions_of_the_same_name() {
        let args = |query, worker: Option<&str>, mode: Option<&str>, count| Arguments {
            query,
            worker: worker.map(str::to_string),
            mode: mode.map(str::to_string),
            count,
        };
        let cases = [
            (
                "cancel",
                args(Some(7), None, None, None),
                "SELECT skiff.cancel(7)",
            ),
            (
                "migrate",
                args(Some(7), None, None, None),
                "SELECT skiff.migrate(7)",
            ),
            (
                "migrate",
                args(Some(7), Some("127.0.0.1:4000"), Some("abort"), None),
                "SELECT skiff.migrate(7, '127.0.0.1:4000', 'abort')",
            ),
            (
                "suspend",
                args(Some(3), None, None, None),
                "SELECT skiff.suspend(3, 'finish')",
            ),
            (
                "resume",
                args(Some(3), None, None, None),
                "SELECT skiff.resume(3)",
            ),
            (
                "drain",
                args(None, Some("2"), None, None),
                "SELECT skiff.drain('2', 'finish')",
            ),
            (
                "undrain",
                args(None, Some("2"), None, None),
                "SELECT skiff.undrain('2')",
            ),
            (
                "add_workers",
                args(None, None, None, Some(2)),
                "SELECT skiff.add_workers(2)",
            ),
            (
                "remove_worker",
                args(None, Some("[::1]:9"), None, None),
                "SELECT skiff.remove_worker('[::1]:9')",
            ),
        ];
        for (action, args, sql) in cases {
            assert_eq!(statement(action, &args).unwrap(), sql, "{action}");
        }
        for (action, args) in [
            ("cancel", args(None, None, None, None)),
            (
                "drain",
                args(None, Some("2'); DROP TABLE t; --"), None, None),
            ),
            ("drain", args(None, Some("2"), Some("later"), None)),
            ("add_workers", args(None, None, None, Some(0))),
            ("add_workers", args(None, None, None, Some(1000))),
            ("explode", args(Some(1), None, None, None)),
        ] {
            assert!(statement(action, &args).is_err(), "{action} {args:?}");
        }
    }
}
