//! Who is logged in to the console. A login is a random token in an
//! HttpOnly, SameSite=Strict cookie, with a CSRF token of its own that the
//! page sends back in a header on every action; the users and their roles
//! are the database's (`skiff_coordinator::auth`). With no users configured, a
//! loopback visitor is logged in at once as an admin, as a loopback
//! client of the PostgreSQL port is trusted.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use crate::limits::{CONSOLE_LOGIN_TTL, CONSOLE_REFUSAL_DELAY};
use crate::logins::Login;
use crate::state::{Console, Refusal, refuse};
use skiff_coordinator::auth::{Role, constant_time_eq};

/// The login cookie's name.
const COOKIE: &str = "skiff_console";
/// The header an action carries its login's CSRF token in.
pub const CSRF_HEADER: &str = "x-skiff-csrf";
/// Who a visitor is when no users are configured.
const TRUSTED_USER: &str = "local";

fn cookie_token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('='))
}

/// The visitor's login, or the answer that refuses them.
pub(crate) fn viewer(console: &Console, headers: &HeaderMap) -> Result<Login, Refusal> {
    cookie_token(headers)
        .and_then(|token| console.logins.get(token))
        .ok_or(Refusal(StatusCode::UNAUTHORIZED, "log in first"))
}

/// The visitor's login when the request is an action: the CSRF header must
/// match the login's token (a page of another site can send the cookie
/// with a form, not the header).
pub(crate) fn actor(console: &Console, headers: &HeaderMap) -> Result<Login, Refusal> {
    let login = viewer(console, headers)?;
    let sent = headers
        .get(CSRF_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !constant_time_eq(sent.as_bytes(), login.csrf.as_bytes()) {
        return Err(Refusal(
            StatusCode::FORBIDDEN,
            "the request lacks this login's CSRF token",
        ));
    }
    Ok(login)
}

/// What the page learns of its visitor.
#[derive(Serialize)]
struct SessionInfo {
    user: String,
    admin: bool,
    csrf: String,
    /// False when no users are configured (no login form, no logout).
    users_required: bool,
}

fn session_info(console: &Console, login: &Login) -> SessionInfo {
    SessionInfo {
        user: login.user.clone(),
        admin: login.is_admin(),
        csrf: login.csrf.clone(),
        users_required: console.coordinator.users().required(),
    }
}

fn with_cookie(token: &str, max_age_secs: u64, body: impl IntoResponse) -> Response {
    let cookie =
        format!("{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age_secs}");
    let mut response = body.into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// `GET /api/session`: who the visitor is; 401 when they must log in.
pub(crate) async fn session(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    match viewer(&console, &headers) {
        Ok(login) => Json(session_info(&console, &login)).into_response(),
        // The peer was admitted (loopback): trusted, as on the PostgreSQL
        // port.
        Err(_) if !console.coordinator.users().required() => {
            let (token, login) = console.logins.open(TRUSTED_USER, Role::Admin);
            let body = Json(session_info(&console, &login));
            with_cookie(&token, CONSOLE_LOGIN_TTL.as_secs(), body)
        }
        Err(refused) => refused.into_response(),
    }
}

#[derive(Deserialize)]
pub(crate) struct Credentials {
    user: String,
    password: String,
}

/// `POST /api/login` with `{"user", "password"}`.
pub(crate) async fn login(
    State(console): State<Arc<Console>>,
    Json(credentials): Json<Credentials>,
) -> Response {
    let users = console.coordinator.users();
    if let Err(e) = users.verify(&credentials.user, &credentials.password) {
        tokio::time::sleep(CONSOLE_REFUSAL_DELAY).await;
        return refuse(StatusCode::UNAUTHORIZED, e.message);
    }
    let role = users.role(&credentials.user);
    let (token, login) = console.logins.open(&credentials.user, role);
    tracing::info!(user = %login.user, "console login");
    let body = Json(session_info(&console, &login));
    with_cookie(&token, CONSOLE_LOGIN_TTL.as_secs(), body)
}

/// `POST /api/logout` (with the CSRF header).
pub(crate) async fn logout(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    if let Err(refused) = actor(&console, &headers) {
        return refused.into_response();
    }
    if let Some(token) = cookie_token(&headers) {
        console.logins.close(token);
    }
    with_cookie("", 0, StatusCode::NO_CONTENT)
}
