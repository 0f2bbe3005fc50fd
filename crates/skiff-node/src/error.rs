//! Errors as clients see them: a SQLSTATE code plus one line of message.
//! Both front doors (PostgreSQL wire and Flight SQL) report these.

use std::fmt;

use datafusion::error::DataFusionError;
use skiff_tables::TableError;

/// SQLSTATE codes Skiff reports (PostgreSQL appendix A).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SqlState {
    SyntaxError,
    UndefinedTable,
    UndefinedColumn,
    UndefinedFunction,
    UndefinedParameter,
    DuplicateTable,
    DivisionByZero,
    DataException,
    InvalidParameterValue,
    FeatureNotSupported,
    QueryCanceled,
    InvalidPassword,
    InvalidAuthorization,
    TooManyConnections,
    OutOfMemory,
    InsufficientResources,
    /// No worker could take the query, or the worker running it was lost.
    CannotConnectNow,
    ConnectionFailure,
    ProtocolViolation,
    Internal,
    DataCorrupted,
    /// The caller may not do this: a non-admin asked for an admin
    /// operation, or a test hook on a server without `--fault-injection`.
    InsufficientPrivilege,
    /// `PREPARE` of a name already prepared in the session.
    DuplicatePreparedStatement,
    /// `EXECUTE` or `DEALLOCATE` of a name nothing was prepared under.
    InvalidStatementName,
    /// A statement longer than the server plans.
    ProgramLimitExceeded,
    /// A statement whose expressions nest deeper than the server plans.
    StatementTooComplex,
    /// A write lost a race with another commit to the same table; nothing
    /// was written and it may be retried.
    SerializationFailure,
    /// A NULL into a column declared NOT NULL.
    NotNullViolation,
    /// Loaded data with a value that does not read as its column's type.
    InvalidTextRepresentation,
    /// Loaded data whose rows are malformed (a wrong number of fields).
    BadCopyFileFormat,
}

impl SqlState {
    pub fn code(self) -> &'static str {
        match self {
            SqlState::SyntaxError => "42601",
            SqlState::UndefinedTable => "42P01",
            SqlState::UndefinedColumn => "42703",
            SqlState::UndefinedFunction => "42883",
            SqlState::UndefinedParameter => "42P02",
            SqlState::DuplicateTable => "42P07",
            SqlState::DivisionByZero => "22012",
            SqlState::DataException => "22000",
            SqlState::InvalidParameterValue => "22023",
            SqlState::FeatureNotSupported => "0A000",
            SqlState::QueryCanceled => "57014",
            SqlState::InvalidPassword => "28P01",
            SqlState::InvalidAuthorization => "28000",
            SqlState::TooManyConnections => "53300",
            SqlState::OutOfMemory => "53200",
            SqlState::InsufficientResources => "53000",
            SqlState::CannotConnectNow => "57P03",
            SqlState::ConnectionFailure => "08006",
            SqlState::ProtocolViolation => "08P01",
            SqlState::Internal => "XX000",
            SqlState::DataCorrupted => "XX001",
            SqlState::InsufficientPrivilege => "42501",
            SqlState::DuplicatePreparedStatement => "42P05",
            SqlState::InvalidStatementName => "26000",
            SqlState::ProgramLimitExceeded => "54000",
            SqlState::StatementTooComplex => "54001",
            SqlState::SerializationFailure => "40001",
            SqlState::NotNullViolation => "23502",
            SqlState::InvalidTextRepresentation => "22P02",
            SqlState::BadCopyFileFormat => "22P04",
        }
    }
}

/// An error reported to a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerError {
    pub state: SqlState,
    pub message: String,
    /// What the server acts on; clients see only the state and message.
    pub cause: Cause,
}

/// Why an error happened, where the server must act on it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Cause {
    #[default]
    Other,
    /// A worker could not be reached, or its connection broke mid-call:
    /// the worker is gone (killed, restarting), and another may take the
    /// query.
    WorkerGone,
}

pub type Result<T, E = ServerError> = std::result::Result<T, E>;

impl ServerError {
    pub fn new(state: SqlState, message: impl Into<String>) -> Self {
        Self {
            state,
            message: message.into(),
            cause: Cause::Other,
        }
    }

    /// A worker gone (SQLSTATE 57P03, [`Cause::WorkerGone`]).
    pub fn worker_gone(message: impl Into<String>) -> Self {
        Self {
            cause: Cause::WorkerGone,
            ..Self::new(SqlState::CannotConnectNow, message)
        }
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(SqlState::Internal, message)
    }

    pub fn canceled(message: impl Into<String>) -> Self {
        Self::new(SqlState::QueryCanceled, message)
    }
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message)
    }
}

impl std::error::Error for ServerError {}

impl From<DataFusionError> for ServerError {
    fn from(error: DataFusionError) -> Self {
        // Context layers and "External error:" wrappers add nothing a
        // client can use; the innermost error says what went wrong.
        let root = error.find_root();
        if let DataFusionError::External(inner) = root
            && let Some(server) = inner.downcast_ref::<ServerError>()
        {
            return server.clone();
        }
        if let Some(message) = skiff_tables::error::conflict(&error) {
            return Self::new(SqlState::SerializationFailure, one_line(&message));
        }
        // A managed table's error says what a user needs (which file,
        // line and column), whatever wrapped it on the way up.
        if let Some(table) = skiff_tables::error::find(&error) {
            let message = one_line(&table.to_string());
            return Self::new(sql_state(&error, &message), message);
        }
        let message = match root {
            DataFusionError::External(inner) => without_wrappers(&one_line(&inner.to_string())),
            other => one_line(&other.strip_backtrace()),
        };
        Self::new(sql_state(&error, &message), message)
    }
}

impl From<ServerError> for DataFusionError {
    fn from(error: ServerError) -> Self {
        DataFusionError::External(Box::new(error))
    }
}

/// DataFusion's errors carry no SQLSTATE; derive one from the variant and,
/// where one variant covers several cases, from the text.
fn sql_state(error: &DataFusionError, message: &str) -> SqlState {
    if let DataFusionError::External(inner) = error.find_root()
        && let Some(server) = inner.downcast_ref::<ServerError>()
    {
        return server.state;
    }
    if let Some(table) = skiff_tables::error::find(error) {
        match table {
            TableError::Conflict { .. } => return SqlState::SerializationFailure,
            TableError::Exists(_) => return SqlState::DuplicateTable,
            TableError::Unsupported(_) => return SqlState::FeatureNotSupported,
            TableError::BadInput(_) => return SqlState::InvalidTextRepresentation,
            // Told by their text below.
            TableError::Delta { .. } | TableError::Io(_) => {}
        }
    }
    match error.find_root() {
        DataFusionError::SQL(parse, _) => {
            // The parser's own depth limit (`sql_parser.recursion_limit`).
            return match **parse {
                datafusion::sql::sqlparser::parser::ParserError::RecursionLimitExceeded => {
                    SqlState::StatementTooComplex
                }
                _ => SqlState::SyntaxError,
            };
        }
        DataFusionError::NotImplemented(_) => return SqlState::FeatureNotSupported,
        DataFusionError::ResourcesExhausted(_) => return SqlState::OutOfMemory,
        _ => {}
    }
    let lower = message.to_ascii_lowercase();
    if lower.contains("divide by zero") || lower.contains("division by zero") {
        SqlState::DivisionByZero
    } else if lower.contains("table") && lower.contains("not found") {
        SqlState::UndefinedTable
    } else if lower.contains("invalid input syntax") {
        SqlState::InvalidTextRepresentation
    } else if lower.contains("bad copy data") {
        SqlState::BadCopyFileFormat
    } else if lower.contains("non-nullable") {
        SqlState::NotNullViolation
    } else if lower.contains("already exists") {
        SqlState::DuplicateTable
    } else if lower.contains("no field named") || lower.contains("schema error") {
        SqlState::UndefinedColumn
    } else if lower.contains("invalid function") {
        SqlState::UndefinedFunction
    } else if lower.contains("parser error") || lower.contains("sql error") {
        SqlState::SyntaxError
    } else if lower.contains("cast error") || lower.contains("arrow error") {
        SqlState::DataException
    } else {
        SqlState::Internal
    }
}

/// `message` without the prefixes deltalake adds when an error passes
/// through it (the error under them is the one a user can act on).
fn without_wrappers(message: &str) -> String {
    let mut rest = message;
    loop {
        let before = rest;
        for prefix in ["Generic DeltaTable error: ", "External error: "] {
            rest = rest.strip_prefix(prefix).unwrap_or(rest);
        }
        if rest == before {
            return rest.to_string();
        }
    }
}

/// Collapse a multi-line message (DataFusion adds backtraces and context
/// lines) to one line.
pub fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Carry a [`ServerError`] in a gRPC status: the SQLSTATE prefixes the
/// message in brackets, so any Flight client can read it too.
pub fn to_status(error: &ServerError) -> tonic::Status {
    let code = match error.state {
        SqlState::QueryCanceled => tonic::Code::Cancelled,
        SqlState::InvalidPassword | SqlState::InvalidAuthorization => tonic::Code::Unauthenticated,
        SqlState::InsufficientPrivilege => tonic::Code::PermissionDenied,
        SqlState::OutOfMemory | SqlState::TooManyConnections => tonic::Code::ResourceExhausted,
        SqlState::FeatureNotSupported => tonic::Code::Unimplemented,
        SqlState::CannotConnectNow | SqlState::ConnectionFailure => tonic::Code::Unavailable,
        SqlState::Internal => tonic::Code::Internal,
        SqlState::DataCorrupted => tonic::Code::DataLoss,
        _ => tonic::Code::InvalidArgument,
    };
    tonic::Status::new(code, format!("[{}] {}", error.state.code(), error.message))
}

/// Read back a status made by [`to_status`]; other statuses (a peer that
/// vanished, a transport error) become connection failures.
pub fn from_status(status: &tonic::Status) -> ServerError {
    let message = status.message();
    if let Some(rest) = message.strip_prefix('[')
        && let Some((code, text)) = rest.split_once("] ")
        && let Some(state) = SqlState::from_code(code)
    {
        return ServerError::new(state, text);
    }
    // Skiff's own cancels carry their SQLSTATE (above); a bare Cancelled is
    // the transport's: hyper cancels a call whose connection closed, as
    // when the peer was killed ("operation was canceled").
    let state = match status.code() {
        tonic::Code::Unauthenticated => SqlState::InvalidPassword,
        tonic::Code::Cancelled | tonic::Code::Unavailable | tonic::Code::Unknown => {
            SqlState::ConnectionFailure
        }
        _ => SqlState::Internal,
    };
    ServerError::new(state, one_line(message))
}

impl SqlState {
    const ALL: [SqlState; 26] = [
        SqlState::SyntaxError,
        SqlState::UndefinedTable,
        SqlState::UndefinedColumn,
        SqlState::UndefinedFunction,
        SqlState::UndefinedParameter,
        SqlState::DuplicateTable,
        SqlState::DivisionByZero,
        SqlState::DataException,
        SqlState::InvalidParameterValue,
        SqlState::FeatureNotSupported,
        SqlState::QueryCanceled,
        SqlState::InvalidPassword,
        SqlState::InvalidAuthorization,
        SqlState::TooManyConnections,
        SqlState::OutOfMemory,
        SqlState::InsufficientResources,
        SqlState::CannotConnectNow,
        SqlState::ConnectionFailure,
        SqlState::ProtocolViolation,
        SqlState::Internal,
        SqlState::DataCorrupted,
        SqlState::InsufficientPrivilege,
        SqlState::DuplicatePreparedStatement,
        SqlState::InvalidStatementName,
        SqlState::ProgramLimitExceeded,
        SqlState::StatementTooComplex,
    ];

    pub fn from_code(code: &str) -> Option<SqlState> {
        Self::ALL.into_iter().find(|s| s.code() == code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_from_datafusion_errors() {
        let parse = DataFusionError::SQL(
            Box::new(
                datafusion::sql::sqlparser::parser::ParserError::ParserError(
                    "Expected: an SQL statement".into(),
                ),
            ),
            None,
        );
        assert_eq!(ServerError::from(parse).state, SqlState::SyntaxError);
        let div =
            DataFusionError::ArrowError(Box::new(arrow::error::ArrowError::DivideByZero), None);
        assert_eq!(ServerError::from(div).state, SqlState::DivisionByZero);
        let wrapped: DataFusionError = ServerError::canceled("stop").into();
        assert_eq!(ServerError::from(wrapped).state, SqlState::QueryCanceled);
    }

    #[test]
    fn status_round_trip() {
        for state in SqlState::ALL {
            let error = ServerError::new(state, "what [went] wrong");
            assert_eq!(from_status(&to_status(&error)), error);
        }
        let lost = from_status(&tonic::Status::unavailable("connection reset"));
        assert_eq!(lost.state, SqlState::ConnectionFailure);
        let closed = from_status(&tonic::Status::cancelled("operation was canceled"));
        assert_eq!(closed.state, SqlState::ConnectionFailure);
    }
}
