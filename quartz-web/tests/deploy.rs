//! What `deploy/` ships: the Kubernetes manifests render and pass
//! Kubernetes' schemas and match the code; the Prometheus alert rules pass `promtool check
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

/// `deploy/kubernetes` as `kubectl kustomize` renders it, one JSON value a
/// resource (read with PyYAML), after a strict check against Kubernetes'
/// own schemas (`kubernetes-validate`, offline).
fn rendered_manifests() -> Option<Vec<serde_json::Value>> {
    let kubectl = quartz_testkit::tools::debian_program("kubectl", "kubectl", "render deploy/kubernetes")?;
    let python = quartz_testkit::tools::python_with(&["kubernetes-validate"], "check deploy/kubernetes")?;
    let out = Command::new(kubectl)
        .args(["kustomize"])
        .arg(deploy().join("kubernetes"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl kustomize: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = std::env::temp_dir().join(format!("quartz-kubernetes-{}.yaml", std::process::id()));
    std::fs::write(&file, &out.stdout).unwrap();
    let check = Command::new(&python)
        .args(["-m", "kubernetes_validate", "--strict", "--quiet"])
        .arg(&file)
        .output()
        .unwrap();
    let as_json = Command::new(&python)
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))",
        ])
        .arg(&file)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&file);
    assert!(
        check.status.success(),
        "the manifests fail Kubernetes' schemas:\n{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(as_json.status.success(), "{}", String::from_utf8_lossy(&as_json.stderr));
    Some(serde_json::from_slice(&as_json.stdout).unwrap())
}

/// The Kubernetes manifests render, pass Kubernetes' schemas strictly, and
/// say what the code does: the probes' paths answer on a real server
/// without a token, the grace outlasts the node's shutdown grace, the
/// commands and variables are the `quartz` command's, and the pods run as
/// the image's user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubernetes_manifests_render_validate_and_match_the_code() {
    let Some(resources) = rendered_manifests() else {
        return;
    };
    let of = |kind: &str| {
        resources
            .iter()
            .find(|r| r["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} in deploy/kubernetes"))
    };
    for kind in ["Deployment", "PodDisruptionBudget", "Job", "Service", "Secret"] {
        of(kind);
    }
    let pod = &of("Deployment")["spec"]["template"]["spec"];
    let node = &pod["containers"][0];
    let args: Vec<&str> = node["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args[..3], ["run", "--listen", "0.0.0.0:8080"], "{args:?}");

    // The grace covers the node's own: running fires finish, claims go back.
    let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    let shutdown = quartz_core::engine::Settings::default().shutdown_grace.as_secs();
    assert!(
        grace >= shutdown + 10,
        "grace {grace} s against shutdown_grace {shutdown} s"
    );

    // The image's user, and no root.
    let containerfile = std::fs::read_to_string(deploy().join("container/Containerfile")).unwrap();
    assert!(containerfile.contains("USER 65532:65532"), "{containerfile}");
    assert!(containerfile.contains(r#"ENTRYPOINT ["/usr/local/bin/quartz"]"#));
    assert!(containerfile.contains("-p quartz-cli") && containerfile.contains("target/release/quartz"));
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(node["securityContext"]["readOnlyRootFilesystem"], true);

    // The variables the command reads, from the Secret's keys.
    let secret = &of("Secret")["stringData"];
    let env: Vec<&serde_json::Value> = node["env"].as_array().unwrap().iter().collect();
    for (name, key) in [
        ("QUARTZ_DATABASE_URL", "database-url"),
        ("QUARTZ_ADMIN_TOKEN", "admin-token"),
        ("QUARTZ_READ_TOKEN", "read-token"),
    ] {
        let var = env
            .iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("{name}"));
        assert_eq!(var["valueFrom"]["secretKeyRef"]["key"], key);
        assert!(secret[key].is_string(), "the Secret has {key}");
    }
    let migrate = &of("Job")["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(migrate["args"], serde_json::json!(["migrate"]));

    // The probes' paths answer, without a token, on a server with tokens
    // and a node beside it.
    let node_handle = quartz_core::engine::SchedulerBuilder::new("deploy")
        .settings(quartz_testkit::fast_settings())
        .start(quartz_core::testing::MemoryStore::new())
        .await
        .unwrap();
    let web = quartz_web::Web::new(node_handle.admin())
        .access(quartz_web::Access::tokens(Some("a".into()), Some("r".into())))
        .node(node_handle.probe());
    let addr = crate::http::serve(web.router()).await;
    for probe in ["startupProbe", "livenessProbe", "readinessProbe"] {
        let path = node[probe]["httpGet"]["path"]
            .as_str()
            .unwrap_or_else(|| panic!("{probe}"));
        assert_eq!(node[probe]["httpGet"]["port"], "http");
        let answer = crate::http::get(addr, "GET", path, None).await;
        assert_eq!(answer.status, 200, "{probe} {path}: {}", answer.body);
    }
    assert_eq!(
        node["livenessProbe"]["httpGet"]["path"], "/livez",
        "liveness never asks the database"
    );
    assert_eq!(node["ports"][0]["containerPort"], 8080);
    node_handle.shutdown().await;
}
