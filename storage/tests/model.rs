//! Model-based property test: random sequences of append / read / roll / retention /
//! truncate / restart / reopen against an in-memory `Vec` of the records that should be
//! there.

mod common;

use proptest::prelude::*;
use warren_storage::{Log, LogConfig, NewRecord};

#[derive(Debug, Clone)]
enum Op {
    Append(Vec<usize>),
    Read { at: usize, count: usize, bytes: usize },
    ReadFiltered { at: usize, count: usize, bytes: usize, scanned: usize, tag: u32 },
    Roll,
    DeleteBelow(usize),
    Retention,
    Truncate(usize),
    RestartAt(usize),
    Reopen,
    Flush,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => prop::collection::vec(0usize..600, 1..20).prop_map(Op::Append),
        4 => (any::<usize>(), 1usize..40, 0usize..5000)
            .prop_map(|(at, count, bytes)| Op::Read { at, count, bytes }),
        3 => (any::<usize>(), 1usize..40, 0usize..5000, 1usize..60, 0u32..TAGS)
            .prop_map(|(at, count, bytes, scanned, tag)| Op::ReadFiltered { at, count, bytes, scanned, tag }),
        1 => Just(Op::Roll),
        1 => any::<usize>().prop_map(Op::DeleteBelow),
        1 => Just(Op::Retention),
        1 => any::<usize>().prop_map(Op::Truncate),
        1 => any::<usize>().prop_map(Op::RestartAt),
        1 => Just(Op::Reopen),
        1 => Just(Op::Flush),
    ]
}

/// Records are tagged `offset % TAGS`, so filtered reads skip most of them.
const TAGS: u32 = 5;

fn tag_of(offset: u64) -> u32 {
    (offset % u64::from(TAGS)) as u32
}

struct Model {
    first: u64,
    records: Vec<(i64, Vec<u8>)>, // records[i] has offset first + i
}

impl Model {
    fn next(&self) -> u64 {
        self.first + self.records.len() as u64
    }
    fn drop_below(&mut self, first: u64) {
        assert!(first >= self.first && first <= self.next(), "first {first} vs model {}", self.first);
        self.records.drain(..(first - self.first) as usize);
        self.first = first;
    }
}

fn config() -> LogConfig {
    LogConfig { retention_bytes: Some(30_000), ..common::small_config() }
}

fn pick(model: &Model, n: usize) -> u64 {
    let span = model.records.len() as u64 + 1;
    model.first + n as u64 % span
}

fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let mut log = common::open(dir.path(), config());
    let mut model = Model { first: 0, records: Vec::new() };
    for op in ops {
        match op {
            Op::Append(sizes) => {
                let payloads: Vec<Vec<u8>> =
                    sizes.iter().enumerate().map(|(i, &n)| vec![(model.next() as usize + i) as u8; n]).collect();
                let recs: Vec<NewRecord> = payloads
                    .iter()
                    .enumerate()
                    .map(|(i, p)| {
                        let offset = model.next() + i as u64;
                        NewRecord { tag_hash: tag_of(offset), ..NewRecord::new(offset as i64, p) }
                    })
                    .collect();
                let range = log.append_batch(&recs).unwrap();
                assert_eq!(range.start, model.next());
                for (i, p) in payloads.into_iter().enumerate() {
                    model.records.push((range.start as i64 + i as i64, p));
                }
                // Retention runs when segments roll.
                let first = log.first_offset();
                model.drop_below(first);
            }
            Op::Read { at, count, bytes } => {
                let from = pick(&model, at);
                let got = log.read(from, count, bytes).unwrap();
                let avail = (model.next() - from) as usize;
                assert!(got.len() <= count.min(avail));
                if avail > 0 {
                    assert!(!got.is_empty());
                }
                let mut budget = bytes;
                for (i, r) in got.iter().enumerate() {
                    let (ts, p) = &model.records[(from - model.first) as usize + i];
                    assert_eq!(r.offset, from + i as u64);
                    assert_eq!((r.timestamp_ms, &r.payload[..]), (*ts, &p[..]));
                    assert!(i == 0 || r.payload.len() <= budget, "byte budget exceeded");
                    budget = budget.saturating_sub(r.payload.len());
                }
            }
            Op::ReadFiltered { at, count, bytes, scanned, tag } => {
                let from = pick(&model, at);
                let wanted = |_flags: u8, hash: u32| hash == tag;
                let got = log.read_filtered(from, count, bytes, scanned, &wanted).unwrap();
                assert!(got.next_offset >= from && got.next_offset <= model.next());
                assert!(got.next_offset - from <= scanned as u64, "scanned past the limit");
                if from < model.next() {
                    assert!(got.next_offset > from, "no progress");
                }
                // Exactly the tagged records of [from, next_offset), in order.
                let expected: Vec<u64> = (from..got.next_offset).filter(|o| tag_of(*o) == tag).collect();
                let offsets: Vec<u64> = got.records.iter().map(|r| r.offset).collect();
                assert_eq!(offsets, expected);
                assert!(got.records.len() <= count);
                for r in &got.records {
                    let (ts, p) = &model.records[(r.offset - model.first) as usize];
                    assert_eq!((r.timestamp_ms, &r.payload[..], r.tag_hash), (*ts, &p[..], tag));
                }
            }
            Op::Roll => {
                log.roll().unwrap();
                model.drop_below(log.first_offset());
            }
            Op::DeleteBelow(n) => {
                let target = pick(&model, n);
                let out = log.delete_below(target).unwrap();
                assert!(out.first_offset <= target.max(model.first));
                model.drop_below(out.first_offset);
            }
            Op::Retention => {
                let out = log.enforce_retention().unwrap();
                model.drop_below(out.first_offset);
            }
            Op::Truncate(n) => {
                let at = pick(&model, n);
                log.truncate_from(at).unwrap();
                model.records.truncate((at - model.first) as usize);
            }
            Op::RestartAt(n) => {
                // Anywhere from 0 to a little past the end.
                let at = (n % (model.next() as usize + 100)) as u64;
                log.restart_at(at).unwrap();
                model.records.clear();
                model.first = at;
            }
            Op::Reopen => {
                drop(log);
                log = common::open(dir.path(), config());
            }
            Op::Flush => log.flush().unwrap(),
        }
        assert_eq!((log.first_offset(), log.next_offset()), (model.first, model.next()));
    }
    check_all(&log, &model);
}

fn check_all(log: &Log, model: &Model) {
    let all = common::read_all(log, model.first);
    assert_eq!(all.len(), model.records.len());
    for (r, (ts, p)) in all.iter().zip(&model.records) {
        assert_eq!((r.timestamp_ms, &r.payload[..]), (*ts, &p[..]));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]
    #[test]
    fn log_matches_model(ops in prop::collection::vec(op(), 1..40)) {
        run(ops);
    }
}
