//! Every input the fuzzers kept (`fuzz/regressions/<target>/`), replayed
//! through the same checks the fuzz targets make (`fuzz/src/lib.rs`), on
//! stable Rust, in the ordinary test suite.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[path = "../../fuzz/src/lib.rs"]
mod checks;

use std::path::Path;

fn replay(target: &str, check: fn(&[u8])) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/regressions")
        .join(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        eprintln!("replaying {}", path.display());
        check(&data);
        n += 1;
    }
    n
}

#[test]
fn cron_inputs_kept_by_the_fuzzer() {
    assert!(replay("cron", checks::cron) > 0);
}

#[test]
fn payload_inputs_kept_by_the_fuzzer() {
    assert!(replay("payload", checks::payload) > 0);
}

#[test]
fn trigger_row_inputs_kept_by_the_fuzzer() {
    assert!(replay("trigger_row", checks::trigger_row) > 0);
}
