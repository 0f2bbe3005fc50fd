//! Who may open a PostgreSQL session. With users configured, clients
//! authenticate with SCRAM-SHA-256 (SCRAM-SHA-256-PLUS as well over TLS);
//! without users, loopback peers are let in without a password and others
//! are turned away. A session is opened, and so the connection limit
//! checked, after the client proves who it is but before it hears that it
//! is in: a refusal arrives as a FATAL error instead of a broken session.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::Sink;
use pgwire::api::auth::mechanism::AuthMechanismFactory;
use pgwire::api::auth::sasl::scram::{SCRAM_ITERATIONS, ScramAuth, gen_salted_password};
use pgwire::api::auth::{
    AuthDriver, AuthOutcome, AuthSource, DefaultServerParameterProvider, LoginInfo, Password,
    StartupHandler, protocol_negotiation, save_startup_parameters_to_metadata,
};
use pgwire::api::{ClientInfo, METADATA_USER};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::startup::Authentication;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use tracing::{debug, warn};

use super::{CancelKeys, Connection, fatal};
use skiff_node::sync::lock;

use skiff_coordinator::Coordinator;
use skiff_node::error::{ServerError, SqlState};

/// Salt length for the SCRAM secrets derived at run time.
const SALT_BYTES: usize = 16;

/// The startup phase of a connection: protocol negotiation, authentication,
/// opening the session.
pub(super) struct Startup {
    coordinator: Coordinator,
    driver: AuthDriver<DefaultServerParameterProvider>,
    /// `None` when no users are configured.
    scram: Option<Scram>,
    keys: Arc<CancelKeys>,
}

/// SCRAM for plain connections, and for TLS ones (with channel binding
/// when the certificate allows it). libpq refuses a server that offers
/// SCRAM-SHA-256-PLUS over a plain connection, so the two differ.
struct Scram {
    plain: ScramAuth,
    tls: ScramAuth,
}

impl Startup {
    /// `cert_pem` (the TLS certificate chain) enables channel binding.
    pub(super) fn new(
        coordinator: Coordinator,
        keys: Arc<CancelKeys>,
        cert_pem: Option<&[u8]>,
    ) -> Self {
        let scram = coordinator.users().required().then(|| {
            let mut plain = ScramAuth::new(Arc::new(Secrets::new(coordinator.clone())));
            plain.set_iterations(SCRAM_ITERATIONS);
            let mut tls = plain.clone();
            if let Some(pem) = cert_pem
                && let Err(e) = tls.configure_certificate(pem)
            {
                warn!(error = %e, "SCRAM channel binding unavailable for this certificate");
            }
            Scram { plain, tls }
        });
        Self {
            coordinator,
            driver: AuthDriver::new(server_parameters()),
            scram,
            keys,
        }
    }

    /// The client is who it says (or needs not prove it): open its session,
    /// then finish the startup and make the connection cancelable.
    async fn admit<C>(
        &self,
        client: &mut C,
        final_message: Option<Authentication>,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let user = client
            .metadata()
            .get(METADATA_USER)
            .cloned()
            .ok_or(PgWireError::UserNameRequired)?;
        let peer = client.socket_addr();
        let session = self
            .coordinator
            .open_session(&user, Some(peer))
            .map_err(fatal)?;
        self.driver
            .complete_authentication(client, final_message)
            .await?;
        let (pid, secret) = client.pid_and_secret_key();
        let connection = Connection::new(session, Arc::clone(&self.keys), pid, &secret);
        client.session_extensions().insert(connection);
        debug!(%user, %peer, "PostgreSQL session opened");
        Ok(())
    }
}

/// What the server tells a client at startup. `DateStyle` must start with
/// `ISO` for JDBC; dates, times and zones are written in those styles.
fn server_parameters() -> DefaultServerParameterProvider {
    let mut parameters = DefaultServerParameterProvider::default();
    parameters.server_version = format!(
        "{} (Skiff {})",
        skiff_coordinator::SERVER_VERSION,
        env!("CARGO_PKG_VERSION")
    );
    parameters.date_style = "ISO, MDY".to_string();
    parameters.interval_style = "postgres".to_string();
    parameters.time_zone = skiff_coordinator::TIME_ZONE.to_string();
    parameters.is_superuser = false;
    parameters
}

#[async_trait]
impl StartupHandler for Startup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let outcome = match message {
            PgWireFrontendMessage::Startup(startup) => {
                protocol_negotiation(client, &startup).await?;
                save_startup_parameters_to_metadata(client, &startup);
                match &self.scram {
                    Some(scram) => {
                        let scram = if client.is_secure() {
                            &scram.tls
                        } else {
                            &scram.plain
                        };
                        self.driver
                            .begin_authentication(client, scram.create())
                            .await?
                    }
                    None => {
                        self.coordinator
                            .users()
                            .admit(Some(client.socket_addr()))
                            .map_err(fatal)?;
                        AuthOutcome::Authenticated {
                            identity: None,
                            final_message: None,
                        }
                    }
                }
            }
            PgWireFrontendMessage::PasswordMessageFamily(message) => {
                match self.driver.advance_authentication(client, message).await {
                    Ok(outcome) => outcome,
                    // pgwire leaves the user out of the message.
                    Err(PgWireError::InvalidPassword(_)) => {
                        let user = client.metadata().get(METADATA_USER).cloned();
                        let error = ServerError::new(
                            SqlState::InvalidPassword,
                            format!(
                                "password authentication failed for user \"{}\"",
                                user.unwrap_or_default()
                            ),
                        );
                        return Err(fatal(error));
                    }
                    Err(e) => return Err(e),
                }
            }
            _ => return Ok(()),
        };
        match outcome {
            AuthOutcome::InProgress => Ok(()),
            AuthOutcome::Authenticated { final_message, .. } => {
                self.admit(client, final_message).await
            }
        }
    }
}

/// SCRAM secrets derived from the users' cleartext passwords: each user's
/// salted password is computed once, with a salt drawn at first use. A user
/// that does not exist gets a decoy secret no password matches, so the
/// exchange fails the same way as for a wrong password.
struct Secrets {
    coordinator: Coordinator,
    /// Bounded by the number of configured users.
    derived: Mutex<HashMap<String, Password>>,
    decoy: Password,
}

impl Secrets {
    fn new(coordinator: Coordinator) -> Self {
        let decoy = Password::new(Some(random_bytes()), random_bytes());
        Self {
            coordinator,
            derived: Mutex::new(HashMap::new()),
            decoy,
        }
    }
}

fn random_bytes() -> Vec<u8> {
    rand::random::<[u8; SALT_BYTES]>().to_vec()
}

impl Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets").finish_non_exhaustive()
    }
}

#[async_trait]
impl AuthSource for Secrets {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        let user = login.user().unwrap_or_default();
        let Some(cleartext) = self.coordinator.users().password(user) else {
            return Ok(self.decoy.clone());
        };
        if let Some(known) = lock(&self.derived).get(user) {
            return Ok(known.clone());
        }
        let salt = random_bytes();
        let salted = gen_salted_password(cleartext, &salt, SCRAM_ITERATIONS);
        let password = Password::new(Some(salt), salted);
        Ok(lock(&self.derived)
            .entry(user.to_string())
            .or_insert(password)
            .clone())
    }
}
