//! Who may connect. Users come from a file (`name:password` per line, `#`
//! comments) or from `SKIFF_USER` / `SKIFF_PASSWORD`. With no users at all
//! the server trusts loopback clients only, and says so when it starts.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use crate::error::{Result, ServerError, SqlState};

/// Known users and their passwords.
#[derive(Clone, Debug, Default)]
pub struct Users {
    passwords: BTreeMap<String, String>,
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
            users.add(user, password);
        }
        Ok(users)
    }

    /// Parse `name:password` lines.
    pub fn parse(text: &str) -> Result<Self> {
        let mut users = Users::default();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((name, password)) = line.split_once(':') else {
                return Err(ServerError::new(
                    SqlState::InvalidParameterValue,
                    format!("line {}: expected name:password", n + 1),
                ));
            };
            if name.is_empty() || password.is_empty() {
                return Err(ServerError::new(
                    SqlState::InvalidParameterValue,
                    format!("line {}: empty name or password", n + 1),
                ));
            }
            users.add(name.to_string(), password.to_string());
        }
        Ok(users)
    }

    pub fn add(&mut self, name: String, password: String) {
        self.passwords.insert(name, password);
    }

    /// True when clients must authenticate.
    pub fn required(&self) -> bool {
        !self.passwords.is_empty()
    }

    pub fn password(&self, user: &str) -> Option<&str> {
        self.passwords.get(user).map(String::as_str)
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

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_verify() {
        let users = Users::parse("# team\nskiff:secret\n\nbob:pa:ss\n").unwrap();
        assert!(users.required());
        assert!(users.verify("skiff", "secret").is_ok());
        assert!(users.verify("bob", "pa:ss").is_ok());
        let wrong = users.verify("skiff", "nope").unwrap_err();
        assert_eq!(wrong.state, SqlState::InvalidPassword);
        assert!(users.verify("eve", "secret").is_err());
        assert!(Users::parse("nocolon").is_err());
        assert!(Users::parse(":x").is_err());
    }

    #[test]
    fn trust_only_loopback_without_users() {
        let users = Users::default();
        assert!(users.admit(Some("127.0.0.1:5000".parse().unwrap())).is_ok());
        assert!(users.admit(Some("10.1.2.3:5000".parse().unwrap())).is_err());
        assert!(users.admit(None).is_err());
    }
}
