//! Every planted bug (`quartz_core::mutants`) is caught: with it switched
//! on, some seed among the first [`WITHIN`] breaks a guarantee the oracles
//! see. A mutant is switched on for the whole process, so this binary has
//! the one test, which tries them one after another.

use quartz_sim::{Options, run_seed};

/// Seeds tried per mutant (each 20 simulated minutes). The seeds are fixed:
/// which one catches each mutant is the same on every run.
const WITHIN: u64 = 150;

#[test]
fn every_mutant_is_caught() {
    let options = Options {
        nodes: 3,
        minutes: 20,
        keep_trace: false,
    };
    let mut missed = Vec::new();
    for mutant in quartz_core::mutants::ALL {
        quartz_core::mutants::set(Some(mutant.name)).expect("a mutant of the list");
        let caught = (1..=WITHIN).find_map(|seed| {
            let report = run_seed(&options, seed);
            report.violations.first().map(|v| (seed, v.clone()))
        });
        match caught {
            Some((seed, violation)) => println!("{}: caught by seed {seed}: {violation}", mutant.name),
            None => missed.push(format!("{} ({})", mutant.name, mutant.breaks)),
        }
    }
    quartz_core::mutants::set(None).expect("none");
    assert!(missed.is_empty(), "not caught within {WITHIN} seeds: {missed:?}");
}
