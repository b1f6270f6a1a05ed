//! A map from numbers that mostly arrive in increasing order and mostly
//! leave oldest first: the journal's live entries (by id) and its index of
//! them by sequence number.
//!
//! Ids and sequence numbers are handed out in increasing order, and what
//! the journal holds is settled roughly in that order (acknowledgements are
//! cumulative; a legacy control plane's settle in the order sent). A
//! `BTreeMap` paid a tree walk, and a node's allocation or rebalancing, for
//! each append, mark and forget, a visible cost on the journal's writer
//! thread under load. Here the pairs
//! sit in a `VecDeque` sorted by key: an append lands at the back (a short
//! shift when threads' appends interleave out of order), a lookup tries the
//! key's distance from the first key, then a binary search over contiguous
//! memory, a removal leaves an empty slot
//! that is reclaimed once it reaches either end — or all at once when
//! empty slots outnumber the live ones, so memory stays within about twice
//! what is live whatever the order.

use std::collections::VecDeque;

/// Empty slots tolerated beyond the live count before they are swept.
const SLACK: usize = 64;

/// A sorted map of `u64` keys (see the module docs).
#[derive(Debug)]
pub struct Keyed<V> {
    /// Sorted by key; `None`: removed, not yet reclaimed.
    slots: VecDeque<(u64, Option<V>)>,
    /// Slots holding a value.
    live: usize,
}

impl<V> Default for Keyed<V> {
    fn default() -> Self {
        Self {
            slots: VecDeque::new(),
            live: 0,
        }
    }
}

/// Equal when the same keys hold equal values (empty slots aside).
impl<V: PartialEq> PartialEq for Keyed<V> {
    fn eq(&self, other: &Self) -> bool {
        self.live == other.live && self.iter().eq(other.iter())
    }
}

impl<V> Keyed<V> {
    /// How many keys hold a value.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.live
    }

    /// Where `key`'s slot is (`Ok`) or would go (`Err`). A key above every
    /// other (an append) is answered at once; keys handed out one by one
    /// sit at their distance from the first, tried before a search.
    fn find(&self, key: u64) -> Result<usize, usize> {
        let (Some((first, _)), Some((last, _))) = (self.slots.front(), self.slots.back()) else {
            return Err(0);
        };
        if *last < key {
            return Err(self.slots.len());
        }
        let guess = key
            .checked_sub(*first)
            .and_then(|d| usize::try_from(d).ok());
        if let Some(i) = guess
            && self.slots.get(i).is_some_and(|(k, _)| *k == key)
        {
            return Ok(i);
        }
        self.slots.binary_search_by_key(&key, |(k, _)| *k)
    }

    /// Sets `key` to `value`; returns what it held.
    pub fn insert(&mut self, key: u64, value: V) -> Option<V> {
        match self.find(key) {
            Ok(i) => {
                let old = self.slots[i].1.replace(value);
                if old.is_none() {
                    self.live += 1;
                }
                old
            }
            Err(i) => {
                if i == self.slots.len() {
                    self.slots.push_back((key, Some(value)));
                } else if i == 0 {
                    self.slots.push_front((key, Some(value)));
                } else {
                    self.slots.insert(i, (key, Some(value)));
                }
                self.live += 1;
                None
            }
        }
    }

    /// The value of `key`.
    pub fn get(&self, key: u64) -> Option<&V> {
        let i = self.find(key).ok()?;
        self.slots[i].1.as_ref()
    }

    /// The value of `key`, to change.
    pub fn get_mut(&mut self, key: u64) -> Option<&mut V> {
        let i = self.find(key).ok()?;
        self.slots[i].1.as_mut()
    }

    /// Takes `key`'s value out.
    pub fn remove(&mut self, key: u64) -> Option<V> {
        let i = self.find(key).ok()?;
        let old = self.slots[i].1.take()?;
        self.live -= 1;
        self.reclaim();
        Some(old)
    }

    /// Takes out every value whose key is at or below `through`, lowest
    /// first, handing each to `each`.
    pub fn remove_through(&mut self, through: u64, mut each: impl FnMut(u64, V)) {
        while self.slots.front().is_some_and(|(k, _)| *k <= through) {
            if let Some((key, Some(value))) = self.slots.pop_front() {
                self.live -= 1;
                each(key, value);
            }
        }
        self.reclaim();
    }

    /// The keys and values, lowest key first.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &V)> {
        self.slots
            .iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| (*k, v)))
    }

    /// Drops empty slots at either end, and every one once they outnumber
    /// the live ones.
    fn reclaim(&mut self) {
        while matches!(self.slots.front(), Some((_, None))) {
            self.slots.pop_front();
        }
        while matches!(self.slots.back(), Some((_, None))) {
            self.slots.pop_back();
        }
        if self.slots.len() > 2 * self.live + SLACK {
            self.slots.retain(|(_, v)| v.is_some());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A small deterministic generator (no dependency for one test).
    struct XorShift(u64);

    impl XorShift {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// Random inserts (mostly increasing, some out of order or repeated),
    /// removals and sweeps agree with a `BTreeMap` after every step, and
    /// the slots stay within twice the live count (plus the slack).
    #[test]
    fn behaves_as_a_btree_map() {
        for seed in 1..=20u64 {
            let mut rng = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let mut keyed = Keyed::default();
            let mut model = BTreeMap::new();
            let mut next = 0u64;
            for step in 0..5_000u64 {
                match rng.below(10) {
                    0..=4 => {
                        next += 1 + rng.below(3);
                        let key = if rng.below(8) == 0 {
                            next.saturating_sub(rng.below(20))
                        } else {
                            next
                        };
                        assert_eq!(keyed.insert(key, step), model.insert(key, step));
                    }
                    5..=7 => {
                        let key = if rng.below(4) == 0 {
                            rng.below(next + 1)
                        } else {
                            model.keys().next().copied().unwrap_or(0)
                        };
                        assert_eq!(keyed.remove(key), model.remove(&key));
                    }
                    8 => {
                        let through = model.keys().next().copied().unwrap_or(0) + rng.below(10);
                        let mut got = Vec::new();
                        keyed.remove_through(through, |k, v| got.push((k, v)));
                        let rest = model.split_off(&(through + 1));
                        let want: Vec<_> =
                            std::mem::replace(&mut model, rest).into_iter().collect();
                        assert_eq!(got, want);
                    }
                    _ => {
                        let key = rng.below(next + 2);
                        assert_eq!(keyed.get(key), model.get(&key));
                        if let Some(v) = keyed.get_mut(key) {
                            *v += 1;
                            *model.get_mut(&key).unwrap() += 1;
                        }
                    }
                }
                assert_eq!(keyed.live, model.len());
                assert!(keyed.slots.len() <= 2 * keyed.live + SLACK + 1);
                if step % 97 == 0 {
                    let got: Vec<_> = keyed.iter().map(|(k, v)| (k, *v)).collect();
                    let want: Vec<_> = model.iter().map(|(k, v)| (*k, *v)).collect();
                    assert_eq!(got, want, "seed {seed} step {step}");
                }
            }
        }
    }

    /// Removing from the middle leaves empty slots that are swept once they
    /// outnumber the live ones.
    #[test]
    fn empty_slots_in_the_middle_are_swept() {
        let mut keyed = Keyed::default();
        for k in 0..1_000u64 {
            keyed.insert(k, k);
        }
        for k in 1..999u64 {
            keyed.remove(k);
        }
        assert_eq!(keyed.live, 2);
        assert!(
            keyed.slots.len() <= 2 * 2 + SLACK + 1,
            "{}",
            keyed.slots.len()
        );
        assert_eq!(keyed.iter().collect::<Vec<_>>(), vec![(0, &0), (999, &999)]);
    }
}
