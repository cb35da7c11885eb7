//! What the fuzz targets check. `quartz-core/tests/fuzz_regressions.rs`
//! includes this file and replays every input kept under `fuzz/regressions/`,
//! so that a crash once found stays a test on stable Rust.
//!
//! ```text
//! cargo install cargo-fuzz
//! cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run cron -- -max_total_time=300
//! ```

use quartz_core::cron::{CronExpression, parse_time_zone};
use quartz_core::store::{JobSpec, TriggerColumns};
use quartz_core::{Timestamp, Tz};

/// Zones with DST rules of each kind: none, northern, western, half-hour.
const ZONES: [Tz; 4] = [
    Tz::UTC,
    Tz::Europe__London,
    Tz::America__New_York,
    Tz::Australia__Lord_Howe,
];

/// An instant picked by a byte: 2023 to about 2050.
fn instant(selector: u8) -> Timestamp {
    Timestamp::from_millis(1_700_000_000_000 + i64::from(selector) * 37 * 86_400_000 + i64::from(selector) * 997)
}

/// Cron text (the first byte picks a zone and an instant): parsing, Quartz or
/// Unix syntax, never panics; an error says what is wrong in a bounded
/// message; an accepted expression's own text parses to the same schedule,
/// and its fire times come strictly in order.
pub fn cron(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let zone = ZONES[usize::from(selector) % ZONES.len()];
    let start = instant(selector);
    for parsed in [CronExpression::parse(text), CronExpression::parse_unix(text)] {
        match parsed {
            Ok(expr) => {
                let again = CronExpression::parse(expr.as_str()).expect("an accepted expression's text parses again");
                let mut t = start;
                for _ in 0..4 {
                    let next = expr.next_after(t, zone);
                    assert_eq!(
                        again.next_after(t, zone),
                        next,
                        "{text:?} and its own text disagree after {t:?}"
                    );
                    let Some(next) = next else { break };
                    assert!(next > t, "{text:?}: {next:?} is not after {t:?}");
                    t = next;
                }
            }
            Err(e) => {
                let message = e.to_string();
                assert!(
                    !message.is_empty() && message.len() < 4_096,
                    "{text:?}: error of {} bytes",
                    message.len()
                );
            }
        }
    }
}

/// A job payload: the API accepts only what decodes as JSON (so that every
/// handler and tool can read it back), and refuses the rest with a reason.
pub fn payload(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut job = JobSpec::new("fuzz", "noop");
    job.payload = text.to_owned();
    match job.validate() {
        Ok(()) => {
            let _: serde_json::Value = serde_json::from_str(text).expect("an accepted payload decodes");
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}

/// An execute row as a hand might write it: its columns decode to a trigger
/// or to an error, never a panic, and a decoded trigger's fire times come
/// strictly in order.
pub fn trigger_row(data: &[u8]) {
    if data.len() < 33 {
        return;
    }
    let (numbers, text) = data.split_at(33);
    let number = |i: usize| i64::from_le_bytes(numbers[1 + i * 8..9 + i * 8].try_into().unwrap_or([0; 8]));
    let flags = numbers[0];
    let text = String::from_utf8_lossy(text);
    let mut parts = text.split('\n');
    let mut next = || parts.next().map(str::to_owned);
    let kinds = ["cron", "fixed_rate", "fixed_delay", "once"];
    let kind = next().unwrap_or_default();
    let columns = TriggerColumns {
        kind: if flags & 1 == 0 {
            kinds[usize::from(flags >> 1) % 4].to_owned()
        } else {
            kind
        },
        cron_expression: next(),
        time_zone: next()
            .filter(|_| flags & 8 == 0)
            .or_else(|| parse_time_zone("UTC").ok().map(|_| "UTC".to_owned())),
        interval_ms: (flags & 16 == 0).then(|| number(0)),
        start_time: number(1),
        end_time: (flags & 32 == 0).then(|| number(2)),
        repeat_limit: (flags & 64 == 0).then(|| number(3)),
        misfire_policy: next().unwrap_or_else(|| "smart".to_owned()),
        calendar: None,
        dst_skipped: next(),
        dst_repeated: next(),
        // The jitter from the flags' top bit: the interval's number, as
        // a hand might write any.
        jitter_ms: (flags & 128 != 0).then(|| number(2).rem_euclid(1 << 40)),
        jitter_seed: (flags & 128 != 0).then(|| number(3)),
        catch_up_ms: None,
        overlap: None,
    };
    if let Ok(trigger) = columns.to_trigger() {
        let mut t = Timestamp::from_millis(columns.start_time.saturating_sub(1));
        for _ in 0..4 {
            let Some(next) = trigger.fire_time_after(t) else { break };
            assert!(next > t, "{columns:?}: {next:?} is not after {t:?}");
            t = next;
        }
    }
}
