//! The console's logins: who is logged in, with which role and CSRF
//! token, until when (`login` hands them out and checks them).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use skiff_coordinator::auth::Role;
use skiff_node::sync::lock;

use crate::limits::{CONSOLE_LOGIN_TTL, CONSOLE_LOGINS_MAX};

/// One logged-in visitor.
#[derive(Clone, Debug)]
pub(crate) struct Login {
    pub user: String,
    pub role: Role,
    pub csrf: String,
    expires: Instant,
}

impl Login {
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }
}

/// The logins of this coordinator run, by token.
#[derive(Default)]
pub(crate) struct Logins {
    by_token: Mutex<HashMap<String, Login>>,
}

impl Logins {
    /// A new login for `user`; its token goes in the cookie.
    pub(crate) fn open(&self, user: &str, role: Role) -> (String, Login) {
        let login = Login {
            user: user.to_string(),
            role,
            csrf: random_token(),
            expires: Instant::now() + CONSOLE_LOGIN_TTL,
        };
        let token = random_token();
        let mut logins = lock(&self.by_token);
        let now = Instant::now();
        logins.retain(|_, l| l.expires > now);
        if logins.len() >= CONSOLE_LOGINS_MAX
            && let Some(oldest) = logins
                .iter()
                .min_by_key(|(_, l)| l.expires)
                .map(|(t, _)| t.clone())
        {
            logins.remove(&oldest);
        }
        logins.insert(token.clone(), login.clone());
        (token, login)
    }

    pub(crate) fn get(&self, token: &str) -> Option<Login> {
        let logins = lock(&self.by_token);
        logins
            .get(token)
            .filter(|l| l.expires > Instant::now())
            .cloned()
    }

    pub(crate) fn close(&self, token: &str) {
        lock(&self.by_token).remove(token);
    }
}

/// 32 random bytes, URL-safe base64.
fn random_token() -> String {
    URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>())
}
