//! The five pod architectures of issue 5 and where each puts every table.
//! One flag, the same transaction code: an architecture is a placement (pod
//! memory or a host's private partition) per table, plus, for (e), tuples
//! that move between a partition and the shared region, and for (a) and
//! (b), messages to a transaction's remote owner (their mechanisms are
//! `skiff_pod::arch`'s).

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::error::{PodError, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Arch {
    /// (a) Shared-nothing: partitions only, 2PC over TCP on loopback.
    SharedNothingTcp,
    /// (b) Shared-nothing: partitions only, 2PC over message queues in pod memory.
    SharedNothingCxl,
    /// (c) Shared-everything: every table in the shared region, every lock
    /// word in the coherent region.
    SharedEverything,
    /// (d) Pasha static: tables that several hosts access (CUSTOMER, STOCK
    /// when remote accesses are possible) in the shared region up front; the
    /// rest in each host's private partition; ITEM replicated.
    PashaStatic,
    /// (e) Pasha dynamic: tuples move to the shared region on demand.
    PashaDynamic,
}

impl Arch {
    pub const ALL: [Arch; 5] = [
        Arch::SharedNothingTcp,
        Arch::SharedNothingCxl,
        Arch::SharedEverything,
        Arch::PashaStatic,
        Arch::PashaDynamic,
    ];

    /// The letter of the list, `a` to `e`.
    pub fn letter(self) -> char {
        match self {
            Arch::SharedNothingTcp => 'a',
            Arch::SharedNothingCxl => 'b',
            Arch::SharedEverything => 'c',
            Arch::PashaStatic => 'd',
            Arch::PashaDynamic => 'e',
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Arch::SharedNothingTcp => "shared-nothing-tcp",
            Arch::SharedNothingCxl => "shared-nothing-cxl",
            Arch::SharedEverything => "shared-everything",
            Arch::PashaStatic => "pasha-static",
            Arch::PashaDynamic => "pasha-dynamic",
        }
    }

    /// Whether this build can run it.
    pub fn is_implemented(self) -> bool {
        true
    }

    pub fn require_implemented(self) -> Result<()> {
        if self.is_implemented() {
            Ok(())
        } else {
            Err(PodError::NotImplemented(format!(
                "architecture ({}) {}; this build runs (c) shared-everything, (d) pasha-static \
                 and (e) pasha-dynamic",
                self.letter(),
                self.name()
            )))
        }
    }

    pub fn code(self) -> u32 {
        self.letter() as u32 - 'a' as u32 + 1
    }

    pub fn from_code(code: u32) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.code() == code)
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}) {}", self.letter(), self.name())
    }
}

impl FromStr for Arch {
    type Err = PodError;

    /// Accepts the letter (`c`) or the name (`shared-everything`).
    fn from_str(s: &str) -> Result<Arch> {
        let s = s.trim().to_ascii_lowercase();
        Arch::ALL
            .into_iter()
            .find(|a| s == a.name() || s.len() == 1 && s.starts_with(a.letter()))
            .ok_or_else(|| {
                PodError::Config(format!(
                    "unknown architecture {s:?}; one of a..e or {}",
                    Arch::ALL.map(|a| a.name()).join(", ")
                ))
            })
    }
}

/// Concurrency control between transactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum CcProtocol {
    /// Two-phase locking; a conflicting lock request aborts at once.
    NoWait,
    /// Two-phase locking; older transactions wait, younger ones abort.
    WaitDie,
}

impl CcProtocol {
    pub const ALL: [CcProtocol; 2] = [CcProtocol::NoWait, CcProtocol::WaitDie];

    pub fn name(self) -> &'static str {
        match self {
            CcProtocol::NoWait => "no-wait",
            CcProtocol::WaitDie => "wait-die",
        }
    }

    /// Both are built; kept so a pod file naming an unknown protocol is
    /// refused through the same path as an unbuilt architecture.
    pub fn require_implemented(self) -> Result<()> {
        Ok(())
    }
}

impl fmt::Display for CcProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for CcProtocol {
    type Err = PodError;

    /// `no-wait` or `wait-die` (underscores and case ignored).
    fn from_str(s: &str) -> Result<CcProtocol> {
        let s = s.trim().to_ascii_lowercase().replace('_', "-");
        CcProtocol::ALL
            .into_iter()
            .find(|c| s == c.name())
            .ok_or_else(|| PodError::Config(format!("unknown protocol {s:?}; no-wait or wait-die")))
    }
}

/// Where a table's rows and lock words live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// Rows in the shared region of the pod file, lock words in its coherent
    /// region: every host reaches every warehouse's rows.
    Pod,
    /// Rows and lock words in the partition file of the warehouse's host;
    /// only that host touches them.
    Partition,
    /// A full copy in every host's partition (read-only tables).
    Replicated,
}

/// The logical tables of TPC-C, for placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableGroup {
    Warehouse,
    District,
    Customer,
    /// The customer last-name index: read-only after load.
    NameIndex,
    Order,
    Item,
    Stock,
}

/// Placement of `group` under `arch`. `remote_customers` / `remote_stock`:
/// whether a host can ever touch another host's customers (Payment with a
/// remote customer) or stock (NewOrder with a remote supplier). With one
/// host, or with no remote accesses, Pasha static shares nothing.
pub fn place(arch: Arch, group: TableGroup, remote_customers: bool, remote_stock: bool) -> Place {
    match arch {
        Arch::SharedEverything => Place::Pod,
        Arch::PashaStatic => match group {
            TableGroup::Item => Place::Replicated,
            TableGroup::Customer | TableGroup::NameIndex if remote_customers => Place::Pod,
            TableGroup::Stock if remote_stock => Place::Pod,
            _ => Place::Partition,
        },
        // (e) starts partitioned and moves tuples on demand. The read-only
        // last-name index is replicated so a host can resolve a remote
        // customer's name without asking; so is it in (a) and (b), where a
        // shared-nothing system keeps a replicated secondary index.
        Arch::SharedNothingTcp | Arch::SharedNothingCxl | Arch::PashaDynamic => match group {
            TableGroup::Item | TableGroup::NameIndex => Place::Replicated,
            _ => Place::Partition,
        },
    }
}

/// Whether tuples of `group` move to the shared region on demand under
/// `arch`: in Pasha dynamic, the tables other hosts reach (CUSTOMER for
/// Payment, STOCK for NewOrder).
pub fn movable(arch: Arch, group: TableGroup) -> bool {
    arch == Arch::PashaDynamic && matches!(group, TableGroup::Customer | TableGroup::Stock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_letters_and_names() {
        assert_eq!("c".parse::<Arch>().unwrap(), Arch::SharedEverything);
        assert_eq!("pasha-static".parse::<Arch>().unwrap(), Arch::PashaStatic);
        assert!("x".parse::<Arch>().is_err());
        for a in Arch::ALL {
            assert_eq!(Arch::from_code(a.code()), Some(a));
            assert_eq!(a.name().parse::<Arch>().unwrap(), a);
        }
    }

    #[test]
    fn protocols_parse() {
        assert_eq!(
            "WAIT_DIE".parse::<CcProtocol>().unwrap(),
            CcProtocol::WaitDie
        );
        assert_eq!("no-wait".parse::<CcProtocol>().unwrap(), CcProtocol::NoWait);
        assert!("2pl".parse::<CcProtocol>().is_err());
        assert!(Arch::ALL.iter().all(|a| a.require_implemented().is_ok()));
    }

    #[test]
    fn pasha_static_shares_only_what_crosses_hosts() {
        let p = |g, c, s| place(Arch::PashaStatic, g, c, s);
        assert_eq!(p(TableGroup::Customer, true, false), Place::Pod);
        assert_eq!(p(TableGroup::Customer, false, true), Place::Partition);
        assert_eq!(p(TableGroup::Stock, false, true), Place::Pod);
        assert_eq!(p(TableGroup::Warehouse, true, true), Place::Partition);
        assert_eq!(p(TableGroup::Item, true, true), Place::Replicated);
        assert_eq!(
            place(Arch::SharedEverything, TableGroup::Item, false, false),
            Place::Pod
        );
    }
}
