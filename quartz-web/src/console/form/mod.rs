//! The console's job form: create and edit, with a live cron preview (the
//! page's script asks `/api/v1/cron/preview`; the server renders the same
//! preview first, so it works without script) and each error beside its
//! field.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::{Markup, html};
use quartz_core::admin::{AdminError, CronPreview, JobView};

mod fields;

use fields::{FieldErrors, JobForm, dst_name};

use super::html::{self, Section, segment};
use super::{AdminForm, Viewer};
use crate::AppState;

/// The misfire policies, for the select.
const MISFIRE: [&str; 8] = [
    "smart",
    "fire_now",
    "ignore_misfires",
    "do_nothing",
    "reschedule_now_with_existing_count",
    "reschedule_now_with_remaining_count",
    "reschedule_next_with_existing_count",
    "reschedule_next_with_remaining_count",
];

/// The overlap policies, for the select (empty: the job's own rule).
const OVERLAP: [(&str, &str); 6] = [
    ("", "The job's rule (allow concurrent fires or not)"),
    ("allow", "allow: run alongside"),
    ("skip", "skip: record it skipped"),
    ("buffer_one", "buffer_one: run once when it ends"),
    ("buffer_all", "buffer_all: run each, in order"),
    ("cancel", "cancel: stop it, then run"),
];

/// The schedule kinds, for the select.
const KINDS: [(&str, &str); 5] = [
    ("cron", "Cron expression"),
    ("fixed_rate", "Every interval"),
    ("fixed_delay", "Interval after each run"),
    ("once", "Once"),
    ("none", "No trigger"),
];

/// A DST select's options: the choice's name and what it means.
const DST_SKIPPED: [(&str, &str); 3] = [
    ("quartz", "As Quartz (not fired)"),
    ("shift", "Fire at the shifted instant"),
    ("skip", "Skip it"),
];
const DST_REPEATED: [(&str, &str); 4] = [
    ("quartz", "As Quartz (once, the later)"),
    ("first", "Once, the first"),
    ("second", "Once, the second"),
    ("both", "Both"),
];

fn select(name: &str, options: &[(&str, &str)], chosen: &str) -> Markup {
    html! {
        select #(name) name=(name) {
            @for (value, label) in options { option value=(value) selected[*value == dst_name(chosen)] { (label) } }
        }
    }
}

/// The form field an admin error names: `triggers[0].cron` is `cron`, a
/// field inside the payload (`payload.lines[1].sku`) the payload's.
fn field_errors(e: &AdminError) -> FieldErrors {
    let field = e.field().unwrap_or("");
    let field = if field.starts_with("payload.") || field.starts_with("payload[") {
        "payload"
    } else {
        field.rsplit_once('.').map_or(field, |(_, f)| f)
    };
    let field = if field == "triggers" { "kind" } else { field };
    vec![(field.to_owned(), e.to_string())]
}

fn error_for<'a>(errors: &'a FieldErrors, field: &str) -> Option<&'a str> {
    errors.iter().find(|(f, _)| f == field).map(|(_, m)| m.as_str())
}

/// The next five fire times of the form's cron expression, passing over
/// the times its calendar (when one is named) excludes, or why there are
/// none to show.
async fn preview_times(state: &AppState, form: &JobForm) -> Result<CronPreview, String> {
    let zone = match form.time_zone.trim() {
        "" => "UTC",
        zone => zone,
    };
    let calendar = Some(form.calendar.trim()).filter(|c| !c.is_empty());
    let dst = quartz_core::admin::parse_dst(Some(dst_name(&form.dst_skipped)), Some(dst_name(&form.dst_repeated)))
        .map_err(|e| e.to_string())?;
    state
        .admin
        .cron_preview_with(form.cron.trim(), zone, dst, calendar, crate::api::now_ms(), 5)
        .await
        .map_err(|e| e.to_string())
}

/// The server's own rendering of the cron preview.
fn preview(preview: &Result<CronPreview, String>) -> Markup {
    let (times, error) = match preview {
        Ok(p) => (p.times.as_slice(), p.note.as_ref()),
        Err(e) => (&[][..], Some(e)),
    };
    html! {
        div #cron-preview-box data-kinds="cron" {
            span.label { "Next fire times (UTC)" }
            ol #cron-preview { @for t in times { li { (t.to_string()) } } }
            p #cron-preview-error.field-error { @if let Some(e) = error { (e) } }
        }
    }
}

fn field(
    label: &str,
    name: &str,
    errors: &FieldErrors,
    input: Markup,
    hint: Option<&str>,
    kinds: Option<&str>,
) -> Markup {
    html! {
        div.field data-kinds=[kinds] {
            label for=(name) { (label) }
            (input)
            @if let Some(hint) = hint { small.hint { (hint) } }
            @if let Some(e) = error_for(errors, name) { p.field-error data-field=(name) { (e) } }
        }
    }
}

fn text_input(name: &str, value: &str, placeholder: &str) -> Markup {
    html! { input #(name) type="text" name=(name) value=(value) placeholder=(placeholder); }
}

/// What the form shows beside the fields: the handlers live nodes
/// registered, and the cron preview.
struct Beside {
    handlers: Vec<String>,
    preview: Result<CronPreview, String>,
    /// What changed while the editor had the form open, when it did.
    conflict: Option<Markup>,
}

fn render(viewer: &Viewer, form: &JobForm, errors: &FieldErrors, editing: Option<&JobView>, beside: &Beside) -> Markup {
    let handlers = &beside.handlers;
    let action = match editing {
        Some(job) => format!("{}/jobs/{}/edit", viewer.base, segment(&job.spec.name)),
        None => format!("{}/new", viewer.base),
    };
    let locked = editing.is_some_and(|j| j.triggers.len() > 1);
    let general = errors.iter().find(|(f, _)| {
        ![
            "name",
            "handler",
            "description",
            "payload",
            "kind",
            "cron",
            "time_zone",
            "interval_ms",
            "start",
            "end",
            "repeat",
            "priority",
            "misfire",
            "calendar",
            "dst_skipped",
            "dst_repeated",
            "jitter_ms",
            "catch_up_ms",
            "overlap",
            "max_attempts",
            "backoff_ms",
            "backoff_max_ms",
            "timeout_ms",
            "concurrency_limit",
            "concurrency_key",
        ]
        .contains(&f.as_str())
    });
    html! {
        @if !errors.is_empty() {
            p.error role="alert" { "The job was not saved: " (errors.len()) " field(s) need attention." }
        }
        @if let Some((_, message)) = general { p.error { (message) } }
        @if let Some(conflict) = &beside.conflict { (conflict) }
        form.job-form method="post" action=(action) novalidate {
            (html::csrf(viewer))
            @if let Some(job) = editing {
                // The version this form was filled from, and its values: a
                // save made against another version is shown what changed
                // meanwhile instead of overwriting it.
                input type="hidden" name="version" value=(job.version);
                input type="hidden" name="base" value=(serde_json::to_string(&JobForm::from_view(job)).unwrap_or_default());
            }
            fieldset {
                legend { "Job" }
                (field("Name", "name", errors, text_input("name", &form.name, "nightly-report"), None, None))
                (field("Handler", "handler", errors, html! {
                    input #handler type="text" name="handler" value=(form.handler) list="handlers" placeholder="report.nightly";
                    datalist #handlers { @for h in handlers { option value=(h) {} } }
                }, Some("The name a node registered its handler under."), None))
                (field("Description", "description", errors, text_input("description", &form.description, ""), None, None))
                (field("Payload (JSON)", "payload", errors, html! {
                    textarea #payload name="payload" rows="4" spellcheck="false" { (form.payload) }
                }, None, None))
            }
            fieldset {
                legend { "Schedule" }
                @if locked {
                    p.hint { "This job has several triggers; the form leaves them as they are. Change them through the API (PATCH /api/v1/jobs/{name} with triggers)." }
                } @else {
                    (field("Kind", "kind", errors, html! {
                        select #kind name="kind" {
                            @for (value, label) in KINDS { option value=(value) selected[value == form.kind] { (label) } }
                        }
                    }, None, None))
                    (field("Cron expression", "cron", errors, text_input("cron", &form.cron, "0 0 2 * * ?"),
                        Some("Quartz syntax, seconds first: sec min hour day-of-month month day-of-week [year]."), Some("cron")))
                    (field("Time zone", "time_zone", errors, text_input("time_zone", &form.time_zone, "Europe/Paris"), None, Some("cron")))
                    (field("A local time the clocks skip", "dst_skipped", errors, select("dst_skipped", &DST_SKIPPED, &form.dst_skipped),
                        Some("Spring forward: 02:30 on a day the clocks jump from 02:00 to 03:00."), Some("cron")))
                    (field("A local time the clocks repeat", "dst_repeated", errors, select("dst_repeated", &DST_REPEATED, &form.dst_repeated),
                        Some("Fall back: 01:30 on a day the clocks go from 02:00 back to 01:00."), Some("cron")))
                    (preview(&beside.preview))
                    (field("Interval (ms)", "interval_ms", errors, text_input("interval_ms", &form.interval_ms, "60000"), None, Some("fixed_rate fixed_delay")))
                    (field("Start", "start", errors, text_input("start", &form.start, "2026-01-31T09:00:00Z"),
                        Some("RFC 3339. For once: when it fires; otherwise not before (default now)."), Some("cron fixed_rate fixed_delay once")))
                    (field("End", "end", errors, text_input("end", &form.end, ""),
                        Some("RFC 3339: no fire after it; empty: none."), Some("cron fixed_rate fixed_delay")))
                    (field("Fires in all", "repeat", errors, text_input("repeat", &form.repeat, ""),
                        Some("The most times it fires; empty: no limit."), Some("cron fixed_rate fixed_delay")))
                    (field("Priority", "priority", errors, text_input("priority", &form.priority, "0"),
                        Some("Fires due at the same time start higher first."), Some("cron fixed_rate fixed_delay once")))
                    (field("Misfire policy", "misfire", errors, html! {
                        select #misfire name="misfire" {
                            @for m in MISFIRE { option value=(m) selected[m == form.misfire] { (m) } }
                        }
                    }, None, Some("cron fixed_rate fixed_delay once")))
                    (field("Calendar", "calendar", errors, text_input("calendar", &form.calendar, ""),
                        Some("The name of a calendar whose excluded times are not fire times; empty: none."), Some("cron fixed_rate fixed_delay once")))
                    (field("Jitter (ms)", "jitter_ms", errors, text_input("jitter_ms", &form.jitter_ms, ""),
                        Some("Spread each fire by up to this much, the same offset for a fire time on every node; empty: none."), Some("cron fixed_rate fixed_delay once")))
                    (field("Catch-up window (ms)", "catch_up_ms", errors, text_input("catch_up_ms", &form.catch_up_ms, ""),
                        Some("Missed fire times older than this are recorded and skipped, whatever the misfire policy; empty: no limit."), Some("cron fixed_rate fixed_delay once")))
                    (field("Overlap policy", "overlap", errors, html! {
                        select #overlap name="overlap" {
                            @for (value, label) in OVERLAP { option value=(value) selected[value == form.overlap] { (label) } }
                        }
                    }, Some("What a fire does while a fire of this job still runs, on any node."), Some("cron fixed_rate fixed_delay once")))
                }
            }
            fieldset {
                legend { "Running" }
                (field("Attempts in all", "max_attempts", errors, text_input("max_attempts", &form.max_attempts, "1"), None, None))
                (field("Backoff between attempts (ms)", "backoff_ms", errors, text_input("backoff_ms", &form.backoff_ms, "0"), None, None))
                (field("Longest backoff (ms)", "backoff_max_ms", errors, text_input("backoff_max_ms", &form.backoff_max_ms, ""),
                    Some("Set it to double the backoff after each failure up to this; empty keeps it fixed."), None))
                (field("Timeout (ms)", "timeout_ms", errors, text_input("timeout_ms", &form.timeout_ms, ""), Some("Empty: no timeout."), None))
                (field("Concurrency limit", "concurrency_limit", errors, text_input("concurrency_limit", &form.concurrency_limit, ""),
                    Some("At most this many fires at once, on every node together, among the jobs with the same key; empty: no limit."), None))
                (field("Concurrency key", "concurrency_key", errors, text_input("concurrency_key", &form.concurrency_key, "{handler}"),
                    Some("{handler} and {/json/pointer} into the payload stand for their values, e.g. tenant:{/tenant}."), None))
                div.field.check {
                    label { input type="checkbox" name="allow_concurrent" checked[form.allow_concurrent]; " Fires may overlap" }
                    label { input type="checkbox" name="requests_recovery" checked[form.requests_recovery]; " Run again when its node dies mid-run" }
                }
            }
            div.buttons {
                (html::submit(viewer, "save", "primary", if editing.is_some() { "Save" } else { "Create job" }))
                " "
                a href={ (viewer.base) "/jobs" } { "Cancel" }
            }
        }
    }
}

async fn handlers(state: &AppState) -> Vec<String> {
    let mut all: Vec<String> = state
        .admin
        .nodes()
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n.state == "live")
        .flat_map(|n| n.handlers)
        .collect();
    all.sort();
    all.dedup();
    all
}

async fn respond(
    state: &AppState,
    viewer: &Viewer,
    status: StatusCode,
    form: &JobForm,
    errors: &FieldErrors,
    editing: Option<&JobView>,
    conflict: Option<Markup>,
) -> Response {
    let title = match editing {
        Some(job) => format!("Edit {}", job.spec.name),
        None => "New job".to_owned(),
    };
    let beside = Beside {
        handlers: handlers(state).await,
        preview: preview_times(state, form).await,
        conflict,
    };
    let body = render(viewer, form, errors, editing, &beside);
    viewer.respond(status, html::page(viewer, Section::Jobs, &title, None, body))
}

pub(crate) async fn new_page(State(state): State<AppState>, viewer: Viewer) -> Response {
    respond(
        &state,
        &viewer,
        StatusCode::OK,
        &JobForm::blank(),
        &Vec::new(),
        None,
        None,
    )
    .await
}

pub(crate) async fn create(State(state): State<AppState>, AdminForm { viewer, fields }: AdminForm) -> Response {
    let form = JobForm::from_fields(&fields, &JobForm::default());
    let saved = match form.definition() {
        Ok(job) => state
            .admin
            .acting_as(viewer.actor)
            .job_add(&job)
            .await
            .map_err(|e| field_errors(&e)),
        Err(errors) => Err(errors),
    };
    settle(&state, &viewer, saved, &form, None, "created").await
}

/// After a save: to the job's page with `notice`, or the form again with
/// each error beside its field.
async fn settle(
    state: &AppState,
    viewer: &Viewer,
    saved: Result<JobView, FieldErrors>,
    form: &JobForm,
    editing: Option<&JobView>,
    notice: &str,
) -> Response {
    match saved {
        Ok(job) => {
            // Stored, but no live node offers its handler: the notice says so.
            let code = if job.warnings.is_empty() {
                notice.to_owned()
            } else {
                format!("{notice}_unoffered")
            };
            viewer.redirect(&format!(
                "/jobs/{}{}",
                segment(&job.spec.name),
                viewer.notice_query(&code, &job.spec.name)
            ))
        }
        Err(errors) => respond(state, viewer, StatusCode::BAD_REQUEST, form, &errors, editing, None).await,
    }
}

pub(crate) async fn edit_page(State(state): State<AppState>, viewer: Viewer, Path(name): Path<String>) -> Response {
    match state.admin.job(&name).await {
        Ok(job) => {
            respond(
                &state,
                &viewer,
                StatusCode::OK,
                &JobForm::from_view(&job),
                &Vec::new(),
                Some(&job),
                None,
            )
            .await
        }
        Err(e) => viewer.failure(&e),
    }
}

pub(crate) async fn edit(
    State(state): State<AppState>,
    Path(name): Path<String>,
    AdminForm { viewer, fields }: AdminForm,
) -> Response {
    let was = match state.admin.job(&name).await {
        Ok(job) => job,
        Err(e) => return viewer.failure(&e),
    };
    // The job as its editor saw it (posted with the form; only shown: the
    // version decides), else as it is.
    let base = fields
        .opt("base")
        .and_then(|b| serde_json::from_str::<JobForm>(b).ok())
        .unwrap_or_else(|| JobForm::from_view(&was));
    let form = JobForm::from_fields(&fields, &base);
    let expected = fields.version();
    if expected.is_some_and(|v| v != was.version) {
        return conflict(&state, &viewer, &form, &base, &was).await;
    }
    let saved = match form.patch(&was) {
        Ok(patch) => match state
            .admin
            .acting_as(viewer.actor)
            .job_edit(&name, &patch, expected)
            .await
        {
            // Changed between the read above and the write.
            Err(AdminError::Stale { .. }) => match state.admin.job(&name).await {
                Ok(now) => return conflict(&state, &viewer, &form, &base, &now).await,
                Err(e) => return viewer.failure(&e),
            },
            other => other.map_err(|e| field_errors(&e)),
        },
        Err(errors) => Err(errors),
    };
    settle(&state, &viewer, saved, &form, Some(&was), "saved").await
}

/// The form again after a save made against a version of the job that is
/// no longer stored: the editor's changes carried over onto the job as it
/// is now (a field the editor did not change shows its current value),
/// what changed meanwhile (and who changed it last) said above them, and
/// the form now against the current version, so that saving again is a
/// choice made knowingly.
async fn conflict(state: &AppState, viewer: &Viewer, form: &JobForm, base: &JobForm, now: &JobView) -> Response {
    let current = JobForm::from_view(now);
    let meanwhile = base.differences(&current);
    let yours: Vec<String> = base.differences(form).into_iter().map(|(f, _)| f).collect();
    let form = form.rebased(base, &current);
    let filter = quartz_core::admin::ChangeFilter {
        job: Some(now.spec.name.clone()),
        limit: Some(1),
        ..Default::default()
    };
    let last = state
        .admin
        .changes(&filter)
        .await
        .ok()
        .and_then(|page| page.items.into_iter().next());
    let notice = html! {
        div.error.conflict role="alert" {
            p {
                "While you edited, this job was changed"
                @if let Some(change) = &last {
                    " (last by " code { (change.actor) } " at " (quartz_core::Timestamp::from_millis(change.at).to_string())
                    ", " (change.action) ")"
                }
                "; it is now at version " (now.version) ". Nothing was saved."
            }
            @if meanwhile.is_empty() {
                p { "None of the fields this form shows changed (its state did)." }
            } @else {
                p { "Changed meanwhile:" }
                ul.meanwhile {
                    @for (field, value) in &meanwhile {
                        li data-field=(field) {
                            code { (field) } " is now " code { (value) }
                            @if yours.contains(field) { strong { " — you changed it too: your value is kept below" } }
                        }
                    }
                }
            }
            p { "Your changes are carried over onto the job as it is now, below: save again to store them, or cancel to keep the job as it is." }
        }
    };
    respond(
        state,
        viewer,
        StatusCode::CONFLICT,
        &form,
        &Vec::new(),
        Some(now),
        Some(notice),
    )
    .await
}
