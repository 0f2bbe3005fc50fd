//! Clients of a running Skiff server, for `skiff ctl` and
//! `skiff bench --via`: Flight SQL (Arrow batches back) and PostgreSQL
//! (text rows back, as psql gets them).

use std::net::SocketAddr;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use arrow_flight::sql::client::FlightSqlServiceClient;
use futures::TryStreamExt;
use tonic::transport::{Channel, Endpoint};

/// User and password, from SKIFF_USER / SKIFF_PASSWORD unless given.
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    pub user: Option<String>,
    pub password: Option<String>,
}

impl Credentials {
    pub fn from_env() -> Self {
        Self {
            user: std::env::var("SKIFF_USER").ok(),
            password: std::env::var("SKIFF_PASSWORD").ok(),
        }
    }

    fn user(&self) -> &str {
        self.user.as_deref().unwrap_or("skiff")
    }
}

/// A Flight SQL connection.
pub struct FlightConn {
    client: FlightSqlServiceClient<Channel>,
}

impl FlightConn {
    pub async fn connect(addr: &str, credentials: &Credentials) -> Result<Self, String> {
        let channel = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| format!("bad address {addr}: {e}"))?
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .await
            .map_err(|e| format!("cannot reach {addr}: {e}"))?;
        // Batches can exceed tonic's 4 MiB default message size.
        let inner = arrow_flight::flight_service_client::FlightServiceClient::new(channel)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        let mut client = FlightSqlServiceClient::new_from_inner(inner);
        if let Some(password) = &credentials.password {
            client
                .handshake(credentials.user(), password)
                .await
                .map_err(|e| format!("authentication failed: {e}"))?;
        }
        Ok(Self { client })
    }

    /// Run `sql`; its schema and every batch of its result.
    pub async fn query(&mut self, sql: &str) -> Result<(SchemaRef, Vec<RecordBatch>), String> {
        let info = self
            .client
            .execute(sql.to_string(), None)
            .await
            .map_err(flight_message)?;
        let schema = info
            .clone()
            .try_decode_schema()
            .map_err(|e| format!("bad schema from server: {e}"))?;
        let mut batches = Vec::new();
        for endpoint in info.endpoint {
            let Some(ticket) = endpoint.ticket else {
                continue;
            };
            let stream = self.client.do_get(ticket).await.map_err(flight_message)?;
            batches.extend(
                stream
                    .try_collect::<Vec<_>>()
                    .await
                    .map_err(flight_message)?,
            );
        }
        Ok((SchemaRef::new(schema), batches))
    }
}

/// The server's message without gRPC's wrapping.
fn flight_message(error: arrow_flight::error::FlightError) -> String {
    match error {
        arrow_flight::error::FlightError::Tonic(status) => status.message().to_string(),
        other => other.to_string(),
    }
}

/// A PostgreSQL connection.
pub struct PgConn {
    client: tokio_postgres::Client,
}

impl PgConn {
    pub async fn connect(addr: SocketAddr, credentials: &Credentials) -> Result<Self, String> {
        let mut config = tokio_postgres::Config::new();
        config
            .host(addr.ip().to_string())
            .port(addr.port())
            .user(credentials.user())
            .dbname("skiff")
            .connect_timeout(Duration::from_secs(5));
        if let Some(password) = &credentials.password {
            config.password(password);
        }
        let (client, connection) = config
            .connect(tokio_postgres::NoTls)
            .await
            .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            // The connection task ends when the client is dropped.
            runtime.spawn(connection);
        }
        Ok(Self { client })
    }

    /// Run every statement of `sql` as one simple query; rows returned.
    pub async fn query(&self, sql: &str) -> Result<u64, String> {
        Ok(self
            .simple(sql)
            .await?
            .iter()
            .filter(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(_)))
            .count() as u64)
    }

    /// Run every statement of a query file, one simple query each (as a
    /// client sends a script); rows of all of them.
    pub async fn run_script(&self, script: &str) -> Result<u64, String> {
        let mut rows = 0;
        for statement in skiff_engine::statement::split_statements(script) {
            rows += self.query(statement).await?;
        }
        Ok(rows)
    }

    /// Run `sql` as one simple query; its rows as text cells.
    pub async fn rows(&self, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
        Ok(self
            .simple(sql)
            .await?
            .into_iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(row) => Some(
                    (0..row.len())
                        .map(|i| row.get(i).map(str::to_string))
                        .collect(),
                ),
                _ => None,
            })
            .collect())
    }

    async fn simple(&self, sql: &str) -> Result<Vec<tokio_postgres::SimpleQueryMessage>, String> {
        self.client
            .simple_query(sql)
            .await
            .map_err(|e| match e.as_db_error() {
                Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
                None => e.to_string(),
            })
    }
}
