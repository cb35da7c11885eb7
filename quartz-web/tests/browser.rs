//! The console in a real browser (headless Chromium over WebDriver): log in,
//! create a job through the form while the cron preview follows the typing
//! (the calendar typed too),
//! see it fire in the history, pause it from the jobs table, delete one
//! behind its confirmation, and show that a job named
//! `<script>alert(1)</script>` renders as text and runs nothing. A
//! screenshot of each page is saved under `target/tmp/console-screenshots/`.

#![allow(clippy::unwrap_used)]

use crate::http;
use crate::webdriver;

use std::path::Path;
use std::time::Duration;

use chrono::Datelike;

use quartz_core::admin::{JobDefinition, TriggerDefinition};
use quartz_core::engine::SchedulerBuilder;
use quartz_testkit::{Kind, TestDb, wait_for};
use quartz_web::{Access, Web};
use webdriver::Browser;

const CLUSTER: &str = "browser-cluster";
const ADMIN: &str = "browser-admin-token";
const JOB: &str = "browser-report";
const SCRIPT_NAME: &str = "<script>alert(1)</script>";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_in_a_browser() {
    quartz_testkit::run(Kind::SqliteFile, |db| Box::pin(console(db))).await;
}

/// Waits until a selector matches on the page, reloading it between looks.
async fn wait_for_element(browser: &Browser, url: &str, css: &str, limit: Duration) {
    wait_for(limit, &format!("{css} on {url}"), || async {
        browser.goto(url).await;
        if browser.count(css).await > 0 {
            Ok(())
        } else {
            Err("not yet".into())
        }
    })
    .await;
}

/// The days of the fire times the form's preview lists.
async fn preview_days(browser: &Browser) -> Vec<chrono::Weekday> {
    browser
        .text("#cron-preview")
        .await
        .lines()
        .filter_map(|at| chrono::DateTime::parse_from_rfc3339(at.trim()).ok())
        .map(|at| at.weekday())
        .collect()
}

/// Fills the job form and submits it.
async fn create_job(browser: &Browser, base: &str, name: &str, cron: &str) {
    browser.goto(&format!("{base}/new")).await;
    browser.type_into("#name", name).await;
    browser.type_into("#handler", "report").await;
    browser.type_into("#cron", cron).await;
    browser.type_into("#time_zone", "UTC").await;
}

async fn console(db: &TestDb) {
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    let Some(browser) = Browser::start(&shots).await else {
        return;
    };
    let node = SchedulerBuilder::new(CLUSTER)
        .settings(quartz_testkit::fast_settings())
        .handler("report", |_| Ok(()))
        .start(db.store().await)
        .await
        .unwrap();
    let admin = node.admin();
    let access = Access::tokens(Some(ADMIN.into()), None);
    let addr = http::serve(Web::new(admin.clone()).access(access).router()).await;
    let base = format!("http://{addr}");

    // Log in.
    browser.goto(&format!("{base}/jobs")).await;
    assert!(
        browser.url().await.contains("/login?next=%2Fjobs"),
        "{}",
        browser.url().await
    );
    browser.type_into("#token", ADMIN).await;
    browser.screenshot("login").await;
    browser.click("form.login button").await;
    browser.wait_url(&format!("{base}/jobs")).await;
    browser.wait_text("h1", "Jobs").await;
    // The steps below click and read; the live refresh is checked apart.
    browser
        .script("window.localStorage.setItem('quartz-live', 'off')")
        .await;

    // The form: the preview follows the cron expression as it is typed.
    create_job(&browser, &base, JOB, "* * *").await;
    wait_for(Duration::from_secs(10), "the preview to show the error", || async {
        let error = browser.text("#cron-preview-error").await;
        if error.is_empty() {
            Err("no error shown".into())
        } else {
            Ok(())
        }
    })
    .await;
    browser.type_into("#cron", "* * * * * ?").await;
    wait_for(
        Duration::from_secs(10),
        "the preview to list five fire times",
        || async {
            let (n, error) = (
                browser.count("#cron-preview li").await,
                browser.text("#cron-preview-error").await,
            );
            if n == 5 && error.is_empty() {
                Ok(())
            } else {
                Err(format!("{n} items, error {error:?}"))
            }
        },
    )
    .await;
    // It passes over the times the typed calendar excludes, here every day
    // but the one three days from now, and says when no calendar has the
    // name typed.
    let now = chrono::DateTime::<chrono::Utc>::from(std::time::SystemTime::now());
    let day = (now + chrono::Duration::days(3)).weekday();
    let others: Vec<String> = std::iter::successors(Some(day.succ()), |d| Some(d.succ()))
        .take(6)
        .map(|d| d.to_string().to_lowercase())
        .collect();
    let one_day = serde_json::json!({"kind": "weekly", "days": others});
    admin
        .calendar_put("one-day", &serde_json::from_value(one_day).unwrap(), None)
        .await
        .unwrap();
    browser.type_into("#calendar", "no-such").await;
    wait_for(Duration::from_secs(10), "the preview to name the calendar", || async {
        let error = browser.text("#cron-preview-error").await;
        if error.contains("no-such") {
            Ok(())
        } else {
            Err(format!("error {error:?}"))
        }
    })
    .await;
    browser.type_into("#calendar", "one-day").await;
    wait_for(
        Duration::from_secs(10),
        "five fire times on the calendar's day",
        || async {
            let days = preview_days(&browser).await;
            if days.len() == 5 && days.iter().all(|d| *d == day) {
                Ok(())
            } else {
                Err(format!("{days:?}"))
            }
        },
    )
    .await;
    browser.screenshot("job-form-calendar").await;
    browser.type_into("#calendar", "").await;
    browser.type_into("#cron", "* * * * * ?").await;
    wait_for(Duration::from_secs(10), "five fire times within seconds", || async {
        let days = preview_days(&browser).await;
        if days.len() == 5 && !days.contains(&day) {
            Ok(())
        } else {
            Err(format!("{days:?}"))
        }
    })
    .await;
    browser.screenshot("job-form").await;
    browser.click("#save").await;
    browser.wait_text("h1", &format!("Job {JOB}")).await;
    assert!(browser.text("p.notice").await.contains("Created"));

    // It fires, and the history shows it.
    let history = format!("{base}/fires?job={JOB}");
    wait_for_element(
        &browser,
        &history,
        "table.fires tr[data-state=succeeded]",
        Duration::from_secs(30),
    )
    .await;
    browser.screenshot("history").await;
    browser.goto(&format!("{base}/jobs/{JOB}")).await;
    assert!(browser.count("ol.upcoming li").await >= 1);
    browser.screenshot("job").await;

    // Pause it from the jobs table.
    browser.goto(&format!("{base}/jobs")).await;
    browser.click(&format!("tr[data-job=\"{JOB}\"] button.pause")).await;
    browser.wait_text("p.notice", &format!("Paused {JOB}")).await;
    assert_eq!(browser.text(&format!("tr[data-job=\"{JOB}\"] .badge")).await, "paused");
    assert_eq!(admin.job(JOB).await.unwrap().state, "paused");

    // A job named like a script shows as its name and runs nothing.
    create_job(&browser, &base, SCRIPT_NAME, "0 0 6 * * ?").await;
    browser.click("#save").await;
    browser.wait_text("h1", &format!("Job {SCRIPT_NAME}")).await;
    assert_eq!(browser.alert().await, None, "no script ran");
    assert_eq!(browser.text("h1").await, format!("Job {SCRIPT_NAME}"));
    browser.goto(&format!("{base}/jobs")).await;
    assert_eq!(browser.alert().await, None, "no script ran");
    let names = browser
        .script("return [...document.querySelectorAll('a.job')].map(a => a.textContent)")
        .await;
    assert!(
        names.as_array().unwrap().iter().any(|n| n == SCRIPT_NAME),
        "the name is text: {names}"
    );
    let scripts = browser.script("return document.scripts.length").await;
    assert_eq!(scripts, 1, "the console's own script only");
    browser.screenshot("jobs").await;

    // Delete it, behind its confirmation.
    browser.click("a.act.delete").await;
    browser.wait_text("p.warning", "cannot be undone").await;
    browser.screenshot("delete").await;
    browser.click("#confirm-delete").await;
    browser.wait_text("p.notice", "Deleted").await;
    assert!(admin.job(SCRIPT_NAME).await.is_err());

    let weekends =
        serde_json::from_str(r#"{"kind": "weekly", "days": ["sat", "sun"], "time_zone": "Europe/Paris"}"#).unwrap();
    admin.calendar_put("weekends", &weekends, None).await.unwrap();
    for (page, name) in [
        ("/", "overview"),
        ("/nodes", "nodes"),
        ("/changes", "changes"),
        ("/calendars", "calendars"),
    ] {
        browser.goto(&format!("{base}{page}")).await;
        assert_eq!(browser.alert().await, None);
        browser.screenshot(name).await;
        if name == "overview" {
            assert_eq!(browser.text(".card.live .value").await, "1", "one live node");
            assert_eq!(browser.count("#lateness rect.bar").await, 7, "the lateness chart");
        }
        if name == "calendars" {
            let rows = browser.text("tbody").await;
            assert!(rows.contains("weekends weekly: sat, sun"), "{rows}");
        }
    }
    // The charts have axes with units.
    browser.goto(&format!("{base}/")).await;
    assert_eq!(
        browser.text("#per-minute figcaption").await,
        "Fires per minute, the last hour"
    );
    assert_eq!(browser.count("#per-minute text.tick").await, 3, "0, half and the top");
    let units = browser
        .script("return Array.from(document.querySelectorAll('#per-minute text.unit, #per-minute text.title'), t => t.textContent)")
        .await;
    assert_eq!(units, serde_json::json!(["fires", "minute (database time)"]));

    // A live page refreshes itself, without a reload.
    browser.script("window.localStorage.setItem('quartz-live', 'on')").await;
    browser.goto(&format!("{base}/jobs")).await;
    browser.wait_text("#live", "live").await;
    browser.script("window.quartzMarker = 'still here'").await;
    let mut later = JobDefinition::new("appeared-later", "report");
    later
        .triggers
        .push(TriggerDefinition::cron("0 0 5 * * ?", "UTC").unwrap());
    admin.job_add(&later).await.unwrap();
    wait_for(Duration::from_secs(20), "the jobs page to show the new job", || async {
        let shown = browser
            .script("return document.querySelector('main').innerText.includes('appeared-later')")
            .await;
        if shown == true { Ok(()) } else { Err("not yet".into()) }
    })
    .await;
    assert_eq!(
        browser.script("return window.quartzMarker").await,
        "still here",
        "refreshed in place, not reloaded"
    );
    browser.wait_text("#live", "updated").await;

    // A phone's width: no page is wider than the screen.
    browser.resize(420, 900).await;
    for page in [
        "/",
        "/jobs",
        "/fires",
        "/nodes",
        "/changes",
        "/calendars",
        "/new",
        "/jobs/appeared-later",
    ] {
        browser.goto(&format!("{base}{page}")).await;
        let fits = browser
            .script("return document.documentElement.scrollWidth <= document.documentElement.clientWidth + 1")
            .await;
        assert_eq!(fits, true, "{page} is wider than 420 px");
    }
    browser.goto(&format!("{base}/")).await;
    browser.screenshot("overview-420px").await;

    // The system's dark scheme.
    browser.resize(1440, 1000).await;
    browser.color_scheme("dark").await;
    browser.goto(&format!("{base}/")).await;
    let background = browser
        .script(
            "const c = getComputedStyle(document.body).backgroundColor.match(/\\d+/g).map(Number); \
             return c[0] + c[1] + c[2]",
        )
        .await;
    assert!(background.as_u64().unwrap() < 150, "a dark background: {background}");
    browser.screenshot("overview-dark").await;

    eprintln!("console screenshots: {}", shots.display());
    browser.quit().await;
    node.shutdown().await;
}
