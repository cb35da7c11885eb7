//! The `quartz` command as a user runs it: the built binary, its output (the
//! JSON parsed), its exit codes and its one-line errors. Jobs are managed on
//! an SQLite file; several `quartz run` processes share the work on
//! PostgreSQL.

#![allow(clippy::unwrap_used)]

use quartz_testkit as common;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::{Kind, TempDir, TestDb, wait_until};
use serde_json::Value;

/// A scratch directory with an SQLite file in it.
fn scratch(name: &str) -> (TempDir, String) {
    let dir = std::env::temp_dir().join(format!(
        "quartz-cli-{name}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("quartz.db").display());
    (TempDir(dir), url)
}

/// Runs `quartz ARGS` against a database and scheduler.
fn quartz(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_quartz"))
        .args(["--database-url", url, "--scheduler", "cli"])
        .args(args)
        .env_remove("QUARTZ_DATABASE_URL")
        .env_remove("QUARTZ_SCHEDULER")
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs a command that must succeed and prints JSON; returns it.
fn json(url: &str, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = quartz(url, &all);
    assert!(out.status.success(), "quartz {args:?} failed: {}", stderr(&out));
    serde_json::from_str(stdout(&out).trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(&out)))
}

/// A command that must fail with status 2 and one clear line on stderr.
fn refused(url: &str, args: &[&str], says: &str) {
    let out = quartz(url, args);
    assert_eq!(out.status.code(), Some(2), "quartz {args:?}: {}", stderr(&out));
    // The Redis store's warning that the server keeps nothing on disk is
    // not part of the refusal.
    let err: String = stderr(&out)
        .lines()
        .filter(|l| !l.contains("append-only file is off"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(err.contains(says), "quartz {args:?} said {err:?}, not {says:?}");
    assert!(!err.contains("panicked") && !err.contains("backtrace"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.starts_with("quartz: "), "{err}");
}

#[test]
fn jobs_are_added_listed_shown_paused_triggered_edited_and_deleted() {
    let (_dir, url) = scratch("jobs");
    every_admin_command(&url);
}

/// The same commands on Redis (`--database-url redis://...`), in a key
/// namespace of the test's own.
#[test]
fn every_admin_command_works_on_redis() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let Some(db) = runtime.block_on(TestDb::new(Kind::Redis)) else {
        return;
    };
    every_admin_command(&db.url);
    runtime.block_on(db.drop_db());
}

/// Jobs added, listed, shown, paused, resumed, triggered, edited and
/// deleted, calendars, history, nodes and the audit, through the CLI.
fn every_admin_command(url: &str) {
    let url = url.to_owned();
    let migrated = json(&url, &["migrate"]);
    assert_eq!(migrated["migrated"], true);
    let added = json(
        &url,
        &[
            "job",
            "add",
            "report",
            "--handler",
            "log",
            "--payload",
            r#""daily""#,
            "--cron",
            "0 0 6 * * ?",
            "--tz",
            "Europe/Paris",
            "--misfire",
            "do_nothing",
            "--timeout",
            "5m",
            "--no-concurrent",
            "--recover",
            "--description",
            "the morning report",
        ],
    );
    assert_eq!(added["name"], "report");
    assert_eq!(added["allow_concurrent"], false);
    assert_eq!(added["requests_recovery"], true);
    assert_eq!(added["timeout_ms"], 300_000);
    assert_eq!(added["triggers"][0]["kind"], "cron");
    assert_eq!(added["triggers"][0]["time_zone"], "Europe/Paris");
    assert_eq!(added["triggers"][0]["misfire"], "do_nothing");
    json(
        &url,
        &["job", "add", "notify", "--handler", "noop", "--parent", "report"],
    );
    json(
        &url,
        &[
            "job",
            "add",
            "poll",
            "--handler",
            "sleep",
            "--payload",
            r#"{"ms": 10}"#,
            "--every",
            "30s",
            "--repeat",
            "3",
        ],
    );
    json(
        &url,
        &[
            "job",
            "add",
            "once",
            "--handler",
            "noop",
            "--at",
            "2030-01-01T00:00:00Z",
        ],
    );
    let listed = json(&url, &["job", "list"]);
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["notify", "once", "poll", "report"]);
    assert_eq!(listed[0]["parent"], "report");
    assert_eq!(listed[2]["triggers"][0]["interval_ms"], 30_000);
    assert_eq!(listed[2]["triggers"][0]["repeat"], 3);
    // The table for people.
    let table = stdout(&quartz(&url, &["job", "list"]));
    assert!(table.starts_with("NAME"), "{table}");
    assert!(table.contains("after report"), "{table}");

    json(&url, &["job", "pause", "report"]);
    assert_eq!(json(&url, &["job", "show", "report"])["state"], "paused");
    json(&url, &["job", "resume", "report"]);
    assert_eq!(json(&url, &["job", "show", "report"])["state"], "enabled");
    let fired = json(&url, &["job", "trigger", "poll"]);
    assert!(fired["fire_time"].as_i64().unwrap() > 0);
    assert!(fired["note"].as_str().unwrap().contains("pending"), "{fired}");
    let poll = json(&url, &["job", "show", "poll"]);
    assert_eq!(
        poll["triggers"].as_array().unwrap().len(),
        1,
        "a pending fire, not a trigger"
    );
    let edited = json(&url, &["job", "edit", "poll", "--delay", "2s", "--timeout", "1s"]);
    assert_eq!(edited["timeout_ms"], 1_000);
    assert_eq!(
        edited["triggers"].as_array().unwrap().len(),
        1,
        "replaced by the new trigger"
    );
    assert_eq!(edited["triggers"][0]["kind"], "fixed_delay");
    assert_eq!(edited["handler"], "sleep", "what was not named stays");

    json(&url, &["job", "delete", "once"]);
    assert_eq!(json(&url, &["job", "list"]).as_array().unwrap().len(), 3);
    let history = json(&url, &["history"]);
    let history = history.as_array().unwrap();
    assert_eq!(
        history.len(),
        1,
        "the fire asked for by hand, waiting for a node: {history:?}"
    );
    assert_eq!(
        (&history[0]["state"], &history[0]["by_hand"]),
        (&serde_json::json!("pending"), &serde_json::json!(true))
    );
    assert_eq!(json(&url, &["nodes"]).as_array().unwrap().len(), 0);
    // Work enqueued with its own payload and a key; the second with the
    // key is a duplicate naming the first; a payload that is not JSON and a
    // window without a key are refused.
    let args = [
        "job",
        "enqueue",
        "poll",
        "--payload",
        r#"{"to": "ada"}"#,
        "--after",
        "1h",
        "--unique",
        "ada",
    ];
    let queued = json(&url, &args);
    assert_eq!(queued["outcome"], "queued", "{queued}");
    let again = json(&url, &args);
    assert_eq!(
        (&again["outcome"], &again["work_id"]),
        (&serde_json::json!("duplicate"), &queued["work_id"]),
        "{again}"
    );
    let text = stdout(&quartz(&url, &["job", "enqueue", "poll"]));
    assert!(text.starts_with("queued: work "), "{text}");
    let bad = quartz(&url, &["job", "enqueue", "poll", "--payload", "{not json"]);
    assert!(
        !bad.status.success() && stderr(&bad).contains("--payload"),
        "{}",
        stderr(&bad)
    );
    let bad = quartz(&url, &["job", "enqueue", "poll", "--unique-for", "1h"]);
    assert!(
        !bad.status.success() && stderr(&bad).contains("--unique"),
        "{}",
        stderr(&bad)
    );
    let fires = json(&url, &["history", "--job", "poll"]);
    assert!(
        fires.as_array().unwrap().iter().any(|f| f["enqueued"] == true),
        "shown as enqueued: {fires}"
    );

    // Errors: one line, status 2, and nothing stored is lost.
    refused(
        &url,
        &["job", "add", "bad", "--handler", "noop", "--cron", "0 0 25 * * ?"],
        "hour",
    );
    refused(
        &url,
        &["job", "add", "report", "--handler", "noop", "--every", "1s"],
        "report",
    );
    refused(&url, &["job", "add", "x", "--handler", "noop"], "needs a trigger");
    // On demand: no trigger, run by hand.
    let on_demand = json(&url, &["job", "add", "by-hand", "--handler", "noop", "--on-demand"]);
    assert_eq!(on_demand["triggers"].as_array().unwrap().len(), 0, "{on_demand}");
    json(&url, &["job", "delete", "by-hand"]);
    refused(
        &url,
        &["job", "add", "x", "--handler", "noop", "--every", "soon"],
        "duration",
    );
    refused(
        &url,
        &[
            "job",
            "add",
            "x",
            "--handler",
            "noop",
            "--every",
            "1s",
            "--payload",
            "{",
        ],
        "JSON",
    );
    refused(
        &url,
        &[
            "job",
            "add",
            "x",
            "--handler",
            "noop",
            "--every",
            "1s",
            "--tz",
            "Mars/Olympus",
        ],
        "",
    );
    refused(
        &url,
        &[
            "job",
            "add",
            "x",
            "--handler",
            "noop",
            "--every",
            "1s",
            "--dst-skipped",
            "shift",
        ],
        "apply to a --cron trigger",
    );
    refused(
        &url,
        &["job", "edit", "report", "--dst-repeated", "both"],
        "apply to a --cron trigger",
    );
    let dst = json(
        &url,
        &[
            "job",
            "edit",
            "report",
            "--cron",
            "0 30 1 * * ?",
            "--tz",
            "Europe/London",
            "--dst-skipped",
            "shift",
            "--dst-repeated",
            "both",
        ],
    );
    assert_eq!(dst["triggers"][0]["dst_skipped"], "shift");
    assert_eq!(dst["triggers"][0]["dst_repeated"], "both");
    // Jitter and a catch-up window: stored, shown, and a zero refused.
    let spread = json(
        &url,
        &[
            "job",
            "edit",
            "report",
            "--cron",
            "0 0 0 * * ?",
            "--jitter",
            "10m",
            "--catch-up",
            "1h",
        ],
    );
    assert_eq!(spread["triggers"][0]["jitter_ms"], 600_000);
    assert_eq!(spread["triggers"][0]["catch_up_ms"], 3_600_000);
    refused(
        &url,
        &["job", "edit", "report", "--cron", "0 0 0 * * ?", "--jitter", "0s"],
        "jitter",
    );
    // An overlap policy and a concurrency limit: stored, shown, and a key
    // the payload cannot fill refused.
    let limited = json(
        &url,
        &[
            "job",
            "edit",
            "report",
            "--cron",
            "0 0 0 * * ?",
            "--overlap",
            "buffer_one",
            "--payload",
            r#"{"tenant": "acme"}"#,
            "--limit",
            "2",
            "--limit-key",
            "tenant:{/tenant}",
        ],
    );
    assert_eq!(limited["triggers"][0]["overlap"], "buffer_one");
    assert_eq!(limited["concurrency_limit"], 2);
    assert_eq!(limited["concurrency_key"], "tenant:{/tenant}");
    refused(
        &url,
        &["job", "edit", "report", "--limit-key", "{/customer}"],
        "concurrency_key",
    );
    refused(
        &url,
        &[
            "job",
            "edit",
            "report",
            "--cron",
            "0 0 0 * * ?",
            "--overlap",
            "sometimes",
        ],
        "overlap",
    );
    // A backfill previewed and queued (a trigger edited now has no past times).
    let preview = json(&url, &["job", "backfill", "report", "--from", "0", "--preview"]);
    assert_eq!(preview["preview"], true);
    assert_eq!(
        json(&url, &["job", "backfill", "report", "--from", "0", "--rate", "5"])["queued"],
        0
    );
    refused(
        &url,
        &["job", "backfill", "report", "--from", "0", "--rate", "0"],
        "rate",
    );
    // The whole scheduler paused and resumed.
    let paused = json(&url, &["scheduler", "pause"]);
    assert_eq!(paused["on_standby"], true);
    assert_eq!(
        json(&url, &["scheduler", "status"])["standby_since"],
        paused["standby_since"]
    );
    assert_eq!(json(&url, &["scheduler", "resume"])["on_standby"], false);
    refused(&url, &["job", "show", "nobody"], "nobody");
    refused(&url, &["job", "pause", "nobody"], "nobody");
    refused(&url, &["history", "--state", "sleeping"], "sleeping");
    assert_eq!(json(&url, &["job", "list"]).as_array().unwrap().len(), 3);
    // Calendars: added, used by a trigger, refused deletion while in use.
    json(
        &url,
        &["calendar", "add", "weekends", "--kind", "weekly", "--dates", "sat,sun"],
    );
    let calendars = json(&url, &["calendar", "list"]);
    assert_eq!(calendars.as_array().unwrap().len(), 1, "{calendars}");
    // A second add of the name is refused, the first kept; --replace replaces.
    refused(
        &url,
        &["calendar", "add", "weekends", "--kind", "weekly", "--dates", "sun"],
        "give --replace",
    );
    let kept = json(&url, &["calendar", "show", "weekends"]);
    assert_eq!(kept["definition"]["days"], serde_json::json!(["sat", "sun"]), "{kept}");
    let replaced = json(
        &url,
        &[
            "calendar",
            "add",
            "weekends",
            "--kind",
            "weekly",
            "--dates",
            "sat,sun",
            "--replace",
        ],
    );
    assert_eq!(replaced["definition"]["days"], serde_json::json!(["sat", "sun"]));
    json(
        &url,
        &[
            "job",
            "add",
            "weekdays",
            "--handler",
            "noop",
            "--cron",
            "0 0 9 * * ?",
            "--calendar",
            "weekends",
        ],
    );
    let out = quartz(&url, &["calendar", "delete", "weekends"]);
    assert!(
        !out.status.success() && stderr(&out).contains("job weekdays"),
        "{}",
        stderr(&out)
    );
    json(&url, &["job", "delete", "weekdays"]);
    let out = quartz(&url, &["calendar", "delete", "weekends"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // No node runs here: the fire asked for by hand above waits, unclaimed,
    // and past the misfire threshold the audit calls it stranded (a loaded
    // machine took longer than the default 5 s to get here). A threshold
    // longer than the test keeps the audit about the rest.
    let audit = quartz(&url, &["audit", "--misfire-threshold", "10m"]);
    assert!(
        audit.status.success(),
        "{}{}",
        String::from_utf8_lossy(&audit.stdout),
        stderr(&audit)
    );
    refused("ftp://example.com/db", &["job", "list"], "ftp");
    refused(
        "postgres://postgres@127.0.0.1:1/none",
        &["job", "list"],
        "cannot connect",
    );
}

/// An audit of a scheduler with nothing in it is refused, naming the
/// schedulers the database holds; not reported clean.
#[test]
fn an_audit_of_an_empty_scheduler_names_the_ones_there() {
    let (_dir, url) = scratch("empty-audit");
    let out = quartz(&url, &["audit"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("neither has any other"), "{}", stderr(&out));
    json(
        &url,
        &["job", "add", "hello", "--handler", "log", "--cron", "0 0 6 * * ?"],
    );
    let other = Command::new(env!("CARGO_BIN_EXE_quartz"))
        .args(["--database-url", &url, "--scheduler", "default", "audit"])
        .env_remove("QUARTZ_DATABASE_URL")
        .env_remove("QUARTZ_SCHEDULER")
        .output()
        .unwrap();
    assert_eq!(other.status.code(), Some(2), "{}", stderr(&other));
    assert!(
        stderr(&other).contains(r#"nothing to audit; this database holds "cli""#),
        "{}",
        stderr(&other)
    );
    let audit = quartz(&url, &["audit"]);
    assert!(audit.status.success(), "{}", stderr(&audit));
}

#[test]
fn help_on_every_command_has_examples() {
    for args in [
        &["--help"][..],
        &["migrate", "--help"],
        &["job", "add", "--help"],
        &["job", "list", "--help"],
        &["job", "show", "--help"],
        &["job", "pause", "--help"],
        &["job", "resume", "--help"],
        &["job", "trigger", "--help"],
        &["job", "edit", "--help"],
        &["job", "delete", "--help"],
        &["nodes", "--help"],
        &["history", "--help"],
        &["audit", "--help"],
        &["run", "--help"],
        &["cron", "next", "--help"],
        &["demo", "--help"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_quartz")).args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}");
        let text = stdout(&out);
        assert!(
            text.contains("Example"),
            "quartz {args:?} --help has no example:\n{text}"
        );
    }
}

#[test]
fn demo_shows_fires_within_seconds() {
    let (dir, _) = scratch("demo");
    let file = dir.0.join("demo.db");
    let out = Command::new(env!("CARGO_BIN_EXE_quartz"))
        .args(["demo", "--file", file.to_str().unwrap(), "--seconds", "7"])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    let succeeded = |job: &str| {
        text.lines()
            .filter(|l| l.contains(&format!(" {job} ")) && l.contains("succeeded"))
            .count()
    };
    assert!(succeeded("heartbeat") >= 2, "{text}");
    assert!(succeeded("shell-echo") >= 1, "{text}");
    assert!(succeeded("extract") >= 1, "{text}");
    assert!(succeeded("load") >= 1, "the child after its parent:\n{text}");
    assert!(succeeded("slow-report") >= 1, "{text}");
    assert!(
        text.contains("web console: http://127.0.0.1:"),
        "the demo serves its console:\n{text}"
    );
    // Run again: a fresh file each time.
    let again = Command::new(env!("CARGO_BIN_EXE_quartz"))
        .args(["demo", "--file", file.to_str().unwrap(), "--seconds", "1"])
        .output()
        .unwrap();
    assert!(again.status.success(), "{}", stderr(&again));
}

/// A `quartz run` child, stopped with SIGTERM (or killed) when dropped.
struct RunProcess(Child);

impl RunProcess {
    fn start(url: &str, node_id: &str, strategy: &str) -> RunProcess {
        RunProcess::start_with(url, node_id, &["--strategy", strategy], &[])
    }

    /// A node with extra options and environment variables.
    fn start_with(url: &str, node_id: &str, options: &[&str], env: &[(&str, &str)]) -> RunProcess {
        RunProcess(
            Command::new(env!("CARGO_BIN_EXE_quartz"))
                .args(["--database-url", url, "--scheduler", "cli", "run", "--node-id", node_id])
                .args(options)
                .envs(env.iter().copied())
                .args(["--poll-interval", "300ms", "--window", "1s", "--heartbeat", "200ms"])
                .args(["--dead-after", "2s", "--misfire-threshold", "2s"])
                .env("RUST_LOG", "warn")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    }

    /// SIGTERM, then the graceful exit.
    fn stop(mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let exit = self.0.wait().unwrap();
        assert!(exit.success(), "a node stopped by SIGTERM exits 0: {exit}");
    }
}

impl Drop for RunProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sqlite_path(url: &str) -> PathBuf {
    Path::new(url.strip_prefix("sqlite://").unwrap()).to_path_buf()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_finds_a_duplicate_and_a_gap_written_by_hand() {
    let (_dir, url) = scratch("audit");
    json(&url, &["migrate"]);
    let now = chrono::Utc::now().timestamp_millis();
    let start = ((now / 1000) + 2) * 1000;
    let end = start + 4_999;
    json(
        &url,
        &[
            "job",
            "add",
            "tick",
            "--handler",
            "noop",
            "--every",
            "1s",
            "--start",
            &start.to_string(),
            "--end",
            &end.to_string(),
        ],
    );
    let node = RunProcess::start(&url, "auditee", "first-come");
    let url2 = url.clone();
    wait_until(Duration::from_secs(20), "five ticks", move || {
        let url = url2.clone();
        async move {
            let fires = json(&url, &["history", "--job", "tick", "--state", "succeeded"]);
            fires.as_array().unwrap().len() >= 5
        }
    })
    .await;
    node.stop();
    let since = (start - 1_000).to_string();
    let clean = quartz(&url, &["audit", "--since", &since]);
    assert_eq!(clean.status.code(), Some(0), "{}", stdout(&clean));
    assert!(stdout(&clean).contains("0 violation(s)"), "{}", stdout(&clean));

    // By hand: the second fire runs again as attempt 2, and the fourth's row
    // disappears.
    let db = format!("sqlite://{}", sqlite_path(&url).display());
    let pool = sqlx::SqlitePool::connect(&db).await.unwrap();
    sqlx::query(
        "INSERT INTO quartz_fire (scheduler, execute_id, job_id, fire_time, attempt, node_id, incarnation, state, \
         claimed_at, started_at, finished_at) SELECT scheduler, execute_id, job_id, fire_time, 2, node_id, \
         incarnation, 'succeeded', claimed_at, started_at + 5, finished_at + 5 FROM quartz_fire WHERE fire_time = ?",
    )
    .bind(start + 1_000)
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("DELETE FROM quartz_fire WHERE fire_time = ?")
        .bind(start + 3_000)
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    let found = quartz(&url, &["--json", "audit", "--since", &since]);
    assert_eq!(found.status.code(), Some(1), "{}", stdout(&found));
    let report: Value = serde_json::from_str(stdout(&found).trim()).unwrap();
    let kinds: Vec<(String, i64)> = report["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["kind"].as_str().unwrap().to_owned(), v["fire_time"].as_i64().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("duplicate".to_owned(), start + 1_000),
            ("missing".to_owned(), start + 3_000)
        ],
        "{report}"
    );
    let text = stdout(&quartz(&url, &["audit", "--since", &since]));
    assert!(
        text.contains("duplicate: job tick") && text.contains("missing: job tick"),
        "{text}"
    );
}

/// Three `quartz run` processes on PostgreSQL share the jobs added with
/// `quartz job add`; `quartz nodes` sees them; the audit finds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_processes_share_the_work_on_postgres() {
    let Some(db) = TestDb::new(Kind::Postgres).await else {
        return;
    };
    let url = db.url.clone();
    let nodes: Vec<RunProcess> = ["a", "b", "c"]
        .iter()
        .map(|id| RunProcess::start(&url, id, "id-hash"))
        .collect();
    let u = url.clone();
    wait_until(Duration::from_secs(20), "three live nodes", move || {
        let url = u.clone();
        async move {
            let nodes = json(&url, &["nodes"]);
            nodes
                .as_array()
                .unwrap()
                .iter()
                .filter(|n| n["state"] == "live")
                .count()
                == 3
        }
    })
    .await;
    // The twelve jobs are added by twelve processes at once, four seconds
    // ahead: one after another, on a machine the rest of the suite loads,
    // the last ones could be added after their first fire time.
    let now = chrono::Utc::now().timestamp_millis();
    let start = ((now / 1000) + 4) * 1000;
    let end = (start + 5_999).to_string();
    std::thread::scope(|s| {
        for i in 0..12 {
            let (url, start, end) = (&url, start.to_string(), &end);
            s.spawn(move || {
                json(
                    url,
                    &[
                        "job",
                        "add",
                        &format!("share-{i:02}"),
                        "--handler",
                        "sleep",
                        "--payload",
                        r#"{"ms": 50}"#,
                        "--every",
                        "1s",
                        "--start",
                        &start,
                        "--end",
                        end,
                    ],
                )
            });
        }
    });
    let added = chrono::Utc::now().timestamp_millis();
    assert!(
        added < start,
        "the jobs were added {} ms after their start",
        added - start
    );
    let u = url.clone();
    common::wait_for(Duration::from_secs(30), "72 fires to succeed", move || {
        let url = u.clone();
        async move {
            let fires = json(&url, &["history", "--limit", "1000"]);
            let mut states = std::collections::BTreeMap::<String, usize>::new();
            for f in fires.as_array().unwrap() {
                *states.entry(f["state"].as_str().unwrap_or("?").to_owned()).or_default() += 1;
            }
            match states.get("succeeded") {
                Some(&n) if n >= 72 => Ok(()),
                _ => Err(format!("the ledger by state: {states:?}")),
            }
        }
    })
    .await;
    let fires = json(&url, &["history", "--limit", "1000"]);
    let fires = fires.as_array().unwrap();
    assert_eq!(fires.len(), 72, "each fire once, nothing else");
    let owners: HashSet<&str> = fires.iter().map(|f| f["node_id"].as_str().unwrap()).collect();
    assert!(owners.len() >= 2, "the work is shared: {owners:?}");
    let audit = quartz(&url, &["audit", "--since", &(start - 1_000).to_string()]);
    assert_eq!(audit.status.code(), Some(0), "{}", stdout(&audit));
    for node in nodes {
        node.stop();
    }
    let left = json(&url, &["nodes"]);
    assert!(left.as_array().unwrap().iter().all(|n| n["state"] != "live"), "{left}");
    db.drop_db().await;
}

/// The ledger rows of one job, newest first.
fn fires_of(url: &str, job: &str) -> Vec<Value> {
    json(url, &["history", "--job", job, "--limit", "1000"])
        .as_array()
        .unwrap()
        .clone()
}

/// Waits (polling, with a deadline of 20 s) until a job's ledger satisfies `done`.
fn wait_for_fires(url: &str, job: &str, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    wait_for_fires_within(Duration::from_secs(20), url, job, what, done)
}

/// [`wait_for_fires`] with a deadline of its own.
fn wait_for_fires_within(
    limit: Duration,
    url: &str,
    job: &str,
    what: &str,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let rows = fires_of(url, job);
        if done(&rows) {
            return rows;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}: {rows:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn error_of(row: &Value) -> String {
    row["error"].as_str().unwrap_or_default().to_owned()
}

/// Issue 15, points 1, 2 and 5: `shell` runs only what `--allow-shell` names,
/// in a clean environment and the chosen directory; a timeout stops the
/// program's whole process group, and a non-concurrent job's runs never
/// overlap; `job add` refuses a handler no node offers while one is live,
/// and takes any with a warning when none is; `history purge` deletes finished fires.
#[test]
fn shell_runs_only_allowed_programs_cleanly_and_a_timeout_stops_the_group() {
    let (dir, url) = scratch("shell");
    let work = dir.0.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let marker = dir.0.join("forbidden-ran");
    let pidfile = dir.0.join("background.pid");
    let log = dir.0.join("runs.log");
    let shell_job = |name: &str, script: &str, options: &[&str]| {
        let payload = serde_json::json!({"command": "sh", "args": ["-c", script]}).to_string();
        let mut args = vec!["job", "add", name, "--handler", "shell", "--payload", payload.as_str()];
        args.extend_from_slice(options);
        json(&url, &args);
    };
    shell_job("envdump", "pwd; env; exit 3", &["--every", "1h"]);
    shell_job(
        "tree",
        &format!("sleep 30 & echo $! > {}; sleep 30", pidfile.display()),
        &["--every", "1h", "--timeout", "500ms"],
    );
    shell_job(
        "exclusive",
        &format!(
            "echo s $(date +%s%N) >> {log}; trap 'echo e $(date +%s%N) >> {log}; exit 1' TERM; sleep 3",
            log = log.display()
        ),
        &["--every", "300ms", "--no-concurrent", "--timeout", "400ms"],
    );
    let forbidden = serde_json::json!({"command": "/usr/bin/touch", "args": [marker.to_str().unwrap()]}).to_string();
    json(
        &url,
        &[
            "job",
            "add",
            "forbidden",
            "--handler",
            "shell",
            "--payload",
            &forbidden,
            "--every",
            "1h",
        ],
    );

    let node = RunProcess::start_with(
        &url,
        "shell-node",
        &[
            "--allow-shell",
            "/bin/sh",
            "/usr/bin/sh",
            "--pass-env",
            "KEEP_ME",
            "--shell-dir",
            work.to_str().unwrap(),
        ],
        &[
            ("KEEP_ME", "kept"),
            ("SECRET_TOKEN", "hush"),
            ("QUARTZ_DATABASE_URL", url.as_str()),
        ],
    );

    // A clean environment, in the chosen directory, output kept on failure.
    let rows = wait_for_fires(&url, "envdump", "the envdump fire", |r| {
        r.iter().any(|f| f["state"] == "failed")
    });
    let error = error_of(&rows[0]);
    assert!(error.contains("exited with exit status: 3"), "{error}");
    assert!(error.contains(work.to_str().unwrap()), "runs in --shell-dir: {error}");
    assert!(
        error.contains("KEEP_ME=kept") && error.contains("QUARTZ_JOB=envdump"),
        "{error}"
    );
    assert!(
        !error.contains("SECRET_TOKEN") && !error.contains("QUARTZ_DATABASE_URL"),
        "the node's environment leaked: {error}"
    );

    // A program outside the allow-list runs nothing and is recorded.
    let rows = wait_for_fires(&url, "forbidden", "the forbidden fire", |r| {
        r.iter().any(|f| f["state"] == "failed")
    });
    assert!(
        error_of(&rows[0]).contains("not allowed on this node"),
        "{}",
        error_of(&rows[0])
    );
    assert!(!marker.exists(), "a program outside the allow-list ran");

    // A timeout stops the whole process group, background children included.
    wait_for_fires(&url, "tree", "the tree fire recorded failed", |r| {
        r.iter().any(|f| f["state"] == "failed")
    });
    let pid = std::fs::read_to_string(&pidfile).unwrap().trim().to_owned();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while Command::new("kill")
        .args(["-0", &pid])
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the background child {pid} outlived the timeout"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // A handler no node offers is refused while a node is live, naming
    // what the live nodes offer: a misspelt handler fails when it is
    // written, not at its first fire.
    let out = quartz(&url, &["job", "add", "typo", "--handler", "shel", "--every", "1h"]);
    assert!(!out.status.success(), "a handler no node offers was accepted");
    assert!(
        stderr(&out).contains("offers handler \"shel\"") && stderr(&out).contains("shell"),
        "{}",
        stderr(&out)
    );

    // The node publishes the shell payload's schema: a payload that does
    // not fit is refused when it is written, naming the field.
    refused(
        &url,
        &[
            "job",
            "add",
            "bad-shell",
            "--handler",
            "shell",
            "--payload",
            r#"{"args": ["x"]}"#,
            "--every",
            "1h",
        ],
        "payload.command",
    );
    refused(
        &url,
        &[
            "job",
            "enqueue",
            "envdump",
            "--payload",
            r#"{"command": "sh", "args": "-c"}"#,
        ],
        "payload.args",
    );
    let shown = json(&url, &["handler", "schema", "shell"]);
    assert_eq!(shown["schema"]["required"], serde_json::json!(["command"]), "{shown}");

    // A non-concurrent job with a timeout never overlaps itself.
    wait_for_fires(&url, "exclusive", "three timed-out runs", |r| {
        r.iter().filter(|f| f["state"] == "failed").count() >= 3
    });
    node.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    let events: Vec<(&str, u128)> = text
        .lines()
        .map(|l| {
            let (kind, at) = l.split_once(' ').unwrap();
            (kind, at.parse().unwrap())
        })
        .collect();
    assert!(events.len() >= 6, "{text}");
    for pair in events.windows(2) {
        assert_ne!(pair[0].0, pair[1].0, "runs overlapped (or one did not end): {text}");
        assert!(pair[1].1 >= pair[0].1, "{text}");
    }

    // With no node live, any handler name: the service that runs it may not
    // be deployed yet. It is stored, with a warning.
    let out = quartz(
        &url,
        &["job", "add", "invoice-acme", "--handler", "invoice", "--every", "1h"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("no node is live"), "{}", stderr(&out));

    // Finished fires go on request; nothing open does (a fire the stopped
    // node had claimed ahead and gave back stays, for the next node).
    let purged = json(&url, &["history", "purge", "--older-than", "0s"]);
    assert!(purged["purged_fires"].as_u64().unwrap() >= 6, "{purged}");
    for job in ["envdump", "forbidden", "tree", "exclusive"] {
        let left = fires_of(&url, job);
        assert!(
            left.iter()
                .all(|f| ["claimed", "pending"].contains(&f["state"].as_str().unwrap())),
            "{job}: {left:?}"
        );
    }
    assert!(fires_of(&url, "envdump").is_empty());
}

/// A plain HTTP/1.1 GET over a socket: the status and body.
fn http_get(addr: &str, path: &str, token: Option<&str>) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{auth}\r\n"
    )
    .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let status = text.split(' ').nth(1).unwrap().parse().unwrap();
    (
        status,
        text.split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default(),
    )
}

#[test]
fn serve_answers_the_api_and_refuses_an_open_address_without_a_token() {
    use std::io::BufRead;
    let (_dir, url) = scratch("serve");
    json(&url, &["job", "add", "report", "--handler", "log", "--every", "1h"]);
    // A node refused the same way as the server registers nothing: no dead
    // node row.
    for command in ["serve", "run"] {
        let open = Command::new(env!("CARGO_BIN_EXE_quartz"))
            .args(["--database-url", &url, command, "--listen", "0.0.0.0:0"])
            .env_remove("QUARTZ_ADMIN_TOKEN")
            .env_remove("QUARTZ_READ_TOKEN")
            .output()
            .unwrap();
        assert_eq!(open.status.code(), Some(2), "{command}: {}", stderr(&open));
        assert!(
            stderr(&open).contains("QUARTZ_ADMIN_TOKEN"),
            "{command}: {}",
            stderr(&open)
        );
    }
    assert_eq!(
        json(&url, &["nodes"]).as_array().unwrap().len(),
        0,
        "a node row left behind"
    );

    let mut server = Command::new(env!("CARGO_BIN_EXE_quartz"))
        .args([
            "--database-url",
            &url,
            "--scheduler",
            "cli",
            "serve",
            "--listen",
            "127.0.0.1:0",
        ])
        .env("QUARTZ_READ_TOKEN", "reader")
        .env_remove("QUARTZ_ADMIN_TOKEN")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let addr = first
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_owned();
    let (status, body) = http_get(&addr, "/api/v1/jobs", Some("reader"));
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"report\""), "{body}");
    assert_eq!(http_get(&addr, "/api/v1/jobs", None).0, 401);
    let (status, metrics) = http_get(&addr, "/metrics", Some("reader"));
    assert_eq!(status, 200, "quartz serve installs the Prometheus recorder: {metrics}");
    // No node runs: the cluster's gauges come from the database.
    for line in [
        "quartz_cluster_database_up{scheduler=\"cli\"} 1",
        "quartz_cluster_nodes{scheduler=\"cli\",state=\"live\"} 0",
        "quartz_cluster_overdue_triggers{scheduler=\"cli\"} 0",
    ] {
        assert!(metrics.contains(line), "{line}: {metrics}");
    }
    assert_eq!(http_get(&addr, "/healthz", None).0, 200);
    let (status, login) = http_get(&addr, "/login", None);
    assert_eq!(status, 200, "the console's login page: {login}");
    assert!(login.contains("name=\"token\""), "{login}");
    assert_eq!(
        http_get(&addr, "/jobs", None).0,
        303,
        "the console sends a stranger to the login"
    );
    Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(server.wait().unwrap().success());
}

/// A node living through New York's autumn change: its clock, and so its
/// SQLite database's, starts at 01:59:51 EDT on 1 November 2026 (libfaketime),
/// nine seconds before 02:00 EDT becomes 01:00 EST. Three triggers fire
/// every two seconds of the 01:00 hour, choosing the first occurrence of the
/// repeated hour, the second, or both; each fires exactly the times its
/// choice keeps, once each.
#[test]
fn a_node_fires_the_repeated_hour_as_each_trigger_chose() {
    let Some(faketime) = quartz_testkit::faketime::library("move a node's clock to a DST change") else {
        return;
    };
    let (_dir, url) = scratch("dst");
    json(&url, &["migrate"]);
    for choice in ["first", "second", "both"] {
        json(
            &url,
            &[
                "job",
                "add",
                choice,
                "--handler",
                "noop",
                "--cron",
                "*/2 * 1 * * ?",
                "--tz",
                "America/New_York",
                "--start",
                "2026-11-01T05:59:53Z",
                "--dst-repeated",
                choice,
            ],
        );
    }
    let faketime = faketime.to_str().unwrap();
    let node = RunProcess::start_with(
        &url,
        "dst",
        &[],
        &[
            ("LD_PRELOAD", faketime),
            ("FAKETIME", "@2026-11-01 05:59:51"),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
            ("TZ", "UTC"),
        ],
    );
    // 06:00:04Z is 01:00:04 EST, the third time of the repeated hour's
    // second occurrence.
    let last = 1_793_512_804_000;
    // Thirteen seconds of the node's clock from its start.
    for job in ["second", "both"] {
        wait_for_fires_within(
            Duration::from_secs(90),
            &url,
            job,
            "the fire at 06:00:04Z run",
            |rows| {
                rows.iter()
                    .any(|r| r["fire_time"].as_i64() >= Some(last) && r["state"] == "succeeded")
            },
        );
    }
    node.stop();
    let times = |job: &str| {
        let mut times: Vec<i64> = fires_of(&url, job)
            .iter()
            .filter(|r| r["state"] == "succeeded")
            .map(|r| r["fire_time"].as_i64().unwrap())
            .filter(|t| *t <= last)
            .collect();
        times.sort_unstable();
        times
    };
    // 05:59:54Z to 05:59:58Z are 01:59:54 to 01:59:58 EDT, the first
    // occurrence; 06:00:00Z to 06:00:04Z are 01:00:00 to 01:00:04 EST.
    let edt = [1_793_512_794_000, 1_793_512_796_000, 1_793_512_798_000];
    let est = [1_793_512_800_000, 1_793_512_802_000, 1_793_512_804_000];
    assert_eq!(times("first"), edt, "first: {:?}", fires_of(&url, "first"));
    assert_eq!(times("second"), est, "second: {:?}", fires_of(&url, "second"));
    assert_eq!(times("both"), [edt, est].concat(), "both: {:?}", fires_of(&url, "both"));
}
