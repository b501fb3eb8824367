//! [`Sieve`]: the SIEVE eviction policy (Zhang et al., NSDI 2024) over the row ids of a
//! table, deciding which rows a cache of a fixed number of slots keeps.
//!
//! Rows enter at the head of a queue; a hit only sets the row's `visited` bit. To make room, a
//! hand walks from the tail towards the head: a visited row loses its bit and stays where it
//! is, the first unvisited row is evicted, and the hand stays there for the next eviction
//! (wrapping to the tail past the head). Unlike LRU, a hit moves nothing, so hits cost one
//! store and the queue is only touched on misses; unlike a static choice (the rows of highest
//! in-degree), it follows the rows the sampler actually asks for.
//!
//! The policy holds ids and slots, not row bytes: a cache keeps row `id` in slot
//! [`Access`]'s slot of its own buffer.

/// No slot, or no neighbour in the queue.
const NONE: u32 = u32::MAX;

/// What an access did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// The row is cached in this slot.
    Hit(u32),
    /// The row was not cached; it now is, in this slot, which held row `evicted` before
    /// (`None` while the cache was filling).
    Miss {
        /// The row's new slot.
        slot: u32,
        /// The row the slot held.
        evicted: Option<u32>,
    },
}

/// SIEVE over the ids `0..rows` with `capacity` slots; see the module docs.
#[derive(Debug)]
pub struct Sieve {
    /// The slot of each row id, or `NONE`.
    slot_of: Vec<u32>,
    /// Per slot: its row, whether it was hit since the hand last passed, and its neighbours
    /// towards the head (newer) and the tail (older).
    row: Vec<u32>,
    visited: Vec<bool>,
    newer: Vec<u32>,
    older: Vec<u32>,
    head: u32,
    tail: u32,
    hand: u32,
    capacity: usize,
}

impl Sieve {
    /// An empty cache of `capacity` slots over row ids `0..rows` (`capacity` below
    /// `u32::MAX`).
    pub fn new(rows: usize, capacity: usize) -> Sieve {
        assert!(capacity < NONE as usize, "at most u32::MAX - 1 slots");
        Sieve {
            slot_of: vec![NONE; rows],
            row: Vec::with_capacity(capacity),
            visited: Vec::with_capacity(capacity),
            newer: Vec::with_capacity(capacity),
            older: Vec::with_capacity(capacity),
            head: NONE,
            tail: NONE,
            hand: NONE,
            capacity,
        }
    }

    /// The rows cached.
    pub fn len(&self) -> usize {
        self.row.len()
    }

    /// Whether no row is cached.
    pub fn is_empty(&self) -> bool {
        self.row.is_empty()
    }

    /// The slot of row `id`, if cached, without counting an access.
    pub fn slot(&self, id: u32) -> Option<u32> {
        self.slot_of
            .get(id as usize)
            .copied()
            .filter(|&s| s != NONE)
    }

    /// An access to row `id` (below `rows`): a hit marks it visited; a miss admits it,
    /// evicting a row when the cache is full. A cache of no slots misses every time and
    /// admits nothing (its miss has slot `u32::MAX`).
    pub fn access(&mut self, id: u32) -> Access {
        if let Some(slot) = self.slot(id) {
            self.visited[slot as usize] = true;
            return Access::Hit(slot);
        }
        if self.capacity == 0 {
            return Access::Miss {
                slot: NONE,
                evicted: None,
            };
        }
        let (slot, evicted) = if self.row.len() < self.capacity {
            self.row.push(id);
            self.visited.push(false);
            self.newer.push(NONE);
            self.older.push(NONE);
            ((self.row.len() - 1) as u32, None)
        } else {
            let slot = self.evict();
            let old = self.row[slot as usize];
            self.slot_of[old as usize] = NONE;
            self.row[slot as usize] = id;
            self.visited[slot as usize] = false;
            (slot, Some(old))
        };
        self.slot_of[id as usize] = slot;
        self.push_head(slot);
        Access::Miss { slot, evicted }
    }

    /// Finds the slot to evict by the hand's walk and unlinks it.
    fn evict(&mut self) -> u32 {
        let mut at = if self.hand == NONE {
            self.tail
        } else {
            self.hand
        };
        while self.visited[at as usize] {
            self.visited[at as usize] = false;
            at = self.newer[at as usize];
            if at == NONE {
                at = self.tail;
            }
        }
        self.hand = self.newer[at as usize];
        self.unlink(at);
        at
    }

    fn unlink(&mut self, slot: u32) {
        let (newer, older) = (self.newer[slot as usize], self.older[slot as usize]);
        match newer {
            NONE => self.head = older,
            n => self.older[n as usize] = older,
        }
        match older {
            NONE => self.tail = newer,
            o => self.newer[o as usize] = newer,
        }
    }

    fn push_head(&mut self, slot: u32) {
        self.older[slot as usize] = self.head;
        self.newer[slot as usize] = NONE;
        match self.head {
            NONE => self.tail = slot,
            h => self.newer[h as usize] = slot,
        }
        self.head = slot;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use graphloom_tensor::rng::RngKey;

    /// SIEVE as the paper's pseudocode states it, over a vector from the tail (oldest) to the
    /// head (newest), with the hand an index into it.
    struct NaiveSieve {
        queue: Vec<(u32, bool)>,
        hand: Option<usize>,
        capacity: usize,
    }

    impl NaiveSieve {
        /// Whether `id` hit, and the row evicted.
        fn access(&mut self, id: u32) -> (bool, Option<u32>) {
            if let Some(entry) = self.queue.iter_mut().find(|e| e.0 == id) {
                entry.1 = true;
                return (true, None);
            }
            let mut evicted = None;
            if self.queue.len() == self.capacity {
                let mut at = self.hand.unwrap_or(0);
                while self.queue[at].1 {
                    self.queue[at].1 = false;
                    at = (at + 1) % self.queue.len();
                }
                evicted = Some(self.queue.remove(at).0);
                // The hand stays on the next newer row (the one that took `at`'s index).
                self.hand = (at < self.queue.len()).then_some(at);
            }
            self.queue.push((id, false));
            (false, evicted)
        }
    }

    #[test]
    fn sieve_decides_as_the_papers_pseudocode_on_skewed_streams() {
        let key = RngKey::new(3, 0, 0x51e7e);
        for (capacity, rows) in [(1, 5), (4, 10), (16, 100), (64, 1000)] {
            let mut fast = Sieve::new(rows, capacity);
            let mut naive = NaiveSieve {
                queue: Vec::new(),
                hand: None,
                capacity,
            };
            let mut slots_rows = vec![u32::MAX; capacity];
            for i in 0..20_000u64 {
                // A skewed stream: the square of a uniform draw favours low ids.
                let u = key.uniform(i, 0);
                let id = ((u * u) * rows as f64) as u32;
                let (hit, evicted) = naive.access(id);
                match fast.access(id) {
                    Access::Hit(slot) => {
                        assert!(hit, "step {i}: a hit the reference missed");
                        assert_eq!(slots_rows[slot as usize], id);
                    }
                    Access::Miss { slot, evicted: e } => {
                        assert!(!hit, "step {i}: a miss the reference hit");
                        assert_eq!(e, evicted, "step {i}: evicted another row");
                        slots_rows[slot as usize] = id;
                    }
                }
                assert_eq!(fast.len(), naive.queue.len());
            }
        }
    }

    #[test]
    fn a_cache_of_no_slots_misses_and_keeps_nothing() {
        let mut s = Sieve::new(4, 0);
        assert!(matches!(s.access(1), Access::Miss { slot: NONE, .. }));
        assert!(matches!(s.access(1), Access::Miss { .. }));
        assert!(s.is_empty());
    }

    #[test]
    fn a_visited_row_survives_one_pass_of_the_hand() {
        let mut s = Sieve::new(10, 2);
        s.access(1);
        s.access(2);
        assert!(matches!(s.access(1), Access::Hit(_)));
        // 1 is visited: the hand clears it and evicts 2.
        assert_eq!(
            s.access(3),
            Access::Miss {
                slot: 1,
                evicted: Some(2)
            }
        );
        assert!(s.slot(1).is_some() && s.slot(2).is_none());
    }
}
