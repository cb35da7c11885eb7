//! The simulator on the real engine: a seed replays bit for bit, and a
//! batch of seeds (each a cluster of three nodes through partitions,
//! freezes, crashes, store restarts, lost answers and skewed clocks) breaks
//! no guarantee. `quartz-sim --seeds N` runs more; CI runs these.

use quartz_sim::{Options, run_seed};

/// Seeds CI runs on every change (four tests of 60, side by side), and the
/// simulated minutes of each.
const SEEDS_PER_TEST: u64 = 60;
const MINUTES: u64 = 20;

#[test]
fn a_seed_replays_bit_for_bit() {
    let options = Options {
        nodes: 3,
        minutes: 20,
        keep_trace: true,
    };
    for seed in [7, 1_234_567] {
        let first = run_seed(&options, seed);
        let again = run_seed(&options, seed);
        assert!(first.starts > 0, "seed {seed} ran nothing");
        assert_eq!(first.lines, again.lines, "seed {seed}: the two runs' traces differ");
        assert_eq!(first.trace, again.trace);
    }
}

/// The command's last line, seeds side by side on threads or one by one:
/// the same line, so a long run may use every core.
#[test]
fn the_command_gives_the_same_line_on_one_thread_or_three() {
    let line = |jobs: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_quartz-sim"))
            .args(["--seeds", "6", "--first", "301", "--hours", "0.1", "--jobs", jobs])
            .output()
            .expect("quartz-sim runs");
        assert!(out.status.success(), "{out:?}");
        let stdout = String::from_utf8(out.stdout).unwrap();
        stdout.lines().last().unwrap_or_default().to_owned()
    };
    let one = line("1");
    assert!(one.starts_with("seeds 6, simulated hours 0.6"), "{one}");
    assert_eq!(one, line("3"));
}

#[test]
fn seeds_1_to_60_break_no_guarantee() {
    seeds_of_faults_break_no_guarantee(1);
}

#[test]
fn seeds_61_to_120_break_no_guarantee() {
    seeds_of_faults_break_no_guarantee(61);
}

#[test]
fn seeds_121_to_180_break_no_guarantee() {
    seeds_of_faults_break_no_guarantee(121);
}

#[test]
fn seeds_181_to_240_break_no_guarantee() {
    seeds_of_faults_break_no_guarantee(181);
}

/// Seeds a long run (`--seeds 100000 --hours 0.25`) found breaking a
/// guarantee, each a quarter hour as found: a pending fire claimed with its
/// answer lost, or told again by a poll, launched twice on its node.
#[test]
fn seeds_long_runs_found_break_no_guarantee_now() {
    let options = Options {
        nodes: 3,
        minutes: 15,
        keep_trace: false,
    };
    for seed in [27_621, 67_723, 78_317, 84_816, 94_610] {
        let report = run_seed(&options, seed);
        assert!(report.starts > 0, "seed {seed} ran nothing");
        assert!(
            report.violations.is_empty(),
            "seed {seed}: {:#?}\nreplay: cargo run -p quartz-sim -- --seed {seed} --hours 0.25",
            report.violations
        );
    }
}

/// Seeds `first` to `first + SEEDS_PER_TEST - 1`.
fn seeds_of_faults_break_no_guarantee(first: u64) {
    let options = Options {
        nodes: 3,
        minutes: MINUTES,
        keep_trace: false,
    };
    // Fixed seeds: the same run on every change (`quartz-sim --seeds N
    // --first S` runs new ones; a failure found there is replayed by its
    // seed and, once fixed, belongs here).
    let mut broken = Vec::new();
    let (mut starts, mut fire_times) = (0, 0);
    for seed in first..first + SEEDS_PER_TEST {
        let report = run_seed(&options, seed);
        starts += report.starts;
        fire_times += report.fire_times;
        if !report.violations.is_empty() {
            broken.push(format!(
                "seed {seed}: {:#?}\nreplay: cargo run -p quartz-sim -- --seed {seed} --hours {}",
                report.violations,
                MINUTES as f64 / 60.0
            ));
        }
    }
    println!(
        "seeds {first} to {}: {starts} handler starts, {fire_times} fire times checked",
        first + SEEDS_PER_TEST - 1
    );
    assert!(starts > SEEDS_PER_TEST * 10, "the seeds ran fires: {starts}");
    assert!(broken.is_empty(), "{}", broken.join("\n\n"));
}
