//! The query batcher (`../shared/papers/pipeline-groups-disaggregated.txt`
//! §2): with `skiff.batch_window_ms` set, the queries that arrive within a
//! window (or until `skiff.batch_max_queries` have) form one batch, sent to
//! one worker, which groups their pipelines. Nobody waits longer than its
//! own window: a query joining a batch opened with a longer one closes the
//! batch by its own deadline.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// A batch as it closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Closed {
    pub id: u64,
    /// Queries in it.
    pub size: usize,
    /// The worker all its queries go to (`None`: none was alive).
    pub worker: Option<u64>,
}

#[derive(Debug, Default)]
pub(crate) struct Batcher {
    open: Mutex<Option<Open>>,
    next_id: AtomicU64,
}

#[derive(Debug)]
struct Open {
    id: u64,
    members: usize,
    max: usize,
    closes: Instant,
    closed: watch::Sender<Option<Closed>>,
}

impl Batcher {
    /// Join the open batch (or open one) and wait for it to close: at the
    /// earliest deadline of its members, or once it has its members' least
    /// `max` queries. `pick` chooses the batch's worker at the close.
    pub(crate) async fn join(
        self: &Arc<Self>,
        window: Duration,
        max: usize,
        pick: impl Fn() -> Option<u64>,
    ) -> Closed {
        let (id, closes, mut closed) = {
            let mut open = self.lock();
            let now = Instant::now();
            let joined = match open.as_mut() {
                Some(batch) => {
                    batch.members += 1;
                    batch.max = batch.max.min(max);
                    batch.closes = batch.closes.min(now + window);
                    (batch.id, batch.closes, batch.closed.subscribe())
                }
                None => {
                    let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
                    let batch = open.insert(Open {
                        id,
                        members: 1,
                        max: max.max(1),
                        closes: now + window,
                        closed: watch::channel(None).0,
                    });
                    (id, batch.closes, batch.closed.subscribe())
                }
            };
            if open.as_ref().is_some_and(|b| b.members >= b.max) {
                close(&mut open, &pick);
            }
            joined
        };
        // A query dropped while it waits leaves the batch.
        let mut member = Member {
            batcher: Arc::clone(self),
            id,
            waiting: true,
        };
        let done = tokio::select! {
            got = closed.wait_for(Option::is_some) => got.ok().and_then(|c| *c),
            () = tokio::time::sleep_until(closes) => None,
        };
        let done = done.unwrap_or_else(|| {
            let mut open = self.lock();
            if open.as_ref().is_some_and(|b| b.id == id) {
                close(&mut open, &pick);
            }
            drop(open);
            let closed = *closed.borrow();
            closed.unwrap_or(Closed {
                id,
                size: 1,
                worker: None,
            })
        });
        member.waiting = false;
        assert_eq!(done.id, id, "a member learns its own batch's close");
        done
    }

    fn lock(&self) -> MutexGuard<'_, Option<Open>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn close(open: &mut Option<Open>, pick: &impl Fn() -> Option<u64>) {
    let Some(batch) = open.take() else { return };
    batch.closed.send_replace(Some(Closed {
        id: batch.id,
        size: batch.members,
        worker: pick(),
    }));
}

/// A query in a batch still open.
struct Member {
    batcher: Arc<Batcher>,
    id: u64,
    waiting: bool,
}

impl Drop for Member {
    fn drop(&mut self) {
        if !self.waiting {
            return;
        }
        let mut open = self.batcher.lock();
        if let Some(batch) = open.as_mut().filter(|b| b.id == self.id) {
            batch.members -= 1;
            if batch.members == 0 {
                *open = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use datafusion::common::runtime::SpawnedTask;

    use super::*;

    /// Far past any window these tests wait for: reaching it means a batch
    /// did not close when it should have.
    const STUCK: Duration = Duration::from_secs(20);
    const LONG: Duration = Duration::from_secs(600);

    async fn within<T>(future: impl std::future::Future<Output = T>) -> T {
        tokio::time::timeout(STUCK, future)
            .await
            .expect("the batch closed")
    }

    #[tokio::test]
    async fn queries_within_the_window_form_one_batch() {
        let batcher = Arc::new(Batcher::default());
        let window = Duration::from_millis(300);
        let joins: Vec<_> = (0..3)
            .map(|_| {
                let batcher = Arc::clone(&batcher);
                SpawnedTask::spawn(async move { batcher.join(window, 10, || Some(7)).await })
            })
            .collect();
        let mut closed = Vec::new();
        for join in joins {
            closed.push(within(join.join()).await.expect("joined"));
        }
        assert!(closed.iter().all(|c| *c == closed[0]));
        assert_eq!((closed[0].size, closed[0].worker), (3, Some(7)));
        let next = within(batcher.join(Duration::from_millis(1), 10, || None)).await;
        assert_ne!(next.id, closed[0].id, "a later query opens a new batch");
        assert_eq!(next.size, 1);
    }

    #[tokio::test]
    async fn a_full_batch_closes_at_once_and_no_one_waits_past_its_window() {
        let batcher = Arc::new(Batcher::default());
        let first = {
            let batcher = Arc::clone(&batcher);
            SpawnedTask::spawn(async move { batcher.join(LONG, 2, || Some(1)).await })
        };
        while batcher.lock().is_none() {
            tokio::task::yield_now().await;
        }
        let second = within(batcher.join(LONG, 5, || Some(1))).await;
        assert_eq!(second.size, 2, "two of at most two: closed");
        assert_eq!(within(first.join()).await.expect("joined"), second);
        let long = {
            let batcher = Arc::clone(&batcher);
            SpawnedTask::spawn(async move { batcher.join(LONG, 9, || None).await })
        };
        while batcher.lock().is_none() {
            tokio::task::yield_now().await;
        }
        let short = within(batcher.join(Duration::from_millis(5), 9, || None)).await;
        assert_eq!(
            short.size, 2,
            "the short window closed the long one's batch"
        );
        assert_eq!(within(long.join()).await.expect("joined"), short);
    }

    #[tokio::test]
    async fn a_query_dropped_while_waiting_leaves_its_batch() {
        let batcher = Arc::new(Batcher::default());
        let dropped = {
            let batcher = Arc::clone(&batcher);
            SpawnedTask::spawn(async move { batcher.join(LONG, 9, || None).await })
        };
        while batcher.lock().is_none() {
            tokio::task::yield_now().await;
        }
        drop(dropped);
        while batcher.lock().is_some() {
            tokio::task::yield_now().await;
        }
        let alone = within(batcher.join(Duration::from_millis(1), 9, || None)).await;
        assert_eq!(alone.size, 1);
    }
}
