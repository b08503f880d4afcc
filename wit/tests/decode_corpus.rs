//! Nothing a guest answers can make the host's decoder panic, allocate without bound, or accept
//! more yields than its limit. Replays a large corpus of mutated step answers (the same seeds the
//! `fuzz/` target starts from), deterministically, so a failure reproduces.

use std::time::Duration;

use wfcontract::abi::{decode_step_output, DecodeError};
use wfcontract::{
    CallRequest, Command, Field, Level, LogRecord, Payload, Pid, SendRequest, SpawnRequest, Status,
    StepOutput, Tag,
};

const LIMIT: usize = 64;

/// Valid answers covering every status and every command.
fn seeds() -> Vec<Vec<u8>> {
    let json = || Payload::to_json(&serde_json::json!({ "a": [1, 2, 3] })).unwrap();
    let commands = vec![
        Command::Sleep(Duration::from_millis(1500)),
        Command::Log(LogRecord {
            level: Level::Warn,
            message: "careful".into(),
            fields: vec![Field {
                key: "k".into(),
                value: "v".into(),
            }],
        }),
        Command::Send(SendRequest {
            to: Pid(7),
            message: json(),
        }),
        Command::Spawn(SpawnRequest {
            module: Some("billing".into()),
            entry: "charge".into(),
            input: Payload::to_postcard(&42u64).unwrap(),
        }),
        Command::Join(Pid(9)),
        Command::Cancel(Pid(9)),
        Command::Call(CallRequest {
            name: "inventory.reserve".into(),
            input: Payload::opaque(vec![0, 1, 2, 255]),
        }),
        Command::Now,
        Command::Random,
        Command::Forget(Tag(3)),
    ];
    let statuses = [
        Status::Continue,
        Status::Wait,
        Status::Idle,
        Status::Done(json()),
        Status::Failed("it went wrong".into()),
    ];
    let mut seeds = Vec::new();
    for (i, status) in statuses.into_iter().enumerate() {
        let mut out = StepOutput::new();
        out.status = status;
        for (tag, command) in commands.iter().cycle().skip(i).take(3 + 2 * i).enumerate() {
            out.push(Tag(tag as u64 + 1), command.clone());
        }
        seeds.push(postcard::to_allocvec(&out).unwrap());
    }
    seeds
}

/// xorshift64*: a fixed sequence, so a failing input can be found again.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One to four random edits: flip a bit, set a byte, cut, insert, or splice a varint.
fn mutate(rng: &mut Rng, input: &[u8]) -> Vec<u8> {
    let mut bytes = input.to_vec();
    for _ in 0..=rng.below(4) {
        let at = rng.below(bytes.len() + 1);
        match rng.below(6) {
            0 if !bytes.is_empty() => {
                let at = at.min(bytes.len() - 1);
                bytes[at] ^= 1 << rng.below(8);
            }
            1 if !bytes.is_empty() => {
                let at = at.min(bytes.len() - 1);
                bytes[at] = rng.next() as u8;
            }
            2 => bytes.truncate(at),
            3 => {
                let extra: Vec<u8> = (0..rng.below(8)).map(|_| rng.next() as u8).collect();
                bytes.splice(at..at, extra);
            }
            // A huge length or count: the classic way to make a decoder allocate.
            4 => {
                bytes.splice(at..at, [0xff, 0xff, 0xff, 0xff, 0x0f]);
            }
            _ => {
                bytes.splice(
                    at..at,
                    [0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01],
                );
            }
        };
    }
    bytes
}

fn check(bytes: &[u8], outcomes: &mut [usize; 4]) {
    match decode_step_output(bytes, LIMIT) {
        Ok(out) => {
            assert!(out.yields.len() <= LIMIT);
            // What decodes survives a round trip unchanged. (Not always to the same bytes: a
            // duration's nanoseconds past a second carry into its seconds.)
            let again = postcard::to_allocvec(&out).unwrap();
            assert_eq!(decode_step_output(&again, LIMIT).unwrap(), out);
            outcomes[0] += 1;
        }
        Err(DecodeError::Malformed(_)) => outcomes[1] += 1,
        Err(DecodeError::TooManyYields { count, limit }) => {
            assert!(count > limit as u64);
            outcomes[2] += 1;
        }
        Err(DecodeError::TrailingBytes(n)) => {
            assert!(n > 0);
            outcomes[3] += 1;
        }
    }
}

#[test]
fn every_seed_decodes() {
    for seed in seeds() {
        let out = decode_step_output(&seed, LIMIT).unwrap();
        assert_eq!(postcard::to_allocvec(&out).unwrap(), seed);
    }
}

#[test]
fn two_hundred_thousand_mutated_answers_decode_or_are_refused_cleanly() {
    let seeds = seeds();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut outcomes = [0usize; 4];
    for round in 0..200_000 {
        let seed = &seeds[round % seeds.len()];
        check(&mutate(&mut rng, seed), &mut outcomes);
    }
    // Random bytes, too.
    for _ in 0..50_000 {
        let len = rng.below(64);
        let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        check(&bytes, &mut outcomes);
    }
    let [ok, malformed, too_many, trailing] = outcomes;
    assert_eq!(ok + malformed + too_many + trailing, 250_000);
    // The corpus reaches every outcome, or it tests less than it claims.
    assert!(
        ok > 0 && malformed > 0 && too_many > 0 && trailing > 0,
        "{outcomes:?}"
    );
}
