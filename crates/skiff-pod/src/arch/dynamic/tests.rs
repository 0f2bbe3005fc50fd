//! Pasha dynamic's data movement: the protocol on randomized schedules
//! (shuttle), then a real pod, with requests served by a mover and the
//! consistency check afterwards.

/// Randomized schedules of the movement protocol: an owner worker and a
/// remote worker increment one tuple (two cells that must stay equal) while
/// the owner's mover moves it between home and two slots. A lost update, a
/// torn copy or a write to a stale copy shows up as a wrong final value or
/// unequal cells; a broken state transition trips an assertion.
mod shuttle_movement {
    use super::super::{Miss, Route, Tuples, lock_tuple, move_back, move_in};
    use shuttle::sync::Arc;
    use shuttle::sync::atomic::{AtomicU64 as U64, Ordering as O};
    use skiff_pod_memory::lockword::{self, Conflict};

    const SLOTS: usize = 2;
    const OWNER: u16 = 0;
    const REMOTE: u16 = 1;

    struct World {
        home: U64,
        dir: U64,
        slot_words: [U64; SLOTS],
        /// The tuple's two cells at home and in each slot.
        home_cells: [U64; 2],
        slot_cells: [[U64; 2]; SLOTS],
        /// The remote worker asked for the tuple.
        asked: U64,
    }

    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Id {
        Home,
        Dir,
        Slot(u32),
    }

    struct Locker<'a> {
        w: &'a World,
        host: u16,
    }

    impl Tuples for Locker<'_> {
        type Word = U64;
        type Id = Id;
        fn word(&mut self, id: Id) -> &U64 {
            match id {
                Id::Home => &self.w.home,
                Id::Dir => &self.w.dir,
                Id::Slot(s) => &self.w.slot_words[s as usize],
            }
        }
        fn slot(&self, slot: u32) -> Option<Id> {
            ((slot as usize) < SLOTS).then_some(Id::Slot(slot))
        }
        fn acquire(&mut self, id: Id) -> Result<(), Conflict> {
            let host = self.host;
            lockword::try_lock_exclusive(self.word(id), host)
        }
        fn release(&mut self, id: Id) {
            let host = self.host;
            lockword::unlock_exclusive(self.word(id), host);
        }
    }

    impl World {
        fn new() -> World {
            World {
                home: U64::new(0),
                dir: U64::new(0),
                slot_words: [U64::new(0), U64::new(0)],
                home_cells: [U64::new(0), U64::new(0)],
                slot_cells: [[U64::new(0), U64::new(0)], [U64::new(0), U64::new(0)]],
                asked: U64::new(0),
            }
        }

        fn cells(&self, route: Route) -> &[U64; 2] {
            match route {
                Route::Home => &self.home_cells,
                Route::Slot(s) => &self.slot_cells[s as usize],
            }
        }
    }

    /// Copies two cells non-atomically, with a yield in between.
    fn copy(from: &[U64; 2], to: &[U64; 2]) {
        for i in 0..2 {
            to[i].store(from[i].load(O::Relaxed), O::Relaxed);
            shuttle::thread::yield_now();
        }
    }

    /// Increments the tuple `rounds` times where it is; returns commits.
    fn worker(w: &World, host: u16, rounds: u32) -> u64 {
        let mut t = Locker { w, host };
        let (home, forward) = if host == OWNER {
            (Some(Id::Home), Id::Home)
        } else {
            (None, Id::Dir)
        };
        let mut done = 0;
        for _ in 0..rounds {
            match lock_tuple(&mut t, home, forward) {
                Ok(route) => {
                    let cells = w.cells(route);
                    let a = cells[0].load(O::Relaxed);
                    shuttle::thread::yield_now();
                    let b = cells[1].load(O::Relaxed);
                    assert_eq!(a, b, "torn tuple");
                    cells[0].store(a + 1, O::Relaxed);
                    shuttle::thread::yield_now();
                    cells[1].store(b + 1, O::Relaxed);
                    let id = match route {
                        Route::Home => Id::Home,
                        Route::Slot(s) => Id::Slot(s),
                    };
                    t.release(id);
                    done += 1;
                }
                Err(Miss::NotMoved) => {
                    assert_eq!(host, REMOTE, "the owner never asks");
                    w.asked.store(1, O::Relaxed);
                }
                Err(Miss::Conflict) => {}
                Err(Miss::BadForward(s)) => panic!("forward to slot {s}"),
            }
            shuttle::thread::yield_now();
        }
        done
    }

    /// The owner's mover: moves the tuple in (to alternating slots) and back.
    fn mover(w: &World, steps: u32) {
        let mut at: Option<u32> = None;
        let mut next = 0u32;
        for _ in 0..steps {
            match at {
                None => {
                    let s = next % SLOTS as u32;
                    let slot_word = &w.slot_words[s as usize];
                    let to = &w.slot_cells[s as usize];
                    let r = move_in(&w.home, &w.dir, slot_word, s, OWNER, || {
                        copy(&w.home_cells, to)
                    });
                    if r.is_ok() {
                        at = Some(s);
                        next += 1;
                    }
                }
                Some(s) => {
                    let slot_word = &w.slot_words[s as usize];
                    let from = &w.slot_cells[s as usize];
                    let r = move_back(&w.home, &w.dir, slot_word, s, OWNER, || {
                        copy(from, &w.home_cells)
                    });
                    if r.is_ok() {
                        at = None;
                    }
                }
            }
            shuttle::thread::yield_now();
        }
    }

    #[test]
    fn moving_a_tuple_never_loses_or_tears_an_update() {
        shuttle::check_random(
            || {
                let w = Arc::new(World::new());
                let workers: Vec<_> = [OWNER, REMOTE]
                    .into_iter()
                    .map(|host| {
                        let w = Arc::clone(&w);
                        shuttle::thread::spawn(move || worker(&w, host, 4))
                    })
                    .collect();
                let m = {
                    let w = Arc::clone(&w);
                    shuttle::thread::spawn(move || mover(&w, 6))
                };
                let done: u64 = workers.into_iter().map(|h| h.join().unwrap()).sum();
                m.join().unwrap();
                // Where the tuple is now, by the owner's home word.
                let home = w.home.load(O::Relaxed);
                let route = match lockword::forwarded(home) {
                    Some(s) => Route::Slot(s),
                    None => Route::Home,
                };
                let cells = w.cells(route);
                let (a, b) = (cells[0].load(O::Relaxed), cells[1].load(O::Relaxed));
                assert_eq!((a, b), (done, done), "lost update");
                // The directory agrees with the home word and nothing is held.
                let dir = w.dir.load(O::Relaxed);
                match route {
                    Route::Slot(_) => assert_eq!(dir, home),
                    Route::Home => assert_eq!((dir, home), (0, 0)),
                }
                for sw in &w.slot_words {
                    assert!(!lockword::held(sw.load(O::Relaxed)));
                }
            },
            3_000,
        );
    }
}

/// Movement on a real pod: host 1's mover serves host 0's transactions.
mod pod {
    use std::sync::atomic::AtomicBool;
    use std::sync::atomic::Ordering::Relaxed;
    use std::time::Duration;

    use super::super::Mover;
    use crate::cc::txn::{Txn, TxnError};
    use crate::tpcc::check::check_pod;
    use crate::tpcc::keys;
    use skiff_pod_memory::arch::{Arch, Place};
    use skiff_pod_memory::config::PodConfig;
    use skiff_pod_memory::lockword::Mode;
    use skiff_pod_memory::memory::futex;
    use skiff_pod_memory::memory::header::state;
    use skiff_pod_memory::memory::layout::{Array, LockTable};
    use skiff_pod_memory::memory::{Parts, PodMemory};
    use skiff_pod_memory::testing::TempShm;
    use skiff_pod_memory::tpcc::schema::*;

    fn loaded(tag: &str, slots: u32) -> (TempShm, PodMemory) {
        let shm = TempShm::new(tag);
        let mut cfg = PodConfig::new(&shm.0, 2, 2);
        cfg.arch = Arch::PashaDynamic;
        cfg.duration = Duration::from_secs(1);
        cfg.dynamic_slots_per_host = Some(slots);
        crate::load(&cfg).unwrap();
        let mem = PodMemory::open(&shm.0, true, Parts::All).unwrap();
        mem.control().set_state(state::RUNNING);
        // Requests go only to hosts that are up.
        for h in 0..2 {
            crate::durability::lease::HostRecord::of(&mem, h).announce();
        }
        (shm, mem)
    }

    /// Runs host 1's mover (serving requests as they come) while `body`
    /// runs; returns the mover for inspection.
    fn with_mover<'m>(mem: &'m PodMemory, body: impl FnOnce()) -> Mover<'m> {
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let server = s.spawn(|| {
                let mut m = Mover::new(mem, 1);
                let bell = mem.pod.atomic_u32(mem.layout.doorbell(1));
                while !stop.load(Relaxed) {
                    let rung = bell.load(std::sync::atomic::Ordering::Acquire);
                    m.serve();
                    futex::wait(bell, rung, Duration::from_millis(5));
                }
                m
            });
            body();
            stop.store(true, Relaxed);
            server.join().unwrap()
        })
    }

    fn stock_qty(txn: &mut Txn<'_>, w: u32, i_id: u32) -> u32 {
        let s: Stock = txn.get(Array::Stock, w, keys::stock(i_id));
        s.s_quantity
    }

    #[test]
    fn a_remote_tuple_moves_in_on_request_and_back_when_cold() {
        let (_shm, mem) = loaded("dyn-move", 64);
        let l = &mem.layout;
        assert_eq!(l.place_of(Array::Stock), Place::Partition);
        assert_eq!(l.place_of(Array::CustomerName), Place::Replicated);
        let idx = keys::stock(7);
        let mut mover = with_mover(&mem, || {
            let mut txn = Txn::for_worker(&mem, 0, 0);
            txn.begin(0);
            // Warehouse 2 is host 1's: host 0 asks, host 1 moves it.
            txn.lock(LockTable::Stock, 2, idx, Mode::Exclusive).unwrap();
            let mut stock: Stock = txn.get(Array::Stock, 2, idx);
            stock.s_ytd += 5;
            txn.put(Array::Stock, 2, idx, &stock);
            txn.commit();
            assert_eq!(txn.side_counters().asks, 1);
            // Now in the shared region: no second request.
            txn.begin(0);
            txn.lock(LockTable::Stock, 2, idx, Mode::Shared).unwrap();
            assert!(stock_qty(&mut txn, 2, 7) > 0);
            txn.commit();
            assert_eq!(txn.side_counters().asks, 1);
            assert!(txn.cxl_counters().data_misses > 0);
        });
        assert_eq!(mover.stats().moved_in, 1);
        let at = mem.resolve_row(Array::Stock, 2, idx).unwrap();
        assert_eq!(at.place, Place::Pod, "moved");
        let moved: Stock = mem.pod.read(at.off);
        assert_eq!(moved.s_ytd, 5);
        assert!(check_pod(&mem).passed());

        // The owner's own transactions follow the forward.
        let mut own = Txn::for_worker(&mem, 1, 0);
        own.begin(0);
        own.lock(LockTable::Stock, 2, idx, Mode::Exclusive).unwrap();
        let mut stock: Stock = own.get(Array::Stock, 2, idx);
        stock.s_ytd += 1;
        own.put(Array::Stock, 2, idx, &stock);
        own.commit();
        assert_eq!(own.side_counters().asks, 0);

        // Cold: two clock visits move it home, with both updates.
        mover.cool_all();
        assert_eq!(mover.occupied(), 0);
        assert_eq!(mover.stats().moved_back, 1);
        let home = mem.resolve_row(Array::Stock, 2, idx).unwrap();
        assert_eq!(home.place, Place::Partition);
        let back: Stock = mem.part(1).read(home.off);
        assert_eq!(back.s_ytd, 6);
        assert!(check_pod(&mem).passed());
    }

    /// Tuples moved back together go home under one log record, with only
    /// the column groups a transaction can write (S_DIST is read-only).
    #[test]
    fn a_batch_of_moves_back_shares_one_log_record() {
        let (shm, mem) = loaded("dyn-batch", 64);
        let items = 20u32;
        let mover = with_mover(&mem, || {
            let mut txn = Txn::for_worker(&mem, 0, 0);
            for i_id in 1..=items {
                let idx = keys::stock(i_id);
                txn.begin(0);
                txn.lock(LockTable::Stock, 2, idx, Mode::Exclusive).unwrap();
                let mut s: Stock = txn.get(Array::Stock, 2, idx);
                s.s_ytd += i_id;
                txn.put(Array::Stock, 2, idx, &s);
                txn.commit();
            }
        });
        assert_eq!(mover.stats().moved_in, items as u64);
        let wal = crate::durability::wal::Wal::open(
            &skiff_pod_memory::memory::files::wal_path(&shm.0, 1),
            true,
        )
        .unwrap();
        let mut mover = mover.with_log(&wal);
        mover.cool_all();
        assert_eq!(mover.stats().moved_back, items as u64);
        assert_eq!(mover.stats().cooled, items as u64);
        let log = wal.counters();
        assert_eq!(log.records, 1, "{log:?}");
        // Entry heads and the STOCK rows; no S_DIST.
        let stock = size_of::<Stock>() as u64;
        assert!(log.bytes < items as u64 * (stock + 64), "{log:?}");
        for i_id in 1..=items {
            let loc = mem.resolve_row(Array::Stock, 2, keys::stock(i_id)).unwrap();
            assert_eq!(loc.place, Place::Partition);
            let s: Stock = mem.part(1).read(loc.off);
            assert_eq!(s.s_ytd, i_id, "item {i_id}");
        }
        assert!(check_pod(&mem).passed());
    }

    #[test]
    fn a_referenced_tuple_does_not_move_and_a_held_one_is_busy() {
        let (_shm, mem) = loaded("dyn-held", 16);
        let (c1, c2) = (keys::customer(1, 1), keys::customer(1, 2));
        let mut mover = with_mover(&mem, || {
            // Host 1 holds customer 2 locally: host 0's request is busy.
            let mut local = Txn::for_worker(&mem, 1, 0);
            local.begin(0);
            local
                .lock(LockTable::Customer, 2, c2, Mode::Shared)
                .unwrap();
            let mut txn = Txn::for_worker(&mem, 0, 0);
            txn.begin(0);
            let e = txn.lock(LockTable::Customer, 2, c2, Mode::Exclusive);
            assert_eq!(e, Err(TxnError::Conflict));
            txn.abort();
            local.commit();
            // Host 0 reads customer 1 and keeps holding it.
            txn.begin(0);
            txn.lock(LockTable::Customer, 2, c1, Mode::Shared).unwrap();
            let _: Customer = txn.get(Array::Customer, 2, c1);
            std::mem::forget(txn);
        });
        assert_eq!(mover.stats().busy, 1);
        mover.cool_all();
        assert_eq!(mover.occupied(), 1, "a referenced tuple stays");
    }

    #[test]
    fn a_full_pool_moves_cold_tuples_back_to_make_room() {
        let (_shm, mem) = loaded("dyn-full", 16);
        let items = 100u32;
        let mover = with_mover(&mem, || {
            let mut txn = Txn::for_worker(&mem, 0, 0);
            // The first ten again once the clock moved them back.
            for i_id in (1..=items).chain(1..=10) {
                loop {
                    txn.begin(0);
                    let idx = keys::stock(i_id);
                    match txn.lock(LockTable::Stock, 2, idx, Mode::Exclusive) {
                        Ok(()) => {
                            let mut s: Stock = txn.get(Array::Stock, 2, idx);
                            s.s_order_cnt += 1;
                            txn.put(Array::Stock, 2, idx, &s);
                            txn.commit();
                            break;
                        }
                        Err(TxnError::Conflict) => txn.abort(),
                        Err(e) => panic!("{e:?}"),
                    }
                }
            }
        });
        let st = mover.stats();
        assert!(st.moved_in >= items as u64, "{st:?}");
        assert!(st.moved_back >= (items - 16) as u64, "{st:?}");
        assert!(st.moved_again >= 10, "{st:?}");
        assert!(mover.occupied() <= 16);
        for i_id in 1..=items {
            let loc = mem.resolve_row(Array::Stock, 2, keys::stock(i_id)).unwrap();
            let s: Stock = mem.mapping_of(loc, 0).read(loc.off);
            let want = if i_id <= 10 { 2 } else { 1 };
            assert_eq!(s.s_order_cnt, want, "item {i_id}: update lost in a move");
        }
        let report = check_pod(&mem);
        assert!(report.passed(), "{report}");
        assert_eq!(report.rows.stock, 200_000);
    }
}

/// A WAIT_DIE transaction older than the mover waits on a slot word the
/// mover holds (the owner follows its forward while the slot fills): the
/// mover reports the waiter so it is woken, as any releaser does. This was
/// an assertion that a full sweep under WAIT_DIE tripped.
mod waiters {
    use std::sync::atomic::AtomicU64;
    use std::sync::atomic::Ordering::Relaxed;

    use super::super::{move_back, move_in};
    use skiff_pod_memory::lockword;

    #[test]
    fn a_waiter_on_a_slot_being_filled_or_emptied_is_reported() {
        let (home, dir, slot) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
        let wait = || assert!(lockword::ask_for_wake(&slot, slot.load(Relaxed)));
        assert_eq!(move_in(&home, &dir, &slot, 3, 1, wait), Ok(true));
        assert_eq!(lockword::forwarded(home.load(Relaxed)), Some(3));
        assert_eq!(move_back(&home, &dir, &slot, 3, 1, || {}), Ok(false));
        assert_eq!(move_in(&home, &dir, &slot, 3, 1, || {}), Ok(false));
        assert_eq!(move_back(&home, &dir, &slot, 3, 1, wait), Ok(true));
        assert_eq!((home.load(Relaxed), dir.load(Relaxed)), (0, 0));
    }
}
