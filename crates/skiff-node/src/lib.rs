//! What every node of a Skiff cluster shares: errors as clients see them
//! (a SQLSTATE and a line) and as they cross the internal wire, binding a
//! node's Flight port and keeping in touch with the coordinator, the
//! session settings a query carries to the workers, the count of a
//! distributed query's scans wherever they run, a distributed query's
//! stage outputs committed as they are read (`checkpoints`), and the
//! limits more than one role reads.

pub mod carried;
pub mod checkpoints;
pub mod error;
pub mod limits;
pub mod presence;
pub mod scan_progress;
pub mod sync;

pub use error::{Result, ServerError, SqlState};
