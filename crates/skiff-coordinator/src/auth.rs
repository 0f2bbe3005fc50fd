//! Who may connect, and who may steer the cluster. Users come from a file
//! (`name:password` or `name:role:password` per line, role `admin` or
//! `user`, `#` comments) or from `SKIFF_USER` / `SKIFF_PASSWORD`, who is an
//! admin. With no users at all the server trusts loopback clients only,
//! and says so when it starts; a trusted client is an admin, as anyone on
//! the machine could start the server themselves.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use skiff_node::error::{Result, ServerError, SqlState};

/// What a user may do beyond running statements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Runs statements and cancels their own queries.
    User,
    /// Also migrates, suspends, resumes and cancels anyone's queries,
    /// drains and undrains workers and sends spot notices.
    Admin,
}

impl Role {
    fn parse(word: &str) -> Option<Role> {
        match word {
            "user" => Some(Role::User),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }
}

#[derive(Clone, Debug)]
struct Account {
    password: String,
    role: Role,
}

/// Known users, their passwords and roles.
#[derive(Clone, Debug, Default)]
pub struct Users {
    accounts: BTreeMap<String, Account>,
}

impl Users {
    /// Users from `file` if given, plus `SKIFF_USER`/`SKIFF_PASSWORD` when
    /// both are set.
    pub fn load(file: Option<&Path>) -> Result<Self> {
        let mut users = Users::default();
        if let Some(file) = file {
            let text = std::fs::read_to_string(file).map_err(|e| {
                ServerError::new(
                    SqlState::InvalidParameterValue,
                    format!("cannot read users file {}: {e}", file.display()),
                )
            })?;
            users = Self::parse(&text).map_err(|e| {
                ServerError::new(e.state, format!("users file {}: {}", file.display(), e))
            })?;
        }
        if let (Ok(user), Ok(password)) =
            (std::env::var("SKIFF_USER"), std::env::var("SKIFF_PASSWORD"))
        {
            users.add(user, password, Role::Admin);
        }
        Ok(users)
    }

    /// Parse `name:password` and `name:role:password` lines. A password
    /// that itself starts with `admin:` or `user:` needs the role field.
    pub fn parse(text: &str) -> Result<Self> {
        let mut users = Users::default();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((name, rest)) = line.split_once(':') else {
                return Err(ServerError::new(
                    SqlState::InvalidParameterValue,
                    format!(
                        "line {}: expected name:password or name:role:password",
                        n + 1
                    ),
                ));
            };
            let (role, password) = match rest.split_once(':') {
                Some((word, password)) => match Role::parse(word) {
                    Some(role) => (role, password),
                    None => (Role::User, rest),
                },
                None => (Role::User, rest),
            };
            if name.is_empty() || password.is_empty() {
                return Err(ServerError::new(
                    SqlState::InvalidParameterValue,
                    format!("line {}: empty name or password", n + 1),
                ));
            }
            users.add(name.to_string(), password.to_string(), role);
        }
        Ok(users)
    }

    pub fn add(&mut self, name: String, password: String, role: Role) {
        self.accounts.insert(name, Account { password, role });
    }

    /// True when clients must authenticate.
    pub fn required(&self) -> bool {
        !self.accounts.is_empty()
    }

    pub fn password(&self, user: &str) -> Option<&str> {
        self.accounts.get(user).map(|a| a.password.as_str())
    }

    /// The configured user names.
    pub fn names(&self) -> Vec<String> {
        self.accounts.keys().cloned().collect()
    }

    /// The role of an authenticated `user`. Without configured users every
    /// (loopback) client is trusted, and so an admin.
    pub fn role(&self, user: &str) -> Role {
        if !self.required() {
            return Role::Admin;
        }
        self.accounts.get(user).map_or(Role::User, |a| a.role)
    }

    /// Check a cleartext password (Flight SQL basic auth).
    pub fn verify(&self, user: &str, password: &str) -> Result<()> {
        match self.password(user) {
            Some(expected) if constant_time_eq(expected.as_bytes(), password.as_bytes()) => Ok(()),
            _ => Err(ServerError::new(
                SqlState::InvalidPassword,
                format!("password authentication failed for user \"{user}\""),
            )),
        }
    }

    /// Without users, only loopback peers may connect.
    pub fn admit(&self, peer: Option<SocketAddr>) -> Result<()> {
        if self.required() || peer.is_some_and(|p| p.ip().is_loopback()) {
            return Ok(());
        }
        Err(ServerError::new(
            SqlState::InvalidAuthorization,
            "no users are configured, so only loopback connections are accepted \
             (set SKIFF_USER and SKIFF_PASSWORD or pass --users FILE)",
        ))
    }
}

pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_verify() {
        let users =
            Users::parse("# team\nskiff:secret\n\nbob:pa:ss\nroot:admin:x:y\neve:user:admin:z\n")
                .unwrap();
        assert!(users.required());
        assert!(users.verify("skiff", "secret").is_ok());
        assert!(users.verify("bob", "pa:ss").is_ok());
        assert!(users.verify("root", "x:y").is_ok());
        assert!(users.verify("eve", "admin:z").is_ok());
        assert_eq!(users.role("skiff"), Role::User);
        assert_eq!(users.role("bob"), Role::User);
        assert_eq!(users.role("root"), Role::Admin);
        assert_eq!(users.role("eve"), Role::User);
        assert_eq!(users.role("nobody"), Role::User);
        let wrong = users.verify("skiff", "nope").unwrap_err();
        assert_eq!(wrong.state, SqlState::InvalidPassword);
        assert!(users.verify("mallory", "secret").is_err());
        assert!(Users::parse("nocolon").is_err());
        assert!(Users::parse(":x").is_err());
    }

    #[test]
    fn trust_only_loopback_without_users() {
        let users = Users::default();
        assert_eq!(
            users.role("anyone"),
            Role::Admin,
            "trusted loopback clients"
        );
        assert!(users.admit(Some("127.0.0.1:5000".parse().unwrap())).is_ok());
        assert!(users.admit(Some("10.1.2.3:5000".parse().unwrap())).is_err());
        assert!(users.admit(None).is_err());
    }
}
