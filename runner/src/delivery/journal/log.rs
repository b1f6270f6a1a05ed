//! The journal's file format: an append-only log of checksummed records, and
//! the state replaying it gives.
//!
//! A row per update in SQLite cost ~3 µs of store-thread time per update
//! (insert, sequence mark, delete: three B-tree writes and their WAL frames);
//! appending a few bytes to a file costs a copy. The file is
//! `MAGIC` followed by records:
//!
//! ```text
//! u32 LE length of (kind + body) | u32 LE CRC-32 of (kind + body) | u8 kind | body
//! ```
//!
//! Bodies (all integers u64 LE): `APPEND` id + the encoded message;
//! `MARK` (id, sequence) pairs; `FORGET` ids; `FORGET_THROUGH` a sequence
//! (every entry sent with a number at or below it); `RESERVE` a sequence
//! (numbers up to it may be handed out); `BASE` the highest id used and the
//! highest sequence reserved (the first record of a compacted file, so
//! neither is forgotten with the entries that carried them).
//!
//! Reading stops at the first record that is short or fails its checksum:
//! a write torn by a crash. What follows it is dropped (and said so).

use bytes::Bytes;

use super::keyed::Keyed;

/// The first bytes of a journal file (format version 1).
pub const MAGIC: &[u8; 8] = b"ARJRNL1\n";

const APPEND: u8 = 1;
const MARK: u8 = 2;
const FORGET: u8 = 3;
const FORGET_THROUGH: u8 = 4;
const RESERVE: u8 = 5;
const BASE: u8 = 6;

/// Bytes of a record's frame (length and checksum) plus its kind.
const FRAME: usize = 9;

/// One change to the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// Entry `id` holds `message` (an encoded `ClientMessage`).
    Append {
        /// The entry's id.
        id: u64,
        /// The encoded update (shared with the wire: `link::wire`).
        message: Bytes,
    },
    /// Entries were sent with these sequence numbers: `(id, sequence)`.
    Mark(Vec<(u64, u64)>),
    /// These entries are settled.
    Forget(Vec<u64>),
    /// Every entry sent with a sequence at or below this is settled.
    ForgetThrough(u64),
    /// Sequence numbers up to this may be handed out.
    Reserve(u64),
    /// Ids up to `max_id` and sequences up to `reserved` were used.
    Base {
        /// The highest entry id ever used.
        max_id: u64,
        /// The highest sequence number ever reserved.
        reserved: u64,
    },
}

/// A journaled update, as replaying the log leaves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Live {
    /// The sequence it was sent with, once marked.
    pub sequence: Option<u64>,
    /// The encoded update.
    pub message: Bytes,
}

/// What the records written so far say: the live entries and the high
/// water marks. Kept by the writer (to decide and do compaction) and built
/// by recovery.
#[derive(Debug, Default)]
pub struct State {
    /// Live entries by id (append order).
    pub entries: Keyed<Live>,
    /// Live entries' ids by the sequence they were sent with.
    by_sequence: Keyed<u64>,
    /// Bytes the live entries take in a compacted file.
    pub live_bytes: u64,
    /// The highest id ever appended.
    pub max_id: u64,
    /// The highest sequence reserved or marked.
    pub reserved: u64,
}

impl State {
    /// Applies `record`; false when it changes nothing (an unknown entry),
    /// so it need not be written.
    pub fn apply(&mut self, record: &Record) -> bool {
        match record {
            Record::Append { id, message } => {
                self.insert(*id, message.clone());
                true
            }
            Record::Mark(pairs) => {
                let mut changed = false;
                for (id, seq) in pairs {
                    self.reserved = self.reserved.max(*seq);
                    if let Some(live) = self.entries.get_mut(*id) {
                        if let Some(old) = live.sequence.replace(*seq) {
                            self.by_sequence.remove(old);
                        }
                        self.by_sequence.insert(*seq, *id);
                        changed = true;
                    }
                }
                changed
            }
            Record::Forget(ids) => {
                let mut changed = false;
                for id in ids {
                    if let Some(old) = self.entries.remove(*id) {
                        self.unlink(*id, &old);
                        changed = true;
                    }
                }
                changed
            }
            Record::ForgetThrough(through) => {
                let Self {
                    entries,
                    by_sequence,
                    live_bytes,
                    ..
                } = self;
                let mut changed = false;
                by_sequence.remove_through(*through, |_, id| {
                    changed = true;
                    if let Some(old) = entries.remove(id) {
                        *live_bytes = live_bytes.saturating_sub(weight(&old));
                    }
                });
                changed
            }
            Record::Reserve(through) => {
                let changed = *through > self.reserved;
                self.reserved = self.reserved.max(*through);
                changed
            }
            Record::Base { max_id, reserved } => {
                self.max_id = self.max_id.max(*max_id);
                self.reserved = self.reserved.max(*reserved);
                true
            }
        }
    }

    /// Entry `id` holds `message` ([`Record::Append`] without a copy).
    pub fn insert(&mut self, id: u64, message: Bytes) {
        self.max_id = self.max_id.max(id);
        let live = Live {
            sequence: None,
            message,
        };
        self.live_bytes += weight(&live);
        if let Some(old) = self.entries.insert(id, live) {
            self.unlink(id, &old);
        }
    }

    /// Takes an entry out of the sequence index and the byte count.
    fn unlink(&mut self, id: u64, old: &Live) {
        if let Some(seq) = old.sequence
            && self.by_sequence.get(seq) == Some(&id)
        {
            self.by_sequence.remove(seq);
        }
        self.live_bytes = self.live_bytes.saturating_sub(weight(old));
    }

    /// The records of a compacted file holding exactly this state.
    pub fn compacted(&self, out: &mut Vec<u8>) {
        // Sized once: grown by doubling, a compaction of megabytes copied
        // itself over and over.
        out.reserve(MAGIC.len() + 64 + usize::try_from(self.live_bytes).unwrap_or(0));
        out.extend_from_slice(MAGIC);
        encode(
            &Record::Base {
                max_id: self.max_id,
                reserved: self.reserved,
            },
            out,
        );
        let mut marks = Vec::new();
        for (id, live) in self.entries.iter() {
            append_record(id, &live.message, out);
            if let Some(seq) = live.sequence {
                marks.push((id, seq));
            }
        }
        if !marks.is_empty() {
            encode(&Record::Mark(marks), out);
        }
    }
}

/// Bytes an entry takes in a compacted file (its append and its mark).
fn weight(live: &Live) -> u64 {
    (FRAME + 8 + live.message.len()) as u64 + 16
}

/// Appends `record`, framed, to `out`.
pub fn encode(record: &Record, out: &mut Vec<u8>) {
    match record {
        Record::Append { id, message } => append_record(*id, message, out),
        Record::Mark(pairs) => frame(out, MARK, |b| {
            for (id, seq) in pairs {
                b.extend_from_slice(&id.to_le_bytes());
                b.extend_from_slice(&seq.to_le_bytes());
            }
        }),
        Record::Forget(ids) => frame(out, FORGET, |b| {
            for id in ids {
                b.extend_from_slice(&id.to_le_bytes());
            }
        }),
        Record::ForgetThrough(seq) => frame(out, FORGET_THROUGH, |b| {
            b.extend_from_slice(&seq.to_le_bytes());
        }),
        Record::Reserve(seq) => frame(out, RESERVE, |b| {
            b.extend_from_slice(&seq.to_le_bytes());
        }),
        Record::Base { max_id, reserved } => frame(out, BASE, |b| {
            b.extend_from_slice(&max_id.to_le_bytes());
            b.extend_from_slice(&reserved.to_le_bytes());
        }),
    }
}

/// Appends an [`Record::Append`] of entry `id` to `out` (without building
/// the record).
pub fn append_record(id: u64, message: &[u8], out: &mut Vec<u8>) {
    frame(out, APPEND, |b| {
        b.extend_from_slice(&id.to_le_bytes());
        b.extend_from_slice(message);
    });
}

/// Writes the frame around what `body` appends: the length and checksum
/// are filled in afterwards, so the body is written once, in place.
fn frame(out: &mut Vec<u8>, kind: u8, body: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&[0; 8]);
    out.push(kind);
    body(out);
    let payload = &out[start + 8..];
    let len = payload.len() as u32;
    let crc = crc32fast::hash(payload);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// What reading a journal file found.
#[derive(Debug)]
pub struct Read {
    /// The records, in order.
    pub records: Vec<Record>,
    /// Bytes from the first unreadable record to the end (0: none).
    pub dropped_bytes: usize,
}

/// Why a journal file cannot be read at all.
#[derive(Debug, thiserror::Error)]
#[error(
    "not an outbox journal (its first bytes are not {:?})",
    String::from_utf8_lossy(MAGIC)
)]
pub struct NotAJournal;

/// Parses a whole journal file. An empty file is an empty journal, and so
/// is the start of [`MAGIC`] alone: a new file is created without an
/// `fsync` (it holds nothing yet), so a crash may leave its first write
/// cut short.
pub fn read(bytes: &[u8]) -> Result<Read, NotAJournal> {
    if bytes.len() < MAGIC.len() && MAGIC.starts_with(bytes) {
        return Ok(Read {
            records: Vec::new(),
            dropped_bytes: bytes.len(),
        });
    }
    let Some(mut rest) = bytes.strip_prefix(MAGIC.as_slice()) else {
        return Err(NotAJournal);
    };
    let mut records = Vec::new();
    while !rest.is_empty() {
        match decode_one(rest) {
            Some((record, used)) => {
                records.push(record);
                rest = &rest[used..];
            }
            None => break,
        }
    }
    Ok(Read {
        records,
        dropped_bytes: rest.len(),
    })
}

/// One record from the front of `bytes` and its size, or `None` when it is
/// torn, corrupt or of an unknown kind.
fn decode_one(bytes: &[u8]) -> Option<(Record, usize)> {
    let len = u32::from_le_bytes(bytes.get(0..4)?.try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?);
    let payload = bytes.get(8..8 + len)?;
    if len == 0 || crc32fast::hash(payload) != crc {
        return None;
    }
    let (kind, body) = payload.split_first()?;
    let record = match *kind {
        APPEND => Record::Append {
            id: u64_at(body, 0)?,
            message: Bytes::copy_from_slice(body.get(8..)?),
        },
        MARK => Record::Mark(pairs(body)?.chunks_exact(2).map(|p| (p[0], p[1])).collect()),
        FORGET => Record::Forget(pairs(body)?),
        FORGET_THROUGH => Record::ForgetThrough(u64_at(body, 0)?),
        RESERVE => Record::Reserve(u64_at(body, 0)?),
        BASE => Record::Base {
            max_id: u64_at(body, 0)?,
            reserved: u64_at(body, 8)?,
        },
        _ => return None,
    };
    Some((record, 8 + len))
}

fn u64_at(body: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(body.get(at..at + 8)?.try_into().ok()?))
}

/// A body of whole u64s.
fn pairs(body: &[u8]) -> Option<Vec<u64>> {
    if !body.len().is_multiple_of(8) {
        return None;
    }
    body.chunks_exact(8)
        .map(|c| c.try_into().ok().map(u64::from_le_bytes))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<Record> {
        vec![
            Record::Base {
                max_id: 3,
                reserved: 4096,
            },
            Record::Append {
                id: 4,
                message: Bytes::from_static(b"four"),
            },
            Record::Append {
                id: 5,
                message: Bytes::new(),
            },
            Record::Mark(vec![(4, 10), (5, 11)]),
            Record::Forget(vec![5]),
            Record::ForgetThrough(10),
            Record::Reserve(8192),
        ]
    }

    #[test]
    fn records_read_back_as_written() {
        let mut file = MAGIC.to_vec();
        for r in all() {
            encode(&r, &mut file);
        }
        let read = read(&file).unwrap();
        assert_eq!(read.records, all());
        assert_eq!(read.dropped_bytes, 0);
    }

    #[test]
    fn a_torn_or_corrupt_tail_is_dropped_and_the_rest_kept() {
        let mut file = MAGIC.to_vec();
        for r in all() {
            encode(&r, &mut file);
        }
        let whole = file.len();
        // Torn: the last record cut short.
        let torn = read(&file[..whole - 3]).unwrap();
        assert_eq!(torn.records, all()[..6].to_vec());
        assert_eq!(torn.dropped_bytes, 17 - 3);
        // Corrupt: a flipped bit in the second record's body.
        let mut bad = file.clone();
        let second = MAGIC.len() + 8 + 17 + 8 + 2;
        bad[second] ^= 1;
        let read = read(&bad).unwrap();
        assert_eq!(read.records, all()[..1].to_vec());
        assert!(read.dropped_bytes > 0);
        assert!(super::read(b"SQLite format 3\0").is_err());
    }

    #[test]
    fn replay_keeps_live_entries_and_high_water_marks() {
        let mut state = State::default();
        for r in all() {
            state.apply(&r);
        }
        assert_eq!(state.entries.len(), 0, "5 forgotten, 4 acknowledged");
        assert_eq!((state.max_id, state.reserved), (5, 8192));
        assert_eq!(state.live_bytes, 0);
        assert!(!state.apply(&Record::Forget(vec![4])), "unknown: no change");

        state.apply(&Record::Append {
            id: 6,
            message: Bytes::from_static(b"six"),
        });
        state.apply(&Record::Mark(vec![(6, 12)]));
        let mut file = Vec::new();
        state.compacted(&mut file);
        let mut again = State::default();
        for r in read(&file).unwrap().records {
            again.apply(&r);
        }
        assert_eq!(again.entries, state.entries);
        assert_eq!((again.max_id, again.reserved), (6, 8192));
        assert_eq!(again.live_bytes, state.live_bytes);
    }
}
