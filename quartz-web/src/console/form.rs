//! The console's job form: create and edit, with a live cron preview (the
//! page's script asks `/api/v1/cron/preview`; the server renders the same
//! preview first, so it works without script) and each error beside its
//! field.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::{Markup, html};
use quartz_core::Timestamp;
use quartz_core::admin::{AdminError, CronPreview, JobDefinition, JobPatch, JobView, TriggerDefinition, TriggerKind};
use quartz_core::store::Store;

use super::html::{self, Section, segment};
use super::{Fields, Viewer};
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

/// The schedule kinds, for the select.
const KINDS: [(&str, &str); 5] = [
    ("cron", "Cron expression"),
    ("fixed_rate", "Every interval"),
    ("fixed_delay", "Interval after each run"),
    ("once", "Once"),
    ("none", "No trigger"),
];

/// The form's fields, as typed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct JobForm {
    name: String,
    handler: String,
    description: String,
    payload: String,
    kind: String,
    cron: String,
    time_zone: String,
    interval_ms: String,
    start: String,
    end: String,
    repeat: String,
    priority: String,
    misfire: String,
    calendar: String,
    dst_skipped: String,
    dst_repeated: String,
    max_attempts: String,
    backoff_ms: String,
    backoff_max_ms: String,
    timeout_ms: String,
    allow_concurrent: bool,
    requests_recovery: bool,
}

/// An error beside a field.
type FieldErrors = Vec<(String, String)>;

fn opt(v: Option<i64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

impl JobForm {
    fn blank() -> JobForm {
        JobForm {
            payload: "null".into(),
            kind: "cron".into(),
            cron: "0 * * * * ?".into(),
            time_zone: "UTC".into(),
            misfire: "smart".into(),
            priority: "0".into(),
            dst_skipped: "quartz".into(),
            dst_repeated: "quartz".into(),
            max_attempts: "1".into(),
            backoff_ms: "0".into(),
            allow_concurrent: true,
            ..JobForm::default()
        }
    }

    fn from_view(job: &JobView) -> JobForm {
        let mut form = JobForm {
            name: job.name.clone(),
            handler: job.handler.clone(),
            description: job.description.clone(),
            payload: serde_json::to_string_pretty(&job.payload).unwrap_or_default(),
            kind: "none".into(),
            misfire: "smart".into(),
            dst_skipped: "quartz".into(),
            dst_repeated: "quartz".into(),
            max_attempts: job.max_attempts.to_string(),
            backoff_ms: job.backoff_ms.to_string(),
            backoff_max_ms: opt(job.backoff_max_ms),
            timeout_ms: opt(job.timeout_ms),
            allow_concurrent: job.allow_concurrent,
            requests_recovery: job.requests_recovery,
            ..JobForm::default()
        };
        if let Some(t) = job.triggers.first() {
            form.kind.clone_from(&t.kind);
            form.cron = t.cron.clone().unwrap_or_default();
            form.time_zone = t.time_zone.clone().unwrap_or_default();
            form.interval_ms = opt(t.interval_ms);
            form.misfire.clone_from(&t.misfire);
            form.calendar = t.calendar.clone().unwrap_or_default();
            form.dst_skipped = t.dst_skipped.clone().unwrap_or_else(|| "quartz".into());
            form.dst_repeated = t.dst_repeated.clone().unwrap_or_else(|| "quartz".into());
            form.start = Timestamp::from_millis(t.start).to_string();
            form.end = t.end.map(|e| Timestamp::from_millis(e).to_string()).unwrap_or_default();
            form.repeat = t.repeat.map(|r| r.to_string()).unwrap_or_default();
            form.priority = t.priority.to_string();
        }
        form
    }

    /// The form as posted over `base`: a field the body does not carry
    /// keeps `base`'s value (a client that posts only what it changes loses
    /// nothing), an empty one is cleared; checkboxes are on when present.
    fn from_fields(f: &Fields, base: &JobForm) -> JobForm {
        let text = |name: &str, kept: &String| f.opt(name).map_or_else(|| kept.clone(), str::to_owned);
        JobForm {
            name: text("name", &base.name),
            handler: text("handler", &base.handler),
            description: text("description", &base.description),
            payload: text("payload", &base.payload),
            kind: text("kind", &base.kind),
            cron: text("cron", &base.cron),
            time_zone: text("time_zone", &base.time_zone),
            interval_ms: text("interval_ms", &base.interval_ms),
            start: text("start", &base.start),
            end: text("end", &base.end),
            repeat: text("repeat", &base.repeat),
            priority: text("priority", &base.priority),
            misfire: text("misfire", &base.misfire),
            calendar: text("calendar", &base.calendar),
            dst_skipped: text("dst_skipped", &base.dst_skipped),
            dst_repeated: text("dst_repeated", &base.dst_repeated),
            max_attempts: text("max_attempts", &base.max_attempts),
            backoff_ms: text("backoff_ms", &base.backoff_ms),
            backoff_max_ms: text("backoff_max_ms", &base.backoff_max_ms),
            timeout_ms: text("timeout_ms", &base.timeout_ms),
            allow_concurrent: f.on("allow_concurrent"),
            requests_recovery: f.on("requests_recovery"),
        }
    }

    /// What decides the fire times: an edit that leaves it alone keeps the
    /// trigger (and where it stands); an edit of any of it replaces the
    /// trigger with one built from every field the form shows, so that
    /// nothing the form did not change is lost.
    fn schedule(&self) -> [&str; 12] {
        [
            self.kind.trim(),
            self.cron.trim(),
            self.time_zone.trim(),
            self.interval_ms.trim(),
            self.start.trim(),
            self.end.trim(),
            self.repeat.trim(),
            self.priority.trim(),
            self.misfire.trim(),
            self.calendar.trim(),
            dst_name(&self.dst_skipped),
            dst_name(&self.dst_repeated),
        ]
    }

    fn trigger(&self, errors: &mut FieldErrors) -> Option<TriggerDefinition> {
        let kind = match self.kind.as_str() {
            "cron" => TriggerKind::Cron,
            "fixed_rate" => TriggerKind::FixedRate,
            "fixed_delay" => TriggerKind::FixedDelay,
            "once" => TriggerKind::Once,
            "none" => return None,
            other => {
                errors.push(("kind".into(), format!("{other:?} is not a kind of schedule")));
                return None;
            }
        };
        let text = |s: &str| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
        let start = instant(errors, "start", &self.start);
        let end = instant(errors, "end", &self.end);
        let cron_kind = kind == TriggerKind::Cron;
        let interval_kind = matches!(kind, TriggerKind::FixedRate | TriggerKind::FixedDelay);
        Some(TriggerDefinition {
            kind,
            cron: text(&self.cron).filter(|_| cron_kind),
            time_zone: text(&self.time_zone).filter(|_| cron_kind),
            interval_ms: number(errors, "interval_ms", &self.interval_ms).filter(|_| interval_kind),
            start,
            end,
            repeat: number(errors, "repeat", &self.repeat),
            misfire: text(&self.misfire),
            priority: number(errors, "priority", &self.priority).unwrap_or(0),
            calendar: text(&self.calendar),
            dst_skipped: Some(dst_name(&self.dst_skipped).to_owned()).filter(|s| s != "quartz" && cron_kind),
            dst_repeated: Some(dst_name(&self.dst_repeated).to_owned()).filter(|s| s != "quartz" && cron_kind),
        })
    }

    fn payload(&self, errors: &mut FieldErrors) -> serde_json::Value {
        if self.payload.trim().is_empty() {
            return serde_json::Value::Null;
        }
        serde_json::from_str(&self.payload).unwrap_or_else(|e| {
            errors.push(("payload".into(), format!("not JSON: {e}")));
            serde_json::Value::Null
        })
    }

    fn definition(&self) -> Result<JobDefinition, FieldErrors> {
        let mut errors = Vec::new();
        let mut job = JobDefinition::new(self.name.trim(), self.handler.trim());
        job.description = self.description.clone();
        job.payload = self.payload(&mut errors);
        job.allow_concurrent = self.allow_concurrent;
        job.requests_recovery = self.requests_recovery;
        job.timeout_ms = number(&mut errors, "timeout_ms", &self.timeout_ms);
        job.max_attempts = number(&mut errors, "max_attempts", &self.max_attempts).unwrap_or(1);
        job.backoff_ms = number(&mut errors, "backoff_ms", &self.backoff_ms).unwrap_or(0);
        job.backoff_max_ms = number(&mut errors, "backoff_max_ms", &self.backoff_max_ms);
        job.triggers = self.trigger(&mut errors).into_iter().collect();
        if errors.is_empty() { Ok(job) } else { Err(errors) }
    }

    /// The change from `was` to this form; the schedule only when it changed
    /// and the job has at most one trigger.
    fn patch(&self, was: &JobView) -> Result<JobPatch, FieldErrors> {
        let def = self.definition()?;
        let before = JobForm::from_view(was);
        let schedule_changed = was.triggers.len() <= 1 && self.schedule() != before.schedule();
        Ok(JobPatch {
            name: Some(def.name).filter(|n| *n != was.name),
            handler: Some(def.handler),
            payload: Some(def.payload),
            description: Some(def.description),
            requests_recovery: Some(def.requests_recovery),
            allow_concurrent: Some(def.allow_concurrent),
            timeout_ms: Some(def.timeout_ms.unwrap_or(0)),
            max_attempts: Some(def.max_attempts),
            backoff_ms: Some(def.backoff_ms),
            backoff_max_ms: Some(def.backoff_max_ms.unwrap_or(0)),
            parent: None,
            triggers: schedule_changed.then_some(def.triggers),
        })
    }
}

/// A DST choice as typed; empty is Quartz's.
fn dst_name(text: &str) -> &str {
    match text.trim() {
        "" => "quartz",
        name => name,
    }
}

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

/// An RFC 3339 instant from a field, `None` when empty.
fn instant(errors: &mut FieldErrors, field: &str, text: &str) -> Option<i64> {
    match text.trim() {
        "" => None,
        s => chrono::DateTime::parse_from_rfc3339(s).map_or_else(
            |_| {
                errors.push((field.into(), "write an RFC 3339 instant: 2026-01-31T09:00:00Z".into()));
                None
            },
            |t| Some(t.timestamp_millis()),
        ),
    }
}

/// A whole number from a field, `None` when empty.
fn number<T: std::str::FromStr>(errors: &mut FieldErrors, field: &str, text: &str) -> Option<T> {
    match text.trim() {
        "" => None,
        t => t.parse().map_or_else(
            |_| {
                errors.push((field.into(), format!("{t:?} is not a whole number in range")));
                None
            },
            Some,
        ),
    }
}

/// The form field an admin error names: `triggers[0].cron` is `cron`.
fn field_errors(e: &AdminError) -> FieldErrors {
    let field = e.field().unwrap_or("");
    let field = field.rsplit_once('.').map_or(field, |(_, f)| f);
    let field = if field == "triggers" { "kind" } else { field };
    vec![(field.to_owned(), e.to_string())]
}

fn error_for<'a>(errors: &'a FieldErrors, field: &str) -> Option<&'a str> {
    errors.iter().find(|(f, _)| f == field).map(|(_, m)| m.as_str())
}

/// The next five fire times of the form's cron expression, passing over
/// the times its calendar (when one is named) excludes, or why there are
/// none to show.
async fn preview_times<S: Store + Clone>(state: &AppState<S>, form: &JobForm) -> Result<CronPreview, String> {
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
}

fn render(viewer: &Viewer, form: &JobForm, errors: &FieldErrors, editing: Option<&JobView>, beside: &Beside) -> Markup {
    let handlers = &beside.handlers;
    let action = match editing {
        Some(job) => format!("{}/jobs/{}/edit", viewer.base, segment(&job.name)),
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
            "max_attempts",
            "backoff_ms",
            "backoff_max_ms",
            "timeout_ms",
        ]
        .contains(&f.as_str())
    });
    html! {
        @if !errors.is_empty() {
            p.error role="alert" { "The job was not saved: " (errors.len()) " field(s) need attention." }
        }
        @if let Some((_, message)) = general { p.error { (message) } }
        form.job-form method="post" action=(action) novalidate {
            (html::csrf(viewer))
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
                }
            }
            fieldset {
                legend { "Running" }
                (field("Attempts in all", "max_attempts", errors, text_input("max_attempts", &form.max_attempts, "1"), None, None))
                (field("Backoff between attempts (ms)", "backoff_ms", errors, text_input("backoff_ms", &form.backoff_ms, "0"), None, None))
                (field("Longest backoff (ms)", "backoff_max_ms", errors, text_input("backoff_max_ms", &form.backoff_max_ms, ""),
                    Some("Set it to double the backoff after each failure up to this; empty keeps it fixed."), None))
                (field("Timeout (ms)", "timeout_ms", errors, text_input("timeout_ms", &form.timeout_ms, ""), Some("Empty: no timeout."), None))
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

async fn handlers<S: Store + Clone>(state: &AppState<S>) -> Vec<String> {
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

async fn respond<S: Store + Clone>(
    state: &AppState<S>,
    viewer: &Viewer,
    status: StatusCode,
    form: &JobForm,
    errors: &FieldErrors,
    editing: Option<&JobView>,
) -> Response {
    let title = match editing {
        Some(job) => format!("Edit {}", job.name),
        None => "New job".to_owned(),
    };
    let beside = Beside {
        handlers: handlers(state).await,
        preview: preview_times(state, form).await,
    };
    let body = render(viewer, form, errors, editing, &beside);
    viewer.respond(status, html::page(viewer, Section::Jobs, &title, None, body))
}

pub(crate) async fn new_page<S: Store + Clone>(State(state): State<AppState<S>>, viewer: Viewer) -> Response {
    respond(&state, &viewer, StatusCode::OK, &JobForm::blank(), &Vec::new(), None).await
}

pub(crate) async fn create<S: Store + Clone>(
    State(state): State<AppState<S>>,
    viewer: Viewer,
    body: Bytes,
) -> Response {
    let fields = Fields::parse(&body);
    if let Some(refused) = viewer.refuse_form(&fields) {
        return refused;
    }
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
async fn settle<S: Store + Clone>(
    state: &AppState<S>,
    viewer: &Viewer,
    saved: Result<JobView, FieldErrors>,
    form: &JobForm,
    editing: Option<&JobView>,
    notice: &str,
) -> Response {
    match saved {
        Ok(job) => viewer.redirect(&format!(
            "/jobs/{}{}",
            segment(&job.name),
            viewer.notice_query(notice, &job.name)
        )),
        Err(errors) => respond(state, viewer, StatusCode::BAD_REQUEST, form, &errors, editing).await,
    }
}

pub(crate) async fn edit_page<S: Store + Clone>(
    State(state): State<AppState<S>>,
    viewer: Viewer,
    Path(name): Path<String>,
) -> Response {
    match state.admin.job(&name).await {
        Ok(job) => {
            respond(
                &state,
                &viewer,
                StatusCode::OK,
                &JobForm::from_view(&job),
                &Vec::new(),
                Some(&job),
            )
            .await
        }
        Err(e) => viewer.failure(&e),
    }
}

pub(crate) async fn edit<S: Store + Clone>(
    State(state): State<AppState<S>>,
    viewer: Viewer,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    let fields = Fields::parse(&body);
    if let Some(refused) = viewer.refuse_form(&fields) {
        return refused;
    }
    let was = match state.admin.job(&name).await {
        Ok(job) => job,
        Err(e) => return viewer.failure(&e),
    };
    let form = JobForm::from_fields(&fields, &JobForm::from_view(&was));
    let saved = match form.patch(&was) {
        Ok(patch) => state
            .admin
            .acting_as(viewer.actor)
            .job_edit(&name, &patch)
            .await
            .map_err(|e| field_errors(&e)),
        Err(errors) => Err(errors),
    };
    settle(&state, &viewer, saved, &form, Some(&was), "saved").await
}
