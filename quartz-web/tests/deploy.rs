//! What `deploy/` ships: the Prometheus alert rules pass `promtool check
//! rules` and their own unit tests (`promtool test rules`: each alert fires
//! on the series it is written for, and not before), and every metric the
//! rules and the Grafana dashboard query is one the code exports.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// The names the code exports: each node's metrics, and the cluster's
/// gauges `/metrics` reads from the database.
fn exported() -> BTreeSet<&'static str> {
    quartz_core::engine::metrics::ALL
        .iter()
        .chain(quartz_web::health::ALL.iter())
        .copied()
        .collect()
}

/// Every `quartz_…` metric name in a PromQL expression (a summary's `_sum`
/// and `_count` are its own name's).
fn metrics_in(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("quartz_") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[at + name.len()..];
        let base = name
            .strip_suffix("_sum")
            .or_else(|| name.strip_suffix("_count"))
            .unwrap_or(&name);
        names.push(base.to_owned());
    }
    names
}

#[test]
fn the_alert_rules_are_valid_and_fire_when_they_should() {
    let rules = deploy().join("prometheus");
    let Some(promtool) =
        quartz_testkit::tools::debian_program("promtool", "prometheus", "check the Prometheus alert rules")
    else {
        return;
    };
    for args in [
        ["check", "rules", "quartz-alerts.yml"],
        ["test", "rules", "quartz-alerts.test.yml"],
    ] {
        let out = Command::new(&promtool).args(args).current_dir(&rules).output().unwrap();
        assert!(
            out.status.success(),
            "promtool {args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Each alert the issue names is there.
    let text = std::fs::read_to_string(rules.join("quartz-alerts.yml")).unwrap();
    for alert in [
        "QuartzNoLiveNode",
        "QuartzOverdueTriggers",
        "QuartzStrandedRetries",
        "QuartzHighFailureRate",
        "QuartzSilentNode",
        "QuartzDatabaseUnreadable",
    ] {
        assert!(text.contains(&format!("alert: {alert}")), "{alert}");
    }
}

#[test]
fn the_rules_and_the_dashboard_query_only_exported_metrics() {
    let exported = exported();
    let rules = std::fs::read_to_string(deploy().join("prometheus/quartz-alerts.yml")).unwrap();
    let expressions: Vec<&str> = rules.lines().filter_map(|l| l.trim().strip_prefix("expr:")).collect();
    assert!(expressions.len() >= 6, "{expressions:?}");
    let queries: String = rules
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    for name in metrics_in(&queries) {
        assert!(
            exported.contains(name.as_str()),
            "the rules query {name}, which nothing exports"
        );
    }

    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(deploy().join("grafana/quartz-dashboard.json")).unwrap())
            .unwrap();
    assert!(dashboard["title"].is_string() && dashboard["uid"].is_string());
    let mut queried = BTreeSet::new();
    let mut targets = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        if panel["type"] == "row" {
            continue;
        }
        assert!(panel["title"].is_string(), "{panel}");
        let list = panel["targets"].as_array().unwrap_or_else(|| panic!("{panel}"));
        assert!(!list.is_empty(), "{} has no query", panel["title"]);
        for target in list {
            let expr = target["expr"].as_str().unwrap();
            let names = metrics_in(expr);
            assert!(!names.is_empty(), "{expr}");
            for name in names {
                assert!(
                    exported.contains(name.as_str()),
                    "panel {} queries {name}, which nothing exports",
                    panel["title"]
                );
                queried.insert(name);
            }
            targets += 1;
        }
    }
    assert!(targets >= 10, "{targets} queries");
    // The cluster's gauges are all on the dashboard.
    for gauge in quartz_web::health::ALL {
        assert!(queried.contains(gauge), "{gauge} is on no panel");
    }
}
